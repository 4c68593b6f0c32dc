#!/usr/bin/env bash
# Create .venv (once) and install the project with everything it needs, from this repo's own files.
# Idempotent: a second run only re-checks the editable install.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
py="${PYTHON:-python3.11}"
command -v "$py" >/dev/null 2>&1 || py=python3
if [ ! -x .venv/bin/python ]; then
    echo "[bootstrap] creating .venv with $($py --version)" >&2
    "$py" -m venv .venv
fi
stamp=.venv/.rdk-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    echo "[bootstrap] installing rdk-theory[all] (torch CPU build pinned in pyproject)" >&2
    .venv/bin/python -m pip install --quiet --upgrade pip
    # torch first, by exact pin: it resolves to the local CPU build instead of a CUDA one.
    .venv/bin/python -m pip install --quiet "torch==2.13.0"
    .venv/bin/python -m pip install --quiet -e ".[all]"
    touch "$stamp"
fi
