"""The benchmark's own logic: arithmetic, subprocess records (the benchmark itself runs as `make bench`, not in CI)."""
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import time

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import distributed  # noqa: E402
import modes  # noqa: E402


def test_rounds_take_the_median_of_the_runs_medians():
    result = {"step_median_s": 0.010, "tokens_per_step": 256, "tokens_per_s": 256 / 0.010}
    modes._combine_rounds(result, [0.010, None, 0.030, 0.020])   # a failed round is left out
    assert result["round_step_median_s"] == [0.010, 0.030, 0.020]
    assert result["step_median_s"] == 0.020
    assert abs(result["tokens_per_s"] - 256 / 0.020) < 1e-6


def test_every_step_loss_is_compared_with_cpu():
    # the final losses agree, an earlier step's do not: the drift is reported
    results = {"gpt-small": {"cpu": {"status": "ok", "final_loss": 0.455, "losses": [8.451, 8.061, 0.455]},
                             "fused": {"status": "ok", "final_loss": 0.455, "losses": [8.451, 8.063, 0.455]}}}
    ratios = modes._add_ratios(results)["gpt-small"]
    assert ratios["fused_final_loss_rel_diff_vs_cpu"] == 0
    assert abs(ratios["fused_max_step_loss_rel_diff_vs_cpu"] - 0.002 / 8.061) < 1e-9


@pytest.mark.parametrize("mode, loaded", [("cpu", False), ("strict", True)])
def test_native_modes_run_without_torch_tpu(mode, loaded):
    # Loaded, torch_tpu is torch's accelerator, and torch's autograd fails on CUDA tensors.
    with tempfile.TemporaryDirectory() as cache_dir:
        record = modes._run_child("mlp", mode, "full", 2, cache_dir, None, None)
    assert record["status"] == "ok", record.get("error")
    assert record["torch_tpu_loaded"] is loaded


def test_a_child_past_its_time_limit_is_recorded_as_an_error(monkeypatch):
    monkeypatch.setattr(modes, "CHILD_TIMEOUT_S", 0.5)
    with tempfile.TemporaryDirectory() as cache_dir:
        record = modes._run_child("mlp", "strict", "full", 2, cache_dir, None, None)
    assert record["status"] == "error"
    assert record["error"].startswith("subprocess exited with None and wrote no result: timed out after 0.5 s")


def test_the_report_is_saved_after_each_mode(monkeypatch, tmp_path):
    # A run stopped by its time limit (the GPU box's lease) keeps the modes that finished.
    def bench_one(workload, mode, steps, plugin, threads):
        if mode == "fused":
            raise KeyboardInterrupt
        return {"workload": workload, "mode": mode, "status": "ok", "step_median_s": 0.01}

    monkeypatch.setattr(modes, "_bench_one", bench_one)
    out = tmp_path / "modes.json"
    with pytest.raises(KeyboardInterrupt):
        modes.main(["--workloads", "mlp", "--modes", "cpu", "strict", "fused", "--out", str(out), "--chart", ""])
    report = json.loads(out.read_text())
    assert report["complete"] is False
    assert list(report["results"]["mlp"]) == ["cpu", "strict"]


def test_interleaved_modes_share_one_process_and_ratios_are_per_block():
    with tempfile.TemporaryDirectory() as cache_dir:
        record = modes._run_child("mlp", "strict,fused", "interleaved", 2, cache_dir, None, None, rounds=2)
    assert record["status"] == "ok", record.get("error")
    times = record["step_s"]
    assert sorted(times) == ["fused", "strict"]
    assert all(len(v) == 4 and all(t > 0 for t in v) for v in times.values())
    ratio = record["ratios"]["fused_over_strict_throughput"]
    assert ratio["per_block"] == pytest.approx([s / f for s, f in zip(times["strict"], times["fused"])])
    assert ratio["min"] <= ratio["median"] <= ratio["max"]
    assert "compiled_over_fused_throughput" not in record["ratios"]


