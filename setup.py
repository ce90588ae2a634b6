"""Build of torch_tpu: the C++ core (csrc/) as the extension torch_tpu._C.

Built with torch's cpp_extension (ninja, incremental in build/temp) against
the installed torch, without debug info. The PJRT C API header comes from the
xla-cpu-pjrt package, which ships it; TORCH_TPU_PJRT_INCLUDE overrides where it
is looked for.
"""
import glob
import importlib.util
import os
import shutil

from setuptools import setup

# Building must not load an installed torch_tpu (possibly stale or broken)
# through torch's backend autoload.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
import torch  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension  # noqa: E402


def pjrt_include_dir():
    override = os.environ.get("TORCH_TPU_PJRT_INCLUDE")
    if override:
        return override
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "pjrt_c_api.h not found: install xla-cpu-pjrt (it ships the header) "
            "or set TORCH_TPU_PJRT_INCLUDE to a directory holding pjrt_c_api.h"
        )
    return os.path.join(list(spec.submodule_search_locations)[0], "include")


# ccache through its compiler symlink (torch's build rejects a two-word CXX);
# the base dir makes hits independent of the checkout's location.
if "CXX" not in os.environ and shutil.which("ccache") and os.path.exists("/usr/lib/ccache/g++"):
    os.environ["CXX"] = "/usr/lib/ccache/g++"
    os.environ.setdefault("CCACHE_BASEDIR", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    os.environ.setdefault("CCACHE_NOHASHDIR", "1")

here = os.path.dirname(os.path.abspath(__file__))


class PersistentBuild(BuildExtension.with_options(use_ninja=True)):
    """Compiles in build/temp under the checkout whatever command asked
    (pip's editable install would use a fresh temporary directory): ninja then
    rebuilds only what changed, and an unchanged tree compiles nothing."""

    def finalize_options(self):
        super().finalize_options()
        self.build_temp = os.path.join(here, "build", "temp")


sources = sorted(glob.glob(os.path.join("csrc", "*", "*.cpp")))

# The extension links against this torch's C++ ABI: a wheel built here runs
# with this torch release only (its local tag, e.g. +cpu, is the build's own).
TORCH_REQUIREMENT = "torch==" + torch.__version__.split("+")[0]

setup(
    install_requires=[TORCH_REQUIREMENT, "numpy", "xla-cpu-pjrt"],
    ext_modules=[
        CppExtension(
            "torch_tpu._C",
            sources,
            # Kineto's headers: the device's events in torch.profiler (csrc/python/profiler.cpp).
            include_dirs=[os.path.join(here, "csrc"), pjrt_include_dir(),
                          os.path.join(os.path.dirname(torch.__file__), "include", "kineto")],
            # -g0 last: Python's own flags carry -g, which makes the extension ~120 MB.
            extra_compile_args=["-O2", "-std=c++20", "-Wall", "-Wno-unused-parameter", "-fvisibility=hidden", "-g0"],
            libraries=["dl"],
        )
    ],
    cmdclass={"build_ext": PersistentBuild},
)
