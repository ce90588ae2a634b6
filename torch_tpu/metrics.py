"""torch_tpu.metrics(): what the backend did, as counters."""
from . import _C


def metrics():
    """A dict of counters: compiles, compile_seconds, cache_hits (in memory),
    disk_cache_hits and disk_load_seconds, executions,
    execute_seconds, host<->device transfers and bytes, fallbacks (total) and
    fallback_ops (per op), compiled_programs, and device memory."""
    out = {
        "compiles": 0, "compile_seconds": 0.0, "cache_hits": 0, "executions": 0, "execute_seconds": 0.0,
        "host_to_device_transfers": 0, "host_to_device_bytes": 0, "device_to_host_transfers": 0,
        "device_to_host_bytes": 0, "fallbacks": 0, "disk_cache_hits": 0, "disk_load_seconds": 0.0,
    }
    out.update(_C._metrics())
    for key, value in out.items():
        if isinstance(value, float) and not key.endswith("_seconds"):
            out[key] = int(value)  # counters travel as doubles
    out["compiled_programs"] = _C._compiled_program_count() if _C._is_initialized() else 0
    if _C._is_initialized():
        out["memory_allocated"] = _C._memory_allocated(_C._current_device())
        out["max_memory_allocated"] = _C._max_memory_allocated(_C._current_device())
    return out


def reset_metrics():
    _C._reset_metrics()


def metrics_report():
    m = metrics()
    lines = ["torch_tpu metrics"]
    for key, value in m.items():
        if key == "fallback_ops":
            continue
        lines.append("  %-26s %s" % (key, "%.4f" % value if isinstance(value, float) else value))
    ops = m.get("fallback_ops", {})
    lines.append("  fallback ops: %s" % (", ".join("%s x%d" % kv for kv in sorted(ops.items())) or "none"))
    return "\n".join(lines)
