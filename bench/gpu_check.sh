#!/bin/bash
# One prepared run on the GPU box (torch 2.11 + XLA:GPU plugin): build against
# its torch, run the core tests on TORCH_TPU_PLUGIN=cuda, then the mode
# benchmark beside native CUDA eager. Results go to $OUT (or ./gpu_out).
# The PJRT header travels with the tree: TORCH_TPU_PJRT_INCLUDE names it.
set -u
OUT=${OUT:-$PWD/gpu_out}; mkdir -p "$OUT"
PY=${PY:-/opt/torch/.venv/bin/python}
export PYTHONUNBUFFERED=1 MAX_JOBS=16
export TORCH_TPU_PJRT_INCLUDE=${TORCH_TPU_PJRT_INCLUDE:-$PWD/.venv/lib/python3.11/site-packages/xla_plugins/xla_cpu_pjrt/include}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/gpu.txt" 2>&1
start=$(date +%s)
if ! $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1; then
  grep -E "error|Error" "$OUT/build.log" | head -40; exit 1
fi
echo "build: $(( $(date +%s) - start )) s"
export TORCH_TPU_PLUGIN=cuda PYTHONPATH=$PWD
$PY -c "import torch, torch_tpu; print(torch.__version__, torch_tpu.plugin_info()); x = torch.randn(3, device='tpu'); print((x * 2).cpu())" 2>&1 | tail -3
timeout ${TEST_TIMEOUT:-200} $PY -m pytest -q -p no:cacheprovider ${TESTS:-tests/test_device.py tests/test_fused.py tests/test_workloads.py} > "$OUT/tests.log" 2>&1
echo "tests rc=$?: $(tail -1 "$OUT/tests.log")"; grep -E "^FAILED|^ERROR" "$OUT/tests.log" | head -20
timeout ${BENCH_TIMEOUT:-300} $PY bench/modes.py --plugin cuda --workloads ${WORKLOADS:-gpt-tiny gpt-small} \
  --modes ${MODES:-cuda strict fused} --steps ${STEPS:-20} --out "$OUT/modes_cuda.json" --chart "$OUT/modes_cuda.png" \
  > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; tail -25 "$OUT/bench.log"
echo "total: $(( $(date +%s) - start )) s"
