"""Table benchmark: LINEITEM ingested into a table and read back through its views, in one run.

``python -m traxfs.tools.bench_table [--workdir DIR] [--rows 500000] [--paths c,python] [--json FILE]``

The filesystem runs in this process on an engine over a sparse image file in ``--workdir`` (the
mount's code path minus FUSE: the calls the FUSE adapter makes, ``FileSystem.create_file`` /
``write`` / ``flush`` on ``/tables``), so the numbers are the table code's, not the kernel's.

* **ingest**: one CSV file of ``--rows`` LINEITEM rows (``tools/atropos/lineitem.py``: the dbgen
  columns and distributions) written into ``ingest/`` and closed: rows/s of the close (parse,
  check, PAX encode, raw writes, one durable commit) against the target of 100,000 rows/s, and
  the parse alone, and the parse alone of the same rows as JSON lines (the table's
  ``rows.jsonl``); once per path (``--paths``): ``c`` parses and encodes in ``ext/csvcolumns``,
  ``python`` in the reference Python code, each on a fresh filesystem;
* **scans**: ``rows.csv`` (all 16 columns, the baseline) beside the projections TPC-H Q1 (7
  columns) and Q6 (4 columns) need, read whole in 1 MiB reads: bytes read from the volume
  (minipages), bytes served, wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from ..fs.filesystem import FileSystem
from ..fs.limits import ROOT_INO
from ..fs.tables import ingest as ingest_mod
from ..fs.tables import pax
from ..fs.tables.ingest import parse_csv, parse_jsonl
from ..volume.device import create_image
from .atropos.lineitem import ATTRIBUTES, QUERY_ATTRIBUTES, rows

TARGET = 100_000  # rows/s, the ingest target
TYPES = ("int64", "int64", "int64", "int32", "decimal(15,2)", "decimal(15,2)", "decimal(15,2)", "decimal(15,2)",
         "string", "string", "date", "date", "date", "string", "string", "string")
SCHEMA = ", ".join(f"{a} {t}" for a, t in zip(ATTRIBUTES, TYPES, strict=True))


def _cents(v: int) -> str:
    return f"{v // 100}.{v % 100:02d}"


def lineitem_csv(count: int) -> bytes:
    """``count`` LINEITEM rows as CSV with a header row."""
    import datetime as dt

    epoch = dt.date(1970, 1, 1)
    days: dict[int, str] = {}

    def date(d: int) -> str:
        s = days.get(d)
        if s is None:
            s = days[d] = (epoch + dt.timedelta(days=d)).isoformat()
        return s

    out = [",".join(ATTRIBUTES)]
    for r in rows(count):
        v = r.values
        out.append(",".join((str(v[0]), str(v[1]), str(v[2]), str(v[3]), f"{v[4]}.00", _cents(v[5]),
                             f"0.{v[6]:02d}", f"0.{v[7]:02d}", v[8], v[9], date(v[10]), date(v[11]), date(v[12]),
                             v[13], v[14], v[15])))
    return ("\n".join(out) + "\n").encode()


def _lookup(fs: FileSystem, path: str) -> int:
    ino = ROOT_INO
    for part in path.strip("/").split("/"):
        ino = fs.lookup(ino, part.encode()).ino
    return ino


def _read_all(fs: FileSystem, path: str) -> tuple[int, float]:
    h = fs.open_file(_lookup(fs, path), os.O_RDONLY)
    t0 = time.perf_counter()
    n, off = 0, 0
    while True:
        b = h.read(off, 1 << 20)
        if not b:
            break
        n += len(b)
        off += len(b)
    dt = time.perf_counter() - t0
    h.release()
    return n, dt


def run(workdir: Path, count: int, path: str = "c") -> dict:
    """One ingest and the scans, with the C (``c``) or the Python (``python``) parse and encode."""
    ingest_mod.FAST = pax.FAST = path == "c"
    try:
        return _run(workdir, count)
    finally:
        ingest_mod.FAST = pax.FAST = True


def _run(workdir: Path, count: int) -> dict:
    image = workdir / "table.img"
    dev = create_image(str(image), max(1 << 30, count * 600))
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    try:
        top = _lookup(fs, "tables")
        t = fs.mkdir(top, b"lineitem", 0o755, 0, 0)
        schema = fs.open_file(_lookup(fs, "tables/lineitem/schema"), os.O_WRONLY)
        schema.write(0, SCHEMA.encode() + b"\n")
        schema.flush()
        schema.release()
        data = lineitem_csv(count)
        from ..fs.tables.schema import parse_schema

        t0 = time.perf_counter()
        parse_csv(parse_schema(SCHEMA), data)
        parse_s = time.perf_counter() - t0
        ingest = fs.lookup(t.ino, b"ingest").ino
        _, h = fs.create_file(ingest, b"lineitem.csv", stat.S_IFREG | 0o644, os.O_WRONLY)
        for off in range(0, len(data), 1 << 20):
            h.write(off, data[off : off + (1 << 20)])
        t0 = time.perf_counter()
        h.flush()
        ingest_s = time.perf_counter() - t0
        h.release()
        store = fs._root_names[b"tables"].store
        table = store.get(b"lineitem")
        assert table.rec.rows == count, table.rec
        report = {"rows": count, "csv_bytes": len(data), "ingest_s": ingest_s, "ingest_rows_per_s": count / ingest_s,
                  "parse_only_rows_per_s": count / parse_s, "target_rows_per_s": TARGET,
                  "pax_pages": table.rec.npages, "engine_pages": table.rec.engine_pages, "scans": {}}
        views = {"rows.csv (16 columns)": "rows.csv"}
        for q, cols in QUERY_ATTRIBUTES.items():
            views[f"{q} projection ({len(cols)} columns)"] = "columns/" + ",".join(cols) + ".csv"
        for label, rel in views.items():
            before = store.bytes_read
            served, secs = _read_all(fs, f"tables/lineitem/{rel}")
            report["scans"][label] = {"volume_bytes": store.bytes_read - before, "served_bytes": served,
                                      "wall_s": secs}
        jsonl = _read_bytes(fs, "tables/lineitem/rows.jsonl")  # the same rows as JSON lines
        t0 = time.perf_counter()
        parsed = parse_jsonl(parse_schema(SCHEMA), jsonl)
        report["jsonl_parse_only_rows_per_s"] = count / (time.perf_counter() - t0)
        assert len(parsed[0]) == count
        return report
    finally:
        fs.close()
        dev.close()


def _read_bytes(fs: FileSystem, path: str) -> bytes:
    h = fs.open_file(_lookup(fs, path), os.O_RDONLY)
    parts, off = [], 0
    while b := h.read(off, 1 << 20):
        parts.append(b)
        off += len(b)
    h.release()
    return b"".join(parts)


def text(r: dict) -> str:
    lines = [f"path: {r['path']}", f"LINEITEM, {r['rows']:,} rows, {r['csv_bytes']:,} bytes of CSV -> {r['pax_pages']} PAX pages "
             f"({r['engine_pages']:,} engine pages)",
             f"ingest (one CSV file, close to commit): {r['ingest_rows_per_s']:,.0f} rows/s  "
             f"(target {r['target_rows_per_s']:,}; parse alone {r['parse_only_rows_per_s']:,.0f} rows/s)",
             f"JSON lines of the same rows (rows.jsonl), parse alone: {r['jsonl_parse_only_rows_per_s']:,.0f} rows/s",
             f"{'view':<32} {'volume bytes':>14} {'served bytes':>14} {'wall s':>8}"]
    base = r["scans"]["rows.csv (16 columns)"]["volume_bytes"]
    for label, s in r["scans"].items():
        lines.append(f"{label:<32} {s['volume_bytes']:>14,} {s['served_bytes']:>14,} {s['wall_s']:>8.2f}"
                     f"   ({s['volume_bytes'] / base:.2f} of rows.csv)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="bench_table", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, help="folder for the image (default: a temporary folder, removed)")
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--paths", default="c,python", help="parse+encode paths to run, in order: c, python")
    ap.add_argument("--json", type=Path, help="also write the report here")
    a = ap.parse_args()
    own = a.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="bench_table.")) if own else a.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    reports = []
    try:
        for path in a.paths.split(","):
            if path not in ("c", "python"):
                raise SystemExit(f"bench_table: unknown path {path!r} (c, python)")
            reports.append(dict(run(workdir, a.rows, path), path=path))
            (workdir / "table.img").unlink(missing_ok=True)
            print(text(reports[-1]), flush=True)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            (workdir / "table.img").unlink(missing_ok=True)
    if a.json:
        a.json.write_text(json.dumps(reports, indent=2))


if __name__ == "__main__":
    main()
