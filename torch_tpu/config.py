"""Every TORCH_TPU_* environment variable, in one table: its meaning, default and reader.

torch_tpu reads its environment variables through this module (Python) and
csrc/engine/config.cpp (C++), nowhere else; tools/check_layers.py fails on a read
elsewhere, and the tests keep this table, the C++ one and the README's agreeing.

    python -m torch_tpu.config      # every knob with its value here and now

This module imports nothing of torch_tpu: the autoloader reads it before the
extension loads.
"""
import collections
import os

Knob = collections.namedtuple("Knob", "name default reader meaning")

# reader: who reads it and when ("python", "c++", "build"; "at import" or "when used").
KNOBS = tuple(Knob(*row) for row in (
    ("TORCH_TPU_PLUGIN", "", "python, at import",
     "`cpu`, `tpu`, `cuda` (or `gpu`), or a path to a PJRT plugin `.so`. Unset: libtpu when a TPU "
     "is attached, else XLA:CPU."),
    ("TORCH_TPU_CPU_DEVICES", "", "python, at import",
     "XLA:CPU only: how many devices it exposes. Default: usable cores clamped to 2..4, at least "
     "`LOCAL_WORLD_SIZE`; at most 64."),
    ("TORCH_TPU_CPU_DEVICE_NICE", "10", "python, at import",
     "XLA:CPU only: nice steps, 0–19 (default 10), for the plugin's compute threads, so they yield "
     "to the host's; `0` leaves them."),
    ("TORCH_TPU_EAGER_MODE", "strict", "python, at import",
     "`strict` (default), `debug` or `fused` (synonym `defer_and_fuse`)."),
    ("TORCH_TPU_FALLBACK", "allow", "c++, at each fallback",
     "`allow` (default): an op without a lowering runs on the CPU, counted per op. `error`: it "
     "raises `NotImplementedError`."),
    ("TORCH_TPU_FUSED_MAX_OPS", "4096", "c++, once",
     "fused mode: ops in a pending graph before it is cut regardless (default 4096)."),
    ("TORCH_TPU_FUSED_MERGE_BACKWARD", "0", "c++, once",
     "`1`: fused mode records backward into the forward's graph (lower peak memory, no overlap). "
     "Default `0`."),
    ("TORCH_TPU_FUSED_BACKGROUND_COMPILE", "", "c++, once",
     "fused mode: `1`: a graph not in the cache compiles in the background while its ops run one by "
     "one; `0`: the cut waits for the compile. Default: `1`, but `0` on XLA:CPU."),
    ("TORCH_TPU_CHECK_NAN", "0", "c++, at each op in debug mode",
     "`1`: in debug mode, a NaN or Inf in any floating output raises at that op."),
    ("TORCH_TPU_LOG_OPS", "0", "c++, once",
     "`1`: every launch is logged to stderr (op, operands, compiled or cache hit, host time)."),
    ("TORCH_TPU_CACHE_DIR", "", "python, at import",
     "directory of the disk compilation cache (default `$XDG_CACHE_HOME/torch_tpu`, else "
     "`~/.cache/torch_tpu`); `off` disables it. Created 0700; not used if another user owns it or "
     "others may write it ([design](docs/design.md))."),
    ("TORCH_TPU_DUMP_PROGRAMS", "", "c++, at each compile",
     "a directory (created if missing): the StableHLO text of every program compiled is written "
     "there."),
    ("TORCH_TPU_DUMP_FAILED_PROGRAMS", "", "c++, at each compile",
     "any non-empty value: a compilation error includes the program's StableHLO text."),
    ("TORCH_TPU_EXPLAIN_COMPILES", "0", "c++, at each compile",
     "`1`: every program compiled (or loaded from the disk cache) is printed to stderr with its "
     "Python line and what differs from the nearest earlier program there (`torch_tpu.explain_compiles()`)."),
    ("TORCH_TPU_PROGRAM_CACHE_SIZE", "4096", "c++, once",
     "programs kept loaded in memory (default 4096); beyond it the least recently run are unloaded "
     "(reloaded from the disk cache when run again). Each loaded XLA:CPU program holds a few memory "
     "maps, and a process has at most `vm.max_map_count` (65530)."),
    ("TORCH_TPU_DIST_BLOCKING", "0", "c++, once",
     "`1`: each tpu_dist collective completes before its call returns (the host transfer and the copy into the tpu tensors), `async_op=True` included. Default `0`: the call returns once its tensors are staged, and `wait()` waits, as with NCCL."),
    ("TORCH_TPU_OP_MEMO", "1", "c++, once",
     "`0`: every op builds its graph anew. Default `1`: common ops (elementwise, matrix products, softmax, "
     "layer norm, sums, copies, indexing, `cat`, `nll_loss`) and in-place `_foreach_*` lists reuse the graph "
     "they built for alike operands (shapes, strides, dtypes, storages; per thread) instead of lowering again, "
     "and in strict mode launch the program it made; `op_memo_hits` in `torch_tpu.metrics()` counts reuses."),
    ("TORCH_TPU_DIST_TRANSPORT", "", "python, at group creation",
     "how `tpu_dist` moves a group's tensors: `host` (staged through host memory over gloo), `device` "
     "(one XLA collective program; raises where the plugin's client does not span the group's processes). "
     "Unset: `host` ([distributed](docs/distributed.md)). In-process collectives over several devices "
     "(`torch_tpu.distributed`) always run on the devices."),
    ("TORCH_TPU_DYNAMIC_BUCKETS", "pow2", "python, at import",
     "`torch.compile` dynamic shapes: `pow2` (default, 16 to 4096), `pow2:MIN:MAX`, a list such "
     "as `64,128,256`, or `off`."),
    ("TORCH_TPU_PJRT_INCLUDE", "", "build",
     "build only: the directory holding `pjrt_c_api.h` (default: the one `xla-cpu-pjrt` ships)."),
))
_BY_NAME = {knob.name: knob for knob in KNOBS}


def get(name):
    """The raw value of the knob `name` in the environment now (None when unset)."""
    if name not in _BY_NAME:
        raise KeyError("%s is not a torch_tpu knob (torch_tpu.config.KNOBS lists them)" % name)
    return os.environ.get(name)


def settings():
    """{name: value now, or None when unset} for every knob."""
    return {knob.name: os.environ.get(knob.name) for knob in KNOBS}


def _main():
    width = max(len(knob.name) for knob in KNOBS)
    for knob in KNOBS:
        value = os.environ.get(knob.name)
        shown = repr(value) if value is not None else "unset (default %s)" % (knob.default or "none")
        print("%-*s  %s" % (width, knob.name, shown))


if __name__ == "__main__":
    _main()
