#!/usr/bin/env python3
"""The layering check: no include or import points against the architecture's arrows,
and every TORCH_TPU_* knob is read in its one place.

C++ (csrc/<layer>/): a file may include headers of its own layer and of the
layers ALLOWED lists for it; torch headers only where TORCH_FREE does not
forbid them. Python: only torch_tpu/_C's binding sees every layer, so there is
nothing to check there beyond torch_tpu never being imported by csrc.

Knobs: the TORCH_TPU_* environment variables are read only by
csrc/engine/config.cpp and torch_tpu/config.py (writing one, for a child
process, is allowed anywhere).

Run: python tools/check_layers.py [root]; exits 1 listing each violation.
"""
import ast
import os
import re
import sys

# Which layers each layer may include (besides itself). The arrows:
# python -> aten -> {lowering, runtime, engine}; runtime -> engine;
# engine -> {ir, pjrt}; lowering -> ir; amp and distributed sit beside aten.
# A layer may use what the layers it depends on use (aten reaches ir through
# lowering), except pjrt: only engine names PJRT types.
ALLOWED = {
    "pjrt": set(),
    "ir": set(),
    "engine": {"ir", "pjrt"},
    "lowering": {"ir"},
    "runtime": {"engine", "ir"},
    "aten": {"lowering", "runtime", "engine", "ir"},
    "amp": {"aten", "lowering", "runtime", "engine", "ir"},
    "distributed": {"aten", "lowering", "runtime", "engine", "ir"},
    "python": {"aten", "amp", "distributed", "lowering", "runtime", "engine", "ir", "pjrt"},
}
# Layers that know nothing of torch: no ATen, c10 or torch header.
TORCH_FREE = {"pjrt", "ir", "engine"}
TORCH_HEADER = re.compile(r"^(ATen|c10|torch|caffe2)/")
# Only these layers name PJRT types; the others see engine's (engine::Error, BufferRef).
NAMES_PJRT = {"pjrt", "engine", "python"}
PJRT_NAME = re.compile(r"\bpjrt::\w+")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)


def violations(root):
    """(file, what it uses, why) for every include or name against the arrows."""
    found = []
    csrc = os.path.join(root, "csrc")
    for layer in sorted(os.listdir(csrc)):
        directory = os.path.join(csrc, layer)
        if not os.path.isdir(directory):
            continue
        if layer not in ALLOWED:
            found.append((f"csrc/{layer}", "", "a directory that is not a known layer (add it to ALLOWED)"))
            continue
        for name in sorted(os.listdir(directory)):
            if not name.endswith((".h", ".cpp")):
                continue
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for header in INCLUDE.findall(text):
                target = header.split("/", 1)[0] if "/" in header else None
                if target in ALLOWED and target != layer and target not in ALLOWED[layer]:
                    found.append((f"csrc/{layer}/{name}", header, f"{layer} may not include {target}"))
                elif layer in TORCH_FREE and TORCH_HEADER.match(header):
                    found.append((f"csrc/{layer}/{name}", header, f"{layer} knows no torch"))
            if layer not in NAMES_PJRT:
                for used in sorted(set(PJRT_NAME.findall(text))):
                    found.append((f"csrc/{layer}/{name}", used, f"{layer} names a PJRT type (use engine's)"))
    return found


KNOB_READERS = {"csrc/engine/config.cpp", "torch_tpu/config.py"}
CPP_KNOB_READ = re.compile(r'getenv\s*\(\s*"(TORCH_TPU_\w+)"')


def _python_knob_reads(tree):
    """The TORCH_TPU_* names a module reads from os.environ (os.environ.get(X),
    os.getenv(X), os.environ[X], X in os.environ), X a literal or a module constant."""
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = node.value.value

    def knob(expr):
        value = expr.value if isinstance(expr, ast.Constant) else constants.get(getattr(expr, "id", None))
        return value if isinstance(value, str) and value.startswith("TORCH_TPU_") else None

    def is_environ(expr):
        return isinstance(expr, ast.Attribute) and expr.attr == "environ" and getattr(expr.value, "id", "") == "os"

    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            f = node.func
            if (f.attr == "get" and is_environ(f.value)) or (f.attr == "getenv" and getattr(f.value, "id", "") == "os"):
                name = knob(node.args[0])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and is_environ(node.value):
            name = knob(node.slice)
        elif isinstance(node, ast.Compare) and any(is_environ(c) for c in node.comparators):
            name = knob(node.left)
        if name:
            yield node.lineno, name


def knob_violations(root):
    """(file, knob, why) for every TORCH_TPU_* read outside the config modules."""
    found = []
    for top in ("csrc", "torch_tpu"):
        for directory, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                path = os.path.join(directory, name)
                relative = os.path.relpath(path, root).replace(os.sep, "/")
                if relative in KNOB_READERS or not name.endswith((".h", ".cpp", ".py")):
                    continue
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                if name.endswith(".py"):
                    reads = [f"{relative}:{line}: {knob}" for line, knob in _python_knob_reads(ast.parse(text))]
                else:
                    reads = [f"{relative}: {knob}" for knob in CPP_KNOB_READ.findall(text)]
                for read in reads:
                    where, knob = read.rsplit(": ", 1)
                    found.append((where, knob, "a knob read outside engine/config.cpp and torch_tpu/config.py"))
    return found


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = violations(root) + knob_violations(root)
    for path, what, why in found:
        print(f"{path}: {what}: {why}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
