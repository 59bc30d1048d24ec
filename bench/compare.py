"""changejoin side by side with Flink 2.3 and Spark's native join, on the same Kafka topics.

    python bench/compare.py [--rows 200000] [--keys ROWS/20] [--scenarios all] [--rounds 2]
                            [--systems ...] [--mini-batch-size 1000]
                            [--latency left-pk,inner-nopk [--latency-rate R[,R...]] [--latency-duration 60]]
                            [--record]                       # ./dev bench compare [...]

Each data set's changelogs (bench/pipeline_bench.py's seeded, linear generator) are generated once
and preloaded once into a single-node Kafka (service/kafka_broker.py) shared by every system;
then, one run at a time, in each round:

- ``changejoin``: the service end to end (pipeline_bench.run_changejoin), Avro in, Avro out;
- ``flink-p1`` / ``flink-p2``: the same SQL in Flink 2.3 (bench/flink_job.py, PyFlink Table API,
  streaming mode, RocksDB, parallelism 1 and 2) with a Kafka sink, and ``flink-p1-bh`` /
  ``flink-p2-bh`` with a blackhole sink (the sink's share);
- ``spark-native`` (inner-nopk only): Spark's own stream-stream join on the same rows from Parquet
  files (bench/spark_native_job.py).

Scenarios: ``left-pk``, ``inner-nopk``, their mini-batch variants ``left-pk-mb`` /
``inner-nopk-mb`` on the same topics (changejoin ``MINI_BATCH_SIZE``, Flink
``table.exec.mini-batch.*`` with the same size and a 1 s allowed latency), and ``temporal-left``,
an event-time temporal LEFT join. Output agreement: inner-nopk's output count and left-pk's and
temporal-left's final tables are fixed by the data; the harness computes them from the changelogs
and checks every run's output against them (left-pk's changelog length depends on how the inputs
interleave at the join, so its output is materialized and compared by digest).

How Flink reads the changelog: changejoin's inputs carry the change kind in a ``rowkind`` header
and Flink SQL cannot make a row's RowKind from a header. Insert-only inputs (inner-nopk, the
temporal join's orders) are the very same Avro topics (``avro`` format). For a changelog (left-pk,
the temporal join's versioned prices) the harness writes the same changelog a second time, for
Flink, as ``debezium-json`` (each -U/+U pair one ``u`` message with before/after, which Flink reads
back as the same -U, +U rows; +I = ``c``; same partitions, same order), into ``<topic>-dbz``.

Every run is its own process tree; a sampler reads /proc/<pid>/stat (utime+stime) and VmRSS of
every process in it: CPU seconds from the job's start to its end, split into JVM and Python
processes, and the tree's peak RSS. Input rows/s = 2 x rows / (start of the query or job until
every input row is processed). Output records are counted in the output topic. Also per run:
micro-batch duration p50/p99 (the query's progress), time to first output (the output topic's
first record, polled from the start), state on disk (see ``STATE_NOTE``).

``--latency``: after the throughput runs, each system (``--latency-systems``) reads two fresh
topics into which this process produces at ``--latency-rate`` input rows/s (default half of
changejoin's median throughput of that scenario in this invocation) for a warm-up and then
``--latency-duration`` s; changejoin with its default trigger (``TRIGGER_INTERVAL`` 500 ms,
``MAX_RECORDS_PER_TRIGGER`` 100000), Flink with unbounded sources. The inputs carry the producer's
clock (epoch ms, set as each record is produced) in ``order_time`` / ``price_time``
(bench/schemas/*_timed.avsc), and the join selects both into its output, whose topic stamps each
record with the broker's log-append time: an output +I/+U record's latency is its append time
minus the later of the two clocks (the input that caused it); p50/p90/p99/max are reported, and
the p50 of what the first and the last 10 s measured caused (a system that falls behind shows a
last far above its first). Several rates (``--latency-rate 1000,2000,4000``) make a sweep.

Flink runs from its own virtualenv, ``.cache/flink-venv`` (``apache-flink==2.3.0``, made here on
first use; never in the project's venv), with Flink's Kafka SQL connector and Avro format from
Maven Central (jars/flink-peer/pom.xml). ``--record`` appends the round's tables to
bench/RESULTS.md and plots bench/compare-<date>.png (matplotlib, the ``bench`` extra): rows/s per
system and scenario, and the latency percentiles.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pipeline_bench  # noqa: E402

FLINK_VERSION = "2.3.0"
FLINK_VENV = ROOT / ".cache" / "flink-venv"


# --- Flink's environment ---------------------------------------------------------------------

def flink_python() -> str:
    """Flink's own virtualenv's Python, made (pip install apache-flink) on first use."""
    python = FLINK_VENV / "bin" / "python"
    probe = [str(python), "-c", f"import importlib.metadata as m; assert m.version('apache-flink') == '{FLINK_VERSION}'"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return str(python)
    print(f"making {FLINK_VENV} with apache-flink=={FLINK_VERSION} (once, ~850 MB)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(FLINK_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"apache-flink=={FLINK_VERSION}"], check=True)
    return str(python)


def flink_jars() -> list[str]:
    from service.jars import jars

    return [str(j) for j in jars("flink-peer")]


# --- inputs ---------------------------------------------------------------------------------

def debezium(changes) -> list[tuple[dict, int]]:
    """A changelog as debezium-json messages: -U/+U pairs become one ``u`` with before/after
    (a -U whose +U was cut off by the row count is a ``d``); the int is the rows it carries."""
    messages, pending = [], None
    for kind, row in changes:
        if kind == "-U":
            pending = row
        elif kind == "+U":
            assert pending is not None, "+U without its -U"
            messages.append(({"before": pending, "after": row, "op": "u"}, 2))
            pending = None
        elif kind == "+I":
            messages.append(({"before": None, "after": row, "op": "c"}, 1))
        else:  # -D
            messages.append(({"before": row, "after": None, "op": "d"}, 1))
    if pending is not None:
        messages.append(({"before": pending, "after": None, "op": "d"}, 1))
    return messages


def _producer(bootstrap: str, **extra):
    from confluent_kafka import Producer

    # idempotent: retries never reorder a partition (pipeline_bench.preload)
    return Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                     "queue.buffering.max.messages": 1_000_000, "enable.idempotence": True, **extra})


def _produce(producer, topic, value, partition, headers=None) -> None:
    while True:
        try:
            producer.produce(topic, value=value, partition=partition, headers=headers)
            return
        except BufferError:
            producer.poll(0.05)


def preload_json(bootstrap: str, topic: str, messages, partition_of) -> None:
    producer = _producer(bootstrap)
    for message, _ in messages:
        _produce(producer, topic, json.dumps(message, separators=(",", ":")).encode(),
                 partition_of(message["after"] or message["before"]))
        producer.poll(0)
    producer.flush(600)


def write_parquet(directory: Path, rows: list[dict], chunk: int, types: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    for n, i in enumerate(range(0, len(rows), chunk)):
        part = rows[i:i + chunk]
        table = pa.table({name: pa.array([r[name] for r in part], kind) for name, kind in types.items()})
        pq.write_table(table, directory / f"part-{n:05d}.parquet")


def inner_expected(orders, prices) -> int:
    """inner-nopk is insert-only: the join's output is fixed, sum over products of |o| x |p|."""
    o = Counter(row["product"] for _, row in orders)
    p = Counter(row["product"] for _, row in prices)
    return sum(n * p[k] for k, n in o.items())


