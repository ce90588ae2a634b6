"""Target of the `torch.backends` entry point that `import torch` runs.

It lives in a submodule so that `import torch_tpu` first (which imports torch,
which runs the entry point) finds the package already importing instead of
asking a half-initialised torch_tpu for an attribute."""


def load():
    import torch_tpu  # noqa: F401  (registers the tpu device on first import)
