"""changejoin side by side with Flink 2.3 and Spark's native join, on the same Kafka topics.

    python -m bench.compare [--rows 200000] [--keys ROWS/20] [--scenarios all] [--rounds 2]
                            [--systems ...] [--mini-batch-size 1000]
                            [--latency left-pk,inner-nopk [--latency-rate R[,R...]] [--latency-duration 60]]
                            [--record]                       # ./dev bench compare [...]

Each data set's changelogs (bench/harness/data.py's seeded, linear generator) are generated once
and preloaded once into a single-node Kafka (devkit/kafka_broker.py) shared by every system;
then, one run at a time, in each round:

- ``changejoin``: the service end to end (harness.changejoin.run_changejoin), Avro in, Avro out
  (the debezium scenario: debezium-json in), and ``changejoin-rowkind`` (the debezium scenario
  only): the same service on the Avro/RowKind topics of the same changes, and ``changejoin-retract``
  (the debezium scenario only, not by default): on the debezium-json topics with
  ``*_CHANGELOG_MODE=retract`` (the before images retract, no normalize stage);
- ``flink-p1`` / ``flink-p2``: the same SQL in Flink 2.3 (bench/flink_job.py, PyFlink Table API,
  streaming mode, RocksDB, parallelism 1 and 2) with a Kafka sink, and ``flink-p1-bh`` /
  ``flink-p2-bh`` with a blackhole sink (the sink's share);
- ``spark-native`` (inner-nopk only): Spark's own stream-stream join on the same rows from Parquet
  files (bench/spark_native_job.py).

Scenarios: ``left-pk``, ``inner-nopk``, their mini-batch variants ``left-pk-mb`` /
``inner-nopk-mb`` on the same topics (changejoin ``MINI_BATCH_SIZE``, Flink
``table.exec.mini-batch.*`` with the same size and a 1 s allowed latency), ``temporal-left``,
an event-time temporal LEFT join, and ``debezium``: left-pk's changes and join, every system
reading the debezium-json topics the harness writes for Flink (changejoin with
``LEFT_FORMAT``/``RIGHT_FORMAT`` ``debezium-json``: with the primary keys declared, upserts of
them), beside ``changejoin-rowkind`` on left-pk's Avro/RowKind topics, each in every round: the
format's cost is their ratio within a round. Output agreement: inner-nopk's output count and left-pk's and
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
bench/results/RESULTS.md and plots bench/results/compare-<date>.png (matplotlib, the ``bench``
extra): rows/s per system and scenario, and the latency percentiles.

This module is the command line and the order of the runs; the work is done by bench/harness/
(data, changejoin, processes, outputs, peers, latency, report).
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.harness import ROOT
from bench.harness.changejoin import child_changejoin
from bench.harness.data import (END_ORDER_ID, SCENARIOS, changelogs, data_of, debezium_topics, input_format, load,
                                load_debezium, topics, write_parquet)
from bench.harness.latency import child_changejoin_latency, latency_rates, latency_run
from bench.harness.outputs import (TEMPORAL_FLINK_FIELDS, changejoin_reader, debezium_reader, flink_avro_reader,
                                   inner_expected, left_pk_expected, output_counts, temporal_expected)
from bench.harness.peers import (ALL_SYSTEMS, RETRACT_ENV, flink_command, flink_jars, flink_python, peer_scenario,
                                 spark_native_command, systems_of)
from bench.harness.processes import broker_pid, run_measured
from bench.harness.report import append_results, fmt, plot, render, results_png


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="changelog rows per side")
    parser.add_argument("--keys", type=int, help="join keys (default rows / 20: the same output per input row at any size)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated, of {','.join(SCENARIOS)} (default all)")
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
    parser.add_argument("--record", action="store_true", help="append to bench/results/RESULTS.md and plot")
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
        if s not in SCENARIOS:
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
        png = results_png("compare", started)
        plot(runs, lat_runs, png, args.rows)
        append_results("\n" + report.replace("PLOT", f"![rows/s per system and scenario; latency]({png.name})") + "\n")
    print(f"logs: {logs}")


def prepare(args, bootstrap: str, data: str, flink: bool, spark_native: bool, work: Path,
            debezium_json: bool = False) -> dict:
    """Generate and preload one data set (left-pk, inner-nopk, temporal-left) once; what the runs
    need of it: Flink's topics and format, the expected output. Its changelogs go to debezium-json
    topics once, for Flink and (``debezium_json``: the debezium scenario) changejoin alike."""
    t0 = time.perf_counter()
    orders, prices = changelogs(args.rows, args.keys, data)
    gen_s = time.perf_counter() - t0
    load_s = load(bootstrap, data, args.rows, args.keys, changes=(orders, prices))
    orders_topic, prices_topic, _ = topics(data)
    info = {"flink_topics": (orders_topic, prices_topic), "format": "avro", "expected": {}}
    if (flink or debezium_json) and data == "left-pk":
        info["flink_topics"], info["format"] = debezium_topics(data), "debezium-json"
        load_debezium(bootstrap, data, orders, prices)
    if flink and data == "temporal-left":  # orders: the same Avro topic; prices: a keyed changelog
        info["flink_topics"] = (orders_topic, debezium_topics(data)[1])
        load_debezium(bootstrap, data, prices=prices)
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
    from devkit.kafka_broker import KafkaBroker
    from service.sink import ensure_topics

    flink = fpython is not None
    with tempfile.TemporaryDirectory() as work, KafkaBroker(heap="1g") as bootstrap:
        work = Path(work)
        extra = {"broker": broker_pid()} if broker_pid() else {}
        prepared: dict[str, dict] = {}
        for scenario in scenarios:
            data = data_of(scenario)
            if data not in prepared:
                prepared[data] = prepare(args, bootstrap, data, flink, "spark-native" in systems, work,
                                         any(input_format(s) == "debezium-json" and data_of(s) == data
                                             for s in scenarios))
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
    data = data_of(scenario)
    out = f"out-{scenario}-{system}-r{rnd}"
    log = logs / f"{out}.log"
    state_dir = None
    watch = (bootstrap, out)
    if system.startswith("changejoin"):  # changejoin-rowkind: the same changes' Avro/RowKind topics
        cmd = [sys.executable, "-m", "bench.compare", "--child", "changejoin", "--bootstrap", bootstrap,
               "--scenario", data_of(scenario) if system == "changejoin-rowkind" else scenario, "--rows", str(args.rows),
               "--out", out, "--max-per-trigger", str(args.max_per_trigger),
               "--shuffle-partitions", str(args.shuffle_partitions), "--mini-batch-size", str(args.mini_batch_size)]
        if system == "changejoin-retract":  # the debezium-json topics in retract mode
            cmd += [a for name, value in RETRACT_ENV.items() for a in ("--service-env", f"{name}={value}")]
    elif system.startswith("flink"):
        sink = "blackhole" if system.endswith("-bh") else "kafka"
        if sink == "kafka":
            ensure_topics(bootstrap, {}, {out: 2})
        else:
            watch = None
        state_dir = str(work / f"flink-state-{out}")
        os.makedirs(state_dir)
        cmd = flink_command(fpython, fjars, bootstrap, peer_scenario(scenario), system, *info["flink_topics"],
                            info["format"], sink,
                            out, "--mini-batch-size", str(args.mini_batch_size), "--state-dir", state_dir)
    else:
        watch = None
        cmd = spark_native_command(work / data / "orders", work / data / "prices", args.shuffle_partitions)
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
            reader = changejoin_reader(scenario) if system.startswith("changejoin") else debezium_reader
        elif data == "temporal-left":
            reader = changejoin_reader(scenario) if system == "changejoin" else flink_avro_reader(TEMPORAL_FLINK_FIELDS)
            skip = lambda row: row[0] == END_ORDER_ID  # noqa: E731 - the closing order
        count, kinds, digest = output_counts(bootstrap, out, reader, skip)
        if data == "temporal-left":
            count -= kinds.get("skipped", 0)
        if system.startswith("changejoin"):
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
          f"first output {fmt(run['first_output'], 1)} s, state {fmt(run['state_mb'], 1)} MB"
          + (f", dead letters {dead}" if dead else ""), flush=True)
    return run


if __name__ == "__main__":
    main()