def _final(changes) -> Counter:
    """The table a changelog materializes to (a multiset of rows as dict items)."""
    table: Counter = Counter()
    for kind, row in changes:
        table[tuple(row.items())] += 1 if kind in ("+I", "+U") else -1
    return table


def table_digest(rows) -> str:
    """The digest of a materialized table: its rows (tuples, each once per count), in a fixed order."""
    import hashlib

    return hashlib.sha256(repr(sorted(rows, key=repr)).encode()).hexdigest()[:12]


def left_pk_expected(orders, prices) -> tuple[int, str]:
    """left-pk's final table, fixed by the data: the LEFT join of the final orders with the final
    prices (both keyed), whatever the interleaving; (rows, digest)."""
    price_of = {dict(row)["product"]: dict(row)["price"] for row, n in _final(prices).items() if n > 0}
    rows = []
    for row, n in _final(orders).items():
        o = dict(row)
        rows += [(o["order_id"], o["product"], o["quantity"], price_of.get(o["product"]))] * n
    return len(rows), table_digest(rows)


def temporal_expected(orders, prices) -> tuple[int, str]:
    """temporal-left's output, fixed by the data: every order (but the closing one) with the price
    of its product's version valid at the order's time (None before the first); (rows, digest)."""
    import bisect

    versions: dict[str, list] = {}
    for kind, row in prices:
        if kind != "-U":  # dropped before the join (changejoin and Flink alike)
            versions.setdefault(row["product"], []).append((row["price_time"], row["price"] if kind != "-D" else None))
    for v in versions.values():
        v.sort(key=lambda tp: tp[0])
    rows = []
    for _, o in orders:
        if o["order_id"] == pipeline_bench.END_ORDER_ID:
            continue
        v = versions.get(o["product"], [])
        i = bisect.bisect_right(v, o["order_time"], key=lambda tp: tp[0])
        rows.append((o["order_id"], o["product"], o["quantity"], v[i - 1][1] if i else None))
    return len(rows), table_digest(rows)


def end_offsets(consumer, topic: str, required: bool = False) -> dict[int, int] | None:
    """Partition -> end offset of ``topic``; None when the topic does not exist (a KeyError when
    it is ``required``)."""
    from confluent_kafka import TopicPartition

    meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
    if meta is None or meta.error is not None:
        if required:
            raise KeyError(topic)
        return None
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in meta.partitions}


def records(consumer, topic: str, ends: dict[int, int]):
    """Every record of ``topic`` from the beginning up to ``ends`` (``end_offsets``)."""
    from confluent_kafka import TopicPartition

    total, seen = sum(ends.values()), 0
    consumer.assign([TopicPartition(topic, p, 0) for p in ends])
    while seen < total:
        for msg in consumer.consume(10_000, timeout=5):
            if msg.error():
                continue
            seen += 1
            yield msg


def output_counts(bootstrap: str, topic: str, materialize=None, skip=None) -> tuple[int, dict, str | None]:
    """Records in ``topic`` (end offsets; no producer here is transactional). With
    ``materialize`` (message -> (kind, sign, row)), also the count by kind and a digest of the
    final table the changelog materializes to (a multiset: +I/+U add a row, -U/-D remove one);
    rows for which ``skip`` is true are left out of it."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{time.time_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        ends = end_offsets(consumer, topic)
        if ends is None:
            return 0, {}, None
        total = sum(ends.values())
        if materialize is None or not total:
            return total, {}, None
        kinds: Counter = Counter()
        table: Counter = Counter()
        for msg in records(consumer, topic, ends):
            label, sign, row = materialize(msg)
            if skip and skip(row):
                kinds["skipped"] += 1
                continue
            kinds[label] += 1
            table[row] += sign
        negative = sum(1 for n in table.values() if n < 0)
        rows = [row for row, n in table.items() for _ in range(max(0, n))]
        kinds["final rows"] = len(rows)
        if negative:
            kinds["NEGATIVE"] = negative
        return total, dict(kinds), table_digest(rows)
    finally:
        consumer.close()


def changejoin_reader(scenario: str, sql: str | None = None, timed: bool = False):
    """(kind, sign, row) of a changejoin output record: Avro body, RowKind in the header."""
    import io

    import fastavro

    from service.planner import build_plan

    extra = {"LEFT_SCHEMA_FILE": str(pipeline_bench.TIMED_SCHEMAS / "orders_timed.avsc"),
             "RIGHT_SCHEMA_FILE": str(pipeline_bench.TIMED_SCHEMAS / "prices_timed.avsc")} if timed else None
    with tempfile.TemporaryDirectory() as work:
        plan = build_plan(pipeline_bench.service_settings("127.0.0.1:1", scenario, 1, 1, f"{work}/cp", sql=sql,
                                                          extra=extra))
    schema = fastavro.parse_schema(plan.output_schema)

    def read(msg):
        kind = dict(msg.headers() or [])["rowkind"].decode()
        row = fastavro.schemaless_reader(io.BytesIO(msg.value()), schema)
        return kind, 1 if kind in ("+I", "+U") else -1, tuple(row.values())
    return read


def debezium_reader(msg):
    """(kind, sign, row) of a Flink debezium-json output record (+I/+U -> c, -U/-D -> d)."""
    message = json.loads(msg.value())
    if message["op"] == "c":
        return "c (+I/+U)", 1, tuple(message["after"].values())
    return "d (-U/-D)", -1, tuple(message["before"].values())


def flink_avro_reader(fields: list[tuple[str, object]]):
    """(kind, sign, row) of a Flink ``avro`` output record (insert-only): the schema Flink derives
    from the sink's columns (a nullable column is a union with null first)."""
    import io

    import fastavro

    schema = fastavro.parse_schema({"type": "record", "name": "record",
                                    "fields": [{"name": n, "type": t} for n, t in fields]})

    def read(msg):
        return "+I", 1, tuple(fastavro.schemaless_reader(io.BytesIO(msg.value()), schema).values())
    return read


