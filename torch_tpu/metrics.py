"""torch_tpu.metrics(): what the backend did, as counters."""
from . import _C


def metrics():
    """A dict of counters: compiles, compile_seconds, cache_hits (in memory),
    disk_cache_hits and disk_load_seconds, executions,
    execute_seconds, host<->device and device-to-device transfers and bytes, fallbacks (total) and
    fallback_ops (per op), compiled_programs, donated_buffers, fused-mode
    graphs (fused_graphs, fused_graph_ops: ops appended in all, fused_graph_ops_max,
    fused_cuts: why graphs were cut, per reason, fused_graphs_kept: graphs rebuilt
    unchanged in a graph kept from an earlier run, so nothing was built or hashed), collectives (in all, and per
    transport: collectives_host_transport for tpu_dist's host-staged ones,
    collectives_device_transport for those run as XLA programs) and the bytes
    staged through host memory (collective_host_bytes),
    device memory (bytes of live device buffers: memory_allocated,
    max_memory_allocated) and pinned host memory (pin_memory(): live bytes in
    pinned_host_bytes, of which pinned_host_dma_mapped_bytes are registered with
    the plugin for DMA, and pinned_host_allocations)."""
    out = {
        "compiles": 0, "compile_seconds": 0.0, "cache_hits": 0, "executions": 0, "execute_seconds": 0.0,
        "host_to_device_transfers": 0, "host_to_device_bytes": 0, "device_to_host_transfers": 0,
        "device_to_host_bytes": 0, "device_to_device_transfers": 0, "device_to_device_bytes": 0, "fallbacks": 0, "disk_cache_hits": 0, "disk_load_seconds": 0.0,
        "donated_buffers": 0, "fused_graphs": 0, "fused_graph_ops": 0, "fused_graph_ops_max": 0,
        "fused_graphs_kept": 0,
        "collectives": 0, "collectives_host_transport": 0, "collectives_device_transport": 0,
        "collective_host_bytes": 0, "pinned_host_allocations": 0,
    }
    counters = _C._metrics()
    out["fused_cuts"] = {key[len("fused_cut_"):]: int(counters.pop(key))
                         for key in list(counters) if key.startswith("fused_cut_")}
    out.update(counters)
    for key, value in out.items():
        if isinstance(value, float) and not key.endswith("_seconds"):
            out[key] = int(value)  # counters travel as doubles
    out["compiled_programs"] = _C._compiled_program_count() if _C._is_initialized() else 0
    out["pinned_host_bytes"], out["pinned_host_dma_mapped_bytes"] = _C._pinned_host_memory()
    if _C._is_initialized():
        out["memory_allocated"] = _C._memory_allocated(_C._current_device())
        out["max_memory_allocated"] = _C._max_memory_allocated(_C._current_device())
    return out


def reset_metrics():
    _C._reset_metrics()


def metrics_report():
    m = metrics()
    lines = ["torch_tpu metrics"]
    scalars = {k: v for k, v in m.items() if k not in ("fallback_ops", "fused_cuts")}
    width = max(map(len, scalars))
    for key, value in scalars.items():
        lines.append("  %-*s %s" % (width, key, "%.4f" % value if isinstance(value, float) else value))
    cuts = m.get("fused_cuts", {})
    lines.append("  fused graph cuts: %s" % (", ".join("%s x%d" % kv for kv in sorted(cuts.items())) or "none"))
    ops = m.get("fallback_ops", {})
    lines.append("  fallback ops: %s" % (", ".join("%s x%d" % kv for kv in sorted(ops.items())) or "none"))
    return "\n".join(lines)


def explain_compiles(reset=False, enable=None):
    """Every program compiled (or loaded from the disk cache) since the start or the last
    reset, oldest first, as dicts: mode ("strict", "debug", "fused", or "background" for a
    fused graph compiled off-thread), location (the Python line that caused it; "" for
    backward and background compiles), ops (its first ops), nodes, parameters, seconds,
    from_disk, and reason: what differs from the nearest program compiled before at the
    same line (a parameter's shape or dtype, an op, an attribute, the node count of another
    cut), or "first program at this line". `reset=True` clears the log after reading it (later compiles are still compared with the
    programs compiled before). Recording is off unless TORCH_TPU_EXPLAIN_COMPILES=1 or
    `enable=True` (it keeps each line's last programs); `enable=False` turns it off."""
    if enable is not None:
        _C._set_compile_recording(bool(enable))
    records = _C._compile_records()
    if reset:
        _C._clear_compile_records()
    return records
