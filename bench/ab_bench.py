"""Side-by-side runs of the service under configuration variants, alternating, on the same topics.

    python -m bench.ab_bench --variant base: --variant c1:SPARK_CONF_spark_driver_extraJavaOptions=... \
        [--scenario left-pk] [--rows 200000] [--keys 10000] [--rounds 3] [--no-check]

Each ``--variant NAME:VAR=VALUE,VAR=VALUE`` is a set of service variables added to the
benchmarks' own (bench/harness/changejoin.py; empty for the defaults). Every round runs each
variant once, in turn, as a fresh child process (a fresh Spark JVM, as ``bench.compare`` does),
on the scenario's topics preloaded once. Printed per scenario and variant: input rows/s min and
median, CPU seconds by process kind (median) and the ratio of medians to the first variant; and,
unless ``--no-check``, the output's count by kind and the digest of the final table it
materializes to (first round), which must be the same for every variant.

``--record`` appends the table, with the date and the command, to bench/results/RESULTS.md and
plots bench/results/ab-<date>.png (input rows/s per scenario and variant); ``--from-log FILE``
renders (and with ``--record`` records) the runs a previous invocation printed to FILE instead of
running them again (give the same ``--scenario``, ``--variant`` and sizes).

``--without-output NAME`` makes variant NAME write nothing: its micro-batches count the join's
output rows where the others encode and produce them (the join's output still reaches the
counting task). What it gains over the others bounds what any change to the output path
(encode, produce, or Spark's own Kafka sink) could gain. Its output is not checked.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone

from bench.harness.changejoin import parse_variant, run_changejoin
from bench.harness.data import load
from bench.harness.outputs import changejoin_reader, output_counts
from bench.harness.processes import broker_pid, child_result, process_tree, processes
from bench.harness.report import append_results, results_png


def tree_cpu(root: int, broker: int | None) -> dict[str, float]:
    stats = processes()
    tree = process_tree(stats, root)
    out: collections.Counter = collections.Counter()
    for pid in tree:
        _, comm, cpu, _ = stats[pid]
        out["jvm" if comm == "java" else "python"] += cpu
    if broker in stats:
        out["broker"] = stats[broker][2]
    return dict(out)


def counting_partition(config: dict, batch_id: int):
    """Stands in for ``service.pipeline.produce_partition`` (``--without-output``): one counts
    row per task, as there, with nothing encoded or produced."""

    def count(batches):
        import pyarrow as pa

        rows = sum(batch.num_rows for batch in batches)
        yield pa.RecordBatch.from_pylist([{"target": "output", "label": "rows", "n": rows}],
                                         schema=pa.schema([("target", pa.string()), ("label", pa.string()),
                                                           ("n", pa.int64())]))

    return count


def child(args) -> None:
    """One run in this process: JSON lines at the start and the end with CPU of this tree."""
    extra = json.loads(args.extra)
    state = {}
    if args.count_only:
        import service.pipeline

        service.pipeline.produce_partition = counting_partition

    def on_start():
        state["cpu"] = tree_cpu(os.getpid(), args.broker_pid)

    def on_end():
        after = tree_cpu(os.getpid(), args.broker_pid)
        state["cpu"] = {k: round(after.get(k, 0) - state["cpu"].get(k, 0), 1) for k in after}

    result = run_changejoin(args.bootstrap, args.scenario[0], args.rows, args.max_per_trigger,
                            args.shuffle_partitions, out=args.out, on_start=on_start, on_end=on_end, extra=extra)
    print(json.dumps({"event": "end", "elapsed": result["elapsed"], "cpu": state["cpu"],
                      "batches": len(result["durations"])}), flush=True)


def run_one(args, scenario: str, extra: dict, out: str, broker_pid: int | None, without_output: bool = False) -> dict:
    cmd = [sys.executable, "-m", "bench.ab_bench", "--child", "--bootstrap", args.bootstrap, "--scenario", scenario,
           "--rows", str(args.rows), "--max-per-trigger", str(args.max_per_trigger),
           "--shuffle-partitions", str(args.shuffle_partitions), "--out", out, "--extra", json.dumps(extra),
           "--broker-pid", str(broker_pid or 0)] + (["--count-only"] if without_output else [])
    return child_result(cmd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME:VAR=VALUE,,VAR=VALUE (',,' separates variables; values may hold commas)")
    parser.add_argument("--scenario", action="append", choices=["left-pk", "inner-nopk"])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-per-trigger", type=int, default=100_000)
    parser.add_argument("--shuffle-partitions", type=int, default=2)
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--without-output", action="append", default=[], metavar="NAME",
                        help="this variant encodes and produces nothing, it only counts (repeatable)")
    parser.add_argument("--record", action="store_true", help="append to bench/results/RESULTS.md and plot")
    parser.add_argument("--from-log", metavar="FILE", help="the runs a previous invocation printed, not new ones")
    parser.add_argument("--child", action="store_true")
    parser.add_argument("--count-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap")
    parser.add_argument("--out")
    parser.add_argument("--extra")
    parser.add_argument("--broker-pid", type=int)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    variants = [parse_variant(v) for v in args.variant] or [("base", {})]
    started = datetime.now(timezone.utc)
    results: dict = collections.defaultdict(list)
    if args.from_log:
        for line in open(args.from_log):
            if line.startswith("{") and '"variant"' in line:
                r = json.loads(line)
                results[(r["scenario"], r["variant"])].append(r)
    else:
        run_all(args, variants, results)
    table = render(args, variants, results)
    print(table)
    if args.record:
        png = results_png("ab", started)
        plot(args, variants, results, png)
        command = "python -m bench.ab_bench " + " ".join(a for a in sys.argv[1:] if not a.startswith("--from-log")
                                                         and a != args.from_log)
        append_results(f"\n## {started:%Y-%m-%d %H:%M} UTC A/B: {', '.join(n for n, _ in variants)}, "
                       f"{args.rows:,} rows per side\n\n`{command}`\n\n{table}\n\n![input rows/s per variant]"
                       f"({png.name})\n")


def run_all(args, variants, results: dict) -> None:
    from devkit.kafka_broker import KafkaBroker

    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    with contextlib.nullcontext(external) if external else KafkaBroker(heap="1g") as bootstrap:
        args.bootstrap = bootstrap
        broker = None if external else broker_pid()
        for scenario in args.scenario or ["left-pk", "inner-nopk"]:
            load(bootstrap, scenario, args.rows, args.keys)
            reader = None if args.no_check else changejoin_reader(scenario)
            for round_ in range(args.rounds):
                for name, extra in variants:
                    out = f"ab-{scenario}-{round_}-{time.time_ns()}"
                    silent = name in args.without_output
                    r = run_one(args, scenario, extra, out, broker, silent)
                    if reader is not None and round_ == 0 and not silent:  # reading 3-4 M records back takes a while
                        count, kinds, digest = output_counts(bootstrap, out, reader)
                        r["output"] = {"records": count, **kinds, "digest": digest}
                    r["rows_s"] = 2 * args.rows / r["elapsed"]
                    results[(scenario, name)].append(r)
                    print(json.dumps({"scenario": scenario, "variant": name, "round": round_, **r}), flush=True)


def render(args, variants, results) -> str:
    lines = ["| scenario | variant | runs | in rows/s min | in rows/s median | vs first (median) | CPU s median: jvm / python / broker | output (every run) |",
             "|---|---|---|---|---|---|---|---|"]
    for scenario in args.scenario or ["left-pk", "inner-nopk"]:
        base = None
        for name, _ in variants:
            runs = results[(scenario, name)]
            speeds = [r["rows_s"] for r in runs]
            median = statistics.median(speeds)
            base = base or median
            cpu = {k: statistics.median(r["cpu"].get(k, 0) for r in runs) for k in ("jvm", "python", "broker")}
            # Only the first round's runs are checked (the others carry no output).
            outputs = {json.dumps(r["output"], sort_keys=True) for r in runs if r.get("output")}
            if name in args.without_output:
                output = "none written (--without-output)"
            elif not outputs:
                output = "not read (--no-check)"
            else:
                output = "; ".join(outputs) if len(outputs) == 1 else "DIFFERENT: " + " | ".join(sorted(outputs))
            lines.append(f"| {scenario} | {name} | {len(runs)} | {min(speeds):,.0f} | {median:,.0f} | {median / base:.2f} | "
                         f"{cpu['jvm']:.1f} / {cpu['python']:.1f} / {cpu['broker']:.1f} | {output} |")
    return "\n".join(lines)


def plot(args, variants, results, png) -> None:
    """Input rows/s per scenario (groups) and variant (bars: median, dots: every run)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scenarios = args.scenario or ["left-pk", "inner-nopk"]
    names = [name for name, _ in variants]
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, name in enumerate(names):
        xs = [j + i * width for j in range(len(scenarios))]
        speeds = [[r["rows_s"] for r in results[(s, name)]] for s in scenarios]
        ax.bar(xs, [statistics.median(v) if v else 0 for v in speeds], width, label=name)
        for x, v in zip(xs, speeds):
            ax.scatter([x] * len(v), v, color="black", s=8, zorder=3)
    ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(scenarios))], scenarios)
    ax.set_ylabel("input rows/s (bar: median, dots: runs)")
    ax.set_title(f"{args.rows:,} rows per side")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)


if __name__ == "__main__":
    main()
