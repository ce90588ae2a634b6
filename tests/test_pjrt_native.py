"""Native C++ tests of the torch-free layers csrc/pjrt, csrc/ir and csrc/engine.

Builds tests/cpp/test_pjrt.cpp together with csrc/pjrt/pjrt.cpp, csrc/ir/graph.cpp
and csrc/ir/ops.cpp into one binary (in a pytest tmp dir), runs it against the
XLA:CPU PJRT plugin, and runs the same objects linked with LeakSanitizer and
built with ThreadSanitizer. tests/cpp/test_engine.cpp (the engine layer: pending
graphs, the program cache, background compiles, with several recording threads)
is built with csrc/engine as well and run plainly and under ThreadSanitizer.

LeakSanitizer attribution: XLA itself leaves a few unreachable allocations
behind (MLIR attribute storage whose destructors never run). Those are allowed;
a leak fails the test when it is ours, i.e. when the allocation was made
  * by code in the test binary itself (csrc/pjrt, csrc/ir, the test), or
  * by a PJRT C API entry point (pjrt::PJRT_*) called directly from our code:
    a handle the plugin gave us (PJRT_Buffer, PJRT_Event, ...) that we never
    destroyed.
A blanket `leak:xla_cpu_pjrt.so` suppression would hide the second kind, since
LSan suppressions match any frame of the stack; so the report is parsed here.
Two self-checks (a leak on purpose of each kind) prove that LSan is active and
that the attribution sees both.
"""
import importlib.util
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from torch_tpu.tools.lsan_report import FRAME_FORMAT, RUNTIME, parse_leaks

REPO = Path(__file__).resolve().parents[1]
SOURCES = [
    REPO / "tests" / "cpp" / "test_pjrt.cpp",
    REPO / "csrc" / "pjrt" / "pjrt.cpp",
    REPO / "csrc" / "ir" / "graph.cpp",
    REPO / "csrc" / "ir" / "ops.cpp",
]
ENGINE_SOURCES = [REPO / "tests" / "cpp" / "test_engine.cpp", *SOURCES[1:],
                  *sorted((REPO / "csrc" / "engine").glob("*.cpp"))]
CXXFLAGS = ["-std=c++20", "-O1", "-g", "-fno-omit-frame-pointer", "-Wall", "-Wno-unused-parameter"]
RUN_TIMEOUT_S = 120
LSAN_EXITCODE = 23
LSAN_UNAVAILABLE = (
    "LeakSanitizer has encountered a fatal error",
    "LeakSanitizer does not work under ptrace",
)


def xla_cpu_plugin():
    """(plugin .so, directory holding pjrt_c_api.h) of the installed xla-cpu-pjrt."""
    spec = importlib.util.find_spec("xla_plugins.xla_cpu_pjrt")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("xla-cpu-pjrt is not installed (it is in requirements.txt)")
    root = Path(list(spec.submodule_search_locations)[0])
    plugin, include = root / "xla_cpu_pjrt.so", root / "include"
    assert plugin.is_file(), f"no plugin at {plugin}"
    assert (include / "pjrt_c_api.h").is_file(), f"no pjrt_c_api.h in {include}"
    return plugin, include


class Build:
    def __init__(self, plugin, binary, lsan_binary, lsan_error):
        self.plugin = plugin
        self.binary = binary
        self.lsan_binary = lsan_binary
        self.lsan_error = lsan_error  # why there is no LSan binary, or None


