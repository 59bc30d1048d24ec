"""Produce-to-output latency: a system reads two fresh topics into which this process produces
at a paced rate; each output record's log-append time minus the producer clock its input carries."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import ROOT
from .changejoin import service_settings
from .data import (TIMED_ORDERS, TIMED_PRICES, TIMED_SCHEMAS, changelogs, debezium, new_producer, price_partition,
                   produce_retrying)
from .outputs import (READER, changejoin_reader, debezium_reader, end_offsets, end_offsets_total, flink_avro_reader,
                      records)
from .peers import flink_command
from .processes import TreeSampler, cpu_between
from .report import percentile


def latency_sql(scenario: str) -> str:
    """The scenario's join with both inputs' producer clocks (order_time, price_time) selected."""
    if scenario == "left-pk":
        return ("SELECT o.order_id, o.product, o.quantity, p.price, o.order_time, p.price_time "
                "FROM orders o LEFT JOIN prices p ON o.product = p.product")
    return "SELECT o.order_id, p.price, o.order_time, p.price_time FROM orders o JOIN prices p ON o.product = p.product"


TIMED_ENV = {"LEFT_SCHEMA_FILE": str(TIMED_SCHEMAS / "orders_timed.avsc"),
             "RIGHT_SCHEMA_FILE": str(TIMED_SCHEMAS / "prices_timed.avsc")}


def child_changejoin_latency(args) -> None:
    """The service on live topics with its default trigger (TRIGGER_INTERVAL, MAX_RECORDS_PER_TRIGGER
    unset) until a line on stdin says stop (``drain``: answer ``drained`` once every record
    available has been processed); reports start/end as JSON lines."""
    from service.app import Service

    emit = lambda event, **f: print(json.dumps({"event": event, **f}), flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory() as work:
        settings = service_settings(
            args.bootstrap, args.scenario, None, args.shuffle_partitions, f"{work}/cp", args.out,
            orders_topic=args.orders, prices_topic=args.prices, sql=latency_sql(args.scenario),
            extra={**TIMED_ENV, "TRIGGER_INTERVAL": None, **service_env(args)})
        service = Service(settings)
        service.spark  # noqa: B018
        query = service.start()
        emit("start")
        while sys.stdin.readline().strip() == "drain":  # every record produced so far: joined and written
            service.process_available()
            emit("drained")
        progress = list(query.recentProgress)
        service.stop(graceful_timeout_s=30)
        service.spark.stop()
    if os.environ.get("CHANGEJOIN_BENCH_PROGRESS"):  # every micro-batch's progress, for a closer look
        Path(os.environ["CHANGEJOIN_BENCH_PROGRESS"]).write_text(json.dumps([json.loads(p.json) for p in progress]))
    with_input = [p for p in progress if p["numInputRows"]]
    d = sorted(p["durationMs"].get("triggerExecution", 0) for p in with_input)
    emit("end", elapsed=0, batches=len(d), batch_p50=percentile(d, 0.5),
         batch_p99=percentile(d, 0.99), phases=batch_phases(with_input))


def latency_rates(args) -> list[float]:
    """``--latency-rate``: one rate or a comma-separated list of them (input rows/s)."""
    try:
        rates = [float(r) for r in (args.latency_rate or "").split(",") if r.strip()]
    except ValueError:
        raise SystemExit(f"--latency-rate takes rows/s, comma-separated: {args.latency_rate!r}") from None
    if any(r <= 0 for r in rates):
        raise SystemExit(f"--latency-rate: rates are positive: {args.latency_rate!r}")
    return rates


def service_env(args) -> dict[str, str]:
    """``--service-env NAME=VALUE`` options as a dict of the service's environment variables."""
    pairs = [pair.partition("=") for pair in args.service_env]
    bad = [name for name, eq, _ in pairs if not eq or not name]
    if bad:
        raise SystemExit(f"--service-env takes NAME=VALUE, got {bad}")
    return {name: value for name, _, value in pairs}


def batch_phases(progress: list[dict]) -> dict[str, int]:
    """Median ms of each phase Spark times in a micro-batch (``durationMs``: addBatch is the
    job that runs the join and produces, the others the trigger's own work), over ``progress``."""
    names = {name for p in progress for name in p["durationMs"]}
    return {name: round(statistics.median(p["durationMs"].get(name, 0) for p in progress)) for name in sorted(names)}


class Paced:
    """Produces ``units`` ((topic, value, headers, partition, rows, stamp) callables) at ``rate``
    input rows/s in 10 ms steps; ``stamp`` sets the producer's clock in the row just before it is
    encoded."""

    def __init__(self, bootstrap: str):
        self.producer = new_producer(bootstrap, **{"linger.ms": 5})

    def run(self, units, rate: float) -> tuple[float, float, int]:
        start = time.time()
        done = 0
        it = iter(units)
        unit = next(it, None)
        while unit is not None:
            due = (time.time() - start) * rate
            while unit is not None and done < due:
                topic, make, partition, rows = unit
                value, headers = make(int(time.time() * 1000))
                produce_retrying(self.producer, topic, value, partition, headers)
                done += rows
                unit = next(it, None)
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(60)
        return start, time.time(), done


