"""The Spark job traxfs is built for: write, read back, overwrite and retry through one directory.

``python -m traxfs.tools.spark_job --dir DIR [--rows N] [--report FILE]`` runs it over any
directory (a traxfs mount, the pass-through baseline, a local directory); :func:`run` is the same
from Python and returns the report (a dict; ``--report`` writes it as JSON).

What it checks, and why these are the things a filesystem under Spark must get right:

1. **write**: a deterministic data set (``id, key, amount, text``) generated inside Spark is
   written as Parquet and as CSV (with a header) through Spark's default commit path:
   ``SQLHadoopMapReduceCommitProtocol`` over Hadoop's ``FileOutputCommitter`` (algorithm 1). Each
   task writes under ``_temporary/0/_temporary/attempt_*``, task commit renames that directory
   to ``_temporary/0/task_*``, job commit renames each file into place, deletes ``_temporary``
   and creates ``_SUCCESS``: directory renames, listings and recursive deletes, all of which the
   filesystem must do exactly.
2. **read back**: both copies are read and compared with the expected values computed in
   Python, not by Spark: row count, sum of ``id`` and ``amount``, a CRC-32 sum over ``text``, and
   the row count per key. A lost, duplicated or torn row changes at least one of them.
3. **overwrite**: both are written again in ``overwrite`` mode with other data (another seed,
   another size), and only the new data may be there: the old files must be gone.
4. **retry**: one task fails on its first attempt, half-way through its partition (after the
   writer has written part of its file: the write uses small row groups), and is retried; the output must hold each row exactly once,
   with no ``_temporary`` left and ``_SUCCESS`` present, i.e. the failed attempt's partial file
   was aborted and never committed. This needs task retries: the session's master is
   ``local[2,3]`` (two cores, up to three failures per task).

One Spark session serves the whole run (the JVM's start is most of a small run's time); pass
``spark=`` to :func:`run` to share one across runs (the tests do).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

MASTER = "local[2,3]"  # 2 cores; a task may fail up to 3 times (the retry phase needs >= 2)
KEYS = 10
PARTITIONS = 4
DEFAULT_ROWS = 200_000

# Spark's own logging, kept to errors on stderr (the retry phase silences even those while its
# task fails on purpose: a stack trace in a passing run would only mislead).
# PySpark's gateway counts as a shell: unless its logger has a level of its own, Spark imposes WARN
# on the console with a "Setting default log level" banner.
LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} spark %p %c{1}: %m%n
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""

SCHEMA = "id LONG, key STRING, amount LONG, text STRING"

# On two cores the JVM's optimising JIT (C2) and parallel GC threads compete with the job itself
# and with the FUSE server beneath it; a run this short never repays C2's compile time. C1 only
# and the serial collector made a 20,000-row run ~30% faster here (41-49 s instead of 60-79 s
# under load). Pass jvm_options="" to session() for a long job that wants C2's code.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


# ----- the data: the same formulas in Spark SQL (to generate) and in Python (to check) ---------
def _columns(seed: int) -> list[str]:
    return [
        "id",
        f"concat('k', lpad(cast(pmod(id * 7 + {seed}, {KEYS}) as string), 2, '0')) AS key",
        f"pmod(id * 7919 + {seed * 104729}, 100003) AS amount",
        f"concat('row ', cast(id as string), ', seed {seed}/', repeat('x', cast(pmod(id, 13) as int))) AS text",
    ]


def expected(rows: int, seed: int) -> dict[str, Any]:
    """The checksums of the data set, computed row by row in Python."""
    amount = crc = 0
    keys: Counter[str] = Counter()
    for i in range(rows):
        keys[f"k{(i * 7 + seed) % KEYS:02d}"] += 1
        amount += (i * 7919 + seed * 104729) % 100003
        crc += zlib.crc32(f"row {i}, seed {seed}/{'x' * (i % 13)}".encode())
    return {"rows": rows, "distinct_ids": rows, "min_id": 0 if rows else None,
            "max_id": rows - 1 if rows else None, "id_sum": rows * (rows - 1) // 2,
            "amount_sum": amount, "text_crc_sum": crc, "per_key": dict(sorted(keys.items()))}


def checksums(df: Any) -> dict[str, Any]:
    """The same checksums computed by Spark over what it read back, in one job: per key, then
    summed here (each id has one key, so distinct ids add up across keys)."""
    from pyspark.sql import functions as F

    per_key = df.groupBy("key").agg(
        F.count("*").alias("rows"), F.countDistinct("id").alias("distinct_ids"), F.min("id").alias("min_id"),
        F.max("id").alias("max_id"), F.sum("id").alias("id_sum"), F.sum("amount").alias("amount_sum"),
        F.sum(F.crc32(F.col("text").cast("binary"))).alias("text_crc_sum")).collect()
    r: dict[str, Any] = {k: sum(row[k] or 0 for row in per_key)
                         for k in ("rows", "distinct_ids", "id_sum", "amount_sum", "text_crc_sum")}
    r["min_id"] = min((row["min_id"] for row in per_key), default=None)
    r["max_id"] = max((row["max_id"] for row in per_key), default=None)
    r["per_key"] = {row["key"]: row["rows"] for row in sorted(per_key, key=lambda row: row["key"])}
    return r


# ----- the session ----------------------------------------------------------------------------
def session(master: str = MASTER, memory: str = "1g", jvm_options: str = JVM_OPTIONS) -> Any:
    """A small local session: no UI, errors-only logging, loopback only, few shuffle partitions."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # never bind or resolve a real interface
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import this module
    scratch = Path(tempfile.mkdtemp(prefix="traxfs-spark-"))
    (scratch / "log4j2.properties").write_text(LOG4J2)
    builder = (SparkSession.builder.master(master).appName("traxfs-spark-job")
            .config("spark.driver.memory", memory)
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.extraJavaOptions",
                    f"-Dlog4j.configurationFile={scratch / 'log4j2.properties'} {jvm_options}")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.default.parallelism", "2")
            .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
            .config("spark.local.dir", str(scratch / "local")))
    try:
        return builder.getOrCreate()
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise


