"""What the Kafka part of one reading task costs, outside Spark, on a real broker: a new consumer
per range against the process's kept ones (``service.source.ConsumerPool``), on a plain input and
on a transactional one, and there with librdkafka's batch wait as it was (1 s) and as it is.

    python -m bench.source_read_bench [--records 100] [--transactions 5] [--rounds 30] [--record]

Each round appends one micro-batch's worth of records at the end of each input (plain: records;
transactional: ``--transactions`` committed transactions sharing them, each followed by its marker,
as an upstream exactly-once job commits several between two of this service's micro-batches) and
reads the new range
``[previous end, end)`` as a reading task does (``source._iter_records``), once per variant, the
variants' order alternating from round to round:

- ``new consumer``: a pool that keeps nothing, so every range gets a new client (its connections,
  metadata) and closes it, as every reading task did before the pool;
- ``kept consumer``: this process's pool, as a Spark Python worker reads task after task;
- ``kept, 1 s wait`` (transactional input only): the kept consumer with librdkafka's consume
  waiting 1 s for a batch to fill, as the reader did before: markers take offsets but are no
  messages, so a range over two or more of them never fills its batch (with one, the
  end-of-partition event makes up the count).

Prints min / median / p90 milliseconds per range; ``--record`` appends the table and a plot to
bench/results/RESULTS.md. The broker is started from the cached Kafka jars unless
KAFKA_BOOTSTRAP_SERVERS is set.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
import uuid

from bench.harness.report import percentile, record_round
from devkit.kafka_broker import KafkaBroker
from service import source
from service.sink import ensure_topics

VARIANTS = {"plain": ("new consumer", "kept consumer"),
            "transactional": ("new consumer", "kept consumer", "kept, 1 s wait")}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100, help="records per range (one micro-batch's task)")
    parser.add_argument("--transactions", type=int, default=5, help="transactions per range of the transactional input")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--record", action="store_true", help="append to bench/results/RESULTS.md, with a plot")
    args = parser.parse_args()
    from confluent_kafka import Producer

    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    times: dict[tuple[str, str], list[float]] = {(i, v): [] for i, vs in VARIANTS.items() for v in vs}
    with contextlib.nullcontext(external) if external else KafkaBroker(heap="1g") as bootstrap:
        tag = uuid.uuid4().hex[:8]
        topics = {"plain": f"read-bench-{tag}", "transactional": f"read-bench-{tag}-txn"}
        ensure_topics(bootstrap, {}, {t: 1 for t in topics.values()})
        plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"read-bench-{tag}", "linger.ms": 5})
        txn.init_transactions(60)
        ends = {"plain": 0, "transactional": 0}
        offsets: list[int] = []
        value = b"v" * 200

        def append(input_: str) -> tuple[int, int]:
            """One range more at the end of ``input_``: (its start, its end, markers included)."""
            offsets.clear()
            producer = txn if input_ == "transactional" else plain
            parts = args.transactions if producer is txn else 1
            for part in range(parts):
                if producer is txn:
                    txn.begin_transaction()
                for i in range(part * args.records // parts, (part + 1) * args.records // parts):
                    producer.produce(topics[input_], value, key=str(i).encode(),
                                     on_delivery=lambda err, msg: offsets.append(msg.offset()))
                if producer is txn:
                    txn.commit_transaction(60)  # its marker is the next offset
                else:
                    producer.flush(60)
            start, end = ends[input_], max(offsets) + (2 if producer is txn else 1)
            ends[input_] = end
            return start, end

        kept, keeps_none = source.ConsumerPool(), source.ConsumerPool(max_idle=0)
        opts = {i: source.SourceOptions({"bootstrap.servers": bootstrap, "topic": t}) for i, t in topics.items()}
        wait = source._CONSUME_WAIT_S
        for round_ in range(args.rounds + 1):  # round 0 warms the broker and the kept consumer, off the clock
            for input_, variants in VARIANTS.items():
                order = variants if round_ % 2 else variants[::-1]
                for variant in order:
                    start, end = append(input_)
                    pool = keeps_none if variant == "new consumer" else kept
                    source._CONSUME_WAIT_S = 1.0 if variant == "kept, 1 s wait" else wait
                    started = time.perf_counter()
                    read = sum(1 for _ in source._iter_records(
                        opts[input_], source.KafkaInputPartition(topics[input_], 0, start, end), pool))
                    elapsed = time.perf_counter() - started
                    source._CONSUME_WAIT_S = wait
                    assert read == args.records, (input_, variant, read)
                    if round_:
                        times[(input_, variant)].append(elapsed * 1000)
        kept.close_all()
        plain.flush(10)
    table = ["| input | variant | ms per range: min | median | p90 |", "|---|---|---:|---:|---:|"]
    for (input_, variant), ms in times.items():
        ms.sort()
        table.append(f"| {input_} | {variant} | {ms[0]:.1f} | {statistics.median(ms):.1f} | {percentile(ms, 0.9):.1f} |")
    print("\n".join(table))
    if args.record:
        def draw(png):
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            labels = [f"{i}\n{v}" for i, v in times]
            fig, ax = plt.subplots(figsize=(8, 3.5))
            ax.bar(labels, [statistics.median(ms) for ms in times.values()], color="tab:blue", label="median")
            ax.scatter(labels, [percentile(ms, 0.9) for ms in times.values()], color="tab:red", zorder=3, label="p90")
            ax.set_yscale("log")
            ax.set_ylabel("ms per range (log)")
            ax.set_title(f"a reading task's Kafka read, {args.records} records per range")
            ax.legend()
            fig.tight_layout()
            fig.savefig(png, dpi=100)
            plt.close(fig)

        record_round("source-read", "a reading task's Kafka read: kept consumers, and ranges ending on markers",
                     f"`python -m bench.source_read_bench {' '.join(sys.argv[1:])}` ({args.rounds} ranges of "
                     f"{args.records} 200-byte records per variant, the transactional ones in {args.transactions} transactions per "
                     f"range, outside Spark, one broker)\n\n" + "\n".join(table),
                     draw, "median and p90 ms per range")


if __name__ == "__main__":
    main()
