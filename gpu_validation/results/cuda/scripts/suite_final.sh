#!/usr/bin/env bash
# The last call of 2026-11-25 on the H200: the whole suite except the real-model tier on the
# tree of commit a95213f (the fixes of 6595241 and the fused Triton decode call in), with the
# gguf wheel carried this time (outputs/carry/wheels, from gpu_recipe.sh prepare) and no model
# fetched. Output: $OUT/pytest_cuda_full.log.
set -uo pipefail
python3 -m pip install -q --no-deps --no-index --target /tmp/gg outputs/carry/wheels/gguf-0.19.0-py3-none-any.whl
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > "$OUT/pip.log" 2>&1
export PYTHONPATH=/tmp/gg PYTHONUNBUFFERED=1
python3 -c "import gguf; print('gguf', gguf.__file__)"
s=$(date +%s)
timeout 480 python3 -m pytest -q -n 8 -m "not realmodel" -p no:cacheprovider -rfEs \
  > "$OUT/pytest_cuda_full.log" 2>&1
echo "pytest exit status $? after $(( $(date +%s) - s )) s"
tail -n 25 "$OUT/pytest_cuda_full.log"
