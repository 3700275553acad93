#!/usr/bin/env bash
# The main job on the embedded default: image files under ./work, a volume group, a traxtent volume,
# mkfs, mount, fio and a PySpark job (Parquet + CSV, overwrite, a retried task) through the mount,
# unmount, fsck, and a report. See trax-demo(1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/bootstrap.sh
exec .venv/bin/trax demo --workdir "${TRAX_WORKDIR:-work}" "$@"
