#!/usr/bin/env bash
# The last Triton call of 2026-11-25 (after the second reading: the scaled pass, the range and
# subclass routing, the gathered factor's lifetime): the CUDA tests of the Triton, torch,
# first-order and device files, then benchmarks/bench_gpu.py. Outputs in $OUT (committed as
# pytest_cuda_triton_final_first.log, whose one failure was the tiny-mass test's reference, and
# bench_gpu_final.json). After that test was mended, `python3 -m pytest -q tests/test_core_triton.py`
# alone ran once more: pytest_cuda_triton_final.log.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
timeout 300 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_core_triton.py \
  tests/test_core_torch.py tests/test_core_first_order.py tests/test_core_device.py \
  > "$OUT/pytest_cuda_triton_final.log" 2>&1
echo "pytest exit status $?"; tail -n 30 "$OUT/pytest_cuda_triton_final.log"
timeout 200 python3 benchmarks/bench_gpu.py --out "$OUT"
echo "bench exit status $?"
