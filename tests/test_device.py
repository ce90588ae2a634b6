"""The tpu device through PyTorch's own device APIs."""
import os

import pytest
import torch

import torch_tpu
from support import run_python


def test_autoload_on_import_torch():
    # A fresh interpreter that only imports torch: the entry point loads torch_tpu.
    code = (
        "import torch\n"
        "x = torch.ones(2, device='tpu')\n"
        "print(torch.accelerator.current_accelerator(), x.device, (x + 1).cpu().tolist())\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "tpu tpu:0 [2.0, 2.0]"


@pytest.mark.parametrize("cuda, hip, device_files, plugin, visible, expected", [
    (None, None, [], "", None, True),                     # CPU build of torch (CI, a TPU VM with CPU torch)
    ("13.0", None, [], "", None, True),                   # CUDA build without a GPU (a TPU VM with PyPI torch)
    ("13.0", None, ["/dev/nvidia0"], "", None, False),    # a CUDA GPU: leave CUDA autograd working
    (None, "7.0", ["/dev/kfd"], "", None, False),         # a ROCm GPU
    ("13.0", None, ["/dev/nvidia0"], "cuda", None, True),  # asked for: XLA:GPU as the tpu device
    ("13.0", None, ["/dev/nvidia0"], "cpu", None, True),
    ("13.0", None, ["/dev/dxg"], "", None, False),        # WSL2
    ("13.0", None, ["/dev/nvidia0"], "", "", True),       # every GPU hidden by CUDA_VISIBLE_DEVICES
    ("13.0", None, ["/dev/nvidia0"], "", "-1", True),
    ("13.0", None, ["/dev/nvidia0"], "", "0", False),
])
def test_autoload_leaves_a_gpu_machine_alone_unless_asked(monkeypatch, cuda, hip, device_files, plugin, visible,
                                                          expected):
    from torch_tpu import _autoload

    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setattr(torch.version, "cuda", cuda)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(_autoload, "_gpu_device_files", lambda: device_files)
    monkeypatch.setenv("TORCH_TPU_PLUGIN", plugin)
    assert _autoload.should_autoload() is expected


def test_import_torch_leaves_the_compile_analysis_unloaded():
    # torch.compile's padding analysis needs sympy (about half a second to import);
    # `import torch` autoloads torch_tpu, and eager-only programs never use it.
    code = "import sys, torch\nprint('torch_tpu' in sys.modules, 'torch_tpu._buckets' in sys.modules, 'sympy' in sys.modules)\n"
    plain = run_python(code, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    if plain.stdout.split()[-1] == "True":
        pytest.skip("this torch imports sympy itself")
    out = run_python(code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False", "False"]


def test_import_torch_tpu_first():
    code = "import torch_tpu, torch\nprint(torch.ones(1, device='tpu').device)\n"
    out = run_python(code)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "tpu:0"


def test_accelerator_api():
    assert torch.accelerator.current_accelerator() == torch.device("tpu")
    assert torch.accelerator.is_available()
    assert torch.accelerator.device_count() == torch.tpu.device_count() >= 1
    torch.accelerator.synchronize()


def test_tpu_module_api():
    assert torch.tpu.is_available()
    n = torch.tpu.device_count()
    assert n >= 1
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    torch.tpu.synchronize()
    assert "cpu" in torch.tpu.get_device_name().lower() or torch.tpu.get_device_name()


def test_set_device_and_device_context():
    if torch.tpu.device_count() < 2:
        pytest.skip("needs two tpu devices")
    with torch.tpu.device(1):
        assert torch.tpu.current_device() == 1
        x = torch.ones(3, device="tpu")
        assert x.device == torch.device("tpu", 1)
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(1)
    try:
        assert torch.empty(1, device="tpu").device.index == 1
    finally:
        torch.tpu.set_device(0)


def test_set_device_out_of_range():
    with pytest.raises((IndexError, RuntimeError)):
        torch.tpu.set_device(torch.tpu.device_count() + 5)


def test_manual_seed_and_generator_state():
    torch.tpu.manual_seed(1234)
    assert torch.tpu.initial_seed() == 1234
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    torch.tpu.manual_seed_all(99)
    assert torch.tpu.initial_seed() == 99
    torch.tpu.set_rng_state(state)
    assert torch.tpu.initial_seed() == 1234
    g = torch.Generator(device="tpu")
    g.manual_seed(7)
    assert g.initial_seed() == 7 and g.device == torch.device("tpu", 0)
    torch.manual_seed(5)  # seeds every accelerator too
    assert torch.tpu.initial_seed() == 5


def test_memory_stats_track_device_buffers():
    # Bytes of device buffers: a tensor from torch.empty holds none until written.
    torch.empty(1, device="tpu").fill_(0)  # warms the cached scalar 0 that fill_ uploads
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    x = torch.empty(1024, 256, device="tpu")
    assert torch.tpu.memory_allocated() == before
    x.fill_(0)  # 1 MiB
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == before + 1024 * 256 * 4
    assert torch.tpu.max_memory_allocated() >= before + 1024 * 256 * 4
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()
    del x
    assert torch.tpu.memory_allocated() == before
    assert torch.tpu.max_memory_allocated() >= before + 1024 * 256 * 4
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == before


def test_memory_info_reserved_and_properties():
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total
    assert torch.accelerator.get_memory_info(0)[1] == total
    if torch_tpu.plugin_info()["platform"] == "cpu":  # XLA:CPU devices are host memory
        assert total == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    props = torch.tpu.get_device_properties(0)
    assert props.total_memory == total and props.name == torch.tpu.get_device_name(0)
    assert props.platform == torch_tpu.plugin_info()["platform"]
    # No cache of freed blocks: reserved is allocated, and empty_cache has nothing to return.
    x = torch.ones(256, 1024, device="tpu")
    torch.tpu.synchronize()
    assert torch.tpu.memory_reserved() == torch.tpu.memory_allocated() == torch.accelerator.memory_reserved()
    assert torch.tpu.max_memory_reserved() == torch.tpu.max_memory_allocated()
    assert torch.tpu.memory_stats()["reserved_bytes.all.current"] == torch.tpu.memory_allocated()
    torch.tpu.empty_cache()
    torch.accelerator.empty_cache()
    assert x.sum().item() == 256 * 1024
    assert "MiB allocated" in torch.tpu.memory_summary()
    torch.tpu.reset_max_memory_allocated()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated()
    assert torch.tpu.OutOfMemoryError is torch.OutOfMemoryError
    with pytest.raises((IndexError, RuntimeError), match="out of range"):
        torch.tpu.mem_get_info(torch.tpu.device_count() + 3)
    with pytest.raises((IndexError, RuntimeError), match="out of range"):
        torch.accelerator.get_memory_info(torch.tpu.device_count() + 3)


def test_device_of_and_stream_context():
    if torch.tpu.device_count() < 2:
        pytest.skip("needs two tpu devices")
    x = torch.ones(2, device="tpu:1")
    with torch.tpu.device_of(x):
        assert torch.tpu.current_device() == 1
    with torch.tpu.device_of(torch.ones(2)):  # a CPU tensor changes nothing
        assert torch.tpu.current_device() == 0
    assert torch.tpu.current_device() == 0
    s = torch.tpu.current_stream()
    with torch.tpu.stream(s) as entered:
        assert entered is s
    torch.tpu.set_stream(s)
    generic = torch.accelerator.current_stream()  # a torch.Stream on tpu
    with torch.tpu.stream(generic) as entered:
        assert entered is generic
    with pytest.raises(TypeError, match="torch.tpu.Stream"):
        torch.tpu.set_stream("not a stream")


def test_stream_and_event():
    s = torch.tpu.current_stream()
    x = torch.randn(64, 64).to("tpu")
    start = torch.tpu.Event(enable_timing=True)
    end = torch.tpu.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        x = x @ x
    end.record()
    end.synchronize()
    assert end.query() and s.query()
    assert end.elapsed_time(start) <= 0 <= start.elapsed_time(end)
    s.synchronize()
    assert torch.tpu.default_stream() == s


def test_data_ptr_is_stable_and_views_alias():
    x = torch.zeros(4, 4, device="tpu")
    p = x.data_ptr()
    y = x[1]
    assert y.data_ptr() == p + 4 * 4
    x.add_(1)
    assert x.data_ptr() == p  # in-place keeps the storage
    z = torch.zeros(4, 4, device="tpu")
    assert z.data_ptr() != p
    assert x.untyped_storage().data_ptr() == p


def test_metrics_report():
    import torch_tpu

    torch_tpu.reset_metrics()
    x = torch.ones(8, device="tpu")
    (x * 3).cpu()
    m = torch_tpu.metrics()
    assert m["executions"] >= 1 and m["device_to_host_transfers"] == 1
    assert m["host_to_device_transfers"] >= 0
    assert "compiles" in torch_tpu.metrics_report()


def test_plugin_info():
    import torch_tpu

    info = torch_tpu.plugin_info()
    # The platform of the plugin in use: XLA:CPU by default, XLA:GPU's "cuda" on the GPU box.
    chosen = "cpu" if _cpu_plugin_in_use() else os.environ.get("TORCH_TPU_PLUGIN", "").lower()
    expected = {"cpu": "cpu", "cuda": "cuda", "gpu": "cuda", "tpu": "tpu"}.get(chosen)
    if expected:
        assert info["platform"] == expected
    else:  # a plugin given by path, or libtpu found by itself
        assert info["platform"]
    major, minor = map(int, info["api_version"].split("."))
    assert major == 0 and minor >= 50


def _cpu_plugin_in_use():
    from torch_tpu import _plugin

    path, _ = _plugin.resolve()
    return bool(path) and _plugin.is_cpu_plugin(path)


@pytest.mark.skipif(not _cpu_plugin_in_use(), reason="TORCH_TPU_CPU_DEVICES configures the XLA:CPU plugin")
def test_cpu_plugin_device_count_follows_the_variable():
    code = (
        "import torch\n"
        "x = torch.ones(2, device='tpu:2')\n"
        "print(torch.tpu.device_count(), (x * 2).cpu().tolist())\n"
    )
    out = run_python(code, timeout=120, TORCH_TPU_CPU_DEVICES="3", TF_CPP_MIN_LOG_LEVEL=None)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "3 [2.0, 2.0]"
    # the plugin's INFO line about the device count does not reach the user
    assert "cpu_device_count" not in out.stderr, out.stderr[-2000:]


@pytest.mark.skipif(not _cpu_plugin_in_use(), reason="TORCH_TPU_CPU_DEVICES configures the XLA:CPU plugin")
@pytest.mark.parametrize("value", ["zero", "0", "-2"])
def test_cpu_plugin_device_count_rejects_a_bad_value_with_a_warning(value):
    code = "import torch\nprint(torch.tpu.device_count())\n"
    out = run_python(code, timeout=120, TORCH_TPU_CPU_DEVICES=value, PYTHONWARNINGS="default")
    assert out.returncode == 0, out.stderr[-2000:]
    assert 2 <= int(out.stdout.strip()) <= 4
    assert "TORCH_TPU_CPU_DEVICES" in out.stderr and "not a positive integer" in out.stderr


@pytest.mark.skipif(not _cpu_plugin_in_use(), reason="TORCH_TPU_CPU_DEVICES configures the XLA:CPU plugin")
def test_cpu_plugin_device_count_is_capped_at_the_supported_maximum():
    code = "import torch\nprint(torch.tpu.device_count(), torch.ones(1, device='tpu:63').cpu().item())\n"
    out = run_python(code, timeout=120, TORCH_TPU_CPU_DEVICES="99999999999999999999999", PYTHONWARNINGS="default")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "64 1.0"
    assert "at most 64 devices" in out.stderr


# The compute pool's threads of XLA:CPU, with their nice values; the main thread's nice.
_THREAD_NICE_CODE = (
    "import os, json, torch, torch_tpu\n"
    "(torch.ones(4, device='tpu') * 2).cpu()\n"
    "def nice(tid):\n"
    "    stat = open('/proc/self/task/%s/stat' % tid).read()\n"
    "    return stat[stat.index('(') + 1:stat.rindex(')')], int(stat[stat.rindex(')') + 2:].split()[16])\n"
    "pool = [nice(t)[1] for t in os.listdir('/proc/self/task') if nice(t)[0].startswith('tf_XLAEigen')]\n"
    "info = torch_tpu.plugin_info()\n"
    "print(json.dumps({'main': os.getpriority(os.PRIO_PROCESS, 0), 'pool': pool,\n"
    "                  'nice': info['device_thread_nice'], 'lowered': info['device_threads_lowered']}))\n"
)


@pytest.mark.skipif(not _cpu_plugin_in_use() or not os.path.isdir("/proc/self/task"),
                    reason="the XLA:CPU plugin's compute threads, as Linux lists them")
@pytest.mark.parametrize("value, steps", [(None, 10), ("3", 3), ("0", 0), ("twenty", 10), ("20", 10)])
def test_cpu_plugin_compute_threads_run_below_the_host_threads(value, steps):
    # The XLA:CPU "device" shares the host's cores: its compute pool yields to the
    # thread that records and launches ops, and TORCH_TPU_CPU_DEVICE_NICE sets by how much.
    import json

    out = run_python(_THREAD_NICE_CODE, timeout=120, TORCH_TPU_CPU_DEVICE_NICE=value, PYTHONWARNINGS="default")
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["nice"] == steps
    assert seen["pool"], "no compute pool thread found"
    expected = min(19, seen["main"] + steps)
    assert seen["pool"] == [expected] * len(seen["pool"])
    assert seen["lowered"] == (len(seen["pool"]) if steps else 0)
    warned = "TORCH_TPU_CPU_DEVICE_NICE" in out.stderr and "not an integer from 0 to 19" in out.stderr
    assert warned == (value in ("twenty", "20"))


_XLA_FLAGS_CODE = (
    "import os, json, torch, torch_tpu\n"
    "(torch.ones(4, device='tpu') * 2).cpu()\n"
    "info = torch_tpu.plugin_info()\n"
    "print(json.dumps({'created_with': info['xla_flags'], 'split': info['reduction_split'],\n"
    "                  'after': os.environ.get('XLA_FLAGS')}))\n"
)


@pytest.mark.skipif(not _cpu_plugin_in_use(), reason="flags torch_tpu gives the XLA:CPU plugin")
@pytest.mark.parametrize("user_flags", [None, "--xla_disable_hlo_passes=some_pass --xla_cpu_enable_fast_math=false",
                                        "--xla_cpu_use_xnnpack=true"])
def test_cpu_plugin_is_created_with_its_flags_and_the_environment_restored(user_flags):
    import json

    out = run_python(_XLA_FLAGS_CODE, timeout=120, XLA_FLAGS=user_flags)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["after"] == user_flags  # the user's XLA_FLAGS, unset or not, as it was
    assert seen["split"] == "torch_tpu"
    created = seen["created_with"].split()
    assert "--xla_backend_extra_options=-disable-loop-idiom-hashrecognize" in created
    if user_flags is None or "some_pass" not in user_flags:
        assert "--xla_disable_hlo_passes=tree_reduction_rewriter" in created
    else:  # a list-valued flag the user set keeps the user's values
        assert "--xla_disable_hlo_passes=tree_reduction_rewriter,some_pass" in created
        assert "--xla_cpu_enable_fast_math=false" in created
    # XNNPACK off (its dot reuses a stale packed weight), unless the user chose
    xnnpack = [f for f in created if f.startswith("--xla_cpu_use_xnnpack=")]
    assert xnnpack == (["--xla_cpu_use_xnnpack=true"] if user_flags and "xnnpack" in user_flags
                       else ["--xla_cpu_use_xnnpack=false"])


def test_xla_flags_are_for_the_cpu_plugin_only(tmp_path):
    from torch_tpu import _plugin

    for other in ("/x/libtpu/libtpu.so", "/x/jax_plugins/xla_cuda13/xla_cuda_plugin.so", ""):
        assert _plugin.xla_flags(other) == []
        assert not _plugin.explicit_reduction_split(other)
    # An LLVM option the plugin's binary does not name is never passed: it would end the process.
    fake = tmp_path / "xla_cpu_pjrt.so"
    fake.write_bytes(b"\x7fELF no such options here")
    assert _plugin.xla_flags(str(fake)) == [("xla_disable_hlo_passes", "tree_reduction_rewriter")]
    path, _ = _plugin.resolve()
    if _cpu_plugin_in_use():
        assert ("xla_backend_extra_options", "-disable-loop-idiom-hashrecognize") in _plugin.xla_flags(path)


_REDUCTION_PROGRAMS_CODE = (
    "import sys, torch, torch_tpu\n"
    "x = torch.rand(256, 64).to('tpu')\n"
    "torch.softmax(x, 1).cpu()\n"
    "torch.rand(4096, 8).to('tpu').sum(0).cpu()\n"
)


@pytest.mark.skipif(not _cpu_plugin_in_use(), reason="torch_tpu splits long reductions on XLA:CPU")
def test_row_reductions_stay_whole_and_the_others_are_split(tmp_path):
    # The programs a softmax over rows of 64 and a column sum compile to: the first
    # reduces each row in one fused reduction, the second in 32-row windows first.
    dump = tmp_path / "programs"
    out = run_python(_REDUCTION_PROGRAMS_CODE, timeout=120, TORCH_TPU_DUMP_PROGRAMS=str(dump),
                     TORCH_TPU_CACHE_DIR=str(tmp_path / "cache"), TORCH_TPU_EAGER_MODE="strict")
    assert out.returncode == 0, out.stderr[-2000:]
    texts = [p.read_text() for p in dump.iterdir()]
    softmax = [t for t in texts if "stablehlo.exponential" in t]
    column = [t for t in texts if "tensor<4096x8xf32>" in t and "stablehlo.reduce" in t]
    assert softmax and column
    assert all("reduce_window" not in t for t in softmax)
    assert all("window_dimensions = array<i64: 32, 1>" in t for t in column)


def test_device_thread_nice_is_for_the_cpu_plugin_only(monkeypatch):
    from torch_tpu import _plugin

    monkeypatch.setenv("TORCH_TPU_CPU_DEVICE_NICE", "5")
    assert _plugin.device_thread_nice("/x/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so") == 5
    with pytest.warns(UserWarning, match="TORCH_TPU_CPU_DEVICE_NICE is set but ignored"):
        assert _plugin.device_thread_nice("/x/libtpu/libtpu.so") == 0
    monkeypatch.delenv("TORCH_TPU_CPU_DEVICE_NICE")
    assert _plugin.device_thread_nice("/x/libtpu/libtpu.so") == 0
    assert _plugin.device_thread_nice("/x/xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so") == _plugin.DEFAULT_DEVICE_NICE
