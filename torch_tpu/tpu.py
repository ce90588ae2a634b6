"""The `torch.tpu` device module: the tpu counterpart of `torch.cuda`."""
import time

import torch

from . import _C

__all__ = [
    "is_available", "is_initialized", "init", "device_count", "current_device", "set_device", "device",
    "synchronize", "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    "get_rng_state", "set_rng_state", "get_rng_state_all", "set_rng_state_all", "default_generators",
    "memory_allocated", "max_memory_allocated", "reset_peak_memory_stats", "memory_stats",
    "memory_reserved", "max_memory_reserved", "reset_max_memory_allocated", "empty_cache", "mem_get_info",
    "memory_summary", "get_device_properties", "device_of", "OutOfMemoryError",
    "Stream", "Event", "current_stream", "default_stream", "stream", "set_stream", "StreamContext", "get_device_name",
    "get_amp_supported_dtype", "is_bf16_supported",
]


def _index(device=None):
    """Device index from None (current), an int, a string or a torch.device."""
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "tpu":
        raise ValueError("expected a tpu device, got %s" % device)
    return _C._current_device() if device.index is None else device.index


def _is_in_bad_fork():
    """Whether this process was forked after the tpu device started (then tpu cannot be
    used here; torch.manual_seed and DataLoader workers ask this, as of CUDA)."""
    return _C._is_in_bad_fork()


def is_available():
    return _C._device_count() > 0


def is_initialized():
    return _C._is_initialized()


def init():
    """Starts the PJRT plugin now (it otherwise starts on first use)."""
    return _C._init()


def _lazy_init():
    if not _C._is_initialized():
        _C._init()


def device_count():
    return _C._device_count()


def current_device():
    return _C._current_device()


def set_device(device):
    _C._set_device(_index(device))


class device:
    """Context manager that makes `device` current, as torch.cuda.device."""

    def __init__(self, device):
        self.index = _index(device) if device is not None else -1
        self.previous = -1

    def __enter__(self):
        self.previous = _C._current_device()
        if self.index >= 0 and self.index != self.previous:
            _C._set_device(self.index)

    def __exit__(self, *exc):
        if self.index >= 0 and self.index != self.previous:
            _C._set_device(self.previous)
        return False


class device_of(device):
    """Makes the device of `tensor` current; a no-op for a tensor not on tpu."""

    def __init__(self, tensor):
        super().__init__(tensor.get_device() if tensor.device.type == "tpu" else None)


def synchronize(device=None):
    """Waits until all work launched on tpu has finished (and raises its errors)."""
    _C._synchronize()


def get_device_name(device=None):
    info = _C._init()
    kinds = info["device_kinds"]
    return "%s (%s)" % (kinds[_index(device)], info["platform"])


# ---------------------------------------------------------------- RNG

