"""Eager modes (strict, debug) and the on-disk compilation cache."""
import glob
import os
import stat
import struct
import subprocess

import pytest
import torch
from torch.testing import assert_close

import torch_tpu
from support import run_python


# ------------------------------------------------------------ modes

def test_mode_api_and_context_manager():
    assert torch_tpu.get_eager_mode() == "strict"
    with torch_tpu.eager_mode("debug"):
        assert torch_tpu.get_eager_mode() == "debug"
    assert torch_tpu.get_eager_mode() == "strict"
    with pytest.raises(ValueError, match="unknown eager mode"):
        torch_tpu.set_eager_mode("turbo")
    with torch_tpu.eager_mode("fused"):
        assert torch_tpu.get_eager_mode() == "fused"
    assert torch_tpu.get_eager_mode() == "strict"


def test_same_results_in_debug_and_strict():
    x = torch.randn(8, 8)
    results = []
    for mode in ("strict", "debug"):
        with torch_tpu.eager_mode(mode):
            t = x.to("tpu")
            results.append(((t @ t.t()).relu().sum(1) / 3).cpu())
    assert_close(results[0], results[1], rtol=0, atol=0)
    assert_close(results[0], ((x @ x.t()).relu().sum(1) / 3))


def test_env_selects_mode():
    out = run_python("import torch, torch_tpu\nprint(torch_tpu.get_eager_mode())", TORCH_TPU_EAGER_MODE="debug")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "debug"


def debug_nan_error(*lines):
    """stderr of `lines` run in debug mode with the NaN check, which must stop
    the script before its last line, print('not reached')."""
    out = run_python("\n".join(("import torch",) + lines + ("print('not reached')\n",)),
                     TORCH_TPU_EAGER_MODE="debug", TORCH_TPU_CHECK_NAN="1")
    assert out.returncode != 0 and "not reached" not in out.stdout
    assert "RuntimeError" in out.stderr and "NaN or Inf" in out.stderr, out.stderr[-2000:]
    return out.stderr


def test_debug_nan_check_names_op_shapes_and_line():
    message = debug_nan_error("x = torch.tensor([1.0, 0.0]).to('tpu')", "y = x * 2", "z = x / 0  # the offending line")
    assert "div" in message
    assert "[2] float32" in message  # operand shape and dtype
    assert "<string>:4" in message  # the user's source line


def test_debug_nan_check_in_a_foreach_batch_lists_its_first_operands():
    # A _foreach_ op is one program over the whole list: the message names
    # its first operands and how many there were, not all twelve.
    message = debug_nan_error("xs = [torch.full((k + 1,), -1.0).to('tpu') for k in range(12)]",
                              "torch._foreach_sqrt_(xs)")
    assert "_foreach_sqrt_" in message
    assert "[1] float32, [2] float32" in message and "... (12 operands)" in message, message[-2000:]
    assert "[12] float32" not in message
    assert "<string>:3" in message


