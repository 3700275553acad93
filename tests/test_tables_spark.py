"""Real PySpark (local) on /tables: ``df.write.mode("append").csv(MOUNT/tables/t/ingest)`` with a
task that fails its first attempt lands every row exactly once; Spark reading a projection in
many small splits (``spark.sql.files.maxPartitionBytes``) gets every row exactly once. One Spark
session (one JVM) for the module, as tests/test_spark.py."""

from __future__ import annotations

import json
import os
import shutil
from functools import partial

import pytest
from fsmount import traxfs_mount

from traxfs.fs.tables.ingest import parse_csv
from traxfs.fs.tables.schema import parse_schema
from traxfs.tools.spark_job import _flaky_partition

ROWS = 20_000
SCHEMA = "id int64 not null, name string, amount decimal(10,2), day date"

pytestmark = [pytest.mark.skipif(shutil.which("java") is None, reason="no java on PATH (Spark needs Java 17+)"),
              pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    with traxfs_mount(tmp_path_factory.mktemp("tables-spark"), size=1024 << 20) as mount:
        yield mount


def _frame(spark, rows: int):
    from pyspark.sql import functions as F

    df = spark.range(rows).select(
        F.col("id"),
        F.when(F.col("id") % 7 == 0, F.lit(None)).when(F.col("id") % 11 == 0, F.lit(""))
         .otherwise(F.concat(F.lit('name "'), F.col("id").cast("string"), F.lit('", ok'))).alias("name"),
        (F.col("id") / 100).cast("decimal(10,2)").alias("amount"),
        F.date_add(F.lit("2020-01-01").cast("date"), (F.col("id") % 1000).cast("int")).alias("day"))
    return df.repartition(4)


def test_spark_append_lands_every_row_once_and_reads_a_projection_in_small_splits(m, spark):
    t = m.mp / "tables" / "events"
    t.mkdir()
    (t / "schema").write_text(SCHEMA + "\n")
    df = _frame(spark, ROWS)
    flaky = spark.createDataFrame(df.rdd.mapPartitions(partial(_flaky_partition, ROWS // 4 // 2)), df.schema)
    sc = spark.sparkContext
    sc.setJobGroup("tables-append", "append with one failed task attempt")
    (flaky.write.mode("append").option("header", True).option("escape", '"')
     .csv(str(t / "ingest")))
    failed = sum(sc.statusTracker().getStageInfo(s).numFailedTasks
                 for j in sc.statusTracker().getJobIdsForGroup("tables-append")
                 for s in sc.statusTracker().getJobInfo(j).stageIds)
    assert failed >= 1, "no task attempt failed: the retry was not exercised"
    assert os.listdir(t / "ingest") == [".rejected"], os.listdir(t / "ingest")
    assert os.listdir(t / "ingest" / ".rejected") == []
    st = json.loads((t / "status.json").read_bytes())
    assert st["rows"] == ROWS, st

    whole = (t / "rows.csv").read_bytes()
    cols = parse_csv(parse_schema(SCHEMA), whole)
    assert sorted(cols[0]) == list(range(ROWS))  # every row exactly once
    want = {r["id"]: r for r in (x.asDict() for x in df.collect())}
    by_id = dict(zip(cols[0], zip(*cols[1:], strict=True), strict=True))
    for i in (0, 7, 11, 12, ROWS - 1):
        name, amount, _ = by_id[i]
        assert name == want[i]["name"] and amount == int(want[i]["amount"] * 100), (i, by_id[i], want[i])

    path = t / "columns" / "amount,id.csv"
    size = path.stat().st_size
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(16 << 10))
    spark.conf.set("spark.sql.files.openCostInBytes", "0")
    try:
        back = (spark.read.option("header", True).schema("amount decimal(10,2), id long").csv(str(path)))
        assert back.rdd.getNumPartitions() >= size // (16 << 10)
        ids = sorted(r["id"] for r in back.select("id").collect())
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        spark.conf.unset("spark.sql.files.openCostInBytes")
    assert ids == list(range(ROWS))
