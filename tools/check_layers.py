#!/usr/bin/env python3
"""The layering check: no include or import points against the architecture's arrows.

C++ (csrc/<layer>/): a file may include headers of its own layer and of the
layers ALLOWED lists for it; torch headers only where TORCH_FREE does not
forbid them. Python: only torch_tpu/_C's binding sees every layer, so there is
nothing to check there beyond torch_tpu never being imported by csrc.

Run: python tools/check_layers.py [root]; exits 1 listing each violation.
"""
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


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = violations(root)
    for path, what, why in found:
        print(f"{path}: {what}: {why}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
