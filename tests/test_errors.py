"""Bad input gives a clear Python exception, never a crash or a hang."""
import os

import pytest
import torch

import torch_tpu
from support import cpu_only_combine, cpu_only_scale, run_python


def test_mixing_tpu_and_cpu_tensors_raises_like_cuda():
    a = torch.ones(3, device="tpu")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        a + torch.ones(3)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.mm(torch.ones(2, 2, device="tpu"), torch.ones(2, 2))
    # A 0-dim CPU tensor is a scalar, as on CUDA.
    assert (a + torch.tensor(2.0)).cpu().tolist() == [3.0, 3.0, 3.0]


@pytest.mark.parametrize("op", ["embedding", "index_select", "gather", "mm", "mm_cpu_second"])
def test_a_cpu_operand_is_named_as_cpu_in_the_device_error(op):
    # The op's first operand on the CPU (a model left there, as Hugging Face's Trainer did
    # with accelerate unaware of tpu): the message names cpu and tpu:0, never "tpu:-1".
    cpu, tpu = torch.ones(3, 3), torch.ones(3, 3, device="tpu")
    index = torch.tensor([0, 1], device="tpu")
    run = {"embedding": lambda: torch.nn.functional.embedding(index, cpu),
           "index_select": lambda: torch.index_select(cpu, 0, index),
           "gather": lambda: torch.gather(cpu, 0, index.view(1, 2)),
           "mm": lambda: cpu @ tpu,
           "mm_cpu_second": lambda: tpu @ cpu}[op]
    with pytest.raises(RuntimeError, match="same device") as error:
        run()
    message = str(error.value)
    assert "tpu:-1" not in message
    assert "cpu and tpu:0" in message or "tpu:0 and cpu" in message, message


def test_mixing_tpu_devices_raises():
    if torch.tpu.device_count() < 2:
        pytest.skip("needs two tpu devices")
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(2, device="tpu:0") + torch.ones(2, device="tpu:1")


def test_shape_mismatch_is_a_python_error():
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.ones(3, device="tpu") + torch.ones(4, device="tpu")
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.ones(3, device="tpu").sum(5)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_an_output_that_partly_overlaps_an_input_raises_like_cpu(mode):
    # CPU's TensorIterator refuses an input that is part of the output (not all of it).
    message = "some elements of the input tensor and the written-to tensor refer to a single memory location"
    with torch_tpu.eager_mode(mode):
        for device in ["cpu", "tpu"]:
            a = torch.arange(6.0, device=device)
            with pytest.raises(RuntimeError, match=message):
                a[1:].add_(a[:-1])
            with pytest.raises(RuntimeError, match=message):
                torch.mul(a[:-2], 2, out=a[2:])
            a[3:].add_(a[:3])  # disjoint: allowed
            a.mul_(a)  # the whole output: allowed
            assert a.cpu().tolist() == [0.0, 1.0, 4.0, 9.0, 25.0, 49.0]


def test_unsupported_dtype_is_clear():
    with pytest.raises(TypeError, match="float8_e4m3fn is not supported on the tpu device"):
        torch.zeros(2, dtype=torch.float8_e4m3fn, device="tpu")
    with pytest.raises(TypeError, match="not supported on the tpu device"):
        torch.ones(2).to(torch.float8_e4m3fn).to("tpu")
    # complex32 tensors exist (copies, conversions); math on them says why not.
    with pytest.raises(TypeError, match=r"complex32 \(chalf\) tensors on tpu support only copies"):
        torch.add(torch.zeros(2, dtype=torch.complex32, device="tpu"), 1)


def test_tpu_platform_rejects_float64():
    reason = torch_tpu._C._unsupported_dtype_reason("tpu", torch.float64)
    assert "float64" in reason and "TPU" in reason
    assert torch_tpu._C._unsupported_dtype_reason("cpu", torch.float64) == ""
    assert torch_tpu._C._unsupported_dtype_reason("tpu", torch.float32) == ""


def test_fallback_error_mode_names_the_op(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "error")
    with pytest.raises(NotImplementedError, match="torch_tpu_test::cpu_only_scale.*TORCH_TPU_FALLBACK=error"):
        cpu_only_scale(torch.eye(3, device="tpu"))


def test_fallback_runs_on_cpu_and_is_counted(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "allow")
    torch_tpu.reset_metrics()
    a = torch.tensor([[2.0, 1.0], [1.0, 3.0]])
    d = cpu_only_scale(a.to("tpu"))
    assert d.device.type == "tpu"
    torch.testing.assert_close(d.cpu(), a * 2)
    x = torch.zeros(2, 2, device="tpu")
    cpu_only_scale(a.to("tpu"), out=x)  # the out= result lands in the tpu storage
    torch.testing.assert_close(x.cpu(), a * 2)
    m = torch_tpu.metrics()
    assert any(op.startswith("torch_tpu_test::cpu_only_scale") for op in m["fallback_ops"]), m["fallback_ops"]
    assert m["fallbacks"] >= 2


