import os

import pytest
import torch

# Tests compare tpu against CPU PyTorch; they must fail rather than silently
# fall back unless a test opts in.
os.environ.setdefault("TORCH_TPU_FALLBACK", "error")


@pytest.fixture
def allow_fallback(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "allow")


@pytest.fixture
def tpu():
    return torch.device("tpu")
