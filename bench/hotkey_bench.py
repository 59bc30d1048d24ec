"""A hot join key, end to end: what one update costs on a key holding many rows vs a small key.

    python -m bench.hotkey_bench [--hot-rows 1000000] [--small-rows 10] [--updates 8]
                                 [--before PATH] [--record]

A LEFT join of orders (primary key order_id) with prices (primary key product) on product. The
orders topic holds ``--hot-rows`` orders of one product (the hot key) and ``--small-rows``
orders of each of 20 other products; every product has a price. Once the service has joined
all of it, orders are updated one at a time (a -U/+U pair), alternating between a row of the hot
key and a row of a small key, each in a micro-batch of its own; reported is each micro-batch's
duration (Spark's ``triggerExecution``), min and median per kind, and their ratio. The issue's
target: an update to the hot key within 3x of one to a small key.

First, without Spark: the state work of one such update in the operators themselves, on a state
that keeps values and map entries pickled as Spark does
(``operators.testing.InMemoryState(pickled=True)``, one ``process`` call timed alone), for keys of
10 to ``--hot-rows`` rows, with the key's side in one value (``split_at`` beyond the key's size:
the layout before split sides) and split (the default).

``--before PATH`` runs the same with the code of another checkout (e.g. a ``git worktree`` of
the commit before a change) in the same invocation, one system after the other, each on topics
of its own. Each system runs in a child process (``--child``) whose Python path is its checkout:
this file run by its path (not ``-m``, which would import the other checkout's copy of it), with
``PYTHONPATH`` and the working directory set to the checkout.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL_KEYS = 20


def rows(hot_rows: int, small_rows: int):
    """(order_id, product, quantity) of the preload: the hot key's rows, then the small keys'."""
    yield from ((i, "hot", 1) for i in range(hot_rows))
    for k in range(SMALL_KEYS):
        yield from ((hot_rows + k * small_rows + j, f"small{k}", 1) for j in range(small_rows))


def produce(bootstrap: str, topic: str, schema, changes) -> None:
    import io

    import fastavro
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})
    for kind, row in changes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, row)
        while True:
            try:
                producer.produce(topic, value=buffer.getvalue(), headers=[("rowkind", kind.encode())], partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    producer.flush(600)


def child(args) -> None:
    """One system: preload its topics, join them, then the alternating updates; prints JSON. The
    checkout's ``service`` is the one imported: run_system puts it on ``PYTHONPATH``."""
    import fastavro

    from service.app import Service
    from service.config import load_settings
    from service.sink import ensure_topics

    orders_schema = fastavro.parse_schema(json.loads((ROOT / "schemas" / "orders.avsc").read_text()))
    prices_schema = fastavro.parse_schema(json.loads((ROOT / "schemas" / "prices.avsc").read_text()))
    tag = args.tag
    orders, prices, out = f"orders-{tag}", f"prices-{tag}", f"out-{tag}"
    ensure_topics(args.bootstrap, {}, {orders: 1, prices: 1})
    produce(args.bootstrap, prices, prices_schema,
            [("+I", {"product": p, "price": 1.0, "currency": "EUR"})
             for p in ["hot"] + [f"small{k}" for k in range(SMALL_KEYS)]])
    produce(args.bootstrap, orders, orders_schema,
            (("+I", {"order_id": i, "product": p, "quantity": q}) for i, p, q in rows(args.hot_rows, args.small_rows)))
    with tempfile.TemporaryDirectory() as work:
        settings = load_settings({
            "KAFKA_BOOTSTRAP_SERVERS": args.bootstrap, "LEFT_TOPIC": orders, "RIGHT_TOPIC": prices,
            "OUTPUT_TOPIC": out, "LEFT_TABLE": "orders", "RIGHT_TABLE": "prices",
            "LEFT_SCHEMA_FILE": str(ROOT / "schemas" / "orders.avsc"),
            "RIGHT_SCHEMA_FILE": str(ROOT / "schemas" / "prices.avsc"),
            "JOIN_SQL": "SELECT o.order_id, o.product, o.quantity, p.price FROM orders o "
                        "LEFT JOIN prices p ON o.product = p.product",
            "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product",
            "CHECKPOINT_LOCATION": f"{work}/cp", "SPARK_MASTER": "local[2]", "SHUFFLE_PARTITIONS": "2",
            "TRIGGER_INTERVAL": "0", "MAX_RECORDS_PER_TRIGGER": "100000", "METRICS_PORT": "0",
        })
        service = Service(settings)
        service.spark  # noqa: B018 - Spark up before the clock starts
        start = time.perf_counter()
        query = service.start()
        service.process_available()
        preload_s = time.perf_counter() - start
        durations: dict[str, list[int]] = {"hot": [], "small": []}
        quantity = 1
        for i in range(args.updates):
            for kind, order_id, product in (("hot", i * 7 % args.hot_rows, "hot"),
                                            ("small", args.hot_rows + i % args.small_rows, "small0")):
                old = {"order_id": order_id, "product": product, "quantity": quantity}
                new = dict(old, quantity=quantity + 1)
                last = query.lastProgress["batchId"] if query.lastProgress else -1
                produce(args.bootstrap, orders, orders_schema, [("-U", old), ("+U", new)])
                service.process_available()
                progress = [p for p in query.recentProgress if p["batchId"] > last and p["numInputRows"]]
                durations[kind].append(sum(p["durationMs"]["triggerExecution"] for p in progress))
            quantity += 1
        service.stop()
        service.spark.stop()
    print("RESULT " + json.dumps({"preload_s": preload_s, "durations": durations}), flush=True)


