"""What a restart costs: the first micro-batch of a service started again on its checkpoint, per
configuration variant (default: RocksDB changelog checkpointing, the service's default, against
snapshots at every commit).

    python -m bench.restart_bench [--rows 200000] [--keys 10000] [--first 0.75]
                                  [--per-trigger 10000] [--rounds 3] [--variant NAME:VAR=VALUE,,...]

Each round uses new left-pk topics. It preloads the first ``--first`` of each side's changelog,
runs every variant once on them (a fresh process and Spark JVM each, ``--per-trigger`` as
``MAX_RECORDS_PER_TRIGGER``, a cap per input, until everything is read), then preloads the rest,
and starts every variant again on its checkpoint, as a restarted pod would. A restarted query loads its state
store's last version in the first micro-batch's tasks: from the latest snapshot, then, with
changelog checkpointing, every changelog file written after it. Printed per variant: that first
micro-batch's duration and how much longer it took than the median of the restart's later
micro-batches (the same size), the time from the query's start to the end of that first batch,
the first micro-batch of the first start for comparison (a fresh JVM and fresh Python workers, but
no state to load), and the checkpoint's state files at the stop (snapshots, changelog files).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time

from bench.harness.changejoin import parse_variant, service_settings
from bench.harness.data import changelogs, preload, price_partition, schemas
from bench.harness.processes import child_result
from service.config import SPARK_CONF_PREFIX
from service.session import ROCKSDB_CHANGELOG_CONF

DEFAULT_VARIANTS = ["changelog:", f"snapshots:{SPARK_CONF_PREFIX}{ROCKSDB_CHANGELOG_CONF.replace('.', '_')}=false"]


def state_files(checkpoint: str) -> dict[str, int]:
    """The state store's files under ``checkpoint/state``, by kind."""
    counts: collections.Counter = collections.Counter()
    for _, _, files in os.walk(os.path.join(checkpoint, "state")):
        for name in files:
            if name.endswith(".changelog"):
                counts["changelog"] += 1
            elif name.endswith(".zip"):
                counts["snapshot"] += 1
    return dict(counts)


def child(args) -> None:
    """One start of the service on ``args.checkpoint``: until everything is read, then stop."""
    from service.app import Service

    settings = service_settings(
        args.bootstrap, "left-pk", args.per_trigger, 2, args.checkpoint, args.out,
        orders_topic=args.orders, prices_topic=args.prices, extra=json.loads(args.extra))
    batch_done: list[float] = []
    service = Service(settings, on_batch=lambda counts: batch_done.append(time.perf_counter()))
    service.spark  # noqa: B018 - the JVM starts before the clock does, as in every bench
    start = time.perf_counter()
    query = service.start()
    service.process_available()
    # each micro-batch with input, in order: its duration
    batches = [p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress if p["numInputRows"]]
    service.stop()
    service.spark.stop()
    print(json.dumps({"event": "end", "first_batch_s": batch_done[0] - start if batch_done else None,
                      "batches": batches, "files": state_files(args.checkpoint)}), flush=True)


def run_child(args, extra: dict, checkpoint: str, orders: str, prices: str, out: str) -> dict:
    cmd = [sys.executable, "-m", "bench.restart_bench", "--child", "--bootstrap", args.bootstrap, "--checkpoint", checkpoint,
           "--orders", orders, "--prices", prices, "--out", out, "--per-trigger", str(args.per_trigger),
           "--extra", json.dumps(extra)]
    return child_result(cmd)


def restart_figures(first_run: dict, restart: dict) -> dict:
    first, *later = restart["batches"]
    steady = statistics.median(later) if later else None
    return {"first_ms": first, "steady_ms": steady, "extra_ms": first - steady if steady is not None else None,
            "first_batch_s": restart["first_batch_s"], "files": first_run["files"],
            "first_run_batches": len(first_run["batches"]), "fresh_first_ms": first_run["batches"][0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME:VAR=VALUE,,VAR=VALUE (default: changelog checkpointing on and off)")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--first", type=float, default=0.75, help="share of each side read before the restart")
    parser.add_argument("--per-trigger", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true")
    for name in ("--bootstrap", "--checkpoint", "--orders", "--prices", "--out", "--extra"):
        parser.add_argument(name)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    variants = [parse_variant(v) for v in args.variant or DEFAULT_VARIANTS]

    from devkit.kafka_broker import KafkaBroker
    from service.sink import ensure_topics

    orders_all, prices_all = changelogs(args.rows, args.keys, "left-pk")
    split = int(args.rows * args.first)
    orders_schema, prices_schema = schemas("left-pk")
    results: dict[str, list[dict]] = collections.defaultdict(list)
    with KafkaBroker(heap="1g") as bootstrap, tempfile.TemporaryDirectory() as work:
        args.bootstrap = bootstrap
        for rnd in range(args.rounds):
            orders, prices = f"restart-orders-{rnd}", f"restart-prices-{rnd}"
            ensure_topics(bootstrap, {}, {orders: 2, prices: 2})

            def load(part: slice) -> None:
                preload(bootstrap, orders, orders_schema, orders_all[part], lambda r: r["order_id"] % 2)
                preload(bootstrap, prices, prices_schema, prices_all[part], price_partition)

            order = variants if rnd % 2 == 0 else variants[::-1]  # alternate who goes first
            load(slice(0, split))
            first_runs = {name: run_child(args, extra, f"{work}/cp-{rnd}-{name}", orders, prices,
                                          f"restart-out-{rnd}-{name}") for name, extra in order}
            load(slice(split, None))
            for name, extra in order:
                restart = run_child(args, extra, f"{work}/cp-{rnd}-{name}", orders, prices, f"restart-out-{rnd}-{name}")
                figures = restart_figures(first_runs[name], restart)
                results[name].append(figures)
                print(json.dumps({"round": rnd, "variant": name, **figures}), flush=True)
    print(render(args, variants, results))


def render(args, variants, results) -> str:
    lines = [f"`python -m bench.restart_bench --rows {args.rows} --keys {args.keys} --first {args.first} "
             f"--per-trigger {args.per_trigger} --rounds {args.rounds}`", "",
             "| variant | state files at the stop (per round) | first batch of the first start (no state) ms, median "
             "| first batch after the restart ms, min / median "
             "| later batches ms, median | extra ms of the first, min / median | query start to first batch done s, median |",
             "|---|---|---|---|---|---|---|"]
    for name, _ in variants:
        rs = results[name]
        files = "; ".join(", ".join(f"{n} {k}" for k, n in sorted(r["files"].items())) for r in rs)
        lines.append(f"| {name} | {files} | {_median(rs, 'fresh_first_ms')} | {_min(rs, 'first_ms')} / "
                     f"{_median(rs, 'first_ms')} | {_median(rs, 'steady_ms')} | {_min(rs, 'extra_ms')} / "
                     f"{_median(rs, 'extra_ms')} | {_median(rs, 'first_batch_s', ',.1f')} |")
    return "\n".join(lines)


def _values(rs: list[dict], key: str) -> list:
    return [r[key] for r in rs if r[key] is not None]  # None: the restart had a single micro-batch


def _median(rs: list[dict], key: str, spec: str = ",.0f") -> str:
    values = _values(rs, key)
    return format(statistics.median(values), spec) if values else "-"


def _min(rs: list[dict], key: str) -> str:
    values = _values(rs, key)
    return f"{min(values):,.0f}" if values else "-"


if __name__ == "__main__":
    main()