def stop(spark: Any) -> None:
    """Stop a session made by :func:`session` and remove its scratch directory."""
    scratch = Path(spark.conf.get("spark.local.dir")).parent
    spark.stop()
    if scratch.name.startswith("traxfs-spark-"):
        shutil.rmtree(scratch, ignore_errors=True)


def _max_failures(sc: Any) -> int:
    master = sc.master
    if master.startswith("local["):
        parts = master[len("local["):-1].split(",")
        return int(parts[1]) if len(parts) > 1 else 1
    return int(sc.getConf().get("spark.task.maxFailures", "4"))


# ----- phases ---------------------------------------------------------------------------------
def _generate(spark: Any, rows: int, seed: int) -> Any:
    return spark.range(0, rows, 1, PARTITIONS).selectExpr(*_columns(seed))


def _read(spark: Any, fmt: str, path: Path) -> Any:
    if fmt == "csv":
        return spark.read.csv(path.as_uri(), header=True, schema=SCHEMA)
    return spark.read.parquet(path.as_uri())


def _listing(path: Path) -> dict[str, Any]:
    """What the committed directory holds, as the filesystem lists it."""
    names = sorted(os.listdir(path))
    return {"parts": len([n for n in names if n.startswith("part-")]),
            "success": "_SUCCESS" in names, "temporary": "_temporary" in names,
            "stray": [n for n in names if not n.startswith(("part-", ".part-", "_SUCCESS", "._SUCCESS"))]}


def _check(what: str, got: dict[str, Any], want: dict[str, Any], listing: dict[str, Any]) -> None:
    problems = [f"{k}: read {got.get(k)!r}, expected {v!r}" for k, v in want.items() if got.get(k) != v]
    if listing["parts"] != PARTITIONS:  # one file per task: more is a stale or duplicate file
        problems.append(f"{listing['parts']} part files, expected {PARTITIONS}")
    if not listing["success"]:
        problems.append("no _SUCCESS marker")
    if listing["temporary"]:
        problems.append("_temporary left behind")
    if listing["stray"]:
        problems.append(f"unexpected entries {listing['stray']}")
    if problems:
        raise AssertionError(f"{what}: " + "; ".join(problems))


