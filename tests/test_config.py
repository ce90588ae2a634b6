"""One place for every TORCH_TPU_* knob: torch_tpu.config's table, the C++ core's
table (csrc/engine/config.cpp) and the README's list agree."""
import os
import re
import subprocess
import sys

import pytest

import torch_tpu
from torch_tpu import config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_cpp_core_reads_exactly_the_knobs_the_table_gives_it():
    cpp = set(torch_tpu._C._config_knobs())
    assert cpp == {knob.name for knob in config.KNOBS if knob.reader.startswith("c++")}
    assert len(cpp) == len(torch_tpu._C._config_knobs())  # no name twice


def test_the_readme_lists_every_knob_with_its_meaning():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        rows = dict(re.findall(r"^\| `(TORCH_TPU_\w+)` \| (.*) \|$", f.read(), re.M))
    assert rows == {knob.name: knob.meaning for knob in config.KNOBS}


def test_unknown_knob_is_a_key_error(monkeypatch):
    with pytest.raises(KeyError, match="TORCH_TPU_NO_SUCH_KNOB is not a torch_tpu knob"):
        config.get("TORCH_TPU_NO_SUCH_KNOB")
    monkeypatch.setenv("TORCH_TPU_LOG_OPS", "1")
    monkeypatch.delenv("TORCH_TPU_DUMP_PROGRAMS", raising=False)
    assert config.get("TORCH_TPU_LOG_OPS") == "1"
    settings = config.settings()
    assert settings["TORCH_TPU_LOG_OPS"] == "1" and settings["TORCH_TPU_DUMP_PROGRAMS"] is None
    assert list(settings) == [knob.name for knob in config.KNOBS]


def test_config_command_prints_every_knob():
    env = dict(os.environ, TORCH_TPU_FUSED_MAX_OPS="77")
    out = subprocess.run([sys.executable, "-m", "torch_tpu.config"], capture_output=True, text=True, env=env,
                         timeout=120, check=True).stdout
    lines = out.strip().splitlines()
    assert [line.split()[0] for line in lines] == [knob.name for knob in config.KNOBS]
    assert "'77'" in next(line for line in lines if line.startswith("TORCH_TPU_FUSED_MAX_OPS"))
