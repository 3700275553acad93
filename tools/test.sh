#!/usr/bin/env bash
# The test suite: lint, then pytest (unit, property-based, FUSE, loop devices, fio). CI runs this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/bootstrap.sh
.venv/bin/ruff check .
exec .venv/bin/pytest -q "$@"
