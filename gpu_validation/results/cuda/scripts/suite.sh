#!/usr/bin/env bash
# First call of the 2026-11-25 re-run on the H200 (gpu_validation/README.md, "GPU recipe"):
# stash the first GGUF chunk for the second call (recipe.sh), install the project editable and
# run the whole suite except the real-model tier (the Qwen models cannot be carried) on that
# machine's 16 cores. Outputs in $OUT: pytest_cuda_full.log (committed as
# pytest_cuda_full_first_call.log: suite_final.sh ran the suite again after the fixes), device.txt,
# versions.txt.
set -uo pipefail
export PYTHONUNBUFFERED=1
gpu_validation/gpu_recipe.sh stash outputs/carry
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > "$OUT/pip.log" 2>&1 \
  || { echo "editable install failed"; cat "$OUT/pip.log"; }
nvidia-smi -L > "$OUT/device.txt" 2>&1
python3 -c "import torch, triton, numpy, scipy, numba; print('torch', torch.__version__, 'triton',
triton.__version__, 'numpy', numpy.__version__, 'scipy', scipy.__version__, 'numba',
numba.__version__)" > "$OUT/versions.txt" 2>&1
cat "$OUT/device.txt" "$OUT/versions.txt"
start=$(date +%s)
timeout 450 python3 -m pytest -q -n 8 -m "not realmodel" -p no:cacheprovider -rfEs \
  > "$OUT/pytest_cuda_full.log" 2>&1
echo "pytest exit status $? after $(( $(date +%s) - start )) s"
tail -n 40 "$OUT/pytest_cuda_full.log"
