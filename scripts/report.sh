#!/usr/bin/env bash
# The main job: bootstrap .venv from pyproject, then `rdk-theory report` (real model pair when
# fetched with `rdk-theory models fetch`, else the synthetic Zipfian LM). Extra arguments go to
# the report command (see `.venv/bin/rdk-theory report --help`).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh
exec .venv/bin/rdk-theory report "$@"
