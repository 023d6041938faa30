#!/usr/bin/env bash
# One prepared run for a lent GPU machine (about 3-5 minutes; hard limits below keep it under 8):
#   1. the `cuda`-marked tests of the operator layer (Triton on CUDA against the composite
#      reference, float32, float64 and bfloat16 autocast),
#   2. the GPU benchmarks of scripts/gpu_check.py (JSON and a markdown table).
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
[ "$status" -eq 0 ] && [ "$bench" -eq 0 ]
