"""TPC-H Q1 and Q6 in Spark over a table through a real mount: the projection each query needs
beside ``rows.csv``, in one run.

``python -m traxfs.tools.bench_table_spark [--workdir DIR] [--rows 300000] [--json FILE]``

A ``trax mount --foreground`` daemon on a fresh image; LINEITEM (``tools/atropos/lineitem.py``)
written as one CSV file into ``/tables/lineitem/ingest/`` (ingest rows/s through the mount:
write and close); then each query run by local Spark (``tools/spark_job.session``) over
``rows.csv`` (all 16 columns) and over ``columns/<the query's columns>.csv``: wall time, bytes
Spark read through the mount, and bytes the daemon read from the volume (``status.json``'s
``volume_bytes_read``), after one untimed query that warms the JVM up. Both runs of a query must
give the same answer.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

from .atropos.lineitem import ATTRIBUTES, QUERY_ATTRIBUTES
from .bench_queue_mount import Daemon
from .bench_table import SCHEMA, lineitem_csv
from .pipeline.lineitem import ddl, spark_q1, spark_q6


def run(workdir: Path, count: int) -> dict:
    from .spark_job import session, stop

    daemon = Daemon(workdir, size=max(1 << 30, count * 700))
    try:
        t = daemon.mp / "tables" / "lineitem"
        t.mkdir()
        (t / "schema").write_text(SCHEMA + "\n")
        data = lineitem_csv(count)
        t0 = time.perf_counter()
        with open(t / "ingest" / "lineitem.csv", "wb") as f:
            f.write(data)
        ingest_s = time.perf_counter() - t0
        status = json.loads((t / "status.json").read_bytes())
        assert status["rows"] == count, status
        report = {"rows": count, "csv_bytes": len(data), "ingest_rows_per_s": count / ingest_s, "queries": {}}
        spark = session()
        try:
            spark_q6(spark.read.option("header", True).schema(ddl(QUERY_ATTRIBUTES["Q6"]))  # warm the JVM up, untimed
                .csv(str(t / "columns" / (",".join(QUERY_ATTRIBUTES["Q6"]) + ".csv")))).collect()
            for q, fn in (("Q1", spark_q1), ("Q6", spark_q6)):
                answers = []
                for label, path, cols in (("rows.csv", t / "rows.csv", ATTRIBUTES),
                                          ("projection", t / "columns" / (",".join(QUERY_ATTRIBUTES[q]) + ".csv"),
                                           QUERY_ATTRIBUTES[q])):
                    before = json.loads((t / "status.json").read_bytes())["volume_bytes_read"]
                    t0 = time.perf_counter()
                    df = spark.read.option("header", True).schema(ddl(cols)).csv(str(path))
                    answers.append([tuple(r) for r in fn(df).collect()])
                    wall = time.perf_counter() - t0
                    after = json.loads((t / "status.json").read_bytes())["volume_bytes_read"]
                    report["queries"][f"{q} over {label}"] = {"wall_s": wall, "view_bytes": path.stat().st_size,
                                                              "volume_bytes": after - before}
                if answers[0] != answers[1]:
                    raise AssertionError(f"{q}: rows.csv and the projection disagree: {answers}")
        finally:
            stop(spark)
        return report
    finally:
        daemon.stop()


def text(r: dict) -> str:
    lines = [f"LINEITEM {r['rows']:,} rows ({r['csv_bytes']:,} bytes of CSV); ingest through the mount "
             f"{r['ingest_rows_per_s']:,.0f} rows/s",
             f"{'query':<22} {'wall s':>8} {'view bytes':>14} {'volume bytes':>14}"]
    for label, s in r["queries"].items():
        lines.append(f"{label:<22} {s['wall_s']:>8.2f} {s['view_bytes']:>14,} {s['volume_bytes']:>14,}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="bench_table_spark", description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", type=Path, help="folder for the image (default: a temporary folder, removed)")
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--json", type=Path, help="also write the report here")
    a = ap.parse_args()
    own = a.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="bench_table_spark.")) if own else a.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        r = run(workdir, a.rows)
    finally:
        if own:
            shutil.rmtree(workdir, ignore_errors=True)
    print(text(r))
    if a.json:
        a.json.write_text(json.dumps(r, indent=2))


if __name__ == "__main__":
    main()