TEMPORAL_FLINK_FIELDS = [("order_id", "long"), ("product", "string"), ("quantity", "int"), ("price", ["null", "double"])]


# --- measuring a process tree ---------------------------------------------------------------

class TreeSampler:
    """Samples every process under ``root`` (and ``extra`` pids, e.g. the broker) every 0.2 s, and
    the size of ``state_dir`` (if given) every second."""

    def __init__(self, root: int, extra: dict[str, int], state_dir: str | None = None):
        self.root, self.extra, self.state_dir = root, extra, state_dir
        self.cpu: dict[int, tuple[str, float]] = {}  # last seen per pid
        self.peak_rss = 0
        self.peak_state = 0
        self._ticks = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        stats = pipeline_bench.processes()
        tree = pipeline_bench.process_tree(stats, self.root)
        with self._lock:
            rss = 0
            for pid in tree:
                if pid in stats:
                    _, comm, cpu, r = stats[pid]
                    kind = "jvm" if comm == "java" else "python" if comm.startswith("python") else "other"
                    self.cpu[pid] = (kind, cpu)
                    rss += r
            for label, pid in self.extra.items():
                if pid in stats:
                    self.cpu[pid] = (label, stats[pid][2])
            self.peak_rss = max(self.peak_rss, rss)

    def snapshot(self) -> dict[int, tuple[str, float]]:
        self.sample()
        with self._lock:
            return dict(self.cpu)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self.sample()
            self._ticks += 1
            if self.state_dir and self._ticks % 5 == 0:
                self.peak_state = max(self.peak_state, pipeline_bench.directory_bytes(self.state_dir))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def cpu_between(before: dict, after: dict) -> dict[str, float]:
    out: Counter = Counter()
    for pid, (kind, cpu) in after.items():
        out[kind] += cpu - before.get(pid, (kind, 0.0))[1]
    return {k: round(v, 1) for k, v in out.items()}


