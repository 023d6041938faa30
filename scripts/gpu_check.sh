#!/usr/bin/env bash
# One prepared run for a lent GPU machine (about 3-5 minutes; hard limits below keep it under 8):
#   1. the `cuda`-marked tests of the operator layer (Triton on CUDA against the composite
#      reference, float32, float64 and bfloat16 autocast),
#   2. the GPU benchmarks of scripts/gpu_check.py (JSON and a markdown table),
#   3. the QM9 training throughput (pyg-lie bench qm9 on CUDA: LieTransformer presets, SchNet,
#      DimeNet++) on a processed QM9 subset carried to the machine: build it here with
#        python -c "from pyg_lie.datasets import QM9; QM9('data/QM9gpu', max_molecules=2000)"
#      and name data/QM9gpu in the device tool's carry (about 4 MB; the machine has no RDKit or
#      qm9pack, and the processed file loads without them). Skipped when absent.
# Runs from the source tree (PYTHONPATH=.); everything it writes goes to $OUT (default
# ./gpu_check_out). Extra test paths: GPU_CHECK_TESTS="tests/ops tests/nn/test_x.py".
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
{
  date -u +%FT%TZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  "$PY" -c "import sys, torch, triton; print(sys.version.split()[0], torch.__version__, triton.__version__, torch.cuda.is_available())"
} > "$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"

status=0
# shellcheck disable=SC2086
timeout 200 "$PY" -m pytest -q -m cuda -p no:cacheprovider ${GPU_CHECK_TESTS:-tests/ops tests/nn tests/models} \
  > "$OUT/pytest_cuda.txt" 2>&1 || status=$?
tail -n 25 "$OUT/pytest_cuda.txt"
echo "pytest -m cuda exit status: $status"

timeout 240 "$PY" scripts/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_check.log"
bench=${PIPESTATUS[0]}
echo "gpu_check.py exit status: $bench"

qm9=0
QM9_ROOT="${QM9_GPU_ROOT:-data/QM9gpu}"
if ls "$QM9_ROOT"/processed/qm9pack_first2000_v*.pt >/dev/null 2>&1; then
  timeout 180 "$PY" -m pyg_lie bench qm9 --device cuda --root "$QM9_ROOT" --max-molecules 2000 \
    --batch-size 75 --batches 3 --rounds 3 --sensitivity-molecules 0 \
    --models lie-T3:cpu lie-SE3:cpu:haar lie-SE3:cpu:finite lie-T3:paper lie-SE3:paper:haar schnet dimenet++ \
    --out "$OUT/bench_qm9_cuda.json" 2>&1 | tee "$OUT/bench_qm9_cuda.log"
  qm9=${PIPESTATUS[0]}
  echo "bench qm9 (cuda) exit status: $qm9"
else
  echo "bench qm9 skipped: no processed QM9 subset in $QM9_ROOT (see the header of this script)"
fi
[ "$status" -eq 0 ] && [ "$bench" -eq 0 ] && [ "$qm9" -eq 0 ]
