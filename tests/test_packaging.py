"""A wheel built from the tree is what a new user installs: `pip install <wheel>`
alone in a fresh virtual environment gives a working tpu device on the embedded
default plugin, with every package the README names, the torch release the
extension was built for, and an extension without debug info."""
import os
import subprocess
import sys
import zipfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_wheel_installs_alone_and_runs_a_tpu_op(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
                    "-w", str(wheels), ROOT], check=True, capture_output=True, timeout=900)
    (wheel,) = wheels.iterdir()
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        metadata = next(z.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
        extension = next(z.getinfo(n) for n in names if n.startswith("torch_tpu/_C") and n.endswith(".so"))
    assert "torch_tpu/tools/hf_report.py" in names and "torch_tpu/tools/opinfo_report.py" in names
    assert extension.file_size <= 40 * 2**20, extension.file_size
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert "torch==" + torch.__version__.split("+")[0] in requires
    assert "xla-cpu-pjrt" in requires

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    subprocess.run([python, "-m", "pip", "install", "-q", str(wheel)], check=True, capture_output=True, timeout=900)
    code = ("import torch, torch_tpu.tools.hf_report\n"
            "x = torch.arange(6.0).reshape(2, 3).to('tpu')\n"
            "print((x * 2).sum().item(), torch.accelerator.current_accelerator())\n")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                         env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCH_TPU_CACHE_DIR")})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["30.0", "tpu"]