class FirstOutput:
    """Seconds from ``start()`` until ``topic`` holds its first record (end offsets polled every
    0.1 s): the time to first output of a system writing to Kafka, measured the same way for all."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap, self.topic = bootstrap, topic
        self.first: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"first-{time.time_ns()}"})
        try:
            partitions = None
            while not self._stop.wait(0.1):
                try:  # the topic may be new (made by the service): its leaders may not be known yet
                    if partitions is None:
                        meta = consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
                        if meta is None or meta.error is not None or not meta.partitions:
                            continue
                        partitions = [TopicPartition(self.topic, p) for p in meta.partitions]
                    if any(consumer.get_watermark_offsets(tp, timeout=5)[1] > 0 for tp in partitions):
                        self.first = time.perf_counter() - self._t0
                        return
                except KafkaException:
                    continue
        finally:
            consumer.close()

    def stop(self) -> float | None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        return self.first


def run_measured(cmd: list[str], extra: dict[str, int], env: dict | None = None, log: Path | None = None,
                 state_dir: str | None = None, watch: tuple[str, str] | None = None) -> dict:
    """Run ``cmd``; it prints JSON lines ``{"event": "start"}`` and ``{"event": "end", ...}``.
    ``state_dir``: a directory whose peak size is sampled; ``watch``: (bootstrap, topic) whose
    first record is timed from the start event."""
    stderr = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT,
                            env={**os.environ, **(env or {})})
    sampler = TreeSampler(proc.pid, extra, state_dir)
    first = FirstOutput(*watch) if watch else None
    result, before, after = {}, {}, {}
    try:
        for line in proc.stdout:
            if not line.startswith('{"event"'):
                continue
            event = json.loads(line)
            if event["event"] == "start":
                before = sampler.snapshot()
                if first:
                    first.start()
            elif event["event"] == "end":
                after = sampler.snapshot()
                result = event
        proc.wait()
    finally:
        sampler.stop()
        if first:
            first.stop()
        if log:
            stderr.close()
    if proc.returncode != 0 or not result:
        raise RuntimeError(f"{cmd[1]} failed (exit {proc.returncode}); see {log}")
    result["cpu"] = cpu_between(before, after)
    result["peak_rss_mb"] = round(sampler.peak_rss / 2**20)
    if first and first.first is not None:
        result["first_output"] = first.first
    if state_dir and "state_bytes" not in result:
        result["state_bytes"] = sampler.peak_state
    return result


def child_changejoin(args) -> None:
    """One changejoin run in this (child) process, reporting start/end as JSON lines."""
    emit = lambda event, **f: print(json.dumps({"event": event, **f}), flush=True)  # noqa: E731
    result = pipeline_bench.run_changejoin(args.bootstrap, args.scenario, args.rows, args.max_per_trigger,
                                           args.shuffle_partitions, out=args.out,
                                           on_start=lambda: emit("start"), mini_batch_size=args.mini_batch_size)
    d = result["durations"]
    emit("end", elapsed=result["elapsed"], batches=len(d), state_bytes=result["state_bytes"],
         batch_p50=pipeline_bench.percentile(d, 0.5), batch_p99=pipeline_bench.percentile(d, 0.99))


# --- the latency runs -----------------------------------------------------------------------

def latency_sql(scenario: str) -> str:
    """The scenario's join with both inputs' producer clocks (order_time, price_time) selected."""
    if scenario == "left-pk":
        return ("SELECT o.order_id, o.product, o.quantity, p.price, o.order_time, p.price_time "
                "FROM orders o LEFT JOIN prices p ON o.product = p.product")
    return "SELECT o.order_id, p.price, o.order_time, p.price_time FROM orders o JOIN prices p ON o.product = p.product"


TIMED_ENV = {"LEFT_SCHEMA_FILE": str(pipeline_bench.TIMED_SCHEMAS / "orders_timed.avsc"),
             "RIGHT_SCHEMA_FILE": str(pipeline_bench.TIMED_SCHEMAS / "prices_timed.avsc")}


def child_changejoin_latency(args) -> None:
    """The service on live topics with its default trigger (TRIGGER_INTERVAL, MAX_RECORDS_PER_TRIGGER
    unset) until a line on stdin says stop (``drain``: answer ``drained`` once every record
    available has been processed); reports start/end as JSON lines."""
    from service.app import Service

    emit = lambda event, **f: print(json.dumps({"event": event, **f}), flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory() as work:
        settings = pipeline_bench.service_settings(
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
    emit("end", elapsed=0, batches=len(d), batch_p50=pipeline_bench.percentile(d, 0.5),
         batch_p99=pipeline_bench.percentile(d, 0.99), phases=batch_phases(with_input))


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
        self.producer = _producer(bootstrap, **{"linger.ms": 5})

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
                _produce(self.producer, topic, value, partition, headers)
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
        o = [avro_unit(orders_topic, pipeline_bench.TIMED_ORDERS, "order_time", k, r, r["order_id"] % 2) for k, r in orders]
        p = [avro_unit(prices_topic, pipeline_bench.TIMED_PRICES, "price_time", k, r, pipeline_bench.price_partition(r))
             for k, r in prices]
    elif scenario == "left-pk":
        o = [json_unit(orders_topic, "order_time", m, n, (m["after"] or m["before"])["order_id"] % 2) for m, n in debezium(orders)]
        p = [json_unit(prices_topic, "price_time", m, n, pipeline_bench.price_partition(m["after"] or m["before"]))
             for m, n in debezium(prices)]
    else:  # Flink reads inner-nopk's Avro bodies (insert-only): no header needed, same bytes
        o = [avro_unit(orders_topic, pipeline_bench.TIMED_ORDERS, "order_time", k, r, r["order_id"] % 2) for k, r in orders]
        p = [avro_unit(prices_topic, pipeline_bench.TIMED_PRICES, "price_time", k, r, pipeline_bench.price_partition(r))
             for k, r in prices]
    # interleave by input rows so both sides advance together
    out, i, j, ro, rp = [], 0, 0, 0, 0
    while i < len(o) or j < len(p):
        if j >= len(p) or (i < len(o) and ro <= rp):
            out.append(o[i]); ro += o[i][3]; i += 1  # noqa: E702
        else:
            out.append(p[j]); rp += p[j][3]; j += 1  # noqa: E702
    return out


def output_latencies(bootstrap: str, topic: str, reader, since_ms: int) -> list[tuple[int, int]]:
    """(cause, latency) in ms of every +I/+U output record caused by an input produced at or after
    ``since_ms``, in the topic's order: the cause is the later of the two producer clocks the record
    carries (the input that made it), the latency the record's log-append time minus it.
    Retractions carry the clocks of older rows: left out. So are rows with a side padded with NULLs
    (a clock is NULL): the LEFT join pads an order again when its product's price is deleted, and
    that row carries only the order's older clock, not the deletion's (measured as latency, it gave
    both systems a p99 near the run's length)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{time.time_ns()}",
                         "enable.auto.commit": False})
    try:
        out = []
        for msg in records(consumer, topic, end_offsets(consumer, topic, required=True)):
            _, sign, row = reader(msg)
            if sign < 0:
                continue
            if row[-1] is None or row[-2] is None:
                continue
            cause = max(row[-2:])
            if cause >= since_ms:
                out.append((cause, msg.timestamp()[1] - cause))
        return out
    finally:
        consumer.close()


