"""Table benchmark on simulated disks: LINEITEM in PAX pages on a quadrangle volume, in one run.

``python -m traxfs.tools.bench_table_quad [--rows 60000] [--fetches 200] [--json FILE]``

Four simulated Maxtor Atlas 10K III disks (the model of ``volume/disk/profiles.py``, fewer
cylinders so the sparse images stay small) carry a quadrangle volume (b = 8 sectors, d = 4, the
default); the filesystem and its table store run in this process on it, and every number below
is **simulated disk time** (the volume's clock), not wall time:

* **ingest**: rows/s (wall time) of parsing the CSV and appending it in one batch, and the
  simulated disk time of its writes;
* **scans**: ``rows.csv`` (16 columns, the baseline) beside the projections TPC-H Q1 (7 columns)
  and Q6 (4 columns) need — simulated ms and bytes read from the disks;
* **row fetches**: ``--fetches`` random rows, each read as the store reads a row for a lookup by
  key (its page's minipages in one batch: one semi-sequential batch per disk) beside the same
  minipages read one after another, and beside one contiguous read of as many bytes (what a
  packed page on a flat layout would cost; the paper's "contiguous") — simulated ms per fetch.

* **baselines**: the same scans on the Atropos model's NSM, DSM and AtroposDB page stores
  (``tools/atropos/pagestores.py``: 16 × 8-byte attributes in 8 KB pages) of as many rows on
  the same disks — NSM reads every column whatever the projection.

The paper's values are printed beside ours; its record fetch reads one 8 KB page (one block per
minipage), ours reads whole minipages (see BENCHMARKS.md).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import tempfile
import time
from pathlib import Path

from ..fs.engine.page import PAGE_SIZE
from ..fs.filesystem import FileSystem
from ..fs.tables.ingest import parse_csv
from ..fs.tables.render import ViewReader
from ..fs.tables.schema import parse_schema
from ..fs.tables.store import TableStore
from ..volume.disk.profiles import atlas10k3, scaled
from ..volume.group import VolumeGroup
from ..volume.registry import Registry
from ..volume.scan import pv_create
from .atropos.lineitem import QUERY_ATTRIBUTES
from .atropos.shore import scan_ms
from .bench_table import SCHEMA, lineitem_csv

DISKS = 4
MODEL = ("NSM", "DSM", "AtroposDB d=4")  # the model's stores shown beside ours
PAPER_SCANS = {"Q1": "DSM ~ PAX; NSM worse, up to 4x", "Q6": "DSM ~ PAX; NSM up to 4x"}  # Fig. 11
PAPER = {"record fetch vs contiguous, d=4": "1.38x (Fig. 8 text) / 1.44x (issue 15)", "DSM / quadrangle-PAX scan": "about 1.0",
         "NSM scan vs quadrangle-PAX (1 column)": "several times slower"}


def _disk_ms(olv) -> float:
    return olv.clock.now


def _model(spec, rows: int, attrs: tuple[int, ...]) -> dict[str, float]:
    """Simulated ms of the same scan on the Atropos model's page stores (``tools/atropos``:
    16 × 8-byte attributes, 8 KB pages) of as many rows on the same disks: NSM and DSM on a
    traxtent volume, AtroposDB (PAX, d = 4) on a quadrangle one."""
    ms = scan_ms(spec, rows, attrs, DISKS)
    return {k: ms[k] for k in MODEL}


def run(workdir: Path, count: int, fetches: int, seed: int = 1) -> dict:
    registry = Registry(home=workdir / "home")
    spec = scaled(atlas10k3(), 150, zones=1)
    paths = []
    for k in range(DISKS):
        paths.append(str(workdir / f"disk{k}.img"))
        pv_create(registry, paths[-1], model=spec)
    VolumeGroup.create(registry, "bq", paths, extent_size=1 << 20)
    with VolumeGroup.open(registry, "bq") as vg:
        lv = vg.create_lv("q", 560 << 20, "quadrangle")
        olv = vg.open_lv("q")
        disks = [vg.devices[pv] for pv in lv.pvs()]
        FileSystem.mkfs(olv)
        fs = FileSystem.open(olv)
        store = TableStore(fs.e)
        try:
            schema = parse_schema(SCHEMA)
            table = store.create(b"lineitem", SCHEMA)
            data = lineitem_csv(count)
            t0, w0 = time.perf_counter(), _disk_ms(olv)
            store.append(table, parse_csv(schema, data))
            ingest_s, ingest_ms = time.perf_counter() - t0, _disk_ms(olv) - w0
            report = {"rows": count, "ingest_rows_per_s": count / ingest_s, "ingest_disk_ms": ingest_ms,
                      "pax_pages": table.rec.npages, "placement": store.placement(),
                      "quadrangle": {"block": lv.quadrangle.block, "depth": lv.quadrangle.depth,
                                                     "width": lv.quadrangle.width}, "disks": DISKS, "scans": {}, "fetches": {}}
            names = [c.name for c in schema.columns]
            views = {"rows.csv (16 columns)": list(range(len(names)))}
            for q, cols in QUERY_ATTRIBUTES.items():
                views[f"{q} projection ({len(cols)} columns)"] = [names.index(c) for c in cols]
            for label, cols in views.items():
                t0, b0 = _disk_ms(olv), sum(d.stats.read_bytes for d in disks)
                reader = ViewReader(store, table, table.snapshot(), cols, "csv", label)
                reader.read(0, reader.size)
                report["scans"][label] = {"disk_ms": _disk_ms(olv) - t0,
                                          "volume_bytes": sum(d.stats.read_bytes for d in disks) - b0}
            report["model_scans"] = {label: _model(spec, count, tuple(cols)) for label, cols in views.items()}
            rng = random.Random(seed)
            picks = [(rng.randrange(len(table.pages)), rng.randrange(1 << 30)) for _ in range(fetches)]
            ways = {"batch (the store's row read)": lambda e, r: store.row(table, e, r, "bench"),
                    "one minipage after another (baseline)":
                        lambda e, r: [store.column(table, e, c, "bench")[r] for c in range(len(names))],
                    "contiguous read of as many bytes (baseline)":
                        lambda e, r: store.io.raw.read(e.page * PAGE_SIZE, sum(m.length for m in e.minis))}
            for label, fetch in ways.items():
                t0 = _disk_ms(olv)
                for p, r in picks:
                    e = table.pages[p]
                    fetch(e, r % e.rows)
                report["fetches"][label] = {"disk_ms_per_fetch": (_disk_ms(olv) - t0) / fetches}
            return report
        finally:
            store.close()
            fs.close()


def text(r: dict) -> str:
    q = r["quadrangle"]
    lines = [f"LINEITEM, {r['rows']:,} rows in {r['pax_pages']} PAX pages; {r['disks']} simulated Atlas 10K III "
             f"disks, quadrangle b={q['block']} d={q['depth']} w={q['width']}; placement: {r['placement']}",
             f"ingest (parse + append, one batch): {r['ingest_rows_per_s']:,.0f} rows/s wall "
             f"({r['ingest_disk_ms']:.1f} simulated disk ms)",
             f"{'scan':<32} {'disk ms':>10} {'volume bytes':>14} {'vs rows.csv':>12}"]
    base = r["scans"]["rows.csv (16 columns)"]
    for label, s in r["scans"].items():
        lines.append(f"{label:<32} {s['disk_ms']:>10.1f} {s['volume_bytes']:>14,} "
                     f"{s['disk_ms'] / base['disk_ms']:>11.2f}x")
    lines.append(f"baselines: the same scans on the Atropos model's page stores, {r['rows']:,} rows of 16 x 8-byte "
                 f"attributes, same disks (simulated disk ms)")
    lines.append(f"{'scan':<32} {'ours':>8} " + " ".join(f"{k:>10}" for k in MODEL) +
                 f" {'NSM/PAX':>8} {'DSM/PAX':>8} {'NSM/ours':>9}   paper")
    for label, m in r["model_scans"].items():
        pax, ours = m["AtroposDB d=4"], r["scans"][label]["disk_ms"]
        lines.append(f"{label:<32} {ours:>8.1f} " + " ".join(f"{m[k]:>10.1f}" for k in MODEL) +
                     f" {m['NSM'] / pax:>7.2f}x {m['DSM'] / pax:>7.2f}x {m['NSM'] / ours:>8.2f}x   "
                     f"{PAPER_SCANS.get(label.split(' ')[0], 'DSM ~ PAX')}")
    lines.append(f"{'row fetch':<44} {'disk ms per fetch':>18} {'vs contiguous':>14}")
    contiguous = r["fetches"]["contiguous read of as many bytes (baseline)"]["disk_ms_per_fetch"]
    for label, f in r["fetches"].items():
        lines.append(f"{label:<44} {f['disk_ms_per_fetch']:>18.2f} {f['disk_ms_per_fetch'] / contiguous:>13.2f}x")
    lines.append("paper (Atropos): " + "; ".join(f"{k}: {v}" for k, v in PAPER.items()))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="bench_table_quad", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=60_000)
    ap.add_argument("--fetches", type=int, default=200)
    ap.add_argument("--json", type=Path, help="also write the report here")
    a = ap.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench_table_quad."))
    try:
        r = run(workdir, a.rows, a.fetches)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(text(r))
    if a.json:
        a.json.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
