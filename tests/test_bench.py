"""The benchmark's own arithmetic (the benchmark itself runs as `make bench`, not in CI)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import modes  # noqa: E402


def test_rounds_take_the_median_of_the_runs_medians():
    result = {"step_median_s": 0.010, "tokens_per_step": 256, "tokens_per_s": 256 / 0.010}
    modes._combine_rounds(result, [0.010, None, 0.030, 0.020])   # a failed round is left out
    assert result["round_step_median_s"] == [0.010, 0.030, 0.020]
    assert result["step_median_s"] == 0.020
    assert abs(result["tokens_per_s"] - 256 / 0.020) < 1e-6
