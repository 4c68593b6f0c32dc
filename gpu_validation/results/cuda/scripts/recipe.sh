#!/usr/bin/env bash
# Second call of the 2026-11-25 re-run on the H200, within 30 s of suite.sh: stash the last
# GGUF chunk and the gguf wheel, run the GPU recipe with the current code (its folder comes
# back as $OUT/recipe.tgz), then benchmarks/bench_gpu.py side by side with the floor (its
# bench_gpu.json was replaced by that of fused.sh, with the fused decode call).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHON=python3
gpu_validation/gpu_recipe.sh stash outputs/carry
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > "$OUT/pip.log" 2>&1 \
  || { echo "editable install failed"; cat "$OUT/pip.log"; }
start=$(date +%s)
DEVICE=cuda OUT=/tmp/recipe_out gpu_validation/gpu_recipe.sh run > "$OUT/recipe_stdout.log" 2>&1
echo "recipe exit status $? after $(( $(date +%s) - start )) s"
tail -n 30 "$OUT/recipe_stdout.log"
tar czf "$OUT/recipe.tgz" -C /tmp/recipe_out .
start=$(date +%s)
timeout 240 python3 benchmarks/bench_gpu.py --out "$OUT" > "$OUT/bench_stdout.log" 2>&1
echo "bench exit status $? after $(( $(date +%s) - start )) s"
tail -n 30 "$OUT/bench_stdout.log"
