#!/usr/bin/env bash
# The call that tested and timed the Triton engine of first-order RDK on the H200 (its settings
# chosen by triton_sweep.py): the CUDA tests of the torch and Triton engines, then
# benchmarks/bench_gpu.py. Outputs in $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH=.
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_core_triton.py \
  tests/test_core_torch.py tests/test_core_first_order.py tests/test_gpu_validation_carry.py \
  > "$OUT/pytest_cuda_triton.log" 2>&1
echo "pytest exit status $?"; tail -n 4 "$OUT/pytest_cuda_triton.log"
timeout 240 python3 benchmarks/bench_gpu.py --out "$OUT"
echo "bench exit status $?"
