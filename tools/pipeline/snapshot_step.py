"""A snapshot taken while the producers append and the stream runs, read by Spark while they go on.

``mkdir /.snapshots/NAME`` freezes the whole filesystem at one instant: the event-count table at
the version the stream had committed, the queue's sealed segments as they were. A Spark job
reads the snapshot's table and segments while the writers continue; once they stopped, the same
snapshot is read again without Spark, and both must give the same counts — the snapshot did not
move — which must be below the final ones (the writers did go on) and consistent with each other
(the stream had consumed at most what the queue had sealed).
"""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path

from .events import SCHEMA_DDL

COUNTS_DDL = "minute LONG, key STRING, events LONG, amount LONG"


def take(mnt: Path, name: str) -> dict:
    t0 = time.perf_counter()
    os.mkdir(mnt / ".snapshots" / name)
    return {"name": name, "create_ms": round((time.perf_counter() - t0) * 1000, 2)}


def paths(mnt: Path, name: str) -> tuple[Path, Path]:
    root = mnt / ".snapshots" / name
    return root / "tables" / "event_counts" / "rows.csv", root / "queues" / "events" / "segments"


def spark_counts(spark, mnt: Path, name: str) -> dict:
    """What Spark reads of the snapshot: table rows and events, and the segments' records."""
    from pyspark.sql import functions as F

    rows_csv, segments = paths(mnt, name)
    t0 = time.perf_counter()
    table = spark.read.option("header", True).schema(COUNTS_DDL).csv(str(rows_csv))
    agg = table.agg(F.count(F.lit(1)).alias("rows"), F.sum("events").alias("events")).collect()[0]
    records = spark.read.schema(SCHEMA_DDL).json(str(segments)).count() if any(segments.iterdir()) else 0
    return {"table_rows": agg["rows"], "table_events": agg["events"] or 0, "segment_records": records,
            "spark_s": round(time.perf_counter() - t0, 2)}


def python_counts(mnt: Path, name: str) -> dict:
    """The same counts read without Spark (after the writers stopped)."""
    rows_csv, segments = paths(mnt, name)
    rows = events = 0
    with open(rows_csv, newline="") as f:
        for r in csv.DictReader(f):
            rows += 1
            events += int(r["events"])
    records = 0
    for seg in sorted(segments.iterdir()):
        with open(seg, "rb") as f:
            records += sum(1 for _ in f)
    return {"table_rows": rows, "table_events": events, "segment_records": records}


def check(during: dict, after: dict, total_events: int) -> None:
    same = {k: during[k] for k in after}
    if same != after:
        raise RuntimeError(f"the snapshot changed: Spark read {same} while the writers ran, {after} after")
    if not after["table_events"] <= after["segment_records"] <= total_events:
        raise RuntimeError(f"the snapshot is not one instant: its table counts {after['table_events']} events, its "
                           f"segments hold {after['segment_records']} records (of {total_events})")
    if after["segment_records"] == total_events:
        raise RuntimeError("the snapshot holds every event: it was not taken while the producers were appending")