def compile_native(out, sources, sanitize=()):
    """Objects of `sources` compiled into `out` in parallel (with the -fsanitize= options `sanitize`)."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.fail("g++ not found")
    _, include = xla_cpu_plugin()
    flags = CXXFLAGS + [f"-fsanitize={s}" for s in sanitize] + ["-I", str(REPO / "csrc"), "-I", str(include)]

    def compile_one(src):
        obj = out / (src.stem + ".o")
        r = subprocess.run([cxx, *flags, "-c", str(src), "-o", str(obj)], capture_output=True, text=True)
        assert r.returncode == 0, f"compiling {src.relative_to(REPO)} ({' '.join(flags)}) failed:\n{r.stderr[-8000:]}"
        return str(obj)

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return list(pool.map(compile_one, sources))


def link_native(objects, binary, sanitize=()):
    """Links `objects` into `binary`; the linker's error, or None."""
    r = subprocess.run([shutil.which("g++"), *[f"-fsanitize={s}" for s in sanitize], *objects, "-ldl", "-lpthread",
                        "-o", str(binary)], capture_output=True, text=True)
    return None if r.returncode == 0 else r.stderr.strip()[-8000:]


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    plugin, _ = xla_cpu_plugin()
    out = tmp_path_factory.mktemp("pjrt_native")
    # Compile each source once; link twice. LeakSanitizer needs no instrumentation,
    # only its runtime at link time.
    t0 = time.monotonic()
    objects = compile_native(out, SOURCES)
    binary = out / "test_pjrt"
    error = link_native(objects, binary)
    assert error is None, f"linking failed:\n{error}"
    lsan_binary = out / "test_pjrt_lsan"
    lsan_error = link_native(objects, lsan_binary, ["leak"])
    if lsan_error is not None:
        lsan_binary, lsan_error = None, f"linking with -fsanitize=leak failed: {lsan_error[-2000:]}"
    print(f"built in {time.monotonic() - t0:.1f}s")
    return Build(plugin, binary, lsan_binary, lsan_error)


def run(args, env_extra=None, cwd=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    env["TMPDIR"] = str(cwd)
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=RUN_TIMEOUT_S)


def check_cases(r):
    """Every case printed PASS and the summary says 0 failed."""
    report = f"exit code {r.returncode}\n--- stdout ---\n{r.stdout[-12000:]}\n--- stderr ---\n{r.stderr[-12000:]}"
    failures = [line for line in r.stdout.splitlines() if line.startswith("FAIL ")]
    assert not failures, "\n".join(failures) + "\n\n" + report
    summary = re.search(r"^(\d+) passed, (\d+) failed$", r.stdout, re.M)
    assert summary, "the test binary did not finish (no summary line)\n" + report
    passed = int(summary.group(1))
    assert int(summary.group(2)) == 0, report
    assert passed == sum(line.startswith("PASS ") for line in r.stdout.splitlines()), report
    assert passed >= 30, report
    return passed


def test_pjrt_native(build, tmp_path):
    r = run([build.binary, build.plugin], cwd=tmp_path)
    print(r.stdout)
    assert r.returncode == 0, f"exit code {r.returncode}\n{r.stdout[-12000:]}\n{r.stderr[-12000:]}"
    check_cases(r)


# ------------------------------------------------------------------ LeakSanitizer


def attribute(frames, binary, plugin):
    """'ours', 'plugin' or 'other' for one leak's allocation stack (innermost first)."""
    own = {os.path.basename(binary)}
    plugin_name = os.path.basename(plugin)
    frames = [f for f in frames if not RUNTIME.match(os.path.basename(f[0]))]
    if not frames:
        return "other"
    module = os.path.basename(frames[0][0])
    if module in own:
        return "ours"
    if module == plugin_name:
        # A C API entry point's allocation handed straight to our code: a PJRT
        # handle we were responsible for destroying.
        if "PJRT_" in frames[0][1] and len(frames) > 1 and os.path.basename(frames[1][0]) in own:
            return "ours"
        return "plugin"
    return "other"


def describe(leak):
    kind, size, frames = leak
    shown = "\n".join(f"      {os.path.basename(m)}: {f[:160]}  {s}" for m, f, s in frames[:8])
    return f"  {kind} leak of {size} bytes:\n{shown}"


def run_lsan(build, args, tmp_path):
    options = f"exitcode={LSAN_EXITCODE}:detect_leaks=1:stack_trace_format='{FRAME_FORMAT}'"
    r = run([build.lsan_binary, *args], env_extra={"LSAN_OPTIONS": options}, cwd=tmp_path)
    if any(s in r.stderr for s in LSAN_UNAVAILABLE):
        pytest.skip("LeakSanitizer cannot run here: " + r.stderr.strip()[-500:])
    leaks = parse_leaks(r.stderr)
    by_owner = {"ours": [], "plugin": [], "other": []}
    for leak in leaks:
        by_owner[attribute(leak[2], build.lsan_binary, build.plugin)].append(leak)
    return r, by_owner


