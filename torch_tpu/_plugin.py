"""Which PJRT plugin to run on: TORCH_TPU_PLUGIN=cpu|cuda|tpu|/path/to/plugin.so.

Without the variable: libtpu when a TPU is attached, else the XLA:CPU plugin.
Only paths and client options are resolved here; the plugin is loaded on first
device use.
"""
import glob
import importlib.util
import mmap
import os
import re
import warnings

from . import config

ENV = "TORCH_TPU_PLUGIN"
CPU_DEVICES_ENV = "TORCH_TPU_CPU_DEVICES"
DEVICE_NICE_ENV = "TORCH_TPU_CPU_DEVICE_NICE"
DEFAULT_DEVICE_NICE = 10
MAX_DEVICES = 64  # kMaxDevices in csrc/engine/runtime.h


def _package_dir(name):
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return os.path.dirname(spec.origin) if spec.origin else None


def _first_file(directory, pattern):
    if directory is None:
        return None
    hits = sorted(glob.glob(os.path.join(directory, pattern)))
    return hits[0] if hits else None


def cpu_plugin():
    return _first_file(_package_dir("xla_plugins.xla_cpu_pjrt"), "xla_cpu_pjrt*.so")


def tpu_plugin():
    return _first_file(_package_dir("libtpu"), "libtpu*.so")


def cuda_plugin():
    for package in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"):
        path = _first_file(_package_dir(package), "xla_cuda_plugin*.so")
        if path:
            return path
    return None


def tpu_attached():
    """A TPU VM exposes its chips as /dev/accel* (v4 and older) or /dev/vfio/N (v5+)."""
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


_FINDERS = {"cpu": cpu_plugin, "tpu": tpu_plugin, "cuda": cuda_plugin, "gpu": cuda_plugin}
_PACKAGES = {"cpu": "xla-cpu-pjrt", "tpu": "libtpu", "cuda": "jax-cuda13-pjrt", "gpu": "jax-cuda13-pjrt"}


def is_cpu_plugin(path):
    return os.path.basename(path).startswith("xla_cpu_pjrt")


def cpu_device_count():
    """How many devices the XLA:CPU plugin exposes: TORCH_TPU_CPU_DEVICES, else the
    usable cores clamped to 2..4, and at least a launcher's LOCAL_WORLD_SIZE
    (torchrun's processes per host), so that each process can select device
    LOCAL_RANK as it would select its GPU.

    The plugin sizes its worker pools to max(cores, devices); its own default of 4
    devices oversubscribes a 2-core machine, and the spare workers then spin and
    steal the cores the host needs to record ops. Two devices at least keep the
    multi-device paths (tpu:1) available on any machine."""
    value = (config.get(CPU_DEVICES_ENV) or "").strip()
    if value:
        try:
            count = int(value)
        except ValueError:
            count = 0
        if count > MAX_DEVICES:
            warnings.warn("%s=%s: torch_tpu supports at most %d devices; using %d"
                          % (CPU_DEVICES_ENV, value, MAX_DEVICES, MAX_DEVICES))
            return MAX_DEVICES
        if count >= 1:
            return count
        warnings.warn("%s=%r is not a positive integer; using the default" % (CPU_DEVICES_ENV, value))
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    count = min(4, max(2, cores))
    try:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "0"))
    except ValueError:
        local_world = 0
    return min(MAX_DEVICES, max(count, local_world))


def client_options(path):
    """PJRT_Client_Create options for the plugin at `path`: {name: int}."""
    if path and is_cpu_plugin(path):
        # The plugin logs its device count at INFO level on creation; XLA's INFO
        # lines are noise to a PyTorch user. An explicit setting is respected.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        return {"cpu_device_count": cpu_device_count()}
    if (config.get(CPU_DEVICES_ENV) or "").strip():
        warnings.warn("%s is set but ignored: it configures the XLA:CPU plugin, and the plugin in use is %s"
                      % (CPU_DEVICES_ENV, path or "none"))
    return {}


