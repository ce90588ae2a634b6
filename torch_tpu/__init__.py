"""torch_tpu: PyTorch's `tpu` device, running on any PJRT plugin.

`import torch` loads this package through the `torch.backends` entry point, so
`torch.device("tpu")` works with no import of torch_tpu.
"""
import atexit
import sys
import time

import torch

from . import _plugin
from . import _C

torch.utils.rename_privateuse1_backend("tpu")
_plugin_path, _selected_by = _plugin.resolve()
_C._set_plugin_path(_plugin_path, _selected_by, sorted(_plugin.client_options(_plugin_path).items()),
                    _plugin.device_thread_nice(_plugin_path), _plugin.explicit_reduction_split(_plugin_path),
                    _plugin.xla_flags(_plugin_path))

from . import tpu  # noqa: E402

torch._register_device_module("tpu", tpu)
from . import memory  # noqa: E402 - torch.tpu.memory, as torch.cuda.memory

tpu.memory = memory
sys.modules["torch.tpu.memory"] = memory
torch.utils.generate_methods_for_privateuse1_backend(for_tensor=True, for_module=True, for_storage=True)

from .metrics import explain_compiles, metrics, metrics_report, reset_metrics  # noqa: E402
from .modes import eager_mode, get_eager_mode, set_eager_mode  # noqa: E402
from . import cache as _cache  # noqa: E402
from . import modes as _modes  # noqa: E402
from . import _compile  # noqa: E402
from . import _printing  # noqa: E402
from . import _serialization  # noqa: E402
from . import _distributed  # noqa: E402
from . import _dtensor_rules  # noqa: E402
from . import integrations as _integrations  # noqa: E402
from ._jax import jax_kernel  # noqa: E402,F401
from ._bucket_policy import get_dynamic_buckets, set_dynamic_buckets  # noqa: E402,F401

_compile.install_backends()
_printing.install()
_serialization.install()
_distributed.install()
_dtensor_rules.register_if_dtensor_loaded()
_integrations.install()

_cache.init_from_environment()
_modes._init_from_environment()

__all__ = ["metrics", "metrics_report", "reset_metrics", "explain_compiles", "sync", "plugin_info", "set_eager_mode", "get_eager_mode",
           "eager_mode", "set_cache_dir", "get_cache_dir", "wait_for_compiles", "jax_kernel"]

set_cache_dir = _cache.set_cache_dir
get_cache_dir = _cache.get_cache_dir
wait_for_compiles = _cache.wait_for_compiles


def _drain_autograd_device_thread():
    """Works around a shutdown race in torch's autograd engine: its tpu device
    thread releases a finished graph task (and the Python tensors it holds)
    just after the caller has been told the task is done, and needs the GIL
    for that. If the interpreter is finalising by then, that thread's wait for
    the GIL aborts the process. Giving up the GIL for a moment at exit lets it
    finish first."""
    if not _C._is_initialized():
        return
    for _ in range(10):
        time.sleep(0.005)  # each sleep hands the GIL to a waiting thread


atexit.register(_drain_autograd_device_thread)


def _stop_background_compiles():
    """Waits for a fused graph's compile still running in the background, and starts no
    other, while the plugin is whole: C's exit hooks run after the plugin's statics made
    since the compiles began are destroyed, which killed or hung the process at exit."""
    if _C._is_initialized():
        _C._stop_background_compiles()


atexit.register(_stop_background_compiles)


def sync():
    """Runs pending fused graphs and waits for all tpu work (torch.tpu.synchronize())."""
    tpu.synchronize()


def plugin_info():
    """The running PJRT plugin: platform, version, path, API version, device kinds,
    this process's index and the devices of all processes its client spans, the XLA_FLAGS it was created with, and who splits long reductions ("torch_tpu"
    on XLA:CPU, else "compiler")."""
    return _C._init()
