#!/usr/bin/env bash
# The GPU recipe of gpu_validation/README.md, for a machine with torch and transformers but no
# network, no `gguf` package, and at most 64 MiB of files per call.
#
#   here:   gpu_validation/gpu_recipe.sh prepare          # chunks + wheels into outputs/carry
#   there:  gpu_validation/gpu_recipe.sh stash FILE...    # once per call: keep the carried files
#   there:  gpu_validation/gpu_recipe.sh run [ARGS...]    # join, install, validate into $OUT
#
# prepare  splits the verified SmolLM2-135M GGUF of the model cache into chunks of at most
#          CHUNK_MIB (default 60) MiB with a SHA-256 manifest (python -m gpu_validation.carry),
#          copies the gguf wheel (and the scipy wheel for Python 3.12 when WITH_SCIPY=1) into
#          outputs/carry/wheels, and prints which paths each call must carry.
# stash    copies carried files into $RDK_STASH (default /tmp/rdk-stash): chunks and
#          manifest.json into chunks/, *.whl into wheels/. That folder survives between calls
#          only while the machine stays warm.
# run      joins the chunks into $RDK_THEORY_CACHE (default $RDK_STASH/cache) and checks the
#          SHA-256 against the registry pin (wrong hash: error, file removed); installs any
#          wheel whose module is missing with `pip install --no-deps --no-index --target`
#          into $RDK_STASH/site (FORCE_WHEELS=1: every stashed wheel); then runs
#            python -m gpu_validation run --device $DEVICE --target smollm2-135m
#                --drafter truncated:24:smollm2-135m --kept $KEPT --out $OUT ARGS...
#          (timing sweep included unless ARGS say --no-timing) and writes run.log,
#          versions.txt and device.txt next to report.json in $OUT.
#
# Environment: PYTHON (default python), DEVICE (cuda), OUT (outputs/gpu-recipe),
# KEPT (16384,4096,1024), RDK_STASH, RDK_THEORY_CACHE, CHUNK_MIB, WITH_SCIPY, FORCE_WHEELS.
set -euo pipefail

PY=${PYTHON:-python}
STASH=${RDK_STASH:-/tmp/rdk-stash}
MODEL=smollm2-135m
CARRY=outputs/carry

die() { echo "gpu_recipe: error: $*" >&2; exit 2; }
registry() {  # registry FIELD: a field of the built-in SmolLM2 entry
  "$PY" -c "from gpu_validation.registry import REGISTRY; print(REGISTRY['$MODEL'].$1)"
}

cmd_prepare() {
  local src
  src="$("$PY" -c "from gpu_validation import models; print(models.cache_dir())")/$(registry gguf_name)"
  [ -f "$src" ] || die "$src not found: run 'rdk-theory models fetch $MODEL' first"
  rm -rf "$CARRY"
  "$PY" -m gpu_validation.carry split "$src" "$CARRY/chunks" --chunk-mib "${CHUNK_MIB:-60}"
  mkdir -p "$CARRY/wheels"
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: -d "$CARRY/wheels" gguf==0.19.0
  if [ "${WITH_SCIPY:-0}" = 1 ]; then
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
      --platform manylinux2014_x86_64 -d "$CARRY/wheels" scipy
  fi
  echo "carry, one call each (each under 64 MiB); 'stash' the carried paths in every call:"
  local n=0 part
  for part in "$CARRY"/chunks/*.part*; do
    n=$((n + 1))
    echo "  call $n: $CARRY/chunks/manifest.json $part"
  done
  echo "  and in the last call also: $(ls "$CARRY"/wheels/*.whl | tr '\n' ' ')"
  du -sh "$CARRY"/chunks/* "$CARRY"/wheels/* | sed 's/^/    /'
}

cmd_stash() {
  [ $# -gt 0 ] || die "stash needs the carried files or folders"
  mkdir -p "$STASH/chunks" "$STASH/wheels"
  local f
  for f in $(find "$@" -type f); do
    case "$f" in
      *.whl) cp "$f" "$STASH/wheels/" ;;
      *) cp "$f" "$STASH/chunks/" ;;
    esac
  done
  echo "stash $STASH: $(ls "$STASH/chunks" | wc -l) chunk file(s), $(ls "$STASH/wheels" | wc -l) wheel(s)"
}

need_module() {  # need_module MODULE WHEEL_PREFIX: import it, installing a stashed wheel if needed
  local whl
  whl=$(ls "$STASH"/wheels/"$2"-*.whl 2>/dev/null | head -n 1 || true)
  if "$PY" -c "import $1" 2>/dev/null && { [ "${FORCE_WHEELS:-0}" != 1 ] || [ -z "$whl" ]; }; then
    return 0
  fi
  [ -n "$whl" ] || die "python module '$1' is missing and no $2 wheel is stashed: carry one"
  "$PY" -m pip install --quiet --no-deps --no-index --disable-pip-version-check \
    --target "$STASH/site" "$whl"
  "$PY" -c "import $1" || die "installed $whl but cannot import $1"
  echo "installed $(basename "$whl") into $STASH/site"
}

cmd_run() {
  export RDK_THEORY_CACHE=${RDK_THEORY_CACHE:-$STASH/cache}
  OUT=${OUT:-outputs/gpu-recipe}
  mkdir -p "$OUT"
  local gguf
  gguf="$RDK_THEORY_CACHE/$(registry gguf_name)"
  if [ ! -f "$gguf" ]; then
    "$PY" -m gpu_validation.carry join "$STASH/chunks" "$gguf" --sha256 "$(registry sha256)"
  fi
  export PYTHONPATH="$STASH/site${PYTHONPATH:+:$PYTHONPATH}"
  need_module gguf gguf
  need_module scipy scipy
  "$PY" - > "$OUT/versions.txt" <<'EOF'
import importlib, platform, sys
from importlib import metadata
print("python", sys.version.split()[0], platform.platform())
for m in ("torch", "transformers", "gguf", "numpy", "scipy", "accelerate", "matplotlib"):
    try:
        mod = importlib.import_module(m)
        print(m, getattr(mod, "__version__", None) or metadata.version(m), mod.__file__)
    except ImportError:
        print(m, "missing")
EOF
  { nvidia-smi -L 2>/dev/null || echo "no nvidia-smi (device ${DEVICE:-cuda})"; } > "$OUT/device.txt"
  set +e
  "$PY" -m gpu_validation run --device "${DEVICE:-cuda}" --target "$MODEL" \
    --drafter "truncated:24:$MODEL" --kept "${KEPT:-16384,4096,1024}" --out "$OUT" "$@" \
    2>&1 | tee "$OUT/run.log"
  local rc=${PIPESTATUS[0]}
  set -e
  echo "gpu_recipe: validation exit status $rc; outputs in $OUT"
  return "$rc"
}

case "${1:-}" in
  prepare) shift; cmd_prepare "$@" ;;
  stash) shift; cmd_stash "$@" ;;
  run) shift; cmd_run "$@" ;;
  *) sed -n '2,30p' "$0"; exit 2 ;;
esac
