"""LINEITEM through the mount: a Spark batch job ingests it into ``/tables/lineitem``, and TPC-H
Q1 and Q6 run in Spark over the column projections they need, their answers checked against a
pure-Python computation over the generator's rows.

The rows come from ``tools/atropos/lineitem.py`` (the dbgen columns and distributions, seeded).
The generator's CSV is first written as an ordinary file on the mount; the Spark job reads it
with the table's schema and writes it with ``df.write.mode("append").csv(ingest)`` — Spark's
FileOutputCommitter: task attempts under ``_temporary``, renamed into ``ingest/`` at commit, a
``_SUCCESS`` marker — which the table turns into appends of whole part files. The job is
checked by the table's row count.

Answers compare exactly: Spark computes in decimals, the reference in integers (cents, percent),
and :func:`q1_as_ints` scales Spark's sums to the reference's units.
"""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path

from ..atropos.lineitem import ATTRIBUTES, QUERY_ATTRIBUTES, q1, q6, rows
from ..bench_table import SCHEMA, TYPES, lineitem_csv

SPARK_TYPES = {"int64": "long", "int32": "int", "string": "string", "date": "date", "decimal(15,2)": "decimal(15,2)"}


def ddl(cols) -> str:
    """Spark's schema of ``cols`` of LINEITEM."""
    types = dict(zip(ATTRIBUTES, TYPES, strict=True))
    return ", ".join(f"{c} {SPARK_TYPES[types[c]]}" for c in cols)


def spark_q1(df):
    from pyspark.sql import functions as F

    price, disc, tax = F.col("l_extendedprice"), F.col("l_discount"), F.col("l_tax")
    return (df.filter(F.col("l_shipdate") <= F.lit("1998-09-02").cast("date"))
            .groupBy("l_returnflag", "l_linestatus")
            .agg(F.sum("l_quantity"), F.sum(price), F.sum(price * (1 - disc)), F.sum(price * (1 - disc) * (1 + tax)),
                 F.avg("l_quantity"), F.avg(price), F.avg(disc), F.count(F.lit(1)))
            .orderBy("l_returnflag", "l_linestatus"))


def spark_q6(df):
    from pyspark.sql import functions as F

    ship = F.col("l_shipdate")
    return (df.filter((ship >= F.lit("1994-01-01").cast("date")) & (ship < F.lit("1995-01-01").cast("date")) &
                      F.col("l_discount").between(0.05, 0.07) & (F.col("l_quantity") < 24))
            .agg(F.sum(F.col("l_extendedprice") * F.col("l_discount"))))


def _scaled(v: Decimal, digits: int) -> int:
    out = v.scaleb(digits)
    if out != out.to_integral_value():
        raise ValueError(f"{v} has more than {digits} decimal digits")
    return int(out)


def q1_as_ints(result) -> dict[tuple[str, str], tuple[int, ...]]:
    """Spark's Q1 rows in the reference's integer units (quantity, cents, 1e-4 and 1e-6, count)."""
    return {(r[0], r[1]): (_scaled(r[2], 0), _scaled(r[3], 2), _scaled(r[4], 4), _scaled(r[5], 6), r[9])
            for r in result}


def q6_as_int(result) -> int:
    return _scaled(result[0][0] or Decimal(0), 4)


def reference(count: int) -> dict:
    """Q1 and Q6 over the generator's rows, in integers."""
    cols: dict[str, list] = {a: [] for a in ATTRIBUTES}
    for r in rows(count):
        for a, v in zip(ATTRIBUTES, r.values, strict=True):
            cols[a].append(v)
    return {"Q1": q1(cols), "Q6": q6(cols)}


def ingest(spark, mnt: Path, count: int) -> dict:
    """Create ``/tables/lineitem`` and ingest ``count`` rows with a Spark batch job."""
    table = mnt / "tables" / "lineitem"
    table.mkdir()
    (table / "schema").write_text(SCHEMA + "\n")
    source = mnt / "pipeline" / "lineitem-source.csv"
    source.parent.mkdir(exist_ok=True)
    t0 = time.monotonic()
    source.write_bytes(lineitem_csv(count))
    generated = time.monotonic()
    df = spark.read.option("header", True).schema(ddl(ATTRIBUTES)).csv(str(source))
    df.repartition(4).write.mode("append").option("header", True).csv(str(table / "ingest"))
    done = time.monotonic()
    status = json.loads((table / "status.json").read_bytes())
    if status["rows"] != count:
        raise RuntimeError(f"/tables/lineitem holds {status['rows']} rows after the Spark job; {count} were written")
    return {"rows": count, "source_bytes": source.stat().st_size, "generate_s": round(generated - t0, 2),
            "spark_ingest_s": round(done - generated, 2), "rows_per_s": round(count / (done - generated)),
            "pax_pages": status["pax_pages"], "placement": status.get("placement")}


def _volume_read(table: Path) -> int:
    return json.loads((table / "status.json").read_bytes())["volume_bytes_read"]


def queries(spark, mnt: Path, count: int) -> dict:
    """Q1 and Q6 over their projections and over ``rows.csv``; each answer checked."""
    table = mnt / "tables" / "lineitem"
    want = reference(count)
    out = {}
    for q, fn, convert in (("Q1", spark_q1, q1_as_ints), ("Q6", spark_q6, q6_as_int)):
        cols = QUERY_ATTRIBUTES[q]
        runs = {}
        for label, path, schema_cols in (("projection", table / "columns" / (",".join(cols) + ".csv"), cols),
                                         ("rows.csv", table / "rows.csv", ATTRIBUTES)):
            b0, t0 = _volume_read(table), time.monotonic()
            got = convert(fn(spark.read.option("header", True).schema(ddl(schema_cols)).csv(str(path))).collect())
            runs[label] = {"wall_s": round(time.monotonic() - t0, 2), "volume_bytes_read": _volume_read(table) - b0,
                           "answer_matches": got == want[q]}
            if got != want[q]:
                raise RuntimeError(f"{q} over {label}: Spark's answer {got} differs from the reference {want[q]}")
        out[q] = {"columns": list(cols), **runs}
    return out
