"""`torch.tpu.memory`: torch.cuda.memory's counterpart. The statistics (also on
torch.tpu) and the allocation history: `_record_memory_history()`, `_snapshot()` and
`_dump_snapshot()` give CUDA's snapshot shape, so torch.cuda._memory_viz and
pytorch.org/memory_viz read it. A block is a tpu storage; each is its own segment,
as torch_tpu keeps no cache of freed memory. Storages made before recording began
are not in a snapshot."""
import pickle
import sys

from . import _C
from .tpu import (  # noqa: F401 - torch.cuda.memory has them too
    empty_cache, max_memory_allocated, max_memory_reserved, mem_get_info, memory_allocated, memory_reserved,
    memory_stats, memory_summary, reset_max_memory_allocated, reset_peak_memory_stats)

_ENABLED = (None, False, True, "state", "all")
_CONTEXT = (None, "state", "alloc", "all")
_STACKS = ("python", "all")


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                           clear_history=False):
    """Records tpu storage allocations, as torch.cuda.memory._record_memory_history.

    enabled: None stops (and forgets what was recorded); "state" keeps the live
    storages' allocation stacks only; "all" also a trace of every alloc and free (the
    newest `max_entries`). context: None records no stacks. stacks: "python" Python
    frames only, "all" C++ frames too (slower to gather and to symbolize)."""
    if enabled not in _ENABLED:
        raise ValueError("enabled must be one of %r, got %r" % (_ENABLED, enabled))
    if context not in _CONTEXT:
        raise ValueError("context must be one of %r, got %r" % (_CONTEXT, context))
    if stacks not in _STACKS:
        raise ValueError("stacks must be one of %r, got %r" % (_STACKS, stacks))
    if enabled in (None, False):
        _C._record_memory_history(False, False, False, 0)
        return
    if clear_history:
        _C._record_memory_history(False, False, False, 0)
    keep = 0 if enabled == "state" else max(0, min(int(max_entries), sys.maxsize))
    _C._record_memory_history(True, context is not None, context is not None and stacks == "all", keep)


def _snapshot(device=None):
    """{"segments": [...], "device_traces": [[...] per device], "allocator_settings": {}}:
    the recorded storages alive now, each with its allocation's frames, and the trace."""
    return _C._memory_snapshot()


def _dump_snapshot(filename="dump_snapshot.pickle"):
    """Pickles _snapshot() to `filename`, for pytorch.org/memory_viz."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(), f)