def _flaky_partition(fail_at: int, rows: Iterator[Any]) -> Iterator[Any]:
    """Pass rows through, but fail the first attempt of partition 0 at row ``fail_at``, after the
    writer has written rows to its file: a torn attempt that must be aborted."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    first = ctx is not None and ctx.partitionId() == 0 and ctx.attemptNumber() == 0
    for n, row in enumerate(rows):
        if first and n == fail_at:
            raise RuntimeError("traxfs spark_job: injected failure of the first attempt of partition 0")
        yield row


def run(dir: str | os.PathLike[str], rows: int = DEFAULT_ROWS, spark: Any = None) -> dict[str, Any]:
    """Run every phase through ``dir`` (outputs go to ``dir/{parquet,csv,retry}``, replaced if
    there); raise ``AssertionError`` on the first wrong result; return the report."""
    if rows < PARTITIONS:
        raise ValueError(f"rows must be at least {PARTITIONS} (one per partition)")
    root = Path(dir).absolute()
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    report: dict[str, Any] = {"dir": str(root), "rows": rows, "timings_s": timings}

    def lap(name: str, start: float) -> float:
        now = time.perf_counter()
        timings[name] = round(now - start, 3)
        return now

    for name in ("parquet", "csv", "retry"):
        shutil.rmtree(root / name, ignore_errors=True)
    own = spark is None
    if own:
        spark = session()
    t = lap("session", t0)
    try:
        sc = spark.sparkContext
        hconf = sc._jsc.hadoopConfiguration()
        report.update(spark_version=spark.version, master=sc.master,
                      committer_algorithm=hconf.get("mapreduce.fileoutputcommitter.algorithm.version", "1"),
                      commit_protocol=spark.conf.get("spark.sql.sources.commitProtocolClass"))

        # 1. write
        want = expected(rows, seed=1)
        t = lap("expected", t)
        data = _generate(spark, rows, seed=1)
        data.write.parquet((root / "parquet").as_uri())
        t = lap("write_parquet", t)
        data.write.csv((root / "csv").as_uri(), header=True)
        t = lap("write_csv", t)

        # 2. read back
        for fmt in ("parquet", "csv"):
            _check(f"{fmt} read back", checksums(_read(spark, fmt, root / fmt)), want, _listing(root / fmt))
            t = lap(f"read_{fmt}", t)

        # 3. overwrite with other data
        rows2 = rows // 2 + 1
        want2 = expected(rows2, seed=2)
        data2 = _generate(spark, rows2, seed=2)
        data2.write.mode("overwrite").parquet((root / "parquet").as_uri())
        data2.write.mode("overwrite").csv((root / "csv").as_uri(), header=True)
        t = lap("overwrite_write", t)
        for fmt in ("parquet", "csv"):
            _check(f"{fmt} after overwrite", checksums(_read(spark, fmt, root / fmt)), want2,
                   _listing(root / fmt))
        report["overwrite_rows"] = rows2
        t = lap("overwrite_verify", t)

        # 4. a failed and retried task
        if _max_failures(sc) < 2:
            report["retry"] = f"skipped: master {sc.master} does not retry failed tasks"
        else:
            want3 = expected(rows, seed=3)
            source = _generate(spark, rows, seed=3)
            fail_at = rows // PARTITIONS // 2  # half-way through partition 0
            flaky = spark.createDataFrame(source.rdd.mapPartitions(partial(_flaky_partition, fail_at)),
                                          source.schema)
            group = f"traxfs-retry-{time.time_ns()}"
            sc.setJobGroup(group, "write with one failed task attempt")
            level = sc._jvm.org.apache.logging.log4j.LogManager.getRootLogger().getLevel().toString()
            sc.setLogLevel("FATAL")
            try:
                # small row groups, so the doomed attempt has flushed bytes to its file when it
                # fails (Parquet otherwise holds a whole row group in memory until close)
                flaky.write.option("parquet.block.size", 32 * 1024).parquet((root / "retry").as_uri())
            finally:
                sc.setLogLevel(level)
                sc.setLocalProperty("spark.jobGroup.id", None)
            failed = sum(info.numFailedTasks for job in sc.statusTracker().getJobIdsForGroup(group)
                         for sid in (sc.statusTracker().getJobInfo(job).stageIds or [])
                         if (info := sc.statusTracker().getStageInfo(sid)) is not None)
            listing = _listing(root / "retry")
            _check("retried write", checksums(_read(spark, "parquet", root / "retry")), want3, listing)
            if failed < 1:
                raise AssertionError("retried write: no task attempt failed, the retry was not exercised")
            report["retry"] = {"failed_attempts": failed, "part_files": listing["parts"]}
            t = lap("retry", t)
    finally:
        if own:
            stop(spark)
    timings["total"] = round(time.perf_counter() - t0, 3)
    report["ok"] = True
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m traxfs.tools.spark_job", description=__doc__.split("\n")[0])
    p.add_argument("--dir", required=True, help="the directory to work in (e.g. a traxfs mount)")
    p.add_argument("--rows", type=int, default=DEFAULT_ROWS, help=f"rows per data set (default {DEFAULT_ROWS})")
    p.add_argument("--report", help="also write the report as JSON to this file")
    a = p.parse_args(argv)
    try:
        report = run(a.dir, rows=a.rows)
    except AssertionError as e:
        print(f"spark_job: FAILED: {e}", file=sys.stderr)
        return 1
    text = json.dumps(report, indent=2)
    if a.report:
        Path(a.report).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
