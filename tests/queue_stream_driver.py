"""A Spark driver for the queue streaming crash test: a Structured Streaming query over a queue's
``segments/`` folder into Parquet, its checkpoint on the mount. Killed (SIGKILL of its process
group: this Python and the JVM) by the test, and started again on the same checkpoint.

Usage: python queue_stream_driver.py SEGMENTS OUT CHECKPOINT [EXPECT]
Prints, flushed: "STARTED", then "PROGRESS n" with the input rows of each batch that had any.
With EXPECT: once the output holds EXPECT rows, prints "RESULT rows distinct min max" and exits.
"""

from __future__ import annotations

import sys
import time

from traxfs.tools.spark_job import session, stop


def main() -> None:
    segments, out, ckpt = sys.argv[1:4]
    expect = int(sys.argv[4]) if len(sys.argv) > 4 else None
    spark = session()
    src = spark.readStream.schema("id LONG, v STRING").option("maxFilesPerTrigger", 1).json(segments)
    query = (src.writeStream.format("parquet").option("path", out).option("checkpointLocation", ckpt)
             .trigger(processingTime="200 milliseconds").start())
    print("STARTED", flush=True)
    reported = None
    try:
        while True:
            p = query.lastProgress
            if p is not None and p["batchId"] != reported:
                reported = p["batchId"]
                if p["numInputRows"]:
                    print(f"PROGRESS {p['numInputRows']}", flush=True)
            if expect is not None and reported is not None and not query.status["isDataAvailable"]:
                df = spark.read.parquet(out)
                rows = df.count()
                if rows >= expect:
                    agg = df.selectExpr("count(distinct id) d", "min(id) lo", "max(id) hi").collect()[0]
                    print(f"RESULT {rows} {agg.d} {agg.lo} {agg.hi}", flush=True)
                    return
            time.sleep(0.5)
    finally:
        query.stop()
        stop(spark)


if __name__ == "__main__":
    main()
