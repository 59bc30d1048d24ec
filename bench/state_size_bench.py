"""State size: what a micro-batch costs when the join's state holds 10 thousand or 5 million keys.

    python -m bench.state_size_bench [--keys 10000 --keys 1000000 --keys 5000000] [--ttl 1h]
                                     [--rate 2000] [--seconds 60] [--warmup 15] [--rounds 1]
                                     [--before PATH] [--record]

The left-pk join (orders with primary key order_id LEFT JOIN prices with primary key product, on
product). Its state is preloaded through the service: every one of ``--keys`` products gets a
price and one order, and the service joins all of it. Then changes of random keys (an order's
-U/+U, a price's -U/+U, half each) are produced at ``--rate`` input rows/s for ``--warmup`` +
``--seconds`` s, and measured over the last ``--seconds``: the micro-batch duration (Spark's
``triggerExecution``, p50 and p99), the CPU seconds of the service's processes (its JVM and
Python workers) per input row, and the end-to-end latency of the changes (each output record's
append time minus the producer clock of the change that caused it). Every key count runs once
without a state TTL and once with ``--ttl`` (long enough that nothing expires: it costs the
timers of every touched key).

The target (issue 35): at 5M keys, micro-batch duration and CPU per input row within 1.3x of 10k.

``--before PATH`` runs the same with the code of another checkout (e.g. a ``git worktree`` of
the commit before a change), one system after the other per variant. Each system runs in a child
process whose Python path is its checkout: this file run by its path, with ``PYTHONPATH`` and the
working directory set to the checkout (the child uses only ``service.app.Service`` and
``service.config.load_settings``).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import io
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = Path(__file__).resolve().parent / "schemas"
SQL = ("SELECT o.order_id, o.product, o.quantity, p.price, o.order_time, p.price_time "
       "FROM orders o LEFT JOIN prices p ON o.product = p.product")


# -- the child: one system's service on the topics the parent fills --------------------------------
def child(args) -> None:
    """The service of this checkout on ``args``' topics: ``drain`` on stdin answers ``drained`` once
    every record available is joined; ``stop`` stops it and prints its micro-batches."""
    from service.app import Service
    from service.config import load_settings

    emit = lambda event, **f: print(json.dumps({"event": event, **f}), flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory() as work:
        env = {
            "KAFKA_BOOTSTRAP_SERVERS": args.bootstrap, "LEFT_TOPIC": args.orders, "RIGHT_TOPIC": args.prices,
            "OUTPUT_TOPIC": args.out, "LEFT_TABLE": "orders", "RIGHT_TABLE": "prices", "JOIN_SQL": SQL,
            "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders_timed.avsc"), "RIGHT_SCHEMA_FILE": str(SCHEMAS / "prices_timed.avsc"),
            "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product",
            "CHECKPOINT_LOCATION": f"{work}/cp", "SPARK_MASTER": "local[2]", "METRICS_PORT": "0",
            "SPARK_CONF_spark_sql_streaming_numRecentProgressUpdates": "100000",
            **json.loads(args.env),
        }
        service = Service(load_settings(env))
        service.spark  # noqa: B018
        query = service.start()
        emit("start")
        for line in sys.stdin:
            if line.strip() != "drain":
                break
            service.process_available()
            emit("drained")
        progress = [json.loads(p.json) for p in query.recentProgress]
        service.stop(graceful_timeout_s=30)
        service.spark.stop()
    batches = [[_epoch_ms(p["timestamp"]), p["durationMs"].get("triggerExecution", 0), p["numInputRows"]]
               for p in progress]
    emit("end", batches=batches)


def _epoch_ms(text: str) -> int:
    return int(_dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


# -- the parent ------------------------------------------------------------------------------------
def avro_writer(name: str):
    import fastavro

    schema = fastavro.parse_schema(json.loads((SCHEMAS / name).read_text()))

    def write(row: dict) -> bytes:
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, row)
        return buffer.getvalue()

    return write


def preload(bootstrap: str, orders_topic: str, prices_topic: str, keys: int) -> float:
    """A price and an order for every product p0..p<keys-1>; seconds taken."""
    from confluent_kafka import Producer

    order, price = avro_writer("orders_timed.avsc"), avro_writer("prices_timed.avsc")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True,
                         "compression.type": "lz4"})
    started = time.perf_counter()
    insert = [("rowkind", b"+I")]
    for k in range(keys):
        for topic, value in ((prices_topic, price({"product": f"p{k}", "price": 1.0, "currency": "EUR", "price_time": 0})),
                             (orders_topic, order({"order_id": k, "product": f"p{k}", "quantity": 1, "order_time": 0}))):
            while True:
                try:
                    producer.produce(topic, value=value, headers=insert, partition=k % 2)
                    break
                except BufferError:
                    producer.poll(0.05)
        if k % 10_000 == 0:
            producer.poll(0)
    producer.flush(600)
    return time.perf_counter() - started


def changes(keys: int, rate: float, seconds: float, seed: int = 7):
    """Paced units (bench.harness.latency.Paced): -U/+U pairs of random keys' orders and prices,
    each +U stamped with the producer clock when it is produced."""
    order, price = avro_writer("orders_timed.avsc"), avro_writer("prices_timed.avsc")
    rng = random.Random(seed)
    orders, prices = {}, {}
    units = []
    for _ in range(int(rate * seconds / 2) + 1):
        k = rng.randrange(keys)
        if rng.random() < 0.5:
            old = orders.get(k, {"order_id": k, "product": f"p{k}", "quantity": 1, "order_time": 0})
            new = dict(old, quantity=old["quantity"] % 9 + 1)
            new.pop("order_time", None)
            orders[k] = new
            topic, write, column = "orders", order, "order_time"
        else:
            old = prices.get(k, {"product": f"p{k}", "price": 1.0, "currency": "EUR", "price_time": 0})
            new = dict(old, price=float(rng.randrange(100)))
            new.pop("price_time", None)
            prices[k] = new
            topic, write, column = "prices", price, "price_time"
        units.append((topic, _unit(write, old, b"-U"), k % 2, 1))
        units.append((topic, _unit(write, new, b"+U", column), k % 2, 1))
    return units


def _unit(write, row: dict, kind: bytes, column: str | None = None):
    def make(now: int):
        if column is not None:
            row.setdefault(column, now)
        return write(row), [("rowkind", kind)]
    return make


def run_system(args, checkout: Path, bootstrap: str, keys: int, ttl: str | None, logs: Path) -> dict:
    """One system, one variant: fresh topics, the preload, the paced changes; its figures."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.harness.latency import Paced, output_latencies
    from bench.harness.outputs import changejoin_reader
    from bench.harness.processes import TreeSampler, broker_pid, cpu_between
    from bench.harness.report import percentile

    tag = f"size-{keys}-{'ttl' if ttl else 'nottl'}-{time.time_ns() % 10**8}"
    orders_topic, prices_topic, out = f"{tag}-orders", f"{tag}-prices", f"{tag}-out"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(orders_topic, 2), NewTopic(prices_topic, 2),
                                  NewTopic(out, 2, config={"message.timestamp.type": "LogAppendTime"})]).values():
        f.result(30)
    produce_s = preload(bootstrap, orders_topic, prices_topic, keys)
    env = {"SHUFFLE_PARTITIONS": str(args.shuffle_partitions), **({"STATE_TTL": ttl} if ttl else {}),
           **dict(pair.split("=", 1) for pair in args.service_env)}
    cmd = [sys.executable, str(checkout / "bench" / "state_size_bench.py"), "--child", "--bootstrap", bootstrap,
           "--orders", orders_topic, "--prices", prices_topic, "--out", out, "--env", json.dumps(env)]
    log = open(logs / f"{tag}.log", "w")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, cwd=checkout,
                            env={**os.environ, "PYTHONPATH": str(checkout)}, start_new_session=True)
    events: list[dict] = []
    arrived = threading.Condition()

    def read():
        for line in proc.stdout:
            if line.startswith('{"event"'):
                with arrived:
                    events.append(json.loads(line))
                    arrived.notify_all()
        with arrived:
            events.append({"event": "exit"})
            arrived.notify_all()

    def wait(event: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        with arrived:
            while True:
                for e in events:
                    if e["event"] in (event, "exit"):
                        events.remove(e)
                        if e["event"] == "exit":
                            raise RuntimeError(f"the service ended before {event!r}; see {log.name}")
                        return e
                if not arrived.wait(max(0.0, deadline - time.monotonic())):
                    raise RuntimeError(f"no {event!r} within {timeout:.0f} s; see {log.name}")

    def send(line: str) -> None:
        proc.stdin.write(line + "\n")
        proc.stdin.flush()

    threading.Thread(target=read, daemon=True).start()
    sampler = TreeSampler(proc.pid, {"broker": broker_pid()} if broker_pid() else {})
    try:
        wait("start", 600)
        started = time.perf_counter()
        send("drain")
        wait("drained", 7_200)
        preload_s = time.perf_counter() - started
        units = [(orders_topic if t == "orders" else prices_topic, make, part, rows)
                 for t, make, part, rows in changes(keys, args.rate, args.warmup + args.seconds)]
        t_start, _, _ = Paced(bootstrap).run(units[: int(args.rate * args.warmup)], args.rate)
        before = sampler.snapshot()
        measured_from = time.time()
        _, t_end, produced = Paced(bootstrap).run(units[int(args.rate * args.warmup):], args.rate)
        send("drain")
        wait("drained", 600)
        after = sampler.snapshot()
        measured_to = time.time()
        send("stop")
        end = wait("end", 300)
    finally:
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        sampler.stop()
        log.close()
    window = sorted(d for ts, d, n in end["batches"] if measured_from * 1000 <= ts < measured_to * 1000 and n)
    cpu = cpu_between(before, after)
    service_cpu = sum(v for k, v in cpu.items() if k != "broker")
    lat = sorted(latency for _, latency in output_latencies(bootstrap, out, changejoin_reader("left-pk", sql=SQL,
                                                                                               timed=True),
                                                             int(measured_from * 1000)))
    return {"keys": keys, "ttl": ttl, "produce_s": produce_s, "preload_s": preload_s, "rows": produced,
            "achieved": produced / (t_end - measured_from), "batches": len(window),
            "batch_p50": percentile(window, 0.5), "batch_p99": percentile(window, 0.99),
            "cpu_s": service_cpu, "cpu_us_per_row": 1e6 * service_cpu / max(1, produced), "cpu": cpu,
            "lat_p50": percentile(lat, 0.5), "lat_p99": percentile(lat, 0.99), "outputs": len(lat)}


def table(runs: list[dict]) -> str:
    lines = ["| system | keys | TTL | preload s | rows/s | micro-batches | micro-batch p50 / p99 ms | "
             "CPU-µs per row | latency p50 / p99 ms |", "|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['system']} | {r['keys']:,} | {r['ttl'] or '-'} | {r['preload_s']:.0f} | "
                     f"{r['achieved']:,.0f} | {r['batches']} | {r['batch_p50'] or 0:,.0f} / {r['batch_p99'] or 0:,.0f} | "
                     f"{r['cpu_us_per_row']:,.0f} | {r['lat_p50'] or 0:,.0f} / {r['lat_p99'] or 0:,.0f} |")
    return "\n".join(lines)


def ratios(runs: list[dict]) -> str:
    """Each system's largest key count against its smallest, per TTL: the issue's 1.3x."""
    lines = []
    for system in dict.fromkeys(r["system"] for r in runs):
        for ttl in dict.fromkeys(r["ttl"] for r in runs):
            mine = [r for r in runs if r["system"] == system and r["ttl"] == ttl]
            if len(mine) < 2:
                continue
            small = min(mine, key=lambda r: r["keys"])
            for big in sorted((r for r in mine if r["keys"] != small["keys"]), key=lambda r: r["keys"]):
                def ratio(name):
                    return f"{big[name] / small[name]:.2f}x" if small[name] and big[name] is not None else "-"
                lines.append(f"- {system}, TTL {ttl or 'none'}: {big['keys']:,} keys against {small['keys']:,}: "
                             f"micro-batch p50 {ratio('batch_p50')}, p99 {ratio('batch_p99')}, "
                             f"CPU per row {ratio('cpu_us_per_row')}")
    return "\n".join(lines)


def plot(runs: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    for system in dict.fromkeys(r["system"] for r in runs):
        for ttl in dict.fromkeys(r["ttl"] for r in runs):
            mine = sorted((r for r in runs if r["system"] == system and r["ttl"] == ttl), key=lambda r: r["keys"])
            if not mine:
                continue
            label = f"{system}, TTL {ttl or 'none'}"
            a.plot([r["keys"] for r in mine], [(r["batch_p50"] or 0) / 1000 for r in mine], "o-", label=label)
            b.plot([r["keys"] for r in mine], [r["cpu_us_per_row"] for r in mine], "o-", label=label)
    for ax, title in ((a, "micro-batch p50 (s)"), (b, "CPU-µs per input row")):
        ax.set_xscale("log")
        ax.set_xlabel("join keys in the state")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, action="append")
    parser.add_argument("--ttl", default="1h", help="STATE_TTL of the variants with one ('' for none)")
    parser.add_argument("--rate", type=float, default=2000)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup", type=float, default=15)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--shuffle-partitions", type=int, default=2)
    parser.add_argument("--service-env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--before", type=Path, help="another checkout to run side by side")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    for name in ("bootstrap", "orders", "prices", "out", "env"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    from bench.harness.report import record_round
    from devkit.kafka_broker import KafkaBroker

    keys = args.keys or [10_000, 1_000_000, 5_000_000]
    systems = [("this", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    runs = []
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    with contextlib.nullcontext(external) if external else KafkaBroker(heap="1g") as bootstrap, \
            tempfile.TemporaryDirectory() as logs:
        for _ in range(args.rounds):
            for n in keys:
                for ttl in (None, args.ttl or None):
                    for name, checkout in systems:
                        run = {"system": name, **run_system(args, checkout, bootstrap, n, ttl, Path(logs))}
                        runs.append(run)
                        print(json.dumps(run), flush=True)
                    if not args.ttl:
                        break
    text = table(runs) + "\n\n" + ratios(runs)
    print(text)
    if args.record:
        cmd = "python -m bench.state_size_bench " + " ".join(sys.argv[1:])
        record_round("state-size", "state size: micro-batches and CPU per input row against the keys in the state",
                     f"`{cmd}`\n\n{text}", lambda png: plot(runs, png),
                     "micro-batch p50 and CPU per input row against the join keys in the state")


if __name__ == "__main__":
    main()
