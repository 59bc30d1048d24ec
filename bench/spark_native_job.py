"""Spark's own stream-stream join, the JVM-only peer of bench/compare.py (insert-only scenario).

Spark 4.3's Kafka connector is not on Maven Central, so this reads the same generated rows from
Parquet files that compare.py writes once (one file per micro-batch and side,
``maxFilesPerTrigger`` 1), joins them with Spark's native inner equi-join (no watermark: all state
is kept, like the changejoin and Flink jobs without TTL) on RocksDB state, and writes to the
``noop`` sink, with the availableNow trigger: the query stops when every file is processed.

    python -m bench.spark_native_job --orders DIR --prices DIR [--shuffle-partitions 2]

Prints one JSON line per event (``start``, ``end`` with elapsed seconds, output rows, micro-batch
duration p50/p99 in ms, the checkpoint's size at the end and the time to the end of the first
micro-batch with output).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
from datetime import datetime


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--orders", required=True)
    parser.add_argument("--prices", required=True)
    parser.add_argument("--shuffle-partitions", type=int, default=2)
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("spark-native-join")
             .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.streaming.numRecentProgressUpdates", "10000")
             .getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    orders = (spark.readStream.schema("order_id LONG, product STRING, quantity INT")
              .option("maxFilesPerTrigger", 1).parquet(args.orders))
    prices = (spark.readStream.schema("product STRING, price DOUBLE, currency STRING")
              .option("maxFilesPerTrigger", 1).parquet(args.prices))
    joined = orders.alias("o").join(prices.alias("p"), "product").select("o.order_id", "p.price")
    with tempfile.TemporaryDirectory() as work:
        emit("start")
        start = time.perf_counter()
        wall_start = time.time()
        query = (joined.writeStream.format("noop").option("checkpointLocation", f"{work}/cp")
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        elapsed = time.perf_counter() - start
        progress = list(query.recentProgress)
        state_bytes = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(f"{work}/cp") for f in fs)
    durations = sorted(p["durationMs"].get("triggerExecution", 0) for p in progress if p["numInputRows"])
    pct = lambda q: durations[min(len(durations) - 1, max(0, math.ceil(q * len(durations)) - 1))] if durations else None  # noqa: E731
    # the end of the first micro-batch that wrote output (its start plus its duration), from the start
    first = next((datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() - wall_start
                  + p["durationMs"].get("triggerExecution", 0) / 1000
                  for p in progress if p["sink"].get("numOutputRows", 0) > 0), None)
    emit("end", elapsed=elapsed, batch_p50=pct(0.5), batch_p99=pct(0.99), state_bytes=state_bytes, first_output=first,
         output=sum(max(0, p["sink"].get("numOutputRows", -1)) for p in progress),
         state_output=sum(sum(op.get("numRowsUpdated", 0) for op in p.get("stateOperators", [])) for p in progress),
         batches=sum(1 for p in progress if p["numInputRows"]),
         input=sum(p["numInputRows"] for p in progress))
    spark.stop()


if __name__ == "__main__":
    main()
