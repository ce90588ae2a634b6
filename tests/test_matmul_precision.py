"""torch.set_float32_matmul_precision reaches XLA: "highest" / "high" / "medium"
ask float32 dots and convolutions for HIGHEST / HIGH / DEFAULT precision, per op,
in every mode; other dtypes keep HIGHEST. The precision is part of the program,
so a change compiles a new one instead of reusing the old."""
import re

from support import run_python

# Each case has a shape of its own, so that its programs can be told apart.
_CODE = r"""
import torch, torch_tpu
from torch.testing import assert_close

def check(fn, *args, **tol):
    # The reference in full float32: on a CPU with bf16 units (AMX), oneDNN computes
    # float32 convolutions in bf16 under "medium"; XLA:CPU computes float32 whatever is asked.
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        expected = fn(*args)
    finally:
        torch.set_float32_matmul_precision(previous)
    got = fn(*(a.to("tpu") for a in args)).cpu()
    assert_close(got, expected, **tol)

g = torch.Generator().manual_seed(0)
def rand(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g).to(dtype)

# strict mode, float32 matmuls of shapes 3x5x7 (highest), 3x5x9 (high), 3x5x11 (medium)
for precision, n in (("highest", 7), ("high", 9), ("medium", 11)):
    torch.set_float32_matmul_precision(precision)
    check(torch.mm, rand(3, 5), rand(5, n))
# allow_tf32 is "high"
torch.set_float32_matmul_precision("highest")
torch.backends.cuda.matmul.allow_tf32 = True
check(torch.mm, rand(3, 5), rand(5, 13))
torch.backends.cuda.matmul.allow_tf32 = False
torch.set_float32_matmul_precision("medium")
check(torch.mm, rand(3, 5, dtype=torch.float64), rand(5, 15, dtype=torch.float64))    # float64: HIGHEST
check(lambda x, w: torch.nn.functional.conv2d(x, w), rand(1, 2, 6, 6), rand(17, 2, 3, 3))  # conv: DEFAULT
with torch_tpu.eager_mode("fused"):
    check(lambda a, b: (a @ b).relu(), rand(3, 5), rand(5, 19))                       # fused: DEFAULT
torch.set_float32_matmul_precision("highest")
compiled = torch.compile(lambda a, b: a @ b, backend="tpu")
a, b = rand(3, 5), rand(5, 21)
assert_close(compiled(a.to("tpu"), b.to("tpu")).cpu(), a @ b)                         # compiled: HIGHEST
torch.set_float32_matmul_precision("medium")
assert_close(compiled(a.to("tpu"), b.to("tpu")).cpu(), a @ b)                         # then DEFAULT
print("ok")
"""


def _precisions(texts, shape):
    """The precisions of the dots and convolutions of the programs that have a value of `shape`."""
    found = set()
    for text in texts:
        if shape in text:
            found |= set(re.findall(r"#stablehlo<precision (\w+)>", text))
    return found


def test_float32_matmul_precision_in_every_mode(tmp_path):
    dump = tmp_path / "programs"
    out = run_python(_CODE, timeout=300, TORCH_TPU_DUMP_PROGRAMS=str(dump),
                     TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"), TORCH_TPU_EAGER_MODE="strict")
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
    texts = [p.read_text() for p in dump.iterdir()]
    assert _precisions(texts, "tensor<3x7xf32>") == {"HIGHEST"}
    assert _precisions(texts, "tensor<3x9xf32>") == {"HIGH"}
    assert _precisions(texts, "tensor<3x11xf32>") == {"DEFAULT"}
    assert _precisions(texts, "tensor<3x13xf32>") == {"HIGH"}
    assert _precisions(texts, "tensor<3x15xf64>") == {"HIGHEST"}
    assert _precisions(texts, "tensor<1x17x4x4xf32>") == {"DEFAULT"}
    assert _precisions(texts, "tensor<3x19xf32>") == {"DEFAULT"}
    # The compiled function: one program per precision, not the first one reused.
    assert _precisions(texts, "tensor<3x21xf32>") == {"HIGHEST", "DEFAULT"}
