"""Spark over a queue's sealed segments (``/queues/NAME/segments``) on a real traxfs mount, with
real local PySpark: a batch read equals the records, and a Structured Streaming query over the
folder (checkpoint on the mount) counts every record exactly once when it is stopped mid-run and
started again, and when its driver process (Python and JVM, ``queue_stream_driver.py``) is
SIGKILLed mid-run and a new one starts on the same checkpoint. One Spark session (one JVM)
serves the module's own reads; the killed drivers are processes of their own."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fsmount import traxfs_mount
from queue_paths import append, config, status

MiB = 1 << 20
DRIVER = Path(__file__).with_name("queue_stream_driver.py")
pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH (Spark needs Java 17+)")


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
        sealed_through(qdir, first + 4999)  # each batch its own segment, however late the seal
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


class Driver:
    """``queue_stream_driver.py`` in a process group of its own (Python and its JVM), its lines
    collected as they come. Its session's scratch directory is made in ``scratch`` (TMPDIR): a
    killed driver cannot remove it, the test's own directory goes with the test's."""

    def __init__(self, scratch: Path, *args: str):
        self.proc = subprocess.Popen([sys.executable, str(DRIVER), *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                                     env={**os.environ, "TMPDIR": str(scratch)})
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def wait_for(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            found = [ln for ln in self.lines if ln.startswith(prefix)]
            if found:
                return found[-1]
            assert self.proc.poll() is None or self._reader.is_alive(), f"driver exited: {self.lines[-5:]}"
            assert time.monotonic() < deadline, f"no {prefix!r} after {timeout} s: {self.lines[-5:]}"
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL of the driver's process group: the Python driver and its JVM at once."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        self._reader.join(10)


@pytest.mark.timeout(600)
def test_streaming_driver_killed_mid_run_and_restarted_counts_every_record_once(m, spark, tmp_path):
    qdir = m.mp / "queues" / "driver"
    os.mkdir(qdir)
    config(qdir, seal_seconds=0.2)
    work = m.mp / "spark-driver"
    work.mkdir()
    args = (str(qdir / "segments"), str(work / "out"), str(work / "checkpoint"))
    batch = 1000
    d = Driver(tmp_path, *args)
    try:
        d.wait_for("STARTED", 180)
        first = 0
        deadline = time.monotonic() + 180
        while not any(ln.startswith("PROGRESS") for ln in d.lines):
            assert time.monotonic() < deadline, f"no batch processed: {d.lines[-5:]}"
            if first < 100 * batch:
                append(qdir, records(first, batch))
                first += batch
            time.sleep(0.3)
        for _ in range(random.Random(14).randrange(1, 5)):  # a little more, then the kill mid-run
            append(qdir, records(first, batch))
            first += batch
            time.sleep(0.1)
    finally:
        d.kill()
    total = first + 10 * batch
    done = spark.read.parquet(args[1]).count()  # what the killed driver committed: some, not all
    assert 0 < done < total, done
    while first < total:  # appends go on while no driver runs
        append(qdir, records(first, batch))
        first += batch
    sealed_through(qdir, total - 1)
    d = Driver(tmp_path, *args, str(total))
    try:
        result = d.wait_for("RESULT", 420).split()
    finally:
        d.kill()
    assert [int(x) for x in result[1:]] == [total, total, 0, total - 1], d.lines[-5:]
