"""The figures and where they go: percentiles, compare.py's tables and plot, and
bench/results/ (RESULTS.md, which ``--record`` appends to, and the plots beside it)."""
from __future__ import annotations

import math
import os
import statistics
from datetime import datetime, timezone
from pathlib import Path

from . import ROOT
from .peers import ALL_SYSTEMS, FLINK_VERSION, systems_of

RESULTS_DIR = ROOT / "bench" / "results"
RESULTS = RESULTS_DIR / "RESULTS.md"


def results_png(kind: str, when: datetime) -> Path:
    """Where a recorded round's plot goes: ``bench/results/<kind>-<date>.png``, beside RESULTS.md
    (which links it by name), with ``-2``, ``-3``, ... if a round of that kind took the minute."""
    stem = f"{kind}-{when:%Y-%m-%d-%H%M}"
    path, n = RESULTS_DIR / f"{stem}.png", 1
    while path.exists():
        n += 1
        path = RESULTS_DIR / f"{stem}-{n}.png"
    return path


def append_results(text: str) -> None:
    """Append ``text`` to bench/results/RESULTS.md."""
    with open(RESULTS, "a") as handle:
        handle.write(text)


def record_round(kind: str, title: str, body: str, draw, caption: str) -> None:
    """Append a round to RESULTS.md: a section headed with the time and ``title``, ``body``, and the
    plot ``draw(png)`` makes at :func:`results_png` of ``kind``, linked with ``caption``."""
    now = datetime.now(timezone.utc)
    png = results_png(kind, now)
    draw(png)
    append_results(f"\n## {now:%Y-%m-%d %H:%M} UTC {title}\n\n{body}\n\n![{caption}]({png.name})\n")


def percentile(sorted_values, q: float):
    """The ``q`` quantile (0..1) of already sorted values, nearest rank; None when empty."""
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]


def fmt(x, digits=0) -> str:
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
                         f"{fmt(_med(r['out_rate'] for r in rs))} | {ratio('flink-p2')} | "
                         f"{ratio('spark-native')} | {batch} | {fmt(_med(r['first_output'] for r in rs), 1)} | "
                         f"{fmt(_med(r['state_mb'] for r in rs), 1)} | {cpu} | {max(r['peak_rss_mb'] for r in rs):,} |")
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
        lines += format_cost(scenario, [r for r in ok if r["scenario"] == scenario])
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
                         f"{r['outputs']:,} | {fmt(r['p50'])} | {fmt(r['p90'])} | {fmt(r['p99'])} | "
                         f"{fmt(r['max'])} | {fmt(r['p50_first'])} / {fmt(r['p50_last'])} | {batch} | {cpu} | "
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


def format_cost(scenario: str, runs: list[dict]) -> list[str]:
    """The debezium scenario's question: changejoin's input rows/s on the debezium-json topics over
    its rows/s on the Avro/RowKind topics of the same changes (``changejoin-rowkind``), median,
    min over min, and round by round (each round ran both, one after the other)."""
    rates: dict[str, dict[int, float]] = {}
    for r in runs:
        if r["system"] in ("changejoin", "changejoin-rowkind", "changejoin-retract"):
            rates.setdefault(r["system"], {})[r["round"]] = r["in_rate"]
    lines = []
    # changejoin-retract: the debezium-json topics in retract mode, over rowkind and over upserts
    for name, num, den in (("debezium-json / rowkind", "changejoin", "changejoin-rowkind"),
                           ("debezium-json retract / rowkind", "changejoin-retract", "changejoin-rowkind"),
                           ("debezium-json retract / upsert", "changejoin-retract", "changejoin")):
        a, b = rates.get(num), rates.get(den)
        if not a or not b:
            continue
        rounds = sorted(set(a) & set(b))
        lines.append(f"- {scenario}: changejoin {name} input rows/s: median "
                     f"{statistics.median(a.values()) / statistics.median(b.values()):.2f}, min "
                     f"{min(a.values()) / min(b.values()):.2f}; by round "
                     + ", ".join(f"r{n} {a[n] / b[n]:.2f}" for n in rounds))
    return lines


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
