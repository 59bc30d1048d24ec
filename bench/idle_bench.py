"""What an idle service costs: CPU of the service's process tree (Spark JVM, Python workers,
driver; the broker is a separate process) while no input arrives, per ``TRIGGER_INTERVAL``.

    python -m bench.idle_bench [--trigger 1s --trigger 500ms --trigger 0] [--seconds 30] [--rounds 2]

A shorter trigger interval makes the query look for new records more often: each look asks Kafka
for both topics' end offsets (and Spark plans nothing). Each setting runs a fresh service on the
same empty left-pk topics of a single-node Kafka, waits for it to settle, then measures.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from bench.harness.changejoin import service_settings
from bench.harness.data import topics
from bench.harness.processes import broker_pid, process_tree, processes


def tree_cpu(root: int, skip: int | None) -> float:
    """CPU seconds of ``root`` and its descendants, less ``skip``'s subtree (the broker)."""
    procs = processes()
    tree = process_tree(procs, root)
    if skip is not None:
        tree -= process_tree(procs, skip)
    return sum(procs[p][2] for p in tree)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trigger", action="append", help="TRIGGER_INTERVAL values (default 1s, 500ms, 0)")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured, after as long again to settle")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    triggers = args.trigger or ["1s", "500ms", "0"]

    from service.app import Service
    from devkit.kafka_broker import KafkaBroker
    from service.sink import ensure_topics

    with KafkaBroker(heap="1g") as bootstrap, tempfile.TemporaryDirectory() as work:
        broker = broker_pid()
        orders, prices, _ = topics("left-pk")
        ensure_topics(bootstrap, {}, {orders: 2, prices: 2})
        results: dict[str, list[float]] = {t: [] for t in triggers}
        for rnd in range(args.rounds):
            for trigger in triggers:
                settings = service_settings(
                    bootstrap, "left-pk", None, 2, f"{work}/cp-{rnd}-{trigger}", extra={"TRIGGER_INTERVAL": trigger})
                service = Service(settings)
                service.spark  # noqa: B018
                service.start()
                try:
                    time.sleep(args.seconds)
                    c0, t0 = tree_cpu(os.getpid(), broker), time.monotonic()
                    time.sleep(args.seconds)
                    cores = (tree_cpu(os.getpid(), broker) - c0) / (time.monotonic() - t0)
                finally:
                    service.stop()
                    service.spark.stop()
                results[trigger].append(cores)
                print(f"round {rnd + 1} TRIGGER_INTERVAL={trigger}: {cores:.3f} cores while idle", flush=True)
    print("\n| TRIGGER_INTERVAL | cores while idle, min | median |\n|---|---|---|")
    for trigger, values in results.items():
        values.sort()
        print(f"| {trigger} | {values[0]:.3f} | {values[len(values) // 2]:.3f} |")


if __name__ == "__main__":
    main()