def test_the_xla_reference_is_interleaved_with_the_tpu_modes():
    with tempfile.TemporaryDirectory() as cache_dir:
        record = modes._run_child("mlp", "fused,jax", "interleaved", 2, cache_dir, None, None)
    assert record["status"] == "ok", record.get("error")
    assert all(len(v) == 2 and all(t > 0 for t in v) for v in record["step_s"].values())
    assert sorted(record["ratios"]) == ["fused_over_jax_throughput"]


def test_an_interleaved_run_that_fails_is_recorded_with_its_message():
    with tempfile.TemporaryDirectory() as cache_dir:
        record = modes._run_child("mlp", "strict,no_such_mode", "interleaved", 2, cache_dir, None, None)
    assert record["status"] == "error"
    assert "no_such_mode" in record["error"]


def test_the_distributed_benchmark_records_rank_zero():
    records = [distributed._run(1, "strict", blocking) for blocking in (False, True)]
    for record in records:
        assert record["status"] == "ok", record.get("error")
        assert sorted(record["allreduce_s"], key=int) == [str(n * 4) for n in distributed.SIZES]
        assert all(v["tpu_dist"] > 0 and v["gloo_cpu"] > 0 and v["tpu_dist_async_return"] > 0
                   for v in record["allreduce_s"].values())
        assert record["ddp_step_median_s"] > 0 and 0 < record["final_loss"] < 10
    merged = distributed._merged(records)
    assert merged["launches"] == 2 and merged["allreduce_s"].keys() == records[0]["allreduce_s"].keys()


def test_the_distributed_benchmark_times_in_process_collectives_per_transport():
    record = distributed._run_in_process(2, sizes=[256])
    assert record["status"] == "ok", record.get("error")
    assert record["devices"] == 2 and sorted(record["collectives"]) == sorted(distributed.COLLECTIVES)
    for sizes in record["collectives"].values():
        assert list(sizes) == ["1024"]
        assert all(sizes["1024"][k] > 0 for k in ("device_s", "host_staged_s", "device_GBps", "host_staged_GBps"))


@pytest.mark.parametrize("mode", ["fused", "compiled"])
def test_a_step_is_also_timed_phase_by_phase(mode):
    with tempfile.TemporaryDirectory() as cache_dir:
        record = modes._run_child("mlp", mode, "full", 2, cache_dir, None, None)
    assert record["status"] == "ok", record.get("error")
    if mode == "compiled":  # one callable: nothing to time apart
        assert "phases_ms" not in record
        return
    phases = record["phases_ms"]
    assert list(phases) == list(modes.PHASES)
    assert all(p["host_ms"] > 0 and p["sync_ms"] >= 0 for p in phases.values())
    # fused: recording the forward launches nothing; its program runs in the synchronize
    assert phases["forward"]["sync_ms"] > 0
    assert "mlp / fused: batch" in modes._phase_lines({"mlp": {"fused": record}})


def test_the_xla_reference_trains_like_cpu():
    # The reference is the same training step as the torch modes: same weights, batches, AdamW.
    with tempfile.TemporaryDirectory() as cache_dir:
        ref = modes._run_child("gpt-tiny", "jax", "full", 2, cache_dir, None, None)
        cpu = modes._run_child("gpt-tiny", "cpu", "full", 2, cache_dir, None, None)
    assert ref["status"] == "ok", ref.get("error")
    assert ref["torch_tpu_loaded"] is False and ref["jax"]["platform"] == "cpu"
    assert len(ref["losses"]) == 1 + modes.WARMUP_STEPS + 2 and ref["step_median_s"] > 0
    torch.testing.assert_close(torch.tensor(ref["losses"]), torch.tensor(cpu["losses"]), rtol=1e-5, atol=0)


