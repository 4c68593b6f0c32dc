#!/usr/bin/env bash
# The whole test suite, as CI runs it: bootstrap .venv from pyproject, then pytest with the
# derandomised Hypothesis profile. Extra arguments go to pytest (e.g. -k, -m "not realmodel").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh
export HYPOTHESIS_PROFILE="${HYPOTHESIS_PROFILE:-ci}"
export MPLBACKEND=Agg
set +e
.venv/bin/python -m pytest -q "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "error: pytest collected no tests" >&2
fi
exit "$rc"