def latency_units(scenario: str, system: str, orders, prices, orders_topic: str, prices_topic: str):
    """The records of a latency run, orders and prices interleaved, each with its producer clock
    set when it is produced (a retraction carries the clock of the row it retracts: same dict)."""
    import io

    import fastavro

    def avro_unit(topic, schema, column, kind, row, partition):
        def make(now):
            row.setdefault(column, now)
            buffer = io.BytesIO()
            fastavro.schemaless_writer(buffer, schema, row)
            return buffer.getvalue(), [("rowkind", kind.encode())]
        return topic, make, partition, 1

    def json_unit(topic, column, message, rows, partition):
        def make(now):
            for side in ("before", "after"):
                if message[side] is not None:
                    message[side].setdefault(column, now)
            return json.dumps(message, separators=(",", ":")).encode(), None
        return topic, make, partition, rows

    if system == "changejoin":
        o = [avro_unit(orders_topic, TIMED_ORDERS, "order_time", k, r, r["order_id"] % 2) for k, r in orders]
        p = [avro_unit(prices_topic, TIMED_PRICES, "price_time", k, r, price_partition(r))
             for k, r in prices]
    elif scenario == "left-pk":
        o = [json_unit(orders_topic, "order_time", m, n, (m["after"] or m["before"])["order_id"] % 2) for m, n in debezium(orders)]
        p = [json_unit(prices_topic, "price_time", m, n, price_partition(m["after"] or m["before"]))
             for m, n in debezium(prices)]
    else:  # Flink reads inner-nopk's Avro bodies (insert-only): no header needed, same bytes
        o = [avro_unit(orders_topic, TIMED_ORDERS, "order_time", k, r, r["order_id"] % 2) for k, r in orders]
        p = [avro_unit(prices_topic, TIMED_PRICES, "price_time", k, r, price_partition(r))
             for k, r in prices]
    # interleave by input rows so both sides advance together
    out, i, j, ro, rp = [], 0, 0, 0, 0
    while i < len(o) or j < len(p):
        if j >= len(p) or (i < len(o) and ro <= rp):
            out.append(o[i]); ro += o[i][3]; i += 1  # noqa: E702
        else:
            out.append(p[j]); rp += p[j][3]; j += 1  # noqa: E702
    return out


def commit_times(consumer, progress_topic: str) -> dict[tuple[int, int], int]:
    """changejoin with DELIVERY=exactly-once: (task partition, micro-batch) -> when its transaction
    committed, near enough: the time its progress marker was produced, just before the commit (the
    commit's round trip, ~10-20 ms, is not counted). Empty without a progress topic."""
    ends = end_offsets(consumer, progress_topic)
    out: dict[tuple[int, int], int] = {}
    for msg in records(consumer, progress_topic, ends or {}):
        marker = json.loads(msg.value())
        out[(marker["partition"], marker["batch"])] = msg.timestamp()[1]
    return out


