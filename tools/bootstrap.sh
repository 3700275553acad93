#!/usr/bin/env bash
# Installs what traxfs needs on a fresh Debian machine, idempotently: the Debian packages (FUSE 3,
# its headers, pkg-config, fio, util-linux for wipefs, and a Java runtime for Spark when no java is on PATH) and a
# virtual environment in .venv with traxfs and its test tools.
# Sourced by tools/main.sh and tools/test.sh; safe to rerun (it skips what is already there).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

DEBS=(fuse3 libfuse3-dev pkg-config fio util-linux)
missing=()
for d in "${DEBS[@]}"; do
  dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q "install ok installed" || missing+=("$d")
done
# PySpark (tools/spark_job.py) starts a JVM: Spark 4 needs Java 17 or later. Any java already on
# PATH is used as it is; only a machine without one gets Debian's headless JRE.
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "bootstrap: installing Debian packages: ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "bootstrap: creating .venv" >&2
  python3 -m venv .venv
fi
stamp=.venv/.traxfs-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ setup.py -nt "$stamp" ] \
   || [ -n "$(find ext \( -name '*.pyx' -o -name '*.pxd' \) -newer "$stamp" 2>/dev/null)" ]; then
  echo "bootstrap: installing traxfs into .venv (log: .venv/install.log)" >&2
  if ! { .venv/bin/python -m pip install --disable-pip-version-check --upgrade pip setuptools wheel \
         && .venv/bin/python -m pip install --disable-pip-version-check -e '.[test]'; } > .venv/install.log 2>&1; then
    tail -40 .venv/install.log >&2
    echo "bootstrap: pip install failed (full log: .venv/install.log)" >&2
    exit 1
  fi
  .venv/bin/python -c 'import traxfs.volume.group, traxfs.ext.logbuffer, traxfs.ext.logwriter, traxfs.ext.logbuffer_drivers, pyfuse3' && touch "$stamp"
fi
# Byte-compile the package up front: where PYTHONDONTWRITEBYTECODE is set (this sandbox sets it),
# every `trax` process the tests start — mount daemons, fsck, the CLI — would otherwise compile
# the whole package again on import. Up-to-date files are skipped, so a rerun costs little.
.venv/bin/python -m compileall -q -j 0 __init__.py fs volume tools ext >/dev/null