def manual_seed(seed):
    _C._manual_seed(_C._current_device(), int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def manual_seed_all(seed):
    for i in range(max(device_count(), 1)):
        _C._manual_seed(i, int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed():
    return _C._seed(_C._current_device())


def seed_all():
    value = seed()
    manual_seed_all(value)


def initial_seed():
    return _C._initial_seed(_C._current_device())


def get_rng_state(device="tpu"):
    return _C._default_generator(_index(device)).get_state()


def set_rng_state(new_state, device="tpu"):
    _C._default_generator(_index(device)).set_state(new_state)


def get_rng_state_all():
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states):
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


class _Generators:
    """Lazy tuple of the per-device default generators (torch.tpu.default_generators)."""

    def __getitem__(self, i):
        return _C._default_generator(i)

    def __len__(self):
        return device_count()

    def __iter__(self):
        return (self[i] for i in range(len(self)))


default_generators = _Generators()


# ---------------------------------------------------------------- memory

def memory_allocated(device=None):
    """Bytes held by live tpu storages on `device`."""
    return _C._memory_allocated(_index(device))


def max_memory_allocated(device=None):
    return _C._max_memory_allocated(_index(device))


def reset_peak_memory_stats(device=None):
    _C._reset_peak_memory_stats(_index(device))


def memory_reserved(device=None):
    """The same as memory_allocated(): a buffer goes back to the plugin when its
    last tensor dies, so torch_tpu holds no cache of freed blocks."""
    return memory_allocated(device)


def max_memory_reserved(device=None):
    return max_memory_allocated(device)


def reset_max_memory_allocated(device=None):
    reset_peak_memory_stats(device)


def empty_cache():
    """Releases nothing: torch_tpu keeps no cache of freed device memory (see
    memory_reserved), so what torch.cuda.empty_cache() returns is already returned."""


def mem_get_info(device=None):
    """(free, total) bytes of the device's memory: the plugin's limit where it
    reports one (TPU), the host's memory for the XLA:CPU plugin's devices."""
    return tuple(_C._mem_get_info(_index(device)))


def memory_stats(device=None):
    index = _index(device)
    current, peak = _C._memory_allocated(index), _C._max_memory_allocated(index)
    return {
        "allocated_bytes.all.current": current,
        "allocated_bytes.all.peak": peak,
        "reserved_bytes.all.current": current,
        "reserved_bytes.all.peak": peak,
    }


def memory_summary(device=None, abbreviated=False):
    """A short text report of the device's memory, for logs."""
    index = _index(device)
    free, total = mem_get_info(index)
    mib = 1024.0 * 1024.0
    return ("tpu:%d memory: %.1f MiB allocated (peak %.1f MiB), %.1f MiB free of %.1f MiB\n"
            % (index, memory_allocated(index) / mib, max_memory_allocated(index) / mib, free / mib, total / mib))


class _DeviceProperties:
    def __init__(self, index):
        info = _C._init()
        self.name = get_device_name(index)
        self.type = info["device_kinds"][index]
        self.platform = info["platform"]
        self.total_memory = mem_get_info(index)[1]

    def __repr__(self):
        return "_TpuDeviceProperties(name=%r, platform=%r, total_memory=%dMB)" % (
            self.name, self.platform, self.total_memory // (1024 * 1024))


def get_device_properties(device=None):
    """name, type (the plugin's device kind), platform and total_memory (bytes)."""
    return _DeviceProperties(_index(device))


OutOfMemoryError = torch.OutOfMemoryError


# ---------------------------------------------------------------- streams and events

class Stream:
    """A tpu device executes programs in launch order: every stream is that one queue."""

    def __init__(self, device=None, priority=0):
        self.device = torch.device("tpu", _index(device))
        self.priority = priority

    def query(self):
        return _C._mark().query()

    def synchronize(self):
        _C._mark().synchronize()

    def wait_event(self, event):
        pass  # one in-order queue: later work already runs after the event

    def wait_stream(self, stream):
        pass

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other):
        return isinstance(other, Stream) and self.device == other.device

    def __hash__(self):
        return hash(self.device)

    def __repr__(self):
        return "<torch.tpu.Stream device=%s>" % self.device


def current_stream(device=None):
    return Stream(device)


def default_stream(device=None):
    return Stream(device)


def set_stream(stream):
    """Every stream is the device's one in-order queue: nothing to switch."""
    tpu_stream = isinstance(stream, Stream) or (isinstance(stream, torch.Stream) and stream.device.type == "tpu")
    if stream is not None and not tpu_stream:
        raise TypeError("expected a torch.tpu.Stream or a tpu torch.Stream, got %r" % (stream,))


class StreamContext:
    """`with torch.tpu.stream(s):` -- one in-order queue, so work already runs in order."""

    def __init__(self, stream):
        set_stream(stream)
        self.stream = stream

    def __enter__(self):
        return self.stream

    def __exit__(self, *exc):
        return False


def stream(s):
    return StreamContext(s)


class Event:
    """Marks the work launched so far. With enable_timing, record() waits for
    that work and stamps the host clock, so elapsed_time() is real device time
    between the two points (plus the small cost of the wait)."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self._marker = None
        self._time = None

    def record(self, stream=None):
        self._marker = _C._mark()
        if self.enable_timing:
            self._marker.synchronize()
            self._time = time.perf_counter()

    def query(self):
        return True if self._marker is None else self._marker.query()

    def synchronize(self):
        if self._marker is not None:
            self._marker.synchronize()

    def wait(self, stream=None):
        pass

    def elapsed_time(self, end_event):
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Events were not created with enable_timing=True")
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calling elapsed_time()")
        return (end_event._time - self._time) * 1000.0


# ---------------------------------------------------------------- autocast support

def get_amp_supported_dtype():
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation=True):
    return True