def operator_costs(sizes: list[int], repeats: int = 5) -> list[tuple[int, float, float]]:
    """(rows in the key, ms per update with the side in one value, ms per update split): min of
    ``repeats`` updates, each a -U/+U pair of one row of the key, in the operators alone."""
    from operators import Context, InputSpec, JoinSpec, JoinType, Output, RowKind, make_join
    from operators.testing import InMemoryState

    columns = ("order_id", "product", "quantity")
    spec = JoinSpec(JoinType.LEFT, InputSpec(columns, (1,), (0,)), InputSpec(("product", "price"), (0,), (0,)))
    results = []
    for size in sizes:
        costs = []
        for split_at in (10**12, None):
            join = make_join(spec)
            if split_at is not None:
                join.split_at = split_at
            state = InMemoryState(pickled=True).for_key(("k",))
            join.process(state, [(1, RowKind.INSERT, ("k", 1.0))], Context(), Output())
            join.process(state, [(0, RowKind.INSERT, (i, "k", 1)) for i in range(size)], Context(), Output())
            times = []
            for r in range(repeats):
                i = r * 7 % size
                update = [(0, RowKind.UPDATE_BEFORE, (i, "k", 1 + r)), (0, RowKind.UPDATE_AFTER, (i, "k", 2 + r))]
                t0 = time.perf_counter()
                join.process(state, update, Context(), Output())
                times.append(time.perf_counter() - t0)
            costs.append(min(times) * 1000)
        results.append((size, costs[0], costs[1]))
        print(f"operators: key of {size:,} rows: one update {costs[0]:.3f} ms in one value, {costs[1]:.3f} ms split",
              flush=True)
    return results


def operator_table(results) -> str:
    lines = ["| rows in the key | one value: ms per update (min) | split: ms per update (min) |", "|---|---|---|"]
    lines += [f"| {size:,} | {whole:,.3f} | {split:,.3f} |" for size, whole, split in results]
    return "\n".join(lines)


