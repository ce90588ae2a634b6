import os
import tempfile

# Tests compile into a cache of their own, never the user's.
os.environ.setdefault("TORCH_TPU_CACHE_DIR", tempfile.mkdtemp(prefix="torch_tpu_test_cache_"))
# Fused-mode tests check the programs a cut runs; with background compiles (the
# default off XLA:CPU) a first cut runs op by op instead. test_background_compile
# covers that path in processes of its own.
os.environ.setdefault("TORCH_TPU_FUSED_BACKGROUND_COMPILE", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

# Tests compare tpu against CPU PyTorch; they must fail rather than silently
# fall back unless a test opts in.
os.environ.setdefault("TORCH_TPU_FALLBACK", "error")


@pytest.fixture
def allow_fallback(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "allow")


@pytest.fixture
def tpu():
    return torch.device("tpu")
