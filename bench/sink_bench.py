"""Output records per second through the producing task's Python path, outside Spark: the packed
rows the join emits -> ``OutputEncoder.records`` -> ``KafkaSink.produce_all`` into a real broker.

    python -m bench.sink_bench [--scenario inner-nopk] [--records 1000000] [--rounds 5] [--per-key 10]

The rows are shaped like the scenario's join output (inner-nopk: order_id long, price double,
``--per-key`` changes per PACKED row, as a key's call emits them). Each round measures, in this
process, (a) encode only: the records are built and dropped; (b) encode and produce: every record
delivered to a topic of the broker (started from the cached Kafka jars unless
KAFKA_BOOTSTRAP_SERVERS is set). Prints min and median records/s and µs per record for each.

To compare two versions of the code, run ``python -m bench.sink_bench`` in each checkout (its own
directory first on the path), one after the other, and compare the ratios within a run of both.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import tempfile
import time

from bench.harness.changejoin import service_settings
from devkit.kafka_broker import KafkaBroker
from service.catalog import plan_for
from service.encode import OutputEncoder
from service.envelope import Target, pack
from service.shipping import worker_config, worker_secrets
from service.sink import KafkaSink, ensure_topics

PACKED = int(Target.PACKED)


def packed_rows(scenario: str, records: int, per_key: int, rng: random.Random) -> list[tuple]:
    """(target, kind, payload) rows as the join hands them to the sink: ``per_key`` changes each."""
    rows = []
    for start in range(0, records, per_key):
        n = min(per_key, records - start)
        if scenario == "inner-nopk":
            changes = [(0, (start + i, rng.random() * 100)) for i in range(n)]
        else:  # left-pk's output: order_id, product, quantity, price; inserts and retractions
            product = f"p{rng.randrange(10_000)}"
            changes = [((0, 3, 1, 2)[i % 4], (start + i, product, rng.randrange(100),
                                              None if i % 7 == 0 else rng.random() * 100)) for i in range(n)]
        rows.append((PACKED, 0, pack(changes), b""))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", default="inner-nopk", choices=["inner-nopk", "left-pk"])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--per-key", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rows = packed_rows(args.scenario, args.records, args.per_key, random.Random(7))
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    with contextlib.nullcontext(external) if external else KafkaBroker(heap="1g") as bootstrap, \
            tempfile.TemporaryDirectory() as work:
        topic = f"sink-bench-{os.getpid()}"
        settings = service_settings(bootstrap, args.scenario, None, 2, f"{work}/cp", out=topic)
        plan = plan_for(settings)
        config = worker_config(settings, plan, 2, secrets=worker_secrets(settings))
        ensure_topics(bootstrap, {}, {topic: 2})
        encoder, sink = OutputEncoder.from_config(config), KafkaSink.from_config(config)
        figures: dict[str, list[float]] = {"encode": [], "encode + produce": []}
        for round_ in range(args.rounds):
            counts: dict = {}
            start = time.perf_counter()
            for _ in encoder.records(iter(rows), round_, 0, counts):
                pass
            figures["encode"].append(time.perf_counter() - start)
            start = time.perf_counter()
            sent = sink.produce_all(encoder.records(iter(rows), round_, 0, {}))
            figures["encode + produce"].append(time.perf_counter() - start)
            assert sent == args.records == sum(counts.values()), (sent, counts)
        sink.close()
    print(f"{args.scenario}: {args.records:,} output records, {args.per_key} per packed row, {args.rounds} rounds")
    print("| path | records/s min | records/s median | µs per record (median) |")
    print("|---|---|---|---|")
    for name, seconds in figures.items():
        rates = sorted(args.records / s for s in seconds)
        median = statistics.median(rates)
        print(f"| {name} | {rates[0]:,.0f} | {median:,.0f} | {1e6 / median:.2f} |")


if __name__ == "__main__":
    main()
