"""The on-disk compilation cache (shared by every mode and process).

TORCH_TPU_CACHE_DIR sets its directory (default: $XDG_CACHE_HOME/torch_tpu,
else ~/.cache/torch_tpu); TORCH_TPU_CACHE_DIR=off disables it."""
import os

from . import _C, config

ENV = "TORCH_TPU_CACHE_DIR"
_OFF = ("", "0", "off", "none", "false")


def default_cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torch_tpu")


def set_cache_dir(path):
    """Directory of the disk cache for programs compiled from now on; None disables it."""
    _C._set_cache_dir("" if path is None else os.path.abspath(os.fspath(path)))


def get_cache_dir():
    return _C._cache_dir() or None


def wait_for_compiles():
    """Waits until the programs fused mode compiles in the background are in the
    cache (TORCH_TPU_FUSED_BACKGROUND_COMPILE): later cuts of those graphs then
    run them instead of running their ops one by one."""
    _C._wait_for_compiles()


def init_from_environment():
    value = config.get(ENV)
    if value is None:
        set_cache_dir(default_cache_dir())
    elif value.strip().lower() in _OFF:
        set_cache_dir(None)
    else:
        set_cache_dir(value)
