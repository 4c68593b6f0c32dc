#!/usr/bin/env bash
# The second call of the GPU recipe (gpu_validation/README.md, "GPU recipe") as run on the H200
# for the re-run of results/cuda/ (first call: `gpu_recipe.sh stash outputs/carry` with chunk
# part000): stash the last chunk and the gguf wheel, run the recipe with the current code, then
# the whole test suite except the real-model tier (the Qwen models cannot be carried) with the
# project installed. Outputs: $OUT/recipe.tgz (the recipe's folder) and $OUT/pytest_cuda_full.log.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHON=python3
RESULTS=$OUT
gpu_validation/gpu_recipe.sh stash outputs/carry
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > "$RESULTS/pip.log" 2>&1 \
  || { echo "editable install failed"; cat "$RESULTS/pip.log"; }
start=$(date +%s)
DEVICE=cuda OUT=/tmp/recipe_out gpu_validation/gpu_recipe.sh run
echo "recipe exit status $? after $(( $(date +%s) - start )) s"
tar czf "$RESULTS/recipe.tgz" -C /tmp/recipe_out .
export RDK_THEORY_CACHE=/tmp/rdk-stash/cache PYTHONPATH=/tmp/rdk-stash/site
start=$(date +%s)
timeout 300 python3 -m pytest -q -n 8 -m "not realmodel" -p no:cacheprovider \
  > "$RESULTS/pytest_cuda_full.log" 2>&1
echo "pytest exit status $? after $(( $(date +%s) - start )) s"
tail -n 25 "$RESULTS/pytest_cuda_full.log"
