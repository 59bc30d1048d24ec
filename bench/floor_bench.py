"""The floor under changejoin's micro-batches: how long a micro-batch of Spark's own
``transformWithState`` takes on this machine when the stateful processor does next to nothing.

    python -m bench.floor_bench [--rate 2000 --rate 6000 --rate 18000] [--buckets 0 --buckets 2
                                --buckets 256] [--variables 1 --variables 4] [--seconds 50]
                                [--rounds 1] [--record]

Each run is a fresh Spark (local[2], the service's Spark properties: RocksDB state with changelog
checkpointing, Unix domain sockets, the workers' path, 2 shuffle partitions, the service's default
500 ms trigger) reading Spark's ``rate`` source at the given rows/s. ``--buckets N`` groups the
rows by ``value % N`` into one ``transformWithState`` whose processor reads and writes one value
state per grouping key and returns one row per key, as changejoin's join stage returns one packed
row per bucket; ``--buckets 0`` has no stateful stage at all. ``--variables N`` opens N state
variables in the processor's ``init`` (the value state and N - 1 map states of binary keys and
values, unused), as changejoin's join stage opens four (bucket, keys, left, right): PySpark calls
``init`` for every task of every micro-batch, and the JVM builds each variable's encoders then. The output goes to a ``foreachBatch``
whose ``mapInArrow`` counts it, as changejoin's sink stage runs. Printed per variant: the median
micro-batch duration (``triggerExecution``) and its ``addBatch`` share over the micro-batches from
the tenth on.

What changejoin adds to such a micro-batch (the Kafka source and decode, the join's operators and
state values, encode and produce) comes on top of this: a micro-batch of the service cannot be
shorter, and with the produce-to-output p99 roughly the trigger interval plus two micro-batches, a
floor near 1 s leaves no room for a p99 of 2 s.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

WARM_BATCHES = 10  # micro-batches left out: JIT, fresh Python workers


def child(args) -> None:
    from pyspark.sql import Row, SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    from bench.harness.changejoin import service_settings
    from service.session import launch_properties, query_start_properties

    with tempfile.TemporaryDirectory() as work:
        settings = service_settings("127.0.0.1:9", "left-pk", None, 2, f"{work}/cp",
                                    extra={"TRIGGER_INTERVAL": "500ms"})
        builder = SparkSession.builder
        for key, value in {**launch_properties(settings), **query_start_properties(settings)}.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        value_schema = StructType([StructField("v", BinaryType(), True)])
        key_schema = StructType([StructField("k", BinaryType(), True)])

        class Trivial(StatefulProcessor):
            def init(self, handle):
                self.state = handle.getValueState("v", value_schema)
                self.maps = [handle.getMapState(f"m{i}", key_schema, value_schema) for i in range(args.variables - 1)]

            def handleInputRows(self, key, rows, timerValues):
                n = sum(1 for _ in rows)
                previous = self.state.get()
                self.state.update((b"x" * 16 if previous is None else previous[0],))
                yield Row(b=key[0], n=n)

            def close(self):
                pass

        rows = (spark.readStream.format("rate").option("rowsPerSecond", args.rate)
                .option("numPartitions", 2).load().withColumn("b", F.col("value") % max(args.buckets, 1)))
        out_schema = StructType([StructField("b", LongType()), StructField("n", LongType())])
        if args.buckets:
            out = rows.groupBy("b").transformWithState(Trivial(), out_schema, "Append", "None")
        else:
            out = rows.select("b", F.lit(1).cast("long").alias("n"))

        def write(batch, batch_id):
            def count(batches):
                import pyarrow as pa

                n = sum(b.num_rows for b in batches)
                yield pa.RecordBatch.from_pylist([{"n": n}], schema=pa.schema([("n", pa.int64())]))

            batch.mapInArrow(count, "n long").collect()

        query = (out.writeStream.foreachBatch(write).option("checkpointLocation", f"{work}/cp")
                 .trigger(processingTime="500 milliseconds").start())
        time.sleep(args.seconds)
        query.stop()
        progress = [p for p in query.recentProgress if p["batchId"] >= WARM_BATCHES]
        spark.stop()
    print(json.dumps({
        "batches": len(progress),
        "batch_ms": statistics.median(p["durationMs"]["triggerExecution"] for p in progress) if progress else None,
        "add_batch_ms": statistics.median(p["durationMs"].get("addBatch", 0) for p in progress) if progress else None,
        "rows": statistics.median(p["numInputRows"] for p in progress) if progress else None,
    }))


def run(args, rate: int, buckets: int, variables: int) -> dict:
    cmd = [sys.executable, "-m", "bench.floor_bench", "--child", "--rate", str(rate), "--buckets", str(buckets),
           "--variables", str(variables), "--seconds", str(args.seconds)]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def label(buckets: int, variables: int) -> str:
    if buckets == 0:
        return "no stateful stage"
    return f"transformWithState, {buckets:,} keys" + (f", {variables} state variables" if variables != 1 else "")


def table(results: dict) -> str:
    lines = ["| variant | rate rows/s | runs | rows per micro-batch, median | micro-batch ms min / median "
             "| addBatch ms median |", "|---|---|---|---|---|---|"]
    for (buckets, variables, rate), runs in results.items():
        batch = sorted(r["batch_ms"] for r in runs)
        lines.append(f"| {label(buckets, variables)} | {rate:,} | {len(runs)} | {statistics.median(r['rows'] for r in runs):,.0f} "
                     f"| {batch[0]:,.0f} / {statistics.median(batch):,.0f} "
                     f"| {statistics.median(r['add_batch_ms'] for r in runs):,.0f} |")
    return "\n".join(lines)


def plot(results: dict, png) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for buckets, variables in sorted({(b, v) for b, v, _ in results}):
        points = sorted((rate, statistics.median(r["batch_ms"] for r in runs) / 1000)
                        for (b, v, rate), runs in results.items() if (b, v) == (buckets, variables))
        ax.plot([p[0] for p in points], [p[1] for p in points], "o-", label=label(buckets, variables))
    ax.axhline(1.0, color="red", linestyle=":", linewidth=1, label="1 s: room for a 2 s p99")
    ax.set_xlabel("input rows/s")
    ax.set_ylabel("micro-batch duration, s (median)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, action="append")
    parser.add_argument("--buckets", type=int, action="append")
    parser.add_argument("--variables", type=int, action="append", help="state variables opened (default 1)")
    parser.add_argument("--seconds", type=float, default=50.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--record", action="store_true", help="append to bench/results/RESULTS.md with a plot")
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        args.rate, args.buckets, args.variables = args.rate[0], args.buckets[0], args.variables[0]
        child(args)
        return
    rates, bucket_counts = args.rate or [2000, 6000, 18000], args.buckets or [0, 2, 256]
    variable_counts = args.variables or [1]
    shapes = [(b, v) for b in bucket_counts for v in (variable_counts if b else [1])]
    results: dict = {(b, v, r): [] for b, v in shapes for r in rates}
    for rnd in range(args.rounds):
        for rate in rates:
            for buckets, variables in (shapes if rnd % 2 == 0 else shapes[::-1]):  # alternate who goes first
                figures = run(args, rate, buckets, variables)
                print(json.dumps({"rate": rate, "buckets": buckets, "variables": variables, **figures}), flush=True)
                results[(buckets, variables, rate)].append(figures)
    text = table(results)
    print(text)
    if args.record:
        from bench.harness.report import record_round

        command = " ".join(["python -m bench.floor_bench", *sys.argv[1:]])
        record_round("floor", "the micro-batch floor of transformWithState", f"`{command}`\n\n{text}",
                     lambda png: plot(results, png), "micro-batch duration against the input rate")


if __name__ == "__main__":
    main()
