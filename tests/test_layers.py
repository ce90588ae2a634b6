"""The layering check (tools/check_layers.py) passes on the tree, and fails on
an include or a name that points against the arrows."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _checker():
    spec = importlib.util.spec_from_file_location("check_layers", os.path.join(ROOT, "tools", "check_layers.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tree_follows_the_arrows():
    assert _checker().violations(ROOT) == []
    assert _checker().knob_violations(ROOT) == []


def _tree(tmp_path, files):
    for path, text in files.items():
        full = tmp_path / "csrc" / path
        full.parent.mkdir(parents=True, exist_ok=True)
        full.write_text(text)
    return str(tmp_path)


def test_an_include_against_the_arrows_is_named(tmp_path):
    root = _tree(tmp_path, {
        "runtime/hooks.cpp": '#include "aten/memory.h"\n#include "engine/runtime.h"\n',
        "ir/graph.cpp": "#include <ATen/core/Tensor.h>\n",
        "lowering/nn.cpp": '#include "engine/runtime.h"\n#include "ir/graph.h"\n',
        "aten/ok.cpp": '#include "lowering/nn.h"\n#include "runtime/device.h"\n',
    })
    found = {(path, what) for path, what, _ in _checker().violations(root)}
    assert found == {
        ("csrc/runtime/hooks.cpp", "aten/memory.h"),
        ("csrc/ir/graph.cpp", "ATen/core/Tensor.h"),
        ("csrc/lowering/nn.cpp", "engine/runtime.h"),
    }


def test_a_pjrt_name_outside_engine_is_named(tmp_path):
    root = _tree(tmp_path, {
        "aten/program.cpp": "void f() { try {} catch (const pjrt::Error& e) {} }\n",
        "engine/runtime.cpp": "pjrt::Error e;\n",
    })
    assert [(p, w) for p, w, _ in _checker().violations(root)] == [("csrc/aten/program.cpp", "pjrt::Error")]


def test_an_unknown_layer_is_named(tmp_path):
    root = _tree(tmp_path, {"misc/x.cpp": "\n"})
    assert [p for p, _, _ in _checker().violations(root)] == ["csrc/misc"]


def test_a_knob_read_outside_the_config_modules_is_named(tmp_path):
    root = _tree(tmp_path, {
        "aten/fallback.cpp": 'const char* m = std::getenv("TORCH_TPU_FALLBACK");\n',
        "engine/config.cpp": 'std::getenv("TORCH_TPU_LOG_OPS");\n',
    })
    package = tmp_path / "torch_tpu"
    package.mkdir()
    (package / "modes.py").write_text(
        'import os\nENV = "TORCH_TPU_EAGER_MODE"\n'
        'a = os.environ.get(ENV)\nb = os.getenv("TORCH_TPU_PLUGIN")\nc = os.environ["TORCH_TPU_X"]\n'
        'd = "TORCH_TPU_Y" in os.environ\nos.environ["TORCH_TPU_Z"] = "1"\ne = os.environ.get("HOME")\n')
    (package / "config.py").write_text('import os\nos.environ.get("TORCH_TPU_PLUGIN")\n')
    found = [(path, knob) for path, knob, _ in _checker().knob_violations(root)]
    assert found == [("csrc/aten/fallback.cpp", "TORCH_TPU_FALLBACK"),
                     ("torch_tpu/modes.py:3", "TORCH_TPU_EAGER_MODE"), ("torch_tpu/modes.py:4", "TORCH_TPU_PLUGIN"),
                     ("torch_tpu/modes.py:5", "TORCH_TPU_X"), ("torch_tpu/modes.py:6", "TORCH_TPU_Y")]