def test_pjrt_native_lsan(build, tmp_path):
    if build.lsan_binary is None:
        pytest.skip(build.lsan_error)

    # Self-checks: LSan is active and attributes each kind of leak to us.
    r, owners = run_lsan(build, ["--leak-self-check"], tmp_path)
    assert r.returncode == LSAN_EXITCODE and owners["ours"], (
        "LeakSanitizer did not report the deliberate leak in our code\n" + r.stdout + r.stderr[-6000:])
    r, owners = run_lsan(build, ["--leak-self-check-pjrt", build.plugin], tmp_path)
    assert r.returncode == LSAN_EXITCODE and any(
        any("PJRT_Buffer_ReadyEvent" in f for _, f, _ in frames) for _, _, frames in owners["ours"]), (
        "a PJRT_Event dropped without PJRT_Event_Destroy was not attributed to us\n" + r.stdout + r.stderr[-6000:])

    # The whole suite under LSan: all cases pass, and no leak is ours.
    r, owners = run_lsan(build, [build.plugin], tmp_path)
    print(r.stdout)
    assert r.returncode in (0, LSAN_EXITCODE), f"exit code {r.returncode}\n{r.stdout[-12000:]}\n{r.stderr[-12000:]}"
    check_cases(r)
    if r.returncode == LSAN_EXITCODE:
        assert any(owners.values()), "LSan failed the run but its report could not be parsed:\n" + r.stderr[-12000:]
    problems = owners["ours"] + owners["other"]
    assert not problems, (
        f"{len(owners['ours'])} leak(s) in our code, {len(owners['other'])} of unknown origin:\n"
        + "\n".join(describe(leak) for leak in problems)
    )
    plugin_bytes = sum(size for _, size, _ in owners["plugin"])
    print(f"LSan: no leaks of ours; {len(owners['plugin'])} leak record(s), {plugin_bytes} bytes, inside the plugin")


# ------------------------------------------------------------------ ThreadSanitizer
# The PJRT and IR layers (with the plugin's threads behind them) under TSan. The plugin is
# not instrumented: it synchronizes through atomics TSan cannot see, so what its own code
# does (its memcpy into our buffers, its pools' mutexes) is left out (called_from_lib), and
# a report counts as ours only where its first stack enters our code before anything else.

TSAN_EXITCODE = 0  # the reports are parsed instead


def tsan_binary(build, out, sources, name):
    """(binary, suppressions) of `sources` built with ThreadSanitizer into `out`."""
    binary = out / name
    error = link_native(compile_native(out, sources, ["thread"]), binary, ["thread"])
    if error is not None:
        pytest.skip("linking with -fsanitize=thread failed: " + error[-2000:])
    suppressions = out / "suppressions.txt"
    suppressions.write_text(f"called_from_lib:{os.path.basename(build.plugin)}\n")
    return binary, suppressions


@pytest.fixture(scope="module")
def tsan_build(build, tmp_path_factory):
    return tsan_binary(build, tmp_path_factory.mktemp("pjrt_tsan"), SOURCES, "test_pjrt_tsan")


def tsan_reports(stderr, binary):
    """[(kind, ours, frames)] per TSan warning; frames of its first stack, innermost first."""
    reports = []
    for block in stderr.split("==================\n"):
        m = re.search(r"WARNING: ThreadSanitizer: (.+?) \(pid=", block)
        if not m:
            continue
        frames = []
        for line in block.splitlines()[1:]:
            if re.match(r"^\s+#\d+\|", line):
                parts = line.strip().split("|")
                frames.append((os.path.basename(parts[1]), "|".join(parts[2:-1]), parts[-1]))
            elif frames:
                break  # the first stack ends
        own = [f for f in frames if not RUNTIME.match(f[0]) and not f[0].startswith("libtsan")]
        ours = bool(own) and own[0][0] == os.path.basename(binary)
        reports.append((m.group(1), ours, frames))
    return reports


