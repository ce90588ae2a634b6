"""A CI slice of the OpInfo consistency report (torch_tpu.tools.opinfo_report).

One or two OpInfos from each op family, float32, forward and backward, through the same
harness functions as the full report: each must classify as native -- a regression to
the CPU fallback or a wrong result fails here. Plus unit tests of the classifier.
"""
import pytest
import torch

from support import cpu_only_scale
from torch_tpu.tools import opinfo_report as rep

pytest.importorskip("expecttest")

# op family -> OpInfo names (op_key), all free of randomness.
SLICE = {
    "elementwise unary": ["exp", "nn.functional.gelu"],
    "elementwise binary": ["add", "mul", "where"],
    "reduction": ["sum", "amax", "var", "cumsum"],
    "matmul": ["mm", "addmm", "nn.functional.linear"],
    "conv": ["nn.functional.conv1d", "nn.functional.conv2d"],
    "pooling": ["nn.functional.max_pool2d", "nn.functional.avg_pool2d", "nn.functional.adaptive_avg_pool2d"],
    "softmax/norm/loss": ["softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.batch_norm",
                          "nn.functional.cross_entropy"],
    "indexing/scatter": ["gather", "scatter_add", "index_select", "index_put", "nn.functional.embedding"],
    "shape/cat": ["cat", "stack", "permute", "as_strided.partial_views"],
    "sort/special": ["sort", "topk", "special.i0e", "lgamma"],
    "linear algebra": ["linalg.solve", "linalg.det", "linalg.cholesky", "linalg.qr", "linalg.eigvalsh",
                       "linalg.svdvals"],
    "fft/complex": ["fft.irfft", "fft.hfft"],
    "distances/histograms": ["cdist", "histogram"],
}
SLICE_OPS = [name for names in SLICE.values() for name in names]
LIMIT = 6           # as in the full report


@pytest.fixture(scope="module")
def ops():
    return {rep.op_key(op): op for op in rep.find_ops(SLICE_OPS)}


@pytest.mark.parametrize("name", SLICE_OPS)
def test_slice_native(ops, name):
    result = rep.check_op(ops[name], ("float32",), limit_samples=LIMIT, backward=True)["float32"]
    fwd = result["forward"]
    assert fwd["samples"] > 0, result
    assert fwd["status"] == "native", fwd
    if ops[name].supports_autograd:
        bwd = result["backward"]
        assert bwd["samples"] > 0, result
        assert bwd["status"] == "native", bwd


# ---- the classifier ---------------------------------------------------------------------

def test_sparse_opinfos_correct_with_fallback():
    ops = rep.find_ops(["to_sparse", "sparse.sampled_addmm"])
    assert len(ops) == 2
    for op in ops:
        rec = rep.check_op(op, ("float32",), limit_samples=2, backward=True)["float32"]
        assert rec["forward"]["status"] == "fallback", rec
        assert rec["backward"]["status"] == "fallback", rec


def test_replicate_keeps_view_geometry():
    base = torch.arange(20.0)
    view = base[5:15].as_strided((3, 2), (1, 3), 7)
    for device in ("cpu", "tpu"):
        copy = rep.replicate(view, device)
        assert copy.device.type == device
        assert (copy.size(), copy.stride(), copy.storage_offset()) == ((3, 2), (1, 3), 7)
        assert torch.equal(copy.cpu(), view)
        assert copy.untyped_storage().nbytes() == base.untyped_storage().nbytes()
    # On the CPU too it is a copy, so ops writing their input leave the sample alone.
    assert rep.replicate(view, "cpu").untyped_storage().data_ptr() != base.untyped_storage().data_ptr()

def test_ldl_factor_classifies_as_fallback():
    op = rep.find_ops(["linalg.ldl_factor"])[0]
    rec = rep.check_op(op, ("float32",), limit_samples=2, backward=True)["float32"]
    assert rec["forward"]["status"] == "fallback", rec
    assert rec["forward"]["fallback_ops"] == ["aten::linalg_ldl_factor_ex.out"]
    assert "backward" not in rec          # ldl_factor is not differentiable


class FakeOp:
    """The part of an OpInfo the harness uses, around a plain function."""
    name, variant_test_name, decorators = "fake", "", ()

    def __init__(self, fn, supports_autograd=True):
        self.fn, self.supports_autograd = fn, supports_autograd

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)

    def supported_dtypes(self, device):
        return {torch.float32, torch.int64}

    def sample_inputs(self, device, dtype, requires_grad=False):
        from torch.testing._internal.opinfo.core import SampleInput
        for shape in ((3, 4), (5,)):
            x = torch.linspace(-2, 2, int(torch.tensor(shape).prod())).reshape(shape).to(dtype)
            yield SampleInput(x.requires_grad_(requires_grad and dtype.is_floating_point))


def _status(fn, dtype="float32", **kwargs):
    rec = rep.check_op(FakeOp(fn, **kwargs), (dtype,), limit_samples=6, backward=True)[dtype]
    return rec["forward"], rec.get("backward")


def test_classifies_native():
    fwd, bwd = _status(lambda x: x * 2 + 1)
    assert (fwd["status"], fwd["samples"], bwd["status"], bwd["samples"]) == ("native", 2, "native", 2)


def test_classifies_wrong_result_as_fails():
    fwd, bwd = _status(lambda x: x + (1e-3 if x.device.type == "tpu" else 0.0))
    assert fwd["status"] == "fails" and "not close" in fwd["message"], fwd
    assert bwd["status"] == "native"        # the gradient of x + c is right