def run_system(name: str, checkout: str, bootstrap: str, args) -> dict:
    env = dict(os.environ, PYTHONPATH=checkout)
    cmd = [sys.executable, __file__, "--child", "--bootstrap", bootstrap,
           "--tag", f"{name}-{int(time.time())}", "--hot-rows", str(args.hot_rows),
           "--small-rows", str(args.small_rows), "--updates", str(args.updates)]
    # cwd too: Spark's Python workers (python -m pyspark.daemon) look in their working directory first
    proc = subprocess.run(cmd, env=env, cwd=checkout, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")


def table(results: dict) -> str:
    lines = ["| system | preload s | hot update ms min | hot median | small update ms min | small median "
             "| hot/small (median) |", "|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        hot, small = r["durations"]["hot"], r["durations"]["small"]
        lines.append(f"| {name} | {r['preload_s']:.0f} | {min(hot):,} | {statistics.median(hot):,.0f} | "
                     f"{min(small):,} | {statistics.median(small):,.0f} | "
                     f"{statistics.median(hot) / statistics.median(small):.2f} |")
    return "\n".join(lines)


def plot(costs, results, png: Path) -> None:
    """Left: the operators' ms per update by key size (log-log); right: end-to-end medians."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ops, e2e) = plt.subplots(1, 2, figsize=(11, 4))
    sizes = [c[0] for c in costs]
    ops.loglog(sizes, [c[1] for c in costs], "o-", label="side in one value")
    ops.loglog(sizes, [c[2] for c in costs], "s-", label="split side")
    ops.set_xlabel("rows in the join key")
    ops.set_ylabel("ms per update (operators, min)")
    ops.legend()
    names = list(results)
    width = 0.35
    for i, kind in enumerate(("hot", "small")):
        e2e.bar([n + (i - 0.5) * width for n in range(len(names))],
                [statistics.median(results[name]["durations"][kind]) for name in names], width,
                label=f"{kind} key")
    e2e.set_xticks(range(len(names)), names)
    e2e.set_ylabel("micro-batch of one update, ms (median)")
    e2e.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hot-rows", type=int, default=1_000_000)
    parser.add_argument("--small-rows", type=int, default=10)
    parser.add_argument("--updates", type=int, default=8)
    parser.add_argument("--operators-only", action="store_true", help="only the operators' part, no Kafka or Spark")
    parser.add_argument("--before", help="another checkout to run first, for a before/after comparison")
    parser.add_argument("--record", action="store_true", help="append the table to bench/results/RESULTS.md")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--tag", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    sizes = sorted({10, 1_000, 100_000, args.hot_rows})
    costs = operator_costs([n for n in sizes if n <= args.hot_rows])
    print(operator_table(costs))
    if args.operators_only:
        return
    # here, not at the top: a --child (this file run by its path) may have another checkout on its path
    from bench.harness.report import append_results, results_png
    from devkit.kafka_broker import KafkaBroker

    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    systems = ([("before", args.before)] if args.before else []) + [("after" if args.before else "changejoin", str(ROOT))]
    results = {}
    with contextlib.nullcontext(external) if external else KafkaBroker(heap="1g") as bootstrap:
        for name, checkout in systems:
            results[name] = run_system(name, checkout, bootstrap, args)
            r = results[name]
            print(f"{name}: preload {r['preload_s']:.0f} s; update micro-batch ms: hot {r['durations']['hot']}, "
                  f"small {r['durations']['small']}", flush=True)
    print(table(results))
    if args.record:
        command = "python -m bench.hotkey_bench " + " ".join(sys.argv[1:])
        now = _dt.datetime.now(_dt.timezone.utc)
        when = now.strftime("%Y-%m-%d %H:%M UTC")
        png = results_png("hotkey", now)
        plot(costs, results, png)
        append_results(f"\n## {when} hot key: one update to a key of {args.hot_rows:,} rows vs one of "
                       f"{args.small_rows}\n\n`{command}`\n\nThe operators alone, state pickled as in Spark:\n\n"
                       f"{operator_table(costs)}\n\nEnd to end, micro-batch of one update:\n\n{table(results)}\n\n"
                       f"![hot key]({png.name})\n")


if __name__ == "__main__":
    main()