def run_tsan(tsan_build, args, tmp_path, env_extra=None):
    binary, suppressions = tsan_build
    options = (f"exitcode={TSAN_EXITCODE}:suppressions={suppressions}:stack_trace_format='{FRAME_FORMAT}'"
               ":history_size=4")
    r = run([binary, *args], env_extra={"TSAN_OPTIONS": options, **(env_extra or {})}, cwd=tmp_path)
    if "ThreadSanitizer: unexpected memory mapping" in r.stderr or "FATAL: ThreadSanitizer" in r.stderr:
        pytest.skip("ThreadSanitizer cannot run here: " + r.stderr.strip()[-500:])
    return r, tsan_reports(r.stderr, binary)


def test_pjrt_native_tsan(tsan_build, build, tmp_path):
    # Self-check: TSan is active and attributes a race in our code to us.
    r, reports = run_tsan(tsan_build, ["--race-self-check"], tmp_path)
    assert any(kind == "data race" and ours and any("race_on_purpose" in f for _, f, _ in frames)
               for kind, ours, frames in reports), (
        "ThreadSanitizer did not report the deliberate race in our code\n" + r.stdout + r.stderr[-6000:])

    # The whole suite (its multi-threaded cases included) under TSan: all pass, no report is ours.
    r, reports = run_tsan(tsan_build, [build.plugin], tmp_path)
    print(r.stdout)
    assert r.returncode == 0, f"exit code {r.returncode}\n{r.stdout[-12000:]}\n{r.stderr[-12000:]}"
    check_cases(r)
    assert_none_ours(reports)


def assert_none_ours(reports):
    ours = [(kind, frames) for kind, is_ours, frames in reports if is_ours]
    assert not ours, f"{len(ours)} ThreadSanitizer report(s) in our code:\n" + "\n\n".join(
        kind + ":\n" + "\n".join(f"      {m}: {f[:160]}  {s}" for m, f, s in frames[:10]) for kind, frames in ours)
    print(f"TSan: no reports in our code; {len(reports)} inside the plugin's own synchronization")


# ------------------------------------------------------------------ the engine layer
# Fused recording from several threads into one pending graph, strict launches through
# the shared cache, storages freed on other threads than the one that recorded them,
# with and without background compiles (off by default on XLA:CPU, on elsewhere).

ENGINE_MODES = {"foreground compiles": {"TORCH_TPU_FUSED_BACKGROUND_COMPILE": "0"},
                "background compiles": {"TORCH_TPU_FUSED_BACKGROUND_COMPILE": "1"}}


def check_engine_cases(r):
    report = f"exit code {r.returncode}\n--- stdout ---\n{r.stdout[-6000:]}\n--- stderr ---\n{r.stderr[-6000:]}"
    assert r.returncode == 0, report
    assert re.search(r"^5 passed, 0 failed$", r.stdout, re.M), report


@pytest.fixture(scope="module")
def engine_build(build, tmp_path_factory):
    out = tmp_path_factory.mktemp("engine_native")
    binary = out / "test_engine"
    error = link_native(compile_native(out, ENGINE_SOURCES), binary)
    assert error is None, f"linking failed:\n{error}"
    return binary


@pytest.mark.parametrize("mode", ENGINE_MODES)
def test_engine_native(engine_build, build, tmp_path, mode):
    # Three runs each: a race that corrupts memory or an exit that tears the plugin
    # down under a compile (both found here once) shows in some runs, not every one.
    for _ in range(3):
        r = run([engine_build, build.plugin], env_extra=ENGINE_MODES[mode], cwd=tmp_path)
        check_engine_cases(r)


@pytest.fixture(scope="module")
def engine_tsan_build(build, tmp_path_factory):
    return tsan_binary(build, tmp_path_factory.mktemp("engine_tsan"), ENGINE_SOURCES, "test_engine_tsan")


@pytest.mark.parametrize("mode", ENGINE_MODES)
def test_engine_native_tsan(engine_tsan_build, build, tmp_path, mode):
    r, reports = run_tsan(engine_tsan_build, [build.plugin], tmp_path, ENGINE_MODES[mode])
    print(r.stdout)
    check_engine_cases(r)
    assert_none_ours(reports)
