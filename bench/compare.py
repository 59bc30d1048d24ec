"""changejoin side by side with Flink 2.3 and Spark's native join, on the same Kafka topics.

    python bench/compare.py [--rows 200000] [--keys 10000] [--scenarios left-pk,inner-nopk]
                            [--rounds 2] [--record]          # ./dev bench compare [...]

Each scenario's changelogs (bench/pipeline_bench.py's seeded generator) are generated once and
preloaded once into a single-node Kafka (service/kafka_broker.py) shared by every system; then,
one run at a time, in each round:

- ``changejoin``: the service end to end (pipeline_bench.run_changejoin), Avro in, Avro out;
- ``flink-p1`` / ``flink-p2``: the same SQL in Flink 2.3 (bench/flink_job.py, PyFlink Table API,
  streaming mode, RocksDB, parallelism 1 and 2) with a Kafka sink, and ``flink-p1-bh`` /
  ``flink-p2-bh`` with a blackhole sink (the sink's share);
- ``spark-native`` (inner-nopk only): Spark's own stream-stream join on the same rows from Parquet
  files (bench/spark_native_job.py).

How Flink reads the changelog: changejoin's inputs carry the change kind in a ``rowkind`` header
and Flink SQL cannot make a row's RowKind from a header. The insert-only scenario (inner-nopk)
has only ``+I``, so Flink reads the very same Avro topics (``avro`` format). For left-pk the
harness writes the same changelog a second time, for Flink, as ``debezium-json`` (each -U/+U pair
one ``u`` message with before/after, which Flink reads back as the same -U, +U rows; +I = ``c``;
same partitions, same order), into ``<topic>-dbz``.

Every run is its own process tree; a sampler reads /proc/<pid>/stat (utime+stime) and VmRSS of
every process in it: CPU seconds from the job's start to its end, split into JVM and Python
processes, and the tree's peak RSS. Input rows/s = 2 x rows / (start of the query or job until
every input row is processed). Output records are counted in the output topic.

Flink runs from its own virtualenv, ``.cache/flink-venv`` (``apache-flink==2.3.0``, made here on
first use; never in the project's venv), with Flink's Kafka SQL connector and Avro format from
Maven Central (jars/flink-peer/pom.xml). ``--record`` appends the round's tables to
bench/RESULTS.md and plots bench/compare-<date>.png (matplotlib, the ``bench`` extra).
"""
from __future__ import annotations

import argparse
import json
import os
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
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


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

def debezium(changes) -> list[tuple[dict, int | None]]:
    """A changelog as debezium-json messages: -U/+U pairs become one ``u`` with before/after."""
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
    return messages


def preload_json(bootstrap: str, topic: str, messages, partition_of) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000})
    for message, _ in messages:
        row = message["after"] or message["before"]
        value = json.dumps(message, separators=(",", ":")).encode()
        while True:
            try:
                producer.produce(topic, value=value, partition=partition_of(row))
                break
            except BufferError:
                producer.poll(0.05)
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


def output_counts(bootstrap: str, topic: str, materialize=None) -> tuple[int, dict, str | None]:
    """Records in ``topic`` (end offsets; no producer here is transactional). With
    ``materialize`` (value bytes -> (sign, row)), also the count by sign and a digest of the final
    table the changelog materializes to (a multiset: +I/+U add a row, -U/-D remove one)."""
    import hashlib

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{time.time_ns()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        meta = consumer.list_topics(topic, timeout=30).topics[topic]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in meta.partitions}
        total = sum(ends.values())
        if materialize is None or not total:
            return total, {}, None
        kinds: Counter = Counter()
        table: Counter = Counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        seen = 0
        while seen < total:
            for msg in consumer.consume(10_000, timeout=5):
                if msg.error():
                    continue
                seen += 1
                label, sign, row = materialize(msg)
                kinds[label] += 1
                table[row] += sign
        final = sorted((row, n) for row, n in table.items() if n)
        negative = sum(1 for _, n in final if n < 0)
        digest = hashlib.sha256(repr(final).encode()).hexdigest()[:12]
        kinds["final rows"] = sum(n for _, n in final)
        if negative:
            kinds["NEGATIVE"] = negative
        return total, dict(kinds), digest
    finally:
        consumer.close()


def changejoin_reader(scenario: str):
    """(kind, sign, row) of a changejoin output record: Avro body, RowKind in the header."""
    import io

    import fastavro

    from service.plan import build_plan

    with tempfile.TemporaryDirectory() as work:
        plan = build_plan(pipeline_bench.service_settings("127.0.0.1:1", scenario, 1, 1, f"{work}/cp"))
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


# --- measuring a process tree ---------------------------------------------------------------