def test_fallback_rejects_operands_on_two_devices_like_cuda(monkeypatch):
    # Run on the CPU, the op would leave its result on the CPU without a word.
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "allow")
    cpu, tpu = torch.ones(2, 2), torch.ones(2, 2, device="tpu")
    torch_tpu.reset_metrics()
    for x, y in ((cpu, tpu), (tpu, cpu)):
        with pytest.raises(RuntimeError, match="same device.*cpu_only_combine") as error:
            cpu_only_combine(x, y)
        assert "tpu:0 and cpu" in str(error.value), str(error.value)
    assert torch_tpu.metrics()["fallbacks"] == 0  # rejected before anything ran
    # A 0-dim CPU tensor is a scalar, as on CUDA.
    result = cpu_only_combine(tpu, torch.tensor(1.0))
    assert result.device.type == "tpu"
    torch.testing.assert_close(result.cpu(), torch.full((2, 2), 3.0))
    # A CPU input with a tpu weight reaches a kernel that tpu lacks (_slow_conv2d_forward):
    # CUDA raises there too.
    with pytest.raises(RuntimeError, match="same device"):
        torch.nn.functional.conv2d(torch.ones(1, 1, 4, 4), torch.ones(1, 1, 3, 3, device="tpu"))


def test_fallback_preserves_views(monkeypatch):
    monkeypatch.setenv("TORCH_TPU_FALLBACK", "allow")
    a = torch.tensor([[2.0, 1.0], [1.0, 3.0]])
    base = torch.zeros(3, 2, 2, device="tpu")
    cpu_only_scale(a.to("tpu"), out=base[1])  # fallback op writing through a view
    expected = torch.zeros(3, 2, 2)
    expected[1] = a * 2
    torch.testing.assert_close(base.cpu(), expected)


@pytest.mark.parametrize("plugin", ["/nonexistent/libnothing.so", "/bin/true", "nonsense-name"])
def test_missing_or_broken_plugin_names_the_variable(plugin):
    code = (
        "import torch\n"
        "assert not torch.tpu.is_available()\n"
        "assert torch.tpu.device_count() == 0\n"
        "try:\n"
        "    torch.ones(1, device='tpu')\n"
        "except RuntimeError as e:\n"
        "    print('ERROR:', e)\n"
        "else:\n"
        "    print('NO ERROR')\n"
    )
    out = run_python(code, timeout=120, TORCH_TPU_PLUGIN=plugin)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ERROR:" in out.stdout and "TORCH_TPU_PLUGIN" in out.stdout, out.stdout


def test_item_of_tpu_tensor_and_bool_context():
    x = torch.tensor([1.5, -2.0]).to("tpu")
    assert x[0].item() == 1.5
    assert bool((x > 0).sum() == 1)
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(x)


def test_interpreter_exit_after_backward_is_clean():
    # A shutdown race in torch's autograd device thread used to abort about
    # half of such processes at exit (SIGABRT); torch_tpu drains it at exit.
    code = "import torch\nx = torch.randn(5, device='tpu', requires_grad=True)\ntorch.autograd.grad(x.exp().sum(), [x])\n"
    for _ in range(8):
        out = run_python(code, timeout=120)
        assert out.returncode == 0, (out.returncode, out.stderr[-1000:])


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_assert_async_raises_at_the_next_read_as_cuda_does(mode):
    fallbacks = torch_tpu.metrics()["fallbacks"]
    with torch_tpu.eager_mode(mode):
        x = torch.tensor([3.0, 4.0], device="tpu")
        torch._assert_async(x.sum() > 1, "holds")
        assert x.sum().item() == 7.0  # a check that holds raises nothing
        torch._assert_async(x.sum() > 10, "the sum is too small")  # recorded, not waited for
        y = x * 2  # work goes on
        with pytest.raises(RuntimeError, match="the sum is too small"):
            y.cpu()
        torch.testing.assert_close(y.cpu(), torch.tensor([6.0, 8.0]))  # raised once; values kept
        # The value is copied when asserted: a later write does not change the check.
        flag = torch.tensor(0, device="tpu")
        torch._assert_async(flag)
        flag.fill_(1)
        with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value, but got zero"):
            torch.tpu.synchronize()
    assert torch_tpu.metrics()["fallbacks"] == fallbacks


