"""The bucket policy of torch.compile's dynamic shapes: which padded size a symbolic
size rounds up to (TORCH_TPU_DYNAMIC_BUCKETS, torch_tpu.set_dynamic_buckets).

Kept apart from _buckets.py, whose padding analysis needs sympy: importing that
costs about half a second, which `import torch` (autoload) should not pay."""
from . import config


class _Policy:
    """Which padded size a symbolic size rounds up to."""

    def __init__(self, spec):
        self.spec = spec
        self.explicit = None
        self.minimum, self.maximum = 16, 4096
        self.enabled = True
        if spec is None:
            return
        if isinstance(spec, str):
            text = spec.strip().lower()
            if text in ("", "off", "0", "none", "false", "no"):
                self.enabled = False
                return
            if text.startswith("pow2"):
                parts = text.split(":")[1:]
                if len(parts) > 0 and parts[0]:
                    self.minimum = int(parts[0])
                if len(parts) > 1 and parts[1]:
                    self.maximum = int(parts[1])
                if self.minimum < 1 or self.maximum < self.minimum:
                    raise ValueError(f"torch_tpu: bad dynamic bucket policy {spec!r}")
                return
            spec = [int(p) for p in text.replace(" ", "").split(",") if p]
        sizes = sorted(set(int(s) for s in spec))
        if not sizes:
            self.enabled = False
            return
        if sizes[0] < 1:
            raise ValueError(f"torch_tpu: dynamic buckets must be positive, got {spec!r}")
        self.explicit = sizes

    def bucket(self, n):
        """The padded size for a real size n: n itself past the largest bucket."""
        if self.explicit is not None:
            for b in self.explicit:
                if b >= n:
                    return b
            return n
        if n > self.maximum:
            return n
        b = self.minimum
        while b < n:
            b *= 2
        return min(b, self.maximum) if b >= n else n

    def describe(self):
        if not self.enabled:
            return "off"
        if self.explicit is not None:
            return ",".join(str(b) for b in self.explicit)
        return f"pow2:{self.minimum}:{self.maximum}"


_policy = _Policy(config.get("TORCH_TPU_DYNAMIC_BUCKETS"))


def set_dynamic_buckets(spec):
    """Sets how symbolic sizes are padded under torch.compile(backend="tpu", dynamic=True).

    spec: a list of sizes (a size rounds up to the next one; past the last it stays
    exact), "pow2" / "pow2:MIN:MAX" (powers of two from MIN up to MAX, exact past MAX;
    the default is pow2:16:4096), or None / "off" / [] (no padding: one program per
    size). Same syntax as the TORCH_TPU_DYNAMIC_BUCKETS environment variable.
    """
    global _policy
    _policy = _Policy("pow2" if spec is True else ("off" if spec is None or spec is False else spec))


def get_dynamic_buckets():
    """The current bucket policy as a string ("off", "pow2:16:4096", "16,32,48")."""
    return _policy.describe()


def policy():
    return _policy