def _stat(pid: int) -> tuple[int, str, float, int] | None:
    """(parent pid, command, CPU seconds, RSS bytes) of a live process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    ppid, utime, stime, rss = int(fields[1]), int(fields[11]), int(fields[12]), int(fields[21])
    return ppid, comm, (utime + stime) / TICK, rss * PAGE


class TreeSampler:
    """Samples every process under ``root`` (and ``extra`` pids, e.g. the broker) every 0.2 s."""

    def __init__(self, root: int, extra: dict[str, int]):
        self.root, self.extra = root, extra
        self.cpu: dict[int, tuple[str, float]] = {}  # last seen per pid
        self.peak_rss = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                s = _stat(int(name))
                if s:
                    stats[int(name)] = s
        tree, frontier = set(), {self.root}
        while frontier:
            tree |= frontier
            frontier = {pid for pid, s in stats.items() if s[0] in frontier and pid not in tree}
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

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def cpu_between(before: dict, after: dict) -> dict[str, float]:
    out: Counter = Counter()
    for pid, (kind, cpu) in after.items():
        out[kind] += cpu - before.get(pid, (kind, 0.0))[1]
    return {k: round(v, 1) for k, v in out.items()}


def run_measured(cmd: list[str], extra: dict[str, int], env: dict | None = None, log: Path | None = None) -> dict:
    """Run ``cmd``; it prints JSON lines ``{"event": "start"}`` and ``{"event": "end", ...}``."""
    stderr = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT,
                            env={**os.environ, **(env or {})})
    sampler = TreeSampler(proc.pid, extra)
    result, before, after = {}, {}, {}
    try:
        for line in proc.stdout:
            if not line.startswith('{"event"'):
                continue
            event = json.loads(line)
            if event["event"] == "start":
                before = sampler.snapshot()
            elif event["event"] == "end":
                after = sampler.snapshot()
                result = event
        proc.wait()
    finally:
        sampler.stop()
        if log:
            stderr.close()
    if proc.returncode != 0 or not result:
        raise RuntimeError(f"{cmd[1]} failed (exit {proc.returncode}); see {log}")
    result["cpu"] = cpu_between(before, after)
    result["peak_rss_mb"] = round(sampler.peak_rss / 2**20)
    return result


def child_changejoin(args) -> None:
    """One changejoin run in this (child) process, reporting start/end as JSON lines."""
    emit = lambda event, **f: print(json.dumps({"event": event, **f}), flush=True)  # noqa: E731
    result = pipeline_bench.run_changejoin(args.bootstrap, args.scenario, args.rows, args.max_per_trigger,
                                           args.shuffle_partitions, out=args.out,
                                           on_start=lambda: emit("start"))
    emit("end", elapsed=result["elapsed"], batches=len(result["durations"]))


# --- the round ------------------------------------------------------------------------------

def broker_pid() -> int | None:
    for name in os.listdir("/proc"):
        if name.isdigit():
            s = _stat(int(name))
            if s and s[0] == os.getpid() and s[1] == "java":
                return int(name)
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--scenarios", default="left-pk,inner-nopk")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--systems", default="changejoin,flink-p1,flink-p2,flink-p1-bh,flink-p2-bh,spark-native")
    parser.add_argument("--max-per-trigger", type=int, default=100_000)
    parser.add_argument("--shuffle-partitions", type=int, default=2)
    parser.add_argument("--record", action="store_true", help="append to bench/RESULTS.md and plot")
    parser.add_argument("--child", choices=["changejoin"], help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--scenario", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_changejoin(args)

    scenarios = args.scenarios.split(",")
    systems = args.systems.split(",")
    flink = any(s.startswith("flink") for s in systems)
    fpython, fjars = (flink_python(), flink_jars()) if flink else (None, None)
    logs = Path(tempfile.mkdtemp(prefix="compare-logs-"))
    started = datetime.now(timezone.utc)
    runs: list[dict] = []
    expected: dict[str, int] = {}
    try:
        measure(args, systems, scenarios, fpython, fjars, logs, runs, expected)
    except KeyboardInterrupt:  # keep (and record) the runs done so far
        print("interrupted: reporting the runs finished so far", flush=True)
        args.rounds = f"{args.rounds} (interrupted)"
    report = render(args, runs, expected, started)
    print(report)
    if args.record:
        png = ROOT / "bench" / f"compare-{started:%Y-%m-%d-%H%M}.png"
        plot(runs, png)
        with open(ROOT / "bench" / "RESULTS.md", "a") as handle:
            handle.write("\n" + report.replace("PLOT", f"![rows/s per system and scenario]({png.name})") + "\n")
    print(f"logs: {logs}")


def measure(args, systems, scenarios, fpython, fjars, logs, runs, expected) -> None:
    from service.kafka_broker import KafkaBroker
    from service.sink import ensure_topics

    flink = fpython is not None
    with tempfile.TemporaryDirectory() as work, KafkaBroker(heap="1g") as bootstrap:
        extra = {"broker": broker_pid()} if broker_pid() else {}
        for scenario in scenarios:
            t0 = time.perf_counter()
            orders, prices = pipeline_bench.changelogs(args.rows, args.keys, scenario)
            gen_s = time.perf_counter() - t0
            load_s = pipeline_bench.load(bootstrap, scenario, args.rows, args.keys, changes=(orders, prices))
            orders_topic, prices_topic, _ = pipeline_bench.topics(scenario)
            flink_topics, fmt = (orders_topic, prices_topic), "avro"
            if scenario == "left-pk" and flink:
                flink_topics, fmt = (f"{orders_topic}-dbz", f"{prices_topic}-dbz"), "debezium-json"
                ensure_topics(bootstrap, {}, {t: 2 for t in flink_topics})
                preload_json(bootstrap, flink_topics[0], debezium(orders), lambda r: r["order_id"] % 2)
                preload_json(bootstrap, flink_topics[1], debezium(prices), lambda r: int(r["product"][1:]) % 2)
            if scenario == "inner-nopk":
                expected[scenario] = inner_expected(orders, prices)
                if "spark-native" in systems:
                    half = max(1, args.max_per_trigger // 2)
                    write_parquet(Path(work) / scenario / "orders", [r for _, r in orders], half,
                                  {"order_id": "int64", "product": "string", "quantity": "int32"})
                    write_parquet(Path(work) / scenario / "prices", [r for _, r in prices], half,
                                  {"product": "string", "price": "float64", "currency": "string"})
            print(f"{scenario}: generated in {gen_s:.1f} s, preloaded in {time.perf_counter() - t0 - gen_s:.0f} s "
                  f"(Avro topics {load_s:.0f} s)", flush=True)
            del orders, prices
            for rnd in range(1, args.rounds + 1):
                for system in systems:
                    if system == "spark-native" and scenario != "inner-nopk":
                        continue
                    out = f"out-{scenario}-{system}-r{rnd}"
                    log = logs / f"{out}.log"
                    if system == "changejoin":
                        cmd = [sys.executable, str(ROOT / "bench" / "compare.py"), "--child", "changejoin",
                               "--bootstrap", bootstrap, "--scenario", scenario, "--rows", str(args.rows),
                               "--out", out, "--max-per-trigger", str(args.max_per_trigger),
                               "--shuffle-partitions", str(args.shuffle_partitions)]
                    elif system.startswith("flink"):
                        p = system.split("-")[1][1:]
                        sink = "blackhole" if system.endswith("-bh") else "kafka"
                        if sink == "kafka":
                            ensure_topics(bootstrap, {}, {out: 2})
                        cmd = [fpython, str(ROOT / "bench" / "flink_job.py"), "--bootstrap", bootstrap,
                               "--scenario", scenario, "--parallelism", p, "--orders", flink_topics[0],
                               "--prices", flink_topics[1], "--format", fmt, "--sink", sink, "--out", out,
                               "--jars", ",".join(fjars)]
                    else:
                        cmd = [sys.executable, str(ROOT / "bench" / "spark_native_job.py"),
                               "--orders", str(Path(work) / scenario / "orders"),
                               "--prices", str(Path(work) / scenario / "prices"),
                               "--shuffle-partitions", str(args.shuffle_partitions)]
                    try:
                        result = run_measured(cmd, extra, env={"PYTHONPATH": str(ROOT)}, log=log)
                    except RuntimeError as exc:
                        print(f"  {scenario} r{rnd} {system}: FAILED {exc}", flush=True)
                        runs.append({"scenario": scenario, "round": rnd, "system": system, "failed": str(exc)})
                        continue
                    if system == "spark-native":
                        count, kinds = result["output"], {}
                    elif system.endswith("-bh"):
                        count, kinds = None, {}
                    else:
                        reader = None
                        if scenario == "left-pk":
                            reader = changejoin_reader(scenario) if system == "changejoin" else debezium_reader
                        count, kinds, digest = output_counts(bootstrap, out, reader)
                        if digest:
                            kinds["final table sha256"] = digest
                    run = {"scenario": scenario, "round": rnd, "system": system, "elapsed": result["elapsed"],
                           "in_rate": 2 * args.rows / result["elapsed"], "output": count, "kinds": kinds,
                           "out_rate": count / result["elapsed"] if count is not None else None,
                           "cpu": result["cpu"], "peak_rss_mb": result["peak_rss_mb"]}
                    runs.append(run)
                    print(f"  {scenario} r{rnd} {system}: {run['elapsed']:.1f} s, {run['in_rate']:,.0f} in rows/s, "
                          f"output {count if count is not None else '-'} {kinds or ''}, cpu {run['cpu']}, "
                          f"peak RSS {run['peak_rss_mb']} MB", flush=True)


# --- the report -----------------------------------------------------------------------------

def _fmt(x, digits=0) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def render(args, runs, expected, started) -> str:
    ok = [r for r in runs if "failed" not in r]
    lines = [f"## {started:%Y-%m-%d %H:%M} UTC compare: changejoin vs Flink {FLINK_VERSION} vs Spark native",
             "",
             f"`python bench/compare.py --rows {args.rows} --keys {args.keys} --scenarios {args.scenarios} "
             f"--rounds {args.rounds}{' --record' if args.record else ''}` ({os.cpu_count()} cores, shared machine: compare ratios; systems run one "
             "after the other in every round)",
             "",
             "| scenario | system | runs | in rows/s min | in rows/s median | out records | out rec/s median "
             "| vs flink-p2 | vs spark-native | CPU s (median, by process) | peak RSS MB |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    keyed: dict[tuple, list] = {}
    for r in ok:
        keyed.setdefault((r["scenario"], r["system"]), []).append(r)
    for scenario in args.scenarios.split(","):
        ref = {s: statistics.median(x["in_rate"] for x in keyed.get((scenario, s), [])) if keyed.get((scenario, s)) else None
               for s in ("flink-p2", "spark-native")}
        for system in args.systems.split(","):
            rs = keyed.get((scenario, system))
            if not rs:
                if any(r["scenario"] == scenario and r["system"] == system for r in runs):
                    lines.append(f"| {scenario} | {system} | failed | | | | | | | | |")
                continue
            rates = [r["in_rate"] for r in rs]
            med = statistics.median(rates)
            outs = sorted({r["output"] for r in rs if r["output"] is not None})
            out_rates = [r["out_rate"] for r in rs if r["out_rate"] is not None]
            kinds = set(k for r in rs for k in r["cpu"])
            cpu = ", ".join(f"{k} {c:.0f}" for k in sorted(kinds)
                            if (c := statistics.median(r["cpu"].get(k, 0) for r in rs)) >= 0.5)
            ratio = lambda s: f"{med / ref[s]:.2f}" if ref[s] else "-"  # noqa: E731
            lines.append(f"| {scenario} | {system} | {len(rs)} | {min(rates):,.0f} | {med:,.0f} | "
                         f"{'/'.join(f'{o:,}' for o in outs) or '-'} | "
                         f"{_fmt(statistics.median(out_rates)) if out_rates else '-'} | {ratio('flink-p2')} | "
                         f"{ratio('spark-native')} | {cpu} | {max(r['peak_rss_mb'] for r in rs):,} |")
    lines.append("")
    for scenario, n in expected.items():
        got = {f"{r['system']} r{r['round']}": r["output"] for r in ok if r["scenario"] == scenario and r["output"] is not None}
        agree = all(v == n for v in got.values())
        lines.append(f"- {scenario}: expected output {n:,} rows (sum over products of orders x prices); "
                     f"{'every run agrees' if agree else 'MISMATCH: ' + str(got)}")
    digests = {}
    for r in ok:
        if r["kinds"]:
            digests.setdefault(r["scenario"], {})[f"{r['system']} r{r['round']}"] = r["kinds"].get("final table sha256")
        if r["kinds"] and r["round"] == 1:
            lines.append(f"- {r['scenario']} {r['system']} output by kind: "
                         + ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in r["kinds"].items()))
    for scenario, found in digests.items():
        same = len(set(found.values())) == 1
        lines.append(f"- {scenario}: the output changelogs materialize to "
                     + ("the same final table in every run" if same else f"DIFFERENT final tables: {found}"))
    lines.append("")
    lines.append("PLOT")
    return "\n".join(lines)


def plot(runs, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in runs if "failed" not in r]
    scenarios = sorted({r["scenario"] for r in ok})
    systems = list(dict.fromkeys(r["system"] for r in ok))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        meds, mins = [], []
        for scenario in scenarios:
            rates = [r["in_rate"] for r in ok if r["scenario"] == scenario and r["system"] == system]
            meds.append(statistics.median(rates) if rates else 0)
            mins.append(min(rates) if rates else 0)
        xs = [j + i * width for j in range(len(scenarios))]
        ax.bar(xs, meds, width, label=system)
        ax.scatter(xs, mins, color="black", s=8, zorder=3)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(scenarios))], scenarios)
    ax.set_ylabel("input rows/s (bar: median, dot: min)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title("changejoin vs Flink 2.3 vs Spark native join")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
