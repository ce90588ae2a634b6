#!/bin/bash
# One prepared run on an NVIDIA box with torch (CUDA) and the XLA:GPU PJRT plugin
# (jax-cuda13-pjrt): the extension, a smoke test, the mode benchmark beside
# native CUDA eager, then as many of the core tests as the time left allows.
# Everything lands in $OUT (default ./gpu_out): run.log, build.log (if built),
# host_overhead_<workload>.json, modes_<workload>.json, tests.log.
#
#   bash bench/gpu_check.sh                 # TIME_LIMIT=480 seconds in all
#
# The extension: a module prebuilt elsewhere for this box's torch and Python may be
# handed in as PREBUILT=path/_C.cpython-*.so (building here costs minutes of device
# time); it is used if it imports, else the tree is built here with MAX_JOBS jobs.
# The PJRT header travels with the tree: TORCH_TPU_PJRT_INCLUDE (the device tool copies
# no ignored path unless asked: carry .venv/lib/python3.11/site-packages/xla_plugins/xla_cpu_pjrt/include).
# A fresh machine built all of csrc with 16 jobs in about 50 s (2026-12-04); the machine keeps
# build/temp while it stays warm, so a rerun there compiles only what changed.
set -u
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
PY=${PY:-python3}
LIMIT=${TIME_LIMIT:-480}
PLUGIN=${PLUGIN:-cuda}  # cpu here, for a dry run of this script
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-16}
export TORCH_TPU_PJRT_INCLUDE=${TORCH_TPU_PJRT_INCLUDE:-$PWD/.venv/lib/python3.11/site-packages/xla_plugins/xla_cpu_pjrt/include}
start=$(date +%s)
# The checkout runs from PYTHONPATH; a dist-info beside it carries the entry points of
# pyproject.toml, so torch's backend autoload finds torch_tpu as if installed.
site=$(mktemp -d); trap 'rm -rf "$site"' EXIT
$PY - "$site" <<'EOF' || exit 1
import os, sys, tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
info = os.path.join(sys.argv[1], "%s-%s.dist-info" % (project["name"], project["version"]))
os.mkdir(info)
with open(os.path.join(info, "METADATA"), "w") as f:
    f.write("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (project["name"], project["version"]))
with open(os.path.join(info, "entry_points.txt"), "w") as f:
    for group, points in project["entry-points"].items():
        f.write("[%s]\n%s\n" % (group, "".join("%s = %s\n" % item for item in points.items())))
EOF
export PYTHONPATH=$PWD:$site TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-1}
elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( LIMIT - $(elapsed) )); }
log() { echo "[$(elapsed) s] $*" | tee -a "$OUT/run.log"; }

if [ -n "${PREBUILT:-}" ] && [ -f "$PREBUILT" ]; then
  cp "$PREBUILT" torch_tpu/ && log "using the prebuilt module $(basename "$PREBUILT")"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee -a "$OUT/run.log"
TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -c "
import sys, torch, importlib.metadata as m
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return 'absent'
print(sys.version.split()[0], 'torch', torch.__version__, 'jax-cuda13-pjrt', version('jax-cuda13-pjrt'))" 2>&1 \
  | tail -1 | tee -a "$OUT/run.log"

smoke() {
  TORCH_TPU_PLUGIN=$PLUGIN timeout 120 $PY - <<'EOF' 2>&1 | tail -6 | tee -a "$OUT/run.log"
import torch, torch_tpu
print("plugin:", torch_tpu.plugin_info())
x = torch.randn(64, 32)
w = torch.randn(32, 16, requires_grad=True)
wt = w.detach().to("tpu").requires_grad_()
y = (x.to("tpu") @ wt).relu().sum()
y.backward()
(x @ w).relu().sum().backward()
torch.testing.assert_close(y.cpu(), (x @ w).relu().sum(), rtol=1e-3, atol=1e-3)
torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=1e-3, atol=1e-3)
print("smoke ok: matmul/relu/sum forward and backward match CPU")
EOF
  return ${PIPESTATUS[0]}
}

# Build only when there is no module that imports: a failing smoke test is reported, not rebuilt.
if ! TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY -c "import torch_tpu._C" > "$OUT/import.log" 2>&1; then
  tail -3 "$OUT/import.log" | tee -a "$OUT/run.log"
  log "building here with $MAX_JOBS jobs"
  rm -f torch_tpu/_C*.so
  if ! TORCH_DEVICE_BACKEND_AUTOLOAD=0 $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
    grep -E "error|Error" "$OUT/build.log" | head -40; log "build failed"; exit 1
  fi
  log "built"
fi
smoke || { log "smoke test failed"; exit 1; }
log "smoke test passed"

# Host cost of compute-free steps (bench/host_overhead.py) beside CUDA eager, CPU eager,
# inductor and JAX on this GPU, in one process per workload: host_overhead_<workload>.json.
for workload in ${HOST_WORKLOADS-gpt-nano decode}; do
  budget=$(( $(left) - ${BENCH_RESERVE:-200} ))
  if [ "$budget" -lt 30 ]; then log "no time left for host overhead $workload"; break; fi
  log "host overhead $workload (at most $budget s)"
  TORCH_TPU_PLUGIN=$PLUGIN timeout "$budget" $PY bench/host_overhead.py --workloads "$workload" \
    --out "$OUT/host_overhead_$workload.json" --chart "$OUT/host_overhead_$workload.png" 2>&1 \
    | tee -a "$OUT/run.log" | tail -6
  log "host overhead $workload exit status ${PIPESTATUS[0]}"
done

# The benchmark: one JSON per workload, rewritten after each mode, so a run cut short keeps
# what finished. Strict goes last: XLA:GPU compiles its ~70 per-op programs slowest.
# jax: the whole step in JAX on JAX's own CUDA client (the XLA reference).
for workload in ${WORKLOADS:-gpt-tiny gpt-small}; do
  budget=$(( $(left) - ${TEST_RESERVE:-60} ))
  if [ "$budget" -lt 30 ]; then log "no time left for $workload"; break; fi
  log "bench $workload (at most $budget s)"
  timeout "$budget" $PY bench/modes.py --plugin "$PLUGIN" --workloads "$workload" \
    --modes ${MODES:-cpu cuda fused compiled jax strict} --steps ${STEPS:-30} --child-timeout $(( budget < ${CHILD_TIMEOUT:-180} ? budget : ${CHILD_TIMEOUT:-180} )) \
    --out "$OUT/modes_$workload.json" --chart "" 2>&1 | tee -a "$OUT/run.log" | grep -v "^\[" | tail -12
  log "bench $workload exit status ${PIPESTATUS[0]} (124: its time ran out; finished modes are in the JSON)"
done

budget=$(( $(left) - 5 ))
if [ "$budget" -ge 20 ]; then
  log "tests (at most $budget s)"
  # -v: a line per test as it ends; SIGINT at the limit still prints pytest's summary.
  TORCH_TPU_PLUGIN=$PLUGIN timeout -s INT -k 10 "$budget" $PY -m pytest -v -rfE -p no:cacheprovider -o addopts="" \
    ${TESTS:-tests/test_device.py tests/test_fused.py tests/test_workloads.py tests/test_compile.py tests/test_training.py tests/test_ops.py} \
    > "$OUT/tests.log" 2>&1
  log "tests rc=$?: $(tail -1 "$OUT/tests.log")"
  grep -E "^(FAILED|ERROR) " "$OUT/tests.log" | head -40 | tee -a "$OUT/run.log"
fi
log "done"