def end_offsets_total(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{time.time_ns()}"})
    try:
        return sum(end_offsets(consumer, topic, required=True).values())
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
    orders, prices = pipeline_bench.changelogs(per_side, args.keys, scenario, seed=11)
    units = latency_units(scenario, system, orders, prices, orders_topic, prices_topic)
    log = logs / f"{tag}.log"
    if system == "changejoin":
        cmd = [sys.executable, str(ROOT / "bench" / "compare.py"), "--child", "changejoin-latency",
               "--bootstrap", bootstrap, "--scenario", scenario, "--orders", orders_topic, "--prices", prices_topic,
               "--out", out, "--shuffle-partitions", str(args.shuffle_partitions)]
        cmd += [a for pair in args.service_env for a in ("--service-env", pair)]
        reader = changejoin_reader(scenario, sql=latency_sql(scenario), timed=True)
    else:
        p = system.split("-")[1][1:]
        cmd = [fpython, str(ROOT / "bench" / "flink_job.py"), "--bootstrap", bootstrap, "--scenario", scenario,
               "--parallelism", p, "--orders", orders_topic, "--prices", prices_topic,
               "--format", "debezium-json" if scenario == "left-pk" else "avro", "--sink", "kafka", "--out", out,
               "--jars", ",".join(fjars), "--unbounded", "--timed"]
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
    pct = lambda q: pipeline_bench.percentile(lat, q)  # noqa: E731
    # keeping up: the median latency of what the first and the last 10 s measured caused; a backlog
    # that grows through the run shows as a last far above the first
    edge = lambda lo, hi: pipeline_bench.percentile(sorted(l for c, l in caused if lo <= c < hi), 0.5)  # noqa: E731
    first, last = edge(since, since + 10_000), edge(int(t_end * 1000) - 10_000, int(t_end * 1000))
    return {"scenario": scenario, "system": system, "rate": rate, "achieved": produced / (t_end - t_start),
            "duration": t_end - t_start, "outputs": len(lat), "p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99),
            "max": lat[-1] if lat else None, "p50_first": first, "p50_last": last, "cpu": cpu_between(before, after),
            "peak_rss_mb": round(sampler.peak_rss / 2**20),
            "batch_p50": end.get("batch_p50"), "batch_p99": end.get("batch_p99"), "phases": end.get("phases")}


# --- the round ------------------------------------------------------------------------------

def broker_pid() -> int | None:
    for pid, (ppid, comm, _, _) in pipeline_bench.processes().items():
        if ppid == os.getpid() and comm == "java":
            return pid
    return None


ALL_SYSTEMS = "changejoin,flink-p1,flink-p2,flink-p1-bh,flink-p2-bh,spark-native"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="changelog rows per side")
    parser.add_argument("--keys", type=int, help="join keys (default rows / 20: the same output per input row at any size)")
    parser.add_argument("--scenarios", default=",".join(pipeline_bench.SCENARIOS),
                        help=f"comma-separated, of {','.join(pipeline_bench.SCENARIOS)} (default all)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--systems", default=ALL_SYSTEMS)
    parser.add_argument("--max-per-trigger", type=int, default=100_000)
    parser.add_argument("--shuffle-partitions", type=int, default=2)
    parser.add_argument("--mini-batch-size", type=int, default=1000,
                        help="-mb scenarios: changejoin's MINI_BATCH_SIZE and Flink's table.exec.mini-batch.size")
    parser.add_argument("--latency", default="",
                        help="comma-separated scenarios (left-pk, inner-nopk) for a latency run after the throughput runs")
    parser.add_argument("--latency-systems", default="changejoin,flink-p2")
    parser.add_argument("--latency-rate",
                        help="input rows/s of the latency runs, comma-separated for several (default: half of "
                             "changejoin's median in rows/s in this invocation's throughput runs of the scenario)")
    parser.add_argument("--latency-duration", type=float, default=60.0, help="seconds measured")
    parser.add_argument("--latency-warmup", type=float, default=45.0,
                        help="seconds produced first, not measured (changejoin's micro-batches settle ~30 s "
                             "after its first output: JIT, new Python workers, state filling up)")
    parser.add_argument("--service-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for changejoin's latency runs (repeatable), e.g. "
                             "SPARK_CONF_spark_python_unix_domain_socket_enabled=true")
    parser.add_argument("--record", action="store_true", help="append to bench/RESULTS.md and plot")
    parser.add_argument("--child", choices=["changejoin", "changejoin-latency"], help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--orders", help=argparse.SUPPRESS)
    parser.add_argument("--prices", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.keys is None:
        args.keys = max(1, args.rows // 20)
    if args.child == "changejoin":
        return child_changejoin(args)
    if args.child == "changejoin-latency":
        return child_changejoin_latency(args)
    latency_rates(args)  # a bad --latency-rate fails now, not after the throughput runs

    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in scenarios:
        if s not in pipeline_bench.SCENARIOS:
            parser.error(f"--scenarios: unknown {s!r}")
    systems = args.systems.split(",")
    latency = [s for s in args.latency.split(",") if s]
    if any(s not in ("left-pk", "inner-nopk") for s in latency):
        parser.error("--latency: left-pk and/or inner-nopk")
    flink = any(s.startswith("flink") for s in systems + (args.latency_systems.split(",") if latency else []))
    fpython, fjars = (flink_python(), flink_jars()) if flink else (None, None)
    logs = Path(tempfile.mkdtemp(prefix="compare-logs-"))
    started = datetime.now(timezone.utc)
    runs: list[dict] = []
    lat_runs: list[dict] = []
    expected: dict[str, dict] = {}
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)  # a background run (SIGINT ignored) stops like Ctrl-C
    try:
        measure(args, systems, scenarios, latency, fpython, fjars, logs, runs, lat_runs, expected)
    except KeyboardInterrupt:  # keep (and record) the runs done so far
        print("interrupted: reporting the runs finished so far", flush=True)
        args.rounds = f"{args.rounds} (interrupted)"
    report = render(args, scenarios, runs, lat_runs, expected, started)
    print(report)
    if args.record and any("failed" not in r for r in runs + lat_runs):
        png = ROOT / "bench" / f"compare-{started:%Y-%m-%d-%H%M}.png"
        plot(runs, lat_runs, png, args.rows)
        with open(ROOT / "bench" / "RESULTS.md", "a") as handle:
            handle.write("\n" + report.replace("PLOT", f"![rows/s per system and scenario; latency]({png.name})") + "\n")
    print(f"logs: {logs}")


def systems_of(scenario: str, systems: list[str]) -> list[str]:
    """Spark's native join runs the insert-only scenario only (no retractions, no mini-batch)."""
    return [s for s in systems if s != "spark-native" or scenario == "inner-nopk"]


def prepare(args, bootstrap: str, data: str, flink: bool, spark_native: bool, work: Path) -> dict:
    """Generate and preload one data set (left-pk, inner-nopk, temporal-left) once; what the runs
    need of it: Flink's topics and format, the expected output."""
    from service.sink import ensure_topics

    t0 = time.perf_counter()
    orders, prices = pipeline_bench.changelogs(args.rows, args.keys, data)
    gen_s = time.perf_counter() - t0
    load_s = pipeline_bench.load(bootstrap, data, args.rows, args.keys, changes=(orders, prices))
    orders_topic, prices_topic, _ = pipeline_bench.topics(data)
    info = {"flink_topics": (orders_topic, prices_topic), "format": "avro", "expected": {}}
    if flink and data == "left-pk":
        info["flink_topics"], info["format"] = (f"{orders_topic}-dbz", f"{prices_topic}-dbz"), "debezium-json"
        ensure_topics(bootstrap, {}, {t: 2 for t in info["flink_topics"]})
        preload_json(bootstrap, info["flink_topics"][0], debezium(orders), lambda r: r["order_id"] % 2)
        preload_json(bootstrap, info["flink_topics"][1], debezium(prices), pipeline_bench.price_partition)
    if flink and data == "temporal-left":  # orders: the same Avro topic; prices: a keyed changelog
        info["flink_topics"] = (orders_topic, f"{prices_topic}-dbz")
        ensure_topics(bootstrap, {}, {info["flink_topics"][1]: 2})
        preload_json(bootstrap, info["flink_topics"][1], debezium(prices), pipeline_bench.price_partition)
    if data == "inner-nopk":
        info["expected"]["count"] = inner_expected(orders, prices)
        if spark_native:
            half = max(1, args.max_per_trigger // 2)
            write_parquet(work / data / "orders", [r for _, r in orders], half,
                          {"order_id": "int64", "product": "string", "quantity": "int32"})
            write_parquet(work / data / "prices", [r for _, r in prices], half,
                          {"product": "string", "price": "float64", "currency": "string"})
    elif data == "left-pk":
        info["expected"]["final rows"], info["expected"]["digest"] = left_pk_expected(orders, prices)
    else:
        info["expected"]["count"], info["expected"]["digest"] = temporal_expected(orders, prices)
        info["expected"]["final rows"] = info["expected"]["count"]
    print(f"{data}: generated in {gen_s:.1f} s, preloaded in {time.perf_counter() - t0 - gen_s:.0f} s "
          f"(Avro topics {load_s:.0f} s); expected {info['expected']}", flush=True)
    return info


def measure(args, systems, scenarios, latency, fpython, fjars, logs, runs, lat_runs, expected) -> None:
    from service.kafka_broker import KafkaBroker
    from service.sink import ensure_topics

    flink = fpython is not None
    with tempfile.TemporaryDirectory() as work, KafkaBroker(heap="1g") as bootstrap:
        work = Path(work)
        extra = {"broker": broker_pid()} if broker_pid() else {}
        prepared: dict[str, dict] = {}
        for scenario in scenarios:
            data = pipeline_bench.data_of(scenario)
            if data not in prepared:
                prepared[data] = prepare(args, bootstrap, data, flink, "spark-native" in systems, work)
            info = prepared[data]
            expected[scenario] = info["expected"]
            for rnd in range(1, args.rounds + 1):
                for system in systems_of(scenario, systems):
                    run = one_run(args, bootstrap, scenario, system, rnd, info, fpython, fjars, logs, work, extra,
                                  ensure_topics)
                    runs.append(run)
        for scenario in latency:
            rates = [r["in_rate"] for r in runs if r["scenario"] == scenario and r["system"] == "changejoin"
                     and "failed" not in r]
            chosen = latency_rates(args) or ([statistics.median(rates) / 2] if rates else [])
            if not chosen:
                print(f"latency {scenario}: no changejoin throughput run of it here: give --latency-rate", flush=True)
                continue
            for system, rate in ((s, r) for r in chosen for s in args.latency_systems.split(",")):
                try:
                    r = latency_run(args, bootstrap, scenario, system, rate, fpython, fjars, logs, extra)
                except Exception as exc:  # noqa: BLE001 - report and go on with the others
                    print(f"  latency {scenario} {system}: FAILED {exc}", flush=True)
                    lat_runs.append({"scenario": scenario, "system": system, "rate": rate, "failed": str(exc)})
                    continue
                lat_runs.append(r)
                print(f"  latency {scenario} {system}: {r['achieved']:,.0f} rows/s for {r['duration']:.0f} s, "
                      f"{r['outputs']:,} outputs measured, p50 {r['p50']} ms, p99 {r['p99']} ms, max {r['max']} ms, "
                      f"p50 first/last 10 s {r['p50_first']}/{r['p50_last']} ms, "
                      f"batch p50/p99 {r['batch_p50']}/{r['batch_p99']} ms, cpu {r['cpu']}"
                      + (f"; median ms per batch phase {r['phases']}" if r.get("phases") else ""), flush=True)


def one_run(args, bootstrap, scenario, system, rnd, info, fpython, fjars, logs, work, extra, ensure_topics) -> dict:
    data = pipeline_bench.data_of(scenario)
    out = f"out-{scenario}-{system}-r{rnd}"
    log = logs / f"{out}.log"
    state_dir = None
    watch = (bootstrap, out)
    if system == "changejoin":
        cmd = [sys.executable, str(ROOT / "bench" / "compare.py"), "--child", "changejoin",
               "--bootstrap", bootstrap, "--scenario", scenario, "--rows", str(args.rows),
               "--out", out, "--max-per-trigger", str(args.max_per_trigger),
               "--shuffle-partitions", str(args.shuffle_partitions), "--mini-batch-size", str(args.mini_batch_size)]
    elif system.startswith("flink"):
        p = system.split("-")[1][1:]
        sink = "blackhole" if system.endswith("-bh") else "kafka"
        if sink == "kafka":
            ensure_topics(bootstrap, {}, {out: 2})
        else:
            watch = None
        state_dir = str(work / f"flink-state-{out}")
        os.makedirs(state_dir)
        cmd = [fpython, str(ROOT / "bench" / "flink_job.py"), "--bootstrap", bootstrap,
               "--scenario", scenario, "--parallelism", p, "--orders", info["flink_topics"][0],
               "--prices", info["flink_topics"][1], "--format", info["format"], "--sink", sink, "--out", out,
               "--jars", ",".join(fjars), "--mini-batch-size", str(args.mini_batch_size), "--state-dir", state_dir]
    else:
        watch = None
        cmd = [sys.executable, str(ROOT / "bench" / "spark_native_job.py"),
               "--orders", str(work / data / "orders"), "--prices", str(work / data / "prices"),
               "--shuffle-partitions", str(args.shuffle_partitions)]
    try:
        result = run_measured(cmd, extra, env={"PYTHONPATH": str(ROOT)}, log=log, state_dir=state_dir, watch=watch)
    except RuntimeError as exc:
        print(f"  {scenario} r{rnd} {system}: FAILED {exc}", flush=True)
        return {"scenario": scenario, "round": rnd, "system": system, "failed": str(exc)}
    digest, dead = None, None
    if system == "spark-native":
        count, kinds = result["output"], {}
    elif system.endswith("-bh"):
        count, kinds = None, {}
    else:
        reader, skip = None, None
        if data == "left-pk":
            reader = changejoin_reader(scenario) if system == "changejoin" else debezium_reader
        elif data == "temporal-left":
            reader = changejoin_reader(scenario) if system == "changejoin" else flink_avro_reader(TEMPORAL_FLINK_FIELDS)
            skip = lambda row: row[0] == pipeline_bench.END_ORDER_ID  # noqa: E731 - the closing order
        count, kinds, digest = output_counts(bootstrap, out, reader, skip)
        if data == "temporal-left":
            count -= kinds.get("skipped", 0)
        if system == "changejoin":
            dead = output_counts(bootstrap, f"{out}.dlq")[0]
    run = {"scenario": scenario, "round": rnd, "system": system, "elapsed": result["elapsed"],
           "in_rate": 2 * args.rows / result["elapsed"], "output": count, "kinds": kinds, "digest": digest,
           "out_rate": count / result["elapsed"] if count is not None else None, "dead_letters": dead,
           "cpu": result["cpu"], "peak_rss_mb": result["peak_rss_mb"],
           "batch_p50": result.get("batch_p50"), "batch_p99": result.get("batch_p99"),
           "first_output": result.get("first_output"), "state_mb": (result["state_bytes"] / 2**20
                                                                    if result.get("state_bytes") is not None else None)}
    print(f"  {scenario} r{rnd} {system}: {run['elapsed']:.1f} s, {run['in_rate']:,.0f} in rows/s, "
          f"output {count if count is not None else '-'} {kinds or ''} {digest or ''}, cpu {run['cpu']}, "
          f"peak RSS {run['peak_rss_mb']} MB, batch p50/p99 {run['batch_p50']}/{run['batch_p99']} ms, "
          f"first output {_fmt(run['first_output'], 1)} s, state {_fmt(run['state_mb'], 1)} MB"
          + (f", dead letters {dead}" if dead else ""), flush=True)
    return run


# --- the report -----------------------------------------------------------------------------

def _fmt(x, digits=0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


STATE_NOTE = ("state MB: changejoin and spark-native the checkpoint directory at the end (offsets, commits and "
              "the RocksDB versions Spark retains), Flink the peak of its RocksDB working directory (no checkpoints)")


def render(args, scenarios, runs, lat_runs, expected, started) -> str:
    ok = [r for r in runs if "failed" not in r]
    systems = args.systems.split(",")
    lines = [f"## {started:%Y-%m-%d %H:%M} UTC compare: changejoin vs Flink {FLINK_VERSION} vs Spark native, "
             f"{args.rows:,} rows per side",
             "",
             f"`./dev bench compare --rows {args.rows} --keys {args.keys} --scenarios {args.scenarios} "
             f"--rounds {args.rounds}"
             + (f" --systems {args.systems}" if args.systems != ALL_SYSTEMS else "")
             + (f" --mini-batch-size {args.mini_batch_size}" if any(s.endswith("-mb") for s in scenarios) else "")
             + (f" --latency {args.latency} --latency-systems {args.latency_systems}"
                f" --latency-duration {args.latency_duration:g} --latency-warmup {args.latency_warmup:g}"
                if args.latency else "")
             + (f" --latency-rate {args.latency_rate}" if args.latency_rate else "")
             + "".join(f" --service-env {pair}" for pair in args.service_env)
             + f"{' --record' if args.record else ''}` ({os.cpu_count()} cores, shared machine: compare ratios; "
             "systems run one after the other in every round)",
             "",
             "| scenario | system | runs | in rows/s min | in rows/s median | out records | out rec/s median "
             "| vs flink-p2 | vs spark-native | batch p50 / p99 s | first output s | state MB "
             "| CPU s (median, by process) | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    keyed: dict[tuple, list] = {}
    for r in ok:
        keyed.setdefault((r["scenario"], r["system"]), []).append(r)
    for scenario in scenarios:
        ref = {s: _med(x["in_rate"] for x in keyed.get((scenario, s), [])) for s in ("flink-p2", "spark-native")}
        for system in systems_of(scenario, systems):
            rs = keyed.get((scenario, system))
            if not rs:
                if any(r["scenario"] == scenario and r["system"] == system for r in runs):
                    lines.append(f"| {scenario} | {system} | failed |" + " |" * 11)
                continue
            rates = [r["in_rate"] for r in rs]
            med = statistics.median(rates)
            outs = sorted({r["output"] for r in rs if r["output"] is not None})
            kinds = set(k for r in rs for k in r["cpu"])
            cpu = ", ".join(f"{k} {c:.0f}" for k in sorted(kinds)
                            if (c := statistics.median(r["cpu"].get(k, 0) for r in rs)) >= 0.5)
            ratio = lambda s: f"{med / ref[s]:.2f}" if ref[s] else "-"  # noqa: E731
            p50, p99 = _med(r["batch_p50"] for r in rs), _med(r["batch_p99"] for r in rs)
            batch = f"{p50 / 1000:.1f} / {p99 / 1000:.1f}" if p50 is not None else "-"
            lines.append(f"| {scenario} | {system} | {len(rs)} | {min(rates):,.0f} | {med:,.0f} | "
                         f"{'/'.join(f'{o:,}' for o in outs) or '-'} | "
                         f"{_fmt(_med(r['out_rate'] for r in rs))} | {ratio('flink-p2')} | "
                         f"{ratio('spark-native')} | {batch} | {_fmt(_med(r['first_output'] for r in rs), 1)} | "
                         f"{_fmt(_med(r['state_mb'] for r in rs), 1)} | {cpu} | {max(r['peak_rss_mb'] for r in rs):,} |")
    lines.append("")
    for scenario in scenarios:
        exp = expected.get(scenario, {})
        mine = [r for r in ok if r["scenario"] == scenario and (r["output"] is not None or r["digest"])]
        if "count" in exp:
            got = {f"{r['system']} r{r['round']}": r["output"] for r in mine if r["output"] is not None}
            agree = all(v == exp["count"] for v in got.values())
            lines.append(f"- {scenario}: output fixed by the data: {exp['count']:,} rows; "
                         + ("every run agrees" if agree else "MISMATCH: " + str(got)))
        if "digest" in exp:
            got = {f"{r['system']} r{r['round']}": r["digest"] for r in mine if r["digest"]}
            agree = all(v == exp["digest"] for v in got.values())
            lines.append(f"- {scenario}: final table fixed by the data: {exp['final rows']:,} rows, sha256 "
                         f"{exp['digest']}; " + ("every run's output materializes to it" if agree
                                                  else "DIFFERENT: " + str(got)))
        for r in mine:
            if r["kinds"] and r["round"] == 1:
                lines.append(f"- {scenario} {r['system']} output by kind: "
                             + ", ".join(f"{k} {v:,}" for k, v in r["kinds"].items()))
        dead = {f"{r['system']} r{r['round']}": r["dead_letters"] for r in mine if r.get("dead_letters")}
        if dead:
            lines.append(f"- {scenario}: DEAD LETTERS {dead}")
    failed = [r for r in runs if "failed" in r]
    for r in failed:
        lines.append(f"- FAILED: {r['scenario']} r{r['round']} {r['system']}: {r['failed']}")
    lines.append(f"- {STATE_NOTE}; batch p50/p99: micro-batch durations (changejoin, spark-native; Flink has none); "
                 "first output: from the start to the first record in the output topic (Kafka sinks)")
    if lat_runs:
        lines += ["", f"Latency: produce-to-output at the rate shown (default half of changejoin's median throughput), default trigger, "
                      f"{args.latency_warmup:g} s warm-up then {args.latency_duration:g} s measured "
                      "(output record's log-append time minus the producer clock the input row carries; "
                      "+I/+U records)",
                  "", "| scenario | system | rate rows/s | achieved rows/s | outputs measured | p50 ms | p90 ms | "
                      "p99 ms | max ms | p50 first / last 10 s ms | batch p50 / p99 s | CPU s (by process) | peak RSS MB |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in lat_runs:
            if "failed" in r:
                lines.append(f"| {r['scenario']} | {r['system']} | {r['rate']:,.0f} | failed: {r['failed'][:80]} |"
                             + " |" * 9)
                continue
            batch = (f"{r['batch_p50'] / 1000:.1f} / {r['batch_p99'] / 1000:.1f}" if r["batch_p50"] is not None else "-")
            cpu = ", ".join(f"{k} {c:.0f}" for k, c in sorted(r["cpu"].items()) if c >= 0.5)
            lines.append(f"| {r['scenario']} | {r['system']} | {r['rate']:,.0f} | {r['achieved']:,.0f} | "
                         f"{r['outputs']:,} | {_fmt(r['p50'])} | {_fmt(r['p90'])} | {_fmt(r['p99'])} | "
                         f"{_fmt(r['max'])} | {_fmt(r['p50_first'])} / {_fmt(r['p50_last'])} | {batch} | {cpu} | "
                         f"{r['peak_rss_mb']:,} |")
        phased = [r for r in lat_runs if r.get("phases")]
        if phased:
            lines += ["", "Median ms per micro-batch phase in the latency runs (Spark's `durationMs`; addBatch is "
                      "the job that joins and produces):", ""]
            names = sorted({n for r in phased for n in r["phases"]} - {"triggerExecution"}) + ["triggerExecution"]
            lines += ["| scenario | system | rate rows/s | " + " | ".join(names) + " |",
                      "|---|---|---|" + "---|" * len(names)]
            lines += [f"| {r['scenario']} | {r['system']} | {r['rate']:,.0f} | " + " | ".join(str(r["phases"].get(n, "-")) for n in names)
                      + " |" for r in phased]
    lines.append("")
    lines.append("PLOT")
    return "\n".join(lines)


def plot(runs, lat_runs, png: Path, rows: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in runs if "failed" not in r]
    lat = [r for r in lat_runs if "failed" not in r and r["p50"] is not None]
    scenarios = list(dict.fromkeys(r["scenario"] for r in ok))
    systems = list(dict.fromkeys(r["system"] for r in ok))
    fig, axes = plt.subplots(1, 2 if lat else 1, figsize=(15 if lat else 11, 4.8),
                             gridspec_kw={"width_ratios": [3, 1]} if lat else None, squeeze=False)
    ax = axes[0][0]
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        meds, mins, xs = [], [], []
        for j, scenario in enumerate(scenarios):
            rates = [r["in_rate"] for r in ok if r["scenario"] == scenario and r["system"] == system]
            if rates:
                meds.append(statistics.median(rates))
                mins.append(min(rates))
                xs.append(j + i * width)
        ax.bar(xs, meds, width, label=system)
        ax.scatter(xs, mins, color="black", s=8, zorder=3)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(scenarios))], scenarios, fontsize=8)
    ax.set_ylabel("input rows/s (bar: median, dot: min)")
    ax.legend(fontsize=7)
    ax.set_title(f"changejoin vs Flink 2.3 vs Spark native join, {rows:,} rows per side")
    if lat:
        ax = axes[0][1]
        labels = [f"{r['scenario']}\n{r['system']}\n{r['rate']:,.0f}/s" for r in lat]
        xs = range(len(lat))
        ax.bar([x - 0.2 for x in xs], [r["p50"] / 1000 for r in lat], 0.4, label="p50")
        ax.bar([x + 0.2 for x in xs], [r["p99"] / 1000 for r in lat], 0.4, label="p99")
        ax.axhline(2.0, color="red", linestyle="--", linewidth=1, label="target p99 2 s")
        ax.set_xticks(list(xs), labels, fontsize=7)
        ax.set_ylabel("produce-to-output latency, s (log)")
        ax.set_yscale("log")
        ax.set_title("latency at the rates shown")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