def test_classifies_wrong_gradient_as_fails():
    def fn(x):
        if x.device.type == "tpu":
            return x * x.detach() * 2 - x.detach() * x      # same values, gradient x instead of 2x
        return x * x
    fwd, bwd = _status(fn)
    assert fwd["status"] == "native" and bwd["status"] == "fails", (fwd, bwd)


def _offset_by_device(cpu_error, tpu_error):
    """x * 3 off by an absolute error per side; exact in float64 (the harness's reference)."""
    def fn(x):
        if x.dtype == torch.float64:
            return x * 3
        return x * 3 + (tpu_error if x.device.type == "tpu" else cpu_error)
    return fn


def test_result_closer_to_float64_than_cpu_counts_as_correct():
    fwd, bwd = _status(_offset_by_device(cpu_error=1e-3, tpu_error=5e-4))
    assert fwd["status"] == "native", fwd
    assert len(fwd["closer_to_float64"]) == 2 and "max error there 0.0005 (CPU 0.001)" in fwd["closer_to_float64"][0]
    assert bwd["status"] == "native" and "closer_to_float64" not in bwd


@pytest.mark.parametrize("tpu_error", [2e-3, float("nan")], ids=["farther", "nan"])
def test_result_farther_from_float64_than_cpu_fails(tpu_error):
    fwd, _ = _status(_offset_by_device(cpu_error=1e-3, tpu_error=tpu_error))
    assert fwd["status"] == "fails" and "closer_to_float64" not in fwd, fwd


def _cpu_overflows(tpu_result):
    """x * 3, with an inf in CPU's result where float64 is finite."""
    def fn(x):
        if x.dtype == torch.float64 or x.device.type == "tpu":
            return tpu_result(x) if x.device.type == "tpu" else x * 3
        r = x * 3
        r.view(-1)[0] = float("inf")
        return r
    return fn


def test_cpu_overflow_passes_only_a_result_close_to_float64():
    fwd, _ = _status(_cpu_overflows(lambda x: x * 3))
    assert fwd["status"] == "native" and "(CPU inf)" in fwd["closer_to_float64"][0], fwd
    fwd, _ = _status(_cpu_overflows(lambda x: x * 3 + 0.5))    # finite, but not close to float64
    assert fwd["status"] == "fails", fwd


def test_float64_rescue_rejects_another_dtype():
    def fn(x):
        if x.device.type == "tpu":
            return (x * 3).double()         # closer to float64, but not the op's dtype
        return x * 3 + (0 if x.dtype == torch.float64 else 1e-3)
    fwd, _ = _status(fn)
    assert fwd["status"] == "fails" and "closer_to_float64" not in fwd, fwd


def test_float64_rescue_rejects_a_wrong_python_scalar():
    def fn(x):
        if x.device.type == "tpu":
            return False, x * 3             # the tensor is closer to float64, the flag is wrong
        return True, x * 3 + (0 if x.dtype == torch.float64 else 1e-3)
    fwd, _ = _status(fn)
    assert fwd["status"] == "fails" and "closer_to_float64" not in fwd, fwd


def test_classifies_tpu_exception_as_errors():
    def fn(x):
        if x.device.type == "tpu":
            raise RuntimeError("boom on tpu\nsecond line")
        return x.sin()
    fwd, bwd = _status(fn)
    assert fwd["status"] == "errors" and fwd["message"] == "RuntimeError: boom on tpu", fwd
    assert bwd["status"] == "errors"


def test_cpu_failure_is_skipped_not_counted():
    def fn(x):
        if x.dim() == 1:
            raise RuntimeError("CPU rejects this sample too")
        return x.cos()
    fwd, _ = _status(fn)
    assert (fwd["status"], fwd["samples"]) == ("native", 1)

    def cpu_rejects_all(x):
        raise ValueError("no sample runs on CPU")
    fwd, bwd = _status(cpu_rejects_all)
    assert fwd == {"status": "skipped", "samples": 0} and bwd["status"] == "skipped"


def test_fallback_then_wrong_is_fails():
    # Needs the fallback and then gives a wrong answer: fails, with the fallback op.
    def fn(x):
        d = cpu_only_scale(x[:2, :2])
        return d + (1 if x.device.type == "tpu" else 0)
    fwd, _ = _status(fn, supports_autograd=False)
    assert fwd["status"] == "fails" and fwd["fallback_ops"] == ["torch_tpu_test::cpu_only_scale"], fwd


def test_backward_fallback_is_classified_separately():
    # The forward falls back; its backward (grad * 2) is native.
    fwd, bwd = _status(lambda x: cpu_only_scale(x[:2, :2]))
    assert fwd["status"] == "fallback" and bwd["status"] == "native", (fwd, bwd)


def test_totals_and_last_line():
    results = {
        "a": {"float32": {"forward": {"status": "native"}, "backward": {"status": "fallback"}}},
        "b": {"float32": {"forward": {"status": "fallback"}, "backward": {"status": "native"}}},
        "c": {"float32": {"forward": {"status": "fails"}}},
        "d": {"float32": {"forward": {"status": "skipped"}}},
        "e": {"int64": {"forward": {"status": "native"}}},
    }
    tot = rep.totals(results)
    assert tot["forward"]["ops"] == 3 and tot["forward"]["native"] == 1
    assert tot["forward"]["correct_with_fallback"] == 2
    assert tot["backward"]["ops"] == 2 and tot["backward"]["native"] == 1
    assert rep.summary_lines(tot)[-1] == "native: 1/3 ops (33.3%)"


def test_worker_timeout_is_recorded():
    out = rep.run_ops(["abs"], ("float32",), limit_samples=1, jobs=1, op_timeout=0.001)
    rec = out["abs"]["float32"]
    assert rec["forward"]["status"] == "errors" and "timeout" in rec["forward"]["message"], rec