def test_tpu_modes_are_read_against_the_xla_reference():
    results = {"gpt-tiny": {"jax": {"status": "ok", "step_median_s": 0.005},
                            "fused": {"status": "ok", "step_median_s": 0.010},
                            "cpu": {"status": "ok", "step_median_s": 0.006}}}
    ratios = modes._add_ratios(results)["gpt-tiny"]
    assert ratios["fused_over_jax_throughput"] == 0.5
    assert "cpu_over_jax_throughput" not in ratios and ratios["jax_over_cpu_throughput"] == 1.2


import host_overhead  # noqa: E402


def test_host_overhead_ratios_are_taken_block_by_block():
    times = {"fused": [2.0, 4.0, 3.0], "cpu": [1.0, 1.0, 2.0]}
    ratio = host_overhead._block_ratios(times, [("fused", "cpu"), ("fused", "jax")])
    assert ratio == {"fused_over_cpu": {"median": 2.0, "min": 1.5, "max": 4.0}}


def test_host_overhead_takes_cuda_from_a_process_of_its_own_as_a_ratio_of_medians():
    result = {"status": "ok", "step_median_ms": {"cpu": 1.0, "fused": 3.0}, "step_s": {}, "ratios": {}}
    alone = {"status": "ok", "step_median_ms": {"cuda": 2.0}, "step_s": {"cuda": [0.002]}, "errors": {}}
    host_overhead._merge_alone(result, alone, ["cuda"])
    assert result["step_median_ms"]["cuda"] == 2.0
    assert result["ratios"]["fused_over_cuda"] == {"median": 1.5, "of": "medians, two processes"}
    assert result["ratios"]["cpu_over_cuda"]["median"] == 0.5
    failed = {"status": "ok", "step_median_ms": {}, "step_s": {}, "ratios": {}}
    host_overhead._merge_alone(failed, {"status": "error", "error": "no GPU"}, ["cuda"])
    assert failed["errors"] == {"cuda": "no GPU"}


def test_host_overhead_sorts_a_sample_into_the_innermost_part_that_claims_it():
    classify = host_overhead._classify
    launch = "main;THPVariable_add;tpu::aten::elementwise;tpu::aten::Program::run;pjrt::PJRT_LoadedExecutable_Execute"
    assert classify(launch) == "execute call"
    assert classify("main;THPVariable_add;tpu::aten::elementwise;tpu::ir::Graph::add") == \
        "op building (aten, lowering, ir)"
    assert classify("main;backward;torch::autograd::Engine::execute;pthread_cond_wait") == "backward (device thread)"
    assert classify("main;Module._call_impl (torch/nn/modules/module.py:1783)") == "python"


def test_host_overhead_runs_its_modes_in_one_process_and_checks_them_against_cpu(tmp_path):
    out = tmp_path / "host.json"
    code = host_overhead.main(["--workloads", "gpt-nano", "ops", "--modes", "cpu", "jax", "strict", "fused", "--blocks", "1",
                               "--block-steps", "4", "--out", str(out), "--chart", str(tmp_path / "host.png")])
    assert code == 0
    report = json.loads(out.read_text())
    nano, ops = report["results"]["gpt-nano"], report["results"]["ops"]
    assert nano["status"] == "ok" and ops["status"] == "ok", (nano.get("error"), ops.get("error"))
    assert set(nano["step_s"]) == {"cpu", "jax", "strict", "fused"} and all(len(v) == 2 for v in nano["step_s"].values())
    # host CPU time per block, of the threads that do host work (main, tpu autograd)
    assert set(nano["host_cpu_s"]) == set(nano["step_s"]) and all(
        0 < h for v in nano["host_cpu_s"].values() for h in v)
    assert {"fused_over_cpu", "fused_over_jax"} <= set(nano["host_cpu_ratios"])
    assert {"fused_over_cpu", "strict_over_cpu", "fused_over_strict"} <= set(nano["ratios"])
    assert max(nano["max_difference_from_cpu"].values()) < 1e-4  # every step's loss, not only the last
    assert nano["per_step"]["fused"]["fused_graphs_per_step"] == 3
    assert set(ops["per_op"]["add"]) == {"cpu_us", "jax_us", "strict_us", "fused_us", "strict_over_cpu",
                                         "fused_over_cpu", "strict_over_jax", "fused_over_jax"}


