"""Spark over a queue's sealed segments (``/queues/NAME/segments``) on a real traxfs mount, with
real local PySpark: a batch read equals the records, and a Structured Streaming query over the
folder (checkpoint on the mount) that is stopped mid-run and started again counts every record
exactly once. One Spark session (one JVM) serves the module."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from fsmount import traxfs_mount
from queue_paths import append, config, status

from traxfs.tools.spark_job import session, stop

MiB = 1 << 20
pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH (Spark needs Java 17+)")


@pytest.fixture(scope="module")
def spark():
    s = session()
    try:
        yield s
    finally:
        stop(s)


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    with traxfs_mount(tmp_path_factory.mktemp("queue-spark"), size=256 * MiB) as mount:
        yield mount


def records(first: int, n: int) -> bytes:
    return b"".join(json.dumps({"id": i, "v": f"event-{i:08d}"}).encode() + b"\n" for i in range(first, first + n))


def sealed_through(qdir, last: int, timeout: float = 30) -> None:
    """Wait until the segments hold every record up to ``last``."""
    deadline = time.monotonic() + timeout
    while True:
        names = sorted(os.listdir(qdir / "segments"))
        if names and int(names[-1].removesuffix(".jsonl").split("-")[1]) >= last:
            return
        assert time.monotonic() < deadline, (names[-3:], status(qdir))
        time.sleep(0.1)


@pytest.mark.timeout(300)
def test_batch_read_of_segments_equals_the_records(m, spark):
    qdir = m.mp / "queues" / "batch"
    os.mkdir(qdir)
    config(qdir, seal_seconds=0.2)
    n = 30000
    for first in range(0, n, 5000):
        append(qdir, records(first, 5000))
        time.sleep(0.3)
    sealed_through(qdir, n - 1)
    assert len(os.listdir(qdir / "segments")) >= 3
    df = spark.read.schema("id LONG, v STRING").json(str(qdir / "segments"))
    rows = df.collect()
    assert sorted(r.id for r in rows) == list(range(n))
    assert all(r.v == f"event-{r.id:08d}" for r in rows)
    text = spark.read.text(str(qdir / "segments")).collect()  # byte for byte the records
    assert sorted(r.value.encode() + b"\n" for r in text) == sorted(records(0, n).splitlines(keepends=True))


@pytest.mark.timeout(600)
def test_streaming_query_stopped_and_restarted_counts_every_record_once(m, spark):
    qdir = m.mp / "queues" / "stream"
    os.mkdir(qdir)
    config(qdir, seal_seconds=0.2)
    work = m.mp / "spark-stream"
    work.mkdir()
    out, ckpt = str(work / "out"), str(work / "checkpoint")

    def start():
        src = (spark.readStream.schema("id LONG, v STRING").option("maxFilesPerTrigger", 1)
               .json(str(qdir / "segments")))
        return (src.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
                .trigger(processingTime="200 milliseconds").start())

    def done_ids() -> list[int]:
        return sorted(r.id for r in spark.read.parquet(out).select("id").collect())

    first_part, total, batch = 20000, 40000, 2000
    query = start()
    try:
        for first in range(0, first_part, batch):
            append(qdir, records(first, batch))
            time.sleep(0.25)
        deadline = time.monotonic() + 120
        while query.lastProgress is None or query.recentProgress[-1]["numInputRows"] == 0:
            assert time.monotonic() < deadline, "the query processed nothing"
            time.sleep(0.2)
    finally:
        query.stop()  # mid-run: segments it has not read are left
    seen = len(done_ids())
    assert 0 < seen, "nothing committed before the stop"
    for first in range(first_part, total, batch):  # appends go on while the query is down
        append(qdir, records(first, batch))
        time.sleep(0.1)
    sealed_through(qdir, total - 1)
    assert seen < total
    query = start()
    try:
        deadline = time.monotonic() + 300
        while len(done_ids()) < total:
            assert time.monotonic() < deadline, f"{len(done_ids())} of {total} after the restart"
            time.sleep(1)
        query.processAllAvailable()
    finally:
        query.stop()
    ids = done_ids()
    assert ids == list(range(total)), f"{len(ids)} rows, {len(set(ids))} distinct, expected {total}"