def test_nan_check_is_quiet_without_nans_and_in_strict_mode():
    code = (
        "import torch\n"
        "x = torch.tensor([1.0, 0.0]).to('tpu')\n"
        "print((x + 1).cpu().tolist(), (x / 0).cpu().isnan().any().item())\n"
    )
    out = run_python(code, TORCH_TPU_EAGER_MODE="strict", TORCH_TPU_CHECK_NAN="1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[2.0, 1.0] True"


def test_log_ops():
    code = "import torch\nx = torch.ones(3, device='tpu')\nfor _ in range(2):\n    y = x + x\n"
    out = run_python(code, TORCH_TPU_LOG_OPS="1", TORCH_TPU_CACHE_DIR="off")
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [l for l in out.stderr.splitlines() if l.startswith("[torch_tpu] add(")]
    assert len(lines) == 2
    assert "compiled" in lines[0] and "cache hit" in lines[1] and " us" in lines[1]
    assert "[3] float32" in lines[0]


# ------------------------------------------------------------ disk cache

PROGRAM = (
    "import torch, torch_tpu\n"
    "x = torch.arange(12.0).reshape(3, 4).to('tpu')\n"
    "y = ((x * 2 + 1) @ x.t()).sum(0)\n"
    "print(y.cpu().tolist())\n"
    "m = torch_tpu.metrics()\n"
    "print(m['compiles'], m.get('disk_cache_hits', 0))\n"
)
EXPECTED = str((((torch.arange(12.0).reshape(3, 4) * 2 + 1) @ torch.arange(12.0).reshape(3, 4).t()).sum(0)).tolist())


def run_cached(cache_dir):
    out = run_python(PROGRAM, TORCH_TPU_CACHE_DIR=str(cache_dir))
    assert out.returncode == 0, out.stderr[-3000:]
    values, counts = out.stdout.strip().splitlines()
    assert values == EXPECTED
    compiles, disk_hits = map(int, counts.split())
    return compiles, disk_hits, out.stderr


def entries(cache_dir):
    return sorted(glob.glob(os.path.join(cache_dir, "*.xla")))


def test_disk_cache_warm_start(tmp_path):
    compiles, hits, _ = run_cached(tmp_path)
    assert compiles > 0 and hits == 0
    assert len(entries(tmp_path)) == compiles
    compiles2, hits2, _ = run_cached(tmp_path)
    assert compiles2 == 0 and hits2 == compiles
    assert not glob.glob(os.path.join(tmp_path, "*.tmp.*"))  # writes are atomic renames


def test_disk_cache_entries_are_per_xla_flags(tmp_path):
    # The plugin compiles differently under other XLA_FLAGS: no reuse across them.
    compiles, _, _ = run_cached(tmp_path)
    out = run_python(PROGRAM, TORCH_TPU_CACHE_DIR=str(tmp_path), XLA_FLAGS="--xla_cpu_enable_fast_math=false")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[1] == "%d 0" % compiles
    assert run_cached(tmp_path)[:2] == (0, compiles)


def test_disk_cache_truncated_entry_is_rebuilt(tmp_path):
    compiles, _, _ = run_cached(tmp_path)
    victim = entries(tmp_path)[0]
    with open(victim, "r+b") as f:
        f.truncate(os.path.getsize(victim) // 2)
    compiles2, hits2, stderr = run_cached(tmp_path)
    assert compiles2 == 1 and hits2 == compiles - 1
    assert "truncated or corrupt" in stderr
    assert run_cached(tmp_path)[:2] == (0, compiles)  # rewritten and valid again


def test_disk_cache_garbage_entries_are_rebuilt(tmp_path):
    compiles, _, _ = run_cached(tmp_path)
    for path in entries(tmp_path):
        with open(path, "wb") as f:
            f.write(b"not a cache entry at all")
    compiles2, hits2, stderr = run_cached(tmp_path)
    assert compiles2 == compiles and hits2 == 0
    assert "truncated or corrupt" in stderr


def rewrite_entry(path, plugin=None, executable=None):
    """Re-encodes a cache entry with another plugin identity or executable (valid checksum)."""
    data = open(path, "rb").read()
    magic_end = data.index(b"\n") + 1
    pos, blocks = magic_end, []
    for _ in range(3):
        (n,) = struct.unpack_from("<Q", data, pos)
        blocks.append(data[pos + 8:pos + 8 + n])
        pos += 8 + n
    key, old_plugin, old_exe = blocks
    plugin = old_plugin if plugin is None else plugin
    executable = old_exe if executable is None else executable

    def fnv(b):
        h = 1469598103934665603
        for c in b:
            h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
        return h

    out = data[:magic_end]
    for block in (key, plugin, executable):
        out += struct.pack("<Q", len(block)) + block
    out += struct.pack("<Q", fnv(out))  # the checksum covers everything before it
    with open(path, "wb") as f:
        f.write(out)


def test_disk_cache_entry_from_another_plugin_is_rebuilt(tmp_path):
    compiles, _, _ = run_cached(tmp_path)
    rewrite_entry(entries(tmp_path)[0], plugin=b"some-other-plugin 9.9")
    compiles2, hits2, stderr = run_cached(tmp_path)
    assert compiles2 == 1 and hits2 == compiles - 1
    assert "another plugin" in stderr


def test_disk_cache_undeserializable_entry_is_rebuilt(tmp_path):
    compiles, _, _ = run_cached(tmp_path)
    rewrite_entry(entries(tmp_path)[0], executable=b"\x00" * 64)  # valid frame, bad executable
    compiles2, hits2, stderr = run_cached(tmp_path)
    assert compiles2 == 1 and hits2 == compiles - 1
    assert "cannot be loaded" in stderr


def test_cache_dir_api(tmp_path):
    previous = torch_tpu.get_cache_dir()
    try:
        torch_tpu.set_cache_dir(tmp_path)
        assert torch_tpu.get_cache_dir() == str(tmp_path)
        torch_tpu.set_cache_dir(None)
        assert torch_tpu.get_cache_dir() is None
    finally:
        torch_tpu.set_cache_dir(previous)


DUMP_CODE = """
import torch, torch_tpu
x = torch.randn(37, 41).to("tpu")
print((x.flip(0) * x).sum().item())
"""


def test_dump_programs_creates_its_directory(tmp_path):
    target = tmp_path / "new" / "dumps"
    result = run_python(DUMP_CODE, TORCH_TPU_DUMP_PROGRAMS=str(target), TORCH_TPU_CACHE_DIR="off")
    assert result.returncode == 0, result.stderr
    dumped = sorted(target.glob("program_*.mlir"))
    assert dumped and all("func.func public @main" in p.read_text() for p in dumped)


def test_dump_programs_that_cannot_be_written_warn_once(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    result = run_python(DUMP_CODE, TORCH_TPU_DUMP_PROGRAMS=str(blocker / "dumps"), TORCH_TPU_CACHE_DIR="off")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("TORCH_TPU_DUMP_PROGRAMS: cannot write") == 1, result.stderr


_MANY_PROGRAMS = """
import torch, torch_tpu
from torch_tpu import _C

def maps():
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)

hot = torch.ones(3, device="tpu")
expected = {}
start = maps()
for n in range(1, 97):
    x = torch.arange(float(n), device="tpu")
    expected[n] = (x * 2 + 1).sum().item()   # a program of its own per size
    assert torch.equal((hot + 1).cpu(), torch.full((3,), 2.0))  # run throughout: stays loaded
grown = maps() - start
m = torch_tpu.metrics()
# Programs dropped from memory run again, from the disk cache, with the same results.
for n in (1, 2, 3):
    assert (torch.arange(float(n), device="tpu") * 2 + 1).sum().item() == expected[n]
print(_C._compiled_program_count(), m.get("program_cache_evictions", 0), grown)
"""


def test_program_cache_unloads_the_least_recently_run_past_its_size(tmp_path):
    bounded = run_python(_MANY_PROGRAMS, TORCH_TPU_PROGRAM_CACHE_SIZE="16", TORCH_TPU_CACHE_DIR=str(tmp_path / "a"))
    assert bounded.returncode == 0, bounded.stderr[-2000:]
    loaded, evicted, bounded_maps = map(float, bounded.stdout.split())
    assert loaded <= 16 and evicted > 0
    unbounded = run_python(_MANY_PROGRAMS, TORCH_TPU_CACHE_DIR=str(tmp_path / "b"))
    assert unbounded.returncode == 0, unbounded.stderr[-2000:]
    loaded, evicted, unbounded_maps = map(float, unbounded.stdout.split())
    assert loaded > 96 and evicted == 0
    # Unloading a program gives its memory maps back (what bounds a long run's maps).
    assert bounded_maps < unbounded_maps / 2, (bounded_maps, unbounded_maps)


# The cache directory is a trust boundary: what is loaded from it runs as the user.

def test_disk_cache_directories_and_entries_are_private(tmp_path):
    cache = tmp_path / "made" / "here"
    run_cached(cache)
    assert stat.S_IMODE(os.stat(tmp_path / "made").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert entries(cache) and all(stat.S_IMODE(os.stat(p).st_mode) == 0o600 for p in entries(cache))


def test_disk_cache_entry_others_may_write_is_never_loaded(tmp_path):
    compiles, _, _ = run_cached(tmp_path)
    os.chmod(entries(tmp_path)[0], 0o666)
    compiles2, hits2, stderr = run_cached(tmp_path)
    assert compiles2 == 1 and hits2 == compiles - 1
    assert "is writable by other users; ignored and replaced, never loaded" in stderr
    assert run_cached(tmp_path)[:2] == (0, compiles)  # replaced by a private entry


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_disk_cache_entry_of_another_user_is_never_loaded(tmp_path):
    compiles, _, _ = run_cached(tmp_path)
    os.chown(entries(tmp_path)[0], 65534, 65534)
    compiles2, hits2, stderr = run_cached(tmp_path)
    assert compiles2 == 1 and hits2 == compiles - 1
    assert "is owned by another user" in stderr


def test_disk_cache_symlinked_entry_is_never_followed(tmp_path):
    compiles, _, _ = run_cached(tmp_path)
    victim = entries(tmp_path)[0]
    os.replace(victim, str(tmp_path / "elsewhere"))
    os.symlink(str(tmp_path / "elsewhere"), victim)
    compiles2, hits2, stderr = run_cached(tmp_path)
    assert compiles2 == 1 and hits2 == compiles - 1
    assert "symbolic link" in stderr
    assert not os.path.islink(victim)


def test_disk_cache_tampered_header_is_rejected_by_its_checksum(tmp_path):
    compiles, _, _ = run_cached(tmp_path)
    victim = entries(tmp_path)[0]
    data = bytearray(open(victim, "rb").read())
    data[data.index(b"\n") + 10] ^= 0x01  # a byte of the stored program key
    open(victim, "wb").write(bytes(data))
    compiles2, hits2, stderr = run_cached(tmp_path)
    assert compiles2 == 1 and hits2 == compiles - 1
    assert "truncated or corrupt" in stderr


def test_disk_cache_in_a_directory_others_may_write_is_not_used(tmp_path):
    compiles, _, _ = run_cached(tmp_path)
    os.chmod(tmp_path, 0o777)
    try:
        compiles2, hits2, stderr = run_cached(tmp_path)
    finally:
        os.chmod(tmp_path, 0o700)
    assert compiles2 == compiles and hits2 == 0
    assert "is writable by other users; the disk cache is not used" in stderr


def test_disk_cache_entry_of_an_older_format_is_replaced_quietly(tmp_path):
    compiles, _, _ = run_cached(tmp_path)
    with open(entries(tmp_path)[0], "wb") as f:
        f.write(b"TORCH_TPU_XLA_CACHE_V1\n" + b"\x00" * 64)
    compiles2, hits2, stderr = run_cached(tmp_path)
    assert compiles2 == 1 and hits2 == compiles - 1
    assert "compilation cache entry" not in stderr


def test_disk_cache_write_that_fails_midway_leaves_no_entry_and_the_program_runs(tmp_path):
    # A full disk, simulated by a file-size limit below an entry's size (SIGXFSZ ignored:
    # the write fails with EFBIG instead of killing the process).
    limited = ("import resource, signal\n"
               "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
               "resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))\n") + PROGRAM
    out = run_python(limited, TORCH_TPU_CACHE_DIR=str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[0] == EXPECTED
    assert "cannot write the compilation cache entry" in out.stderr and "File too large" in out.stderr
    assert not os.listdir(tmp_path)  # neither a partial entry nor a temporary file left behind
    compiles, hits, stderr = run_cached(tmp_path)  # the cache works again once there is room
    assert compiles > 0 and hits == 0 and "corrupt" not in stderr
    assert run_cached(tmp_path)[:2] == (0, compiles)


def test_disk_cache_directory_reached_through_a_symbolic_link_is_used(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    os.symlink(tmp_path / "real", tmp_path / "link")
    compiles, _, _ = run_cached(tmp_path / "link")
    assert compiles > 0 and len(entries(tmp_path / "real")) == compiles
    assert run_cached(tmp_path / "link")[:2] == (0, compiles)


@pytest.fixture
def read_only_mount(tmp_path):
    """A tmpfs at tmp_path/ro that remount() makes read-only (root only: mount(2)); unmounted after."""
    where = tmp_path / "ro"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a tmpfs needs root (the read-only cache is tested where it can be)")

    def remount():
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)

    yield where, remount
    subprocess.run(["umount", str(where)], check=False)


def test_disk_cache_on_a_read_only_file_system_is_read_and_the_program_runs(read_only_mount):
    where, remount = read_only_mount
    compiles, _, _ = run_cached(where / "cache")
    assert compiles > 0
    remount()
    assert run_cached(where / "cache")[:2] == (0, compiles)  # what is there is still loaded
    # A program not in it compiles, runs, and says once why it is not kept.
    out = run_python(PROGRAM.replace("sum(0)", "sum(1)"), TORCH_TPU_CACHE_DIR=str(where / "cache"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "Read-only file system" in out.stderr, out.stderr[-3000:]
    assert int(out.stdout.strip().splitlines()[1].split()[0]) > 0
