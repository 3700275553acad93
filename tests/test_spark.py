"""The Spark job (tools/spark_job.py) over the filesystem under test and over the pass-through.

``mnt`` is the filesystem under test (traxfs by default, the host's with TRAX_FS_TARGET=local);
the pass-through run proves the Spark-over-FUSE path on its own, so a failure on traxfs alone
points at traxfs, not at FUSE or at the job. Each run writes Parquet and CSV through Spark's
default committer, reads both back against checksums computed in Python, overwrites them, and
retries a failed task (see the job's docstring). One Spark session (one JVM) serves the module:
its start is the largest single cost here.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from traxfs.tools.passthrough import mounted
from traxfs.tools.spark_job import PARTITIONS, run

ROWS = 20_000  # 4 partitions of 5,000; the retry phase fails partition 0 at its 2,500th row

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH (Spark needs Java 17+)")


def _check_report(report: dict, root: Path) -> None:
    assert report["ok"] is True
    assert report["committer_algorithm"] == "1"
    assert report["retry"]["failed_attempts"] >= 1
    assert report["retry"]["part_files"] == PARTITIONS
    for name in ("parquet", "csv", "retry"):
        entries = os.listdir(root / name)
        assert "_SUCCESS" in entries and "_temporary" not in entries, (name, entries)


@pytest.mark.timeout(600)
def test_spark_job_on_filesystem_under_test(mnt, spark):
    report = run(mnt, rows=ROWS, spark=spark)
    _check_report(report, Path(mnt))
    print("spark job timings (s):", report["timings_s"])


@pytest.mark.timeout(600)
def test_spark_job_through_passthrough(tmp_path, spark):
    src, mp = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mp.mkdir()
    with mounted(src, mp):
        report = run(mp, rows=ROWS, spark=spark)
        _check_report(report, mp)
    _check_report(report, src)  # what Spark committed through the mount is in the source
    print("spark job timings over the pass-through (s):", report["timings_s"])