def test_host_cpu_time_counts_the_main_and_the_tpu_autograd_thread():
    import threading

    import torch_tpu  # noqa: F401 - the tpu autograd thread is found by a tpu backward
    clocks = host_overhead._host_clocks()
    assert len(clocks) == 2
    assert time.pthread_getcpuclockid(threading.get_ident()) in clocks
    before = host_overhead._host_cpu_seconds(clocks)
    end = time.thread_time() + 0.05
    while time.thread_time() < end:  # 50 ms of the main thread's CPU
        pass
    assert host_overhead._host_cpu_seconds(clocks) - before >= 0.05


def test_host_instructions_sorts_a_function_into_the_first_component_that_claims_it():
    import host_instructions as hi
    spin = "Eigen::ThreadPoolTempl<tsl::thread::EigenEnvironment>::GlobalSteal()"
    assert hi.component_of(spin, "/x/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so") == "XLA pool idle spin"
    assert hi.component_of("xla::PjRtCpuExecutable::ExecuteHelper(...)", "/x/xla_cpu_pjrt.so") == "XLA plugin"
    assert hi.component_of("tpu::ir::Graph::fingerprint() const", "/r/torch_tpu/_C.cpython-311.so") == "torch_tpu"
    assert hi.component_of("./malloc/./malloc/malloc.c:_int_free", "/usr/lib/libc.so.6") == "malloc"
    assert hi.component_of("???:0x1234", "???") == "other"
    annotated = ("100,000 (100.0%)  PROGRAM TOTALS\n"
                 " 1,500 (50.0%)  ???:tpu::ir::Graph::add(x) [/r/torch_tpu/_C.cpython-311.so]\n"
                 " 1,000 (30.0%)  ???:at::native::add(y) [/v/torch/lib/libtorch_cpu.so]\n"
                 "   500 (20.0%)  ???:tpu::aten::read(z) [/r/torch_tpu/_C.cpython-311.so]\n")
    assert hi.components(annotated) == {"torch_tpu": 2000, "PyTorch": 1000}


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_host_instructions_counts_only_the_timed_steps_of_each_mode(tmp_path):
    import host_instructions as hi
    out = tmp_path / "instructions.json"
    assert hi.main(["--modes", "cpu", "fused", "--steps", "2", "--out", str(out),
                    "--chart", str(tmp_path / "instructions.png")]) == 0
    report = json.loads(out.read_text())
    cpu, fused = report["results"]["cpu"], report["results"]["fused"]
    assert "error" not in cpu and "error" not in fused, (cpu.get("error"), fused.get("error"))
    assert len(cpu["losses"]) == len(fused["losses"]) == 2
    torch.testing.assert_close(torch.tensor(fused["losses"]), torch.tensor(cpu["losses"]), rtol=1e-4, atol=1e-4)
    # torch_tpu is loaded in the cpu run too (torch's backend autoload) but does next to nothing there
    assert cpu["components_per_step"].get("torch_tpu", 0) < 0.01 * cpu["instructions_per_step"]
    assert fused["components_per_step"]["torch_tpu"] > 0.05 * fused["instructions_per_step"]
    # warm-up (compiles) and imports are not counted: a compute-free step is a few million instructions
    assert 1e6 < cpu["instructions_per_step"] < 1e8 and 1e6 < fused["instructions_per_step"] < 1e8
    assert set(report["ratios"]) == {"fused_over_cpu", "fused_over_cpu_without_idle_spin"}
    # the chart where matplotlib is installed (make bench installs it; the test environment need not)
    assert (tmp_path / "instructions.png").exists() == (importlib.util.find_spec("matplotlib") is not None)
