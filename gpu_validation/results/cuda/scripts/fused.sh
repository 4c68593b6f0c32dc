#!/usr/bin/env bash
# The call that tested and timed the Triton engine with TLI's scatter fused into its passes
# (2026-11-25): the CUDA tests of the Triton, torch and first-order paths, then
# benchmarks/bench_gpu.py (fused and unfused decode calls side by side). Outputs in $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_core_triton.py \
  tests/test_core_torch.py tests/test_core_first_order.py tests/test_core_device.py \
  > "$OUT/pytest_cuda_fused.log" 2>&1
echo "pytest exit status $?"; tail -n 30 "$OUT/pytest_cuda_fused.log"
timeout 240 python3 benchmarks/bench_gpu.py --out "$OUT"
echo "bench exit status $?"
