"""Eager execution modes.

- ``strict`` (default): every op is one program, launched asynchronously; the
  host waits only when it reads data. CUDA-like.
- ``debug``: every op waits for its result, so a device error (and, with
  TORCH_TPU_CHECK_NAN=1, a NaN or Inf in any output) is raised at the op that
  caused it, naming the op, its operand shapes and your Python source line.

- ``fused`` (DeferAndFuse; ``defer_and_fuse`` is a synonym): ops append to a
  pending graph per device instead of running; the graph runs as one XLA
  program when data is read (``.item()``, ``.cpu()``, printing, Python control
  flow on a tensor), when an op falls back to the CPU, at
  ``torch.tpu.synchronize()`` / ``torch_tpu.sync()``, at a mode switch, after
  ``optimizer.step()``, or every ``TORCH_TPU_FUSED_MAX_OPS`` ops. Only tensors
  still alive get buffers, so dead intermediates never take device memory.
  Errors surface at the cut, naming the ops of the graph; debug mode finds the op.
"""
import contextlib
import os
import traceback

from . import _C, config

ENV = "TORCH_TPU_EAGER_MODE"
MODES = ("strict", "debug", "fused")
_SYNONYMS = {"defer_and_fuse": "fused", "deferandfuse": "fused"}
_LIBRARY_DIRS = None


def _normalise(name):
    name = str(name).strip().lower()
    name = _SYNONYMS.get(name, name)
    if name not in MODES:
        raise ValueError("torch_tpu: unknown eager mode %r; available modes: %s" % (name, ", ".join(MODES)))
    return name


def set_eager_mode(name):
    """Switches the eager mode; pending and launched work is finished first."""
    name = _normalise(name)
    _C._set_eager_mode(name)  # runs pending fused graphs
    if _C._is_initialized():
        _C._synchronize()


def get_eager_mode():
    return _C._get_eager_mode()


@contextlib.contextmanager
def eager_mode(name):
    """Runs the block in eager mode `name`, then restores the previous mode."""
    previous = get_eager_mode()
    set_eager_mode(name)
    try:
        yield
    finally:
        set_eager_mode(previous)


def _library_dirs():
    global _LIBRARY_DIRS
    if _LIBRARY_DIRS is None:
        import torch

        _LIBRARY_DIRS = tuple(os.path.dirname(m.__file__) + os.sep for m in (torch, __import__("torch_tpu")))
    return _LIBRARY_DIRS


def _user_location():
    """file:line (function) of the innermost frame outside torch and torch_tpu."""
    for frame in reversed(traceback.extract_stack()[:-1]):
        if not frame.filename.startswith(_library_dirs()):
            return "%s:%d (%s)" % (frame.filename, frame.lineno, frame.name)
    return "during the backward pass (autograd engine thread)"


def _flush_after_optimizer_step(optimizer, args, kwargs):
    """An optimizer step ends a training iteration. Launching the pending graph
    there lets the device run the update while the host records the next
    iteration, and starts every iteration on an empty graph, so segment
    boundaries (and so the cached programs) repeat from one step to the next."""
    import torch

    if torch.compiler.is_compiling() or _C._get_eager_mode() != "fused":
        return
    _C._flush("optimizer_step")


def _init_from_environment():
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(_flush_after_optimizer_step)
    _C._set_location_provider(_user_location)
    requested = (config.get(ENV) or "").strip()
    if requested:
        set_eager_mode(requested)
