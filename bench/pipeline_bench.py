"""The whole service, Kafka -> Spark -> Kafka, on a local Apache Kafka broker (KRaft).

    python -m bench.pipeline_bench [--rows 200000] [--keys 10000] [--max-per-trigger 100000]
                                   [--shuffle-partitions 2]

Scenarios, each with ``--rows`` changelog rows per side over ``--keys`` join keys, preloaded
before the service starts into a single-node Kafka started from the cached Maven Central jars
(devkit/kafka_broker.py), or into ``KAFKA_BOOTSTRAP_SERVERS`` when that is set:

- ``left-pk``: a LEFT join of orders (primary key order_id, joined on product) with prices
  (primary key = join key), with -U/+U updates on both sides;
- ``inner-nopk``: an INNER join of two inputs without unique keys (multiset state);
- ``left-pk-mb``, ``inner-nopk-mb``: the same joins on the same topics with ``MINI_BATCH_SIZE``;
- ``temporal-left``: an event-time temporal LEFT join (``FOR SYSTEM_TIME AS OF``) of insert-only
  orders with a versioned prices table (primary key product, -U/+U updates), both with an event
  time (bench/schemas/*_timed.avsc) that grows by 1 s per row of each side; a last row on each
  side far in the future moves the watermark past every real row, so every order is emitted
  (the left one of these two rows waits for ever and is never part of the output).

The generator is linear in ``--rows`` and the preload hands librdkafka whole batches (linger,
1 MB batches), so 1M rows per side take about a minute to generate and load. The scenarios, the
generator and the service's settings live in bench/harness/ (data.py, changejoin.py), which the
other benchmarks share.

Printed: input rows/s (all rows / time from query start until every row is processed),
micro-batch duration p50/p99, and time to first output.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics

from bench.harness.changejoin import run_changejoin
from bench.harness.data import SCENARIOS, load
from bench.harness.report import percentile
from devkit.kafka_broker import KafkaBroker


def run(bootstrap: str, scenario: str, rows: int, keys: int, max_per_trigger: int, shuffle_partitions: int) -> None:
    load_s = load(bootstrap, scenario, rows, keys)
    result = run_changejoin(bootstrap, scenario, rows, max_per_trigger, shuffle_partitions)
    elapsed, durations = result["elapsed"], result["durations"]
    total = 2 * rows
    p99 = percentile(durations, 0.99)
    print(f"{scenario}: {total:,} input rows in {elapsed:.1f} s = {total / elapsed:,.0f} rows/s; "
          f"{len(durations)} micro-batches, duration p50 {statistics.median(durations) / 1000:.1f} s, "
          f"p99 {p99 / 1000:.1f} s; first output after {result['first_output']:.1f} s "
          f"(preload {load_s:.0f} s); checkpoint {result['state_bytes'] / 2**20:.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--max-per-trigger", type=int, default=100_000)
    parser.add_argument("--shuffle-partitions", type=int, default=2, help="SHUFFLE_PARTITIONS (Spark runs local[2])")
    parser.add_argument("--scenario", choices=SCENARIOS, action="append")
    args = parser.parse_args()
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    with contextlib.nullcontext(external) if external else KafkaBroker(heap="1g") as bootstrap:
        for scenario in args.scenario or ["left-pk", "inner-nopk"]:
            run(bootstrap, scenario, args.rows, args.keys, args.max_per_trigger, args.shuffle_partitions)


if __name__ == "__main__":
    main()