def output_latencies(bootstrap: str, topic: str, reader, since_ms: int) -> list[tuple[int, int]]:
    """(cause, latency) in ms of every +I/+U output record caused by an input produced at or after
    ``since_ms``, in the topic's order: the cause is the later of the two producer clocks the record
    carries (the input that made it), the latency the time it became visible to a ``read_committed``
    consumer minus it: its log-append time, or under changejoin's exactly-once delivery the later
    of that and its transaction's commit (:func:`commit_times`).
    Retractions carry the clocks of older rows: left out. So are rows with a side padded with NULLs
    (a clock is NULL): the LEFT join pads an order again when its product's price is deleted, and
    that row carries only the order's older clock, not the deletion's (measured as latency, it gave
    both systems a p99 near the run's length)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{time.time_ns()}", **READER})
    try:
        # the service's default PROGRESS_TOPIC: its default transactional id prefix's (config.py)
        committed = commit_times(consumer, f"changejoin-{topic}.progress") or commit_times(consumer, f"{topic}.progress")
        out = []
        for msg in records(consumer, topic, end_offsets(consumer, topic, required=True)):
            _, sign, row = reader(msg)
            if sign < 0:
                continue
            if row[-1] is None or row[-2] is None:
                continue
            cause = max(row[-2:])
            if cause >= since_ms:
                visible = msg.timestamp()[1]
                if committed:
                    headers = dict(msg.headers() or [])
                    task = int(headers["changejoin.seq"].split(b":")[0])
                    visible = max(visible, committed[(task, int(headers["changejoin.batch"]))])
                out.append((cause, visible - cause))
        return out
    finally:
        consumer.close()


def latency_run(args, bootstrap: str, scenario: str, system: str, rate: float, fpython, fjars, logs: Path,
                extra: dict) -> dict:
    """One latency run: ``system`` reads two fresh topics; ``rate`` input rows/s (both sides) are
    produced for ``--latency-warmup`` + ``--latency-duration`` s, once a probe pair has come out
    joined; then the output is left to settle and the latencies of the records caused after the
    warm-up are read back."""
    from confluent_kafka.admin import AdminClient, NewTopic

    tag = f"lat-{scenario}-{system}-{time.time_ns() % 10**8}"
    orders_topic, prices_topic, out = f"{tag}-orders", f"{tag}-prices", f"{tag}-out"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(orders_topic, 2), NewTopic(prices_topic, 2),
                                   NewTopic(out, 2, config={"message.timestamp.type": "LogAppendTime"})])
    for f in futures.values():
        f.result(30)
    per_side = int(rate / 2 * (args.latency_warmup + args.latency_duration)) + 1
    orders, prices = changelogs(per_side, args.keys, scenario, seed=11)
    units = latency_units(scenario, system, orders, prices, orders_topic, prices_topic)
    log = logs / f"{tag}.log"
    if system == "changejoin":
        cmd = [sys.executable, "-m", "bench.compare", "--child", "changejoin-latency",
               "--bootstrap", bootstrap, "--scenario", scenario, "--orders", orders_topic, "--prices", prices_topic,
               "--out", out, "--shuffle-partitions", str(args.shuffle_partitions)]
        cmd += [a for pair in args.service_env for a in ("--service-env", pair)]
        reader = changejoin_reader(scenario, sql=latency_sql(scenario), timed=True)
    else:
        cmd = flink_command(fpython, fjars, bootstrap, scenario, system, orders_topic, prices_topic,
                            "debezium-json" if scenario == "left-pk" else "avro", "kafka", out, "--unbounded", "--timed")
        reader = debezium_reader if scenario == "left-pk" else flink_avro_reader(
            [("order_id", "long"), ("price", "double"), ("order_time", "long"), ("price_time", "long")])
    stderr = open(log, "w")
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    sampler = TreeSampler(proc.pid, extra)
    events: list[dict] = []
    started = threading.Event()

    drained = threading.Event()

    def read_events():
        for line in proc.stdout:
            if line.startswith('{"event"'):
                events.append(json.loads(line))
                if events[-1]["event"] == "start":
                    started.set()
                if events[-1]["event"] == "drained":
                    drained.set()
        started.set()
        drained.set()
    reader_thread = threading.Thread(target=read_events, daemon=True)
    reader_thread.start()
    try:
        started.wait(300)
        if proc.poll() is not None:
            raise RuntimeError(f"{system} latency run failed to start; see {log}")
        # ready: a probe order and price of a product of their own have come out joined (so the
        # job runs, its sources are assigned and its workers are up) before the clock starts
        probe = latency_units(scenario, system, [("+I", {"order_id": 10**12, "product": "p-probe", "quantity": 1})],
                              [("+I", {"product": "p-probe", "price": 1.0, "currency": "EUR"})],
                              orders_topic, prices_topic)
        Paced(bootstrap).run(probe, 1000)
        deadline = time.time() + 300
        while end_offsets_total(bootstrap, out) == 0 and time.time() < deadline and proc.poll() is None:
            time.sleep(0.5)
        if end_offsets_total(bootstrap, out) == 0:
            raise RuntimeError(f"{system}: no output for the probe rows within 300 s; see {log}")
        before = sampler.snapshot()
        t_start, t_end, produced = Paced(bootstrap).run(units, rate)
        # settle: changejoin until its query has processed every record available; Flink (no such
        # signal) until the output has not grown for 20 s; at most 600 s
        if system == "changejoin":
            proc.stdin.write("drain\n")
            proc.stdin.flush()
            drained.wait(600)
        last, still, deadline = -1, time.time(), time.time() + 600
        while time.time() < deadline and time.time() - still < (3 if system == "changejoin" else 20):
            n = end_offsets_total(bootstrap, out)
            if n != last:
                last, still = n, time.time()
            time.sleep(1)
        after = sampler.snapshot()
    finally:
        if system == "changejoin":
            try:
                proc.stdin.write("stop\n")
                proc.stdin.flush()
                proc.wait(120)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, 15)
        else:
            os.killpg(proc.pid, 15)  # the Flink job's own process group (started here)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        reader_thread.join(10)
        sampler.stop()
        stderr.close()
    since = int((t_start + args.latency_warmup) * 1000)
    caused = output_latencies(bootstrap, out, reader, since)
    lat = sorted(latency for _, latency in caused)
    end = next((e for e in events if e["event"] == "end"), {})
    pct = lambda q: percentile(lat, q)  # noqa: E731
    # keeping up: the median latency of what the first and the last 10 s measured caused; a backlog
    # that grows through the run shows as a last far above the first
    edge = lambda lo, hi: percentile(sorted(l for c, l in caused if lo <= c < hi), 0.5)  # noqa: E731
    first, last = edge(since, since + 10_000), edge(int(t_end * 1000) - 10_000, int(t_end * 1000))
    return {"scenario": scenario, "system": system, "rate": rate, "achieved": produced / (t_end - t_start),
            "duration": t_end - t_start, "outputs": len(lat), "p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99),
            "max": lat[-1] if lat else None, "p50_first": first, "p50_last": last, "cpu": cpu_between(before, after),
            "peak_rss_mb": round(sampler.peak_rss / 2**20),
            "batch_p50": end.get("batch_p50"), "batch_p99": end.get("batch_p99"), "phases": end.get("phases")}