def device_thread_nice(path):
    """Nice steps for the XLA:CPU plugin's threads (TORCH_TPU_CPU_DEVICE_NICE, 0-19,
    default 10; 0 leaves them as they are). That plugin runs the device on the
    host's own cores; below the host threads in priority, its pool leaves a core to
    the thread recording and launching the next ops, and still gets every core
    while that thread waits. Other plugins' threads only drive their device: 0."""
    value = (config.get(DEVICE_NICE_ENV) or "").strip()
    if not (path and is_cpu_plugin(path)):
        if value:
            warnings.warn("%s is set but ignored: it configures the XLA:CPU plugin, and the plugin in use is %s"
                          % (DEVICE_NICE_ENV, path or "none"))
        return 0
    if not value:
        return DEFAULT_DEVICE_NICE
    try:
        steps = int(value)
    except ValueError:
        steps = -1
    if 0 <= steps <= 19:
        return steps
    warnings.warn("%s=%r is not an integer from 0 to 19; using %d" % (DEVICE_NICE_ENV, value, DEFAULT_DEVICE_NICE))
    return DEFAULT_DEVICE_NICE


def explicit_reduction_split(path):
    """Whether torch_tpu splits long reductions itself, with XLA's own split turned
    off (XLA:CPU only; see ir::ReductionSplit in csrc/ir/ops.h). XLA:CPU splits
    every reduction of a dimension longer than 32 into a windowed pass it cannot
    fuse; a row of a softmax or a layer norm stays one fused reduction instead
    (which made gpt-tiny's backward program faster; sums are tested against float64),
    and only the others are split. Other plugins keep their own handling of reductions."""
    return bool(path) and is_cpu_plugin(path)


def _binary_contains(path, text):
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(text) >= 0
    except (OSError, ValueError):
        return False


def xla_flags(path):
    """(flag, value) pairs added to list-valued flags in XLA_FLAGS while the client
    is created (the user's own values kept, XLA_FLAGS restored afterwards).

    XLA:CPU: XLA's split of long reductions off (see explicit_reduction_split); and
    LLVM's CRC recognition off: in the plugin's LLVM it takes exponential time on a
    loop that reduces random bits (randn followed by a softmax or a layer norm in one
    fused graph never finished compiling). An LLVM option the plugin does not know
    would end the process, so it is passed only when the plugin's binary names it.

    XLA:CPU: XNNPACK off (xla_cpu_use_xnnpack=false) unless XLA_FLAGS sets it. The
    plugin's XNNPACK dot packs its right operand once and keeps the packed copy for
    as long as that operand arrives at the same address, so a weight updated in place
    (a donated buffer) or a new buffer the allocator put where an old one was gave
    `grad_output @ weight` the old weight's product, silently: an AdamW step of
    gpt-small gave its next backward gradients 10-40% off."""
    flags = []
    if explicit_reduction_split(path):
        flags.append(("xla_disable_hlo_passes", "tree_reduction_rewriter"))
    if path and is_cpu_plugin(path) and _binary_contains(path, b"disable-loop-idiom-hashrecognize\0"):
        flags.append(("xla_backend_extra_options", "-disable-loop-idiom-hashrecognize"))
    if path and is_cpu_plugin(path) and not re.search(r"--(no)?xla_cpu_use_xnnpack\b", os.environ.get("XLA_FLAGS", "")) \
            and _binary_contains(path, b"xla_cpu_use_xnnpack\0"):
        flags.append(("xla_cpu_use_xnnpack", "false"))
    return flags


def resolve():
    """Returns (path or "", how it was chosen) for torch_tpu._C._set_plugin_path."""
    choice = (config.get(ENV) or "").strip()
    if choice in ("", "auto"):
        if tpu_attached() and tpu_plugin():
            return tpu_plugin(), "a TPU is attached; override with %s" % ENV
        path = cpu_plugin()
        if path:
            return path, "default XLA:CPU plugin; override with %s" % ENV
        return "", "%s is unset and no plugin package is installed" % ENV
    key = choice.lower()
    if key in _FINDERS:
        path = _FINDERS[key]()
        if path:
            return path, "%s=%s" % (ENV, choice)
        return "", "%s=%s but the package %s is not installed" % (ENV, choice, _PACKAGES[key])
    if os.path.exists(choice):
        return os.path.abspath(choice), "%s=%s" % (ENV, choice)
    return "", "%s=%s: no such file, and not one of cpu, cuda, tpu" % (ENV, choice)
