"""Spark Structured Streaming from a queue's sealed segments into a table, exactly once.

The query reads ``/queues/NAME/segments`` (JSON-lines files that appear as the queue seals
them; a few files per trigger) and, for each micro-batch, aggregates per event-time minute and
key: events and amount. The driver writes the batch's rows, sorted, as one CSV file
``batch-<id>.csv`` into the table's ``ingest/_temporary/`` and renames it into ``ingest/``; the
table appends a file renamed in whole, in one durable transaction.

**Exactly once.** Spark's file source logs each micro-batch's files in the checkpoint (on the
mount) before running it and its completion after, so a batch interrupted by a stop runs again
after the restart over the same files — and writes the same bytes under the same name. The table
records every ingested file's name, size and crc32c with its rows and drops a file it has seen
(the retry of a lost answer), so a replayed batch adds nothing: every event is counted once,
which :func:`totals` lets the caller check against the generator's answer key.
"""

from __future__ import annotations

import csv
import io
import os
import threading
import time
from pathlib import Path

from .events import SCHEMA_DDL

TABLE_SCHEMA = "minute int64, key string, events int64, amount int64"


class EventStream:
    """One streaming query at a time over ``segments`` into the table folder ``table``, its
    checkpoint in ``checkpoint``; :meth:`stop` then :meth:`start` restarts it from there."""

    def __init__(self, spark, segments: Path, table: Path, checkpoint: Path, trigger_s: float = 1.0):
        self.spark, self.segments, self.table, self.checkpoint = spark, segments, table, checkpoint
        self.trigger_s = trigger_s
        self.query = None
        self.rows_by_batch: dict[int, int] = {}  # input records per micro-batch (a replay overwrites)
        self.log: list[tuple[float, int]] = []  # (monotonic time, records processed so far)
        self.starts = 0
        self.replayed: list[int] = []  # batch ids run more than once
        self._lock = threading.Lock()

    @property
    def processed(self) -> int:
        with self._lock:
            return sum(self.rows_by_batch.values())

    def start(self) -> None:
        src = (self.spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 4)
               .json(str(self.segments)))
        self.query = (src.writeStream.foreachBatch(self._batch).option("checkpointLocation", str(self.checkpoint))
                      .trigger(processingTime=f"{self.trigger_s} seconds").queryName("event_counts").start())
        self.starts += 1

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
            self.query = None

    def failure(self) -> str | None:
        """The query's error, if it stopped by one."""
        if self.query is None:
            return None
        exc = self.query.exception()
        return str(exc) if exc is not None else None

    def _batch(self, df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        rows = (df.groupBy(F.floor(F.col("ts") / 60000).cast("long").alias("minute"), "key")
                .agg(F.count(F.lit(1)).alias("events"), F.sum("amount").alias("amount")).collect())
        rows = sorted((r["minute"], r["key"], r["events"], r["amount"]) for r in rows)
        n = sum(r[2] for r in rows)
        if rows:
            out = io.StringIO()
            w = csv.writer(out, lineterminator="\n")
            w.writerow(("minute", "key", "events", "amount"))
            w.writerows(rows)
            ingest = self.table / "ingest"
            tmp = ingest / "_temporary"
            tmp.mkdir(exist_ok=True)
            name = f"batch-{batch_id:08d}.csv"
            (tmp / name).write_text(out.getvalue())
            os.rename(tmp / name, ingest / name)
        with self._lock:
            if batch_id in self.rows_by_batch:
                self.replayed.append(batch_id)
            self.rows_by_batch[batch_id] = n
            self.log.append((time.monotonic(), sum(self.rows_by_batch.values())))

    def wait_for(self, records: int, timeout: float) -> None:
        """Until ``records`` input records were processed (raises on a failed query or timeout)."""
        deadline = time.monotonic() + timeout
        while self.processed < records:
            err = self.failure()
            if err:
                raise RuntimeError(f"the streaming query failed: {err}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the stream processed {self.processed} of {records} records in {timeout:.0f} s")
            time.sleep(0.2)


def totals(rows_csv: Path) -> dict[tuple[int, str], tuple[int, int]]:
    """(minute, key) → (events, amount) summed over the table's rows (one row per batch and
    bucket), read from its ``rows.csv`` view."""
    out: dict[tuple[int, str], list[int]] = {}
    with open(rows_csv, newline="") as f:
        for r in csv.DictReader(f):
            acc = out.setdefault((int(r["minute"]), r["key"]), [0, 0])
            acc[0] += int(r["events"])
            acc[1] += int(r["amount"])
    return {k: (v[0], v[1]) for k, v in sorted(out.items())}
