"""What one producing task's share of a micro-batch costs to write, at-least-once against
exactly-once, outside Spark, on a real broker.

    python -m bench.transaction_bench [--records 0,100,1000,10000] [--rounds 20] [--record]

Per share size and round, in this process (the records are 200-byte values with a key, as the
join's output is):

- ``at-least-once``: the service's cached idempotent producer (``KafkaSink.produce_all``), warm;
- ``exactly-once``, as a task does it (``service/transactions.py``): a new transactional producer
  and its ``init_transactions()`` (``init``), the share held whole (``Share``), the progress marker
  read (``marker``), begin, the records, the marker, commit (``commit``), close; ``total`` is the
  task's wall time for all of it,
  ``cpu`` this process's CPU time for it. In the service the init overlaps the join's work for the
  task's rows; a task whose rows are ready sooner waits for the rest of it.

Prints min and median milliseconds per share; ``--record`` appends the table to
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
from datetime import datetime, timezone

from bench.harness.report import append_results
from devkit.kafka_broker import KafkaBroker
from service.shipping import Delivery
from service.sink import KafkaSink, ensure_topics
from service.transactions import ProgressReader, Share, TaskTransaction, abort_open_transactions


def share(topic: str, n: int, batch: int):
    value = b"v" * 200
    for i in range(n):
        yield topic, f"key-{batch}-{i}".encode(), value, [("changejoin.batch", str(batch).encode())]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", default="0,100,1000,10000", help="records per share, comma-separated")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--record", action="store_true", help="append to bench/results/RESULTS.md")
    args = parser.parse_args()
    sizes = [int(x) for x in args.records.split(",")]
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    rows = []
    with contextlib.nullcontext(external) if external else KafkaBroker(heap="1g") as bootstrap:
        tag = uuid.uuid4().hex[:8]
        topic, progress = f"txn-bench-{tag}", f"txn-bench-{tag}.progress"
        ensure_topics(bootstrap, {}, {topic: 2, progress: 1}, configs={progress: {"cleanup.policy": "compact"}})
        config = Delivery(prefix=f"txn-bench-{tag}", progress_topic=progress, timeout_ms=120_000, location="",
                          output_topic=topic, kafka=(("bootstrap.servers", bootstrap),), checkpoint_id=tag)
        abort_open_transactions(config, 1)  # the coordinator's first load, off the clock
        reader, sink = ProgressReader(config), KafkaSink(bootstrap)
        sink.produce_all(share(topic, 10, -1))  # warm: its producer id
        batch = 0
        for n in sizes:
            times: dict[str, list[float]] = {k: [] for k in ("at-least-once", "init", "marker", "commit", "total", "cpu")}
            for _ in range(args.rounds):
                batch += 1
                started = time.perf_counter()
                sink.produce_all(share(topic, n, batch))
                times["at-least-once"].append(time.perf_counter() - started)
                batch += 1
                started, cpu = time.perf_counter(), time.process_time()
                task = TaskTransaction(config, 0, batch)
                try:
                    if n:
                        held = Share.of(share(topic, n, batch))
                        task.ready()
                        times["init"].append(task.init_seconds)
                        marker_started = time.perf_counter()
                        marker = task.committed(reader)
                        assert marker is None or marker["batch"] < batch, marker  # an earlier round's
                        times["marker"].append(time.perf_counter() - marker_started)
                        task.write(held, {("output", "+I"): n})
                        times["commit"].append(task.transaction_seconds)
                        held.close()
                finally:
                    task.close()
                times["total"].append(time.perf_counter() - started)
                times["cpu"].append(time.process_time() - cpu)
            rows.append((n, times))
            print(f"{n:>6} records: " + "; ".join(
                f"{k} {1000 * min(v):.1f}/{1000 * statistics.median(v):.1f} ms" for k, v in times.items() if v),
                flush=True)
        sink.close()
    table = ["| records per share | at-least-once | exactly-once: init | marker read | begin..commit | task total | task CPU |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for n, t in rows:
        cell = lambda k: "-" if not t[k] else f"{1000 * min(t[k]):.1f} / {1000 * statistics.median(t[k]):.1f}"  # noqa: E731
        table.append(f"| {n:,} | {cell('at-least-once')} | {cell('init')} | {cell('marker')} | {cell('commit')} | "
                     f"{cell('total')} | {cell('cpu')} |")
    print("\n".join(table))
    if args.record:
        now = datetime.now(timezone.utc)
        append_results(f"\n## {now:%Y-%m-%d %H:%M} UTC: one task's share, at-least-once vs exactly-once\n\n"
                       f"`python -m bench.transaction_bench {' '.join(sys.argv[1:])}` (ms, min / median of "
                       f"{args.rounds}; 200-byte values; a share of 0 records opens no transaction)\n\n"
                       + "\n".join(table) + "\n")


if __name__ == "__main__":
    main()