def test_assert_async_checks_shape_at_the_op_and_values_at_the_op_in_debug_mode():
    for bad, message in ((torch.ones(2, device="tpu"), "more than one value"),
                         (torch.ones(0, device="tpu"), "no values")):
        with pytest.raises(RuntimeError, match=message):
            torch._assert_async(bad)
    with torch_tpu.eager_mode("debug"):
        with pytest.raises(RuntimeError, match="at the op"):
            torch._assert_async(torch.tensor(0.0, device="tpu"), "at the op")


@pytest.mark.parametrize("case", ["sub_bool", "sub_bool_scalar", "cat_0dim", "mm_bool", "bmm_bool", "mv_bool",
                                  "floor_divide_bool", "relu_bool", "copy_broadcast", "copy_wider",
                                  "binary_shape_before_dtype"])
def test_errors_the_fuzzer_found_match_cpu(case):
    """Each raised a different exception than CPU's (or none) before the differential fuzzer."""
    def run(device):
        b = torch.tensor([True, False], device=device)
        f = torch.ones(2, 3, device=device)
        return {"sub_bool": lambda: b - torch.ones(2, device=device),
                "sub_bool_scalar": lambda: torch.ones(2, device=device) - True,
                "cat_0dim": lambda: torch.cat([torch.tensor(1.0, device=device), torch.tensor(2.0, device=device)]),
                "mm_bool": lambda: torch.ones(2, 3, dtype=torch.bool, device=device) @ torch.ones(
                    3, 2, dtype=torch.bool, device=device),
                "bmm_bool": lambda: torch.ones(2, 2, 3, dtype=torch.bool, device=device) @ torch.ones(
                    2, 3, 2, dtype=torch.bool, device=device),
                "mv_bool": lambda: torch.ones(2, 2, dtype=torch.bool, device=device) @ b,
                "floor_divide_bool": lambda: torch.floor_divide(b, b),
                "relu_bool": lambda: torch.relu(b),
                "copy_broadcast": lambda: f.copy_(torch.ones(4, device=device)),
                "copy_wider": lambda: torch.ones(3, device=device).copy_(f),
                "binary_shape_before_dtype": lambda: f.bitwise_and(torch.ones(2, 2, device=device)),
                }[case]()

    with pytest.raises(Exception) as on_cpu:
        run("cpu")
    with pytest.raises(type(on_cpu.value)):
        run("tpu")


def test_a_bool_tensor_to_a_bool_power_is_as_on_cpu():
    for exponent in (True, False):
        b = torch.tensor([True, False])
        torch.testing.assert_close(torch.pow(b.to("tpu"), exponent).cpu(), torch.pow(b, exponent))
        t = b.to("tpu")
        t.pow_(exponent)
        torch.testing.assert_close(t.cpu(), b.clone().pow_(exponent))


def test_debug_mode_divides_nothing_into_an_empty_integer_tensor():
    with torch_tpu.eager_mode("debug"):
        out = torch.ones(5, 0, dtype=torch.int32, device="tpu").remainder(0)
    assert out.shape == (5, 0)


FAKE_PLUGINS = {
    # a shared library that is no PJRT plugin
    "no_entry_point": ("int unrelated(void) { return 0; }\n", "is not a PJRT plugin (no GetPjrtApi symbol)"),
    # a plugin of an API major version this build does not speak
    "wrong_api_version": ("#include <pjrt_c_api.h>\n"
                          "static PJRT_Api api;\n"
                          "const PJRT_Api* GetPjrtApi(void) {\n"
                          "  api.struct_size = PJRT_Api_STRUCT_SIZE;\n"
                          "  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;\n"
                          "  api.pjrt_api_version.major_version = PJRT_API_MAJOR + 1;\n"
                          "  return &api;\n"
                          "}\n", "speaks API major version"),
}


@pytest.mark.parametrize("case", FAKE_PLUGINS)
def test_a_plugin_that_is_not_one_or_speaks_another_api_is_a_clear_error(case, tmp_path):
    import shutil
    import subprocess
    import torch_tpu
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the fake plugin")
    source, expected = FAKE_PLUGINS[case]
    (tmp_path / "plugin.c").write_text(source)
    include = os.path.join(os.path.dirname(torch_tpu._plugin.cpu_plugin()), "include")
    subprocess.run([compiler, "-shared", "-fPIC", "-I", include, "-o", str(tmp_path / "plugin.so"),
                    str(tmp_path / "plugin.c")], check=True)
    code = ("import torch\n"
            "try:\n"
            "    torch.ones(1, device='tpu')\n"
            "except RuntimeError as e:\n"
            "    print('ERROR:', e)\n")
    out = run_python(code, timeout=120, TORCH_TPU_PLUGIN=str(tmp_path / "plugin.so"))
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ERROR:" in out.stdout and expected in out.stdout and "TORCH_TPU_PLUGIN" in out.stdout, out.stdout
