"""A latency sweep across variants: p50 and p99 against the input rate, from ``bench.compare`` runs.

    python -m bench.latency_sweep perkey=LOG buckets=LOG [--record TITLE]

Each LOG is the output ``python -m bench.compare ... --latency left-pk --latency-rate R1,R2,...``
printed (one invocation per variant, e.g. ``--service-env STATE_BUCKETS=0`` and the defaults, or of a
peer, ``--systems flink-p2 --latency-systems flink-p2``, for reference); its latency table rows are
read back. Printed: one table of every run; with ``--record``, the table and
a plot (p50 and p99 against the rate, one line per variant, and whether the run kept up: the p50
of its last 10 s measured within 1.5x of its first's) are appended to bench/results/.
"""
from __future__ import annotations

import argparse
import sys

from bench.harness.logs import latency_runs
from bench.harness.report import fmt, record_round


#: Issue 40's p99 targets for left-pk at the default trigger: (input rows/s, seconds).
P99_TARGETS = ((2000, 1.0), (6000, 1.5), (18000, 2.0))


def runs_of(path: str) -> list[dict]:
    """The latency rows in the log at ``path`` of its one system (changejoin's variants, or a peer
    such as flink-p2 for reference); a failed run has no figures to plot."""
    with open(path) as handle:
        return [r for r in latency_runs(handle.read()) if "failed" not in r]


def table(series: dict[str, list[dict]]) -> str:
    lines = ["| variant | rate rows/s | p50 ms | p99 ms | max ms | p50 first / last 10 s ms | kept up | micro-batch p50 s |",
             "|---|---|---|---|---|---|---|---|"]
    for name, runs in series.items():
        for r in runs:
            lines.append(f"| {name} | {r['rate']:,} | {r['p50']:,} | {r['p99']:,} | {r['max']:,} | "
                         f"{r['first']:,} / {r['last']:,} | {'yes' if r['kept_up'] else 'no'} | {fmt(r['batch_p50'], 1)} |")
    return "\n".join(lines)


def plot(series: dict[str, list[dict]], png) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, runs in series.items():
        rates = [r["rate"] for r in runs]
        line, = ax.plot(rates, [r["p99"] / 1000 for r in runs], "o-", label=f"{name} p99")
        ax.plot(rates, [r["p50"] / 1000 for r in runs], "s--", color=line.get_color(), label=f"{name} p50")
        for r in runs:
            if not r["kept_up"]:
                ax.annotate("falls behind", (r["rate"], r["p99"] / 1000), fontsize=7, xytext=(4, 4),
                            textcoords="offset points")
    ax.plot([rate for rate, _ in P99_TARGETS], [target for _, target in P99_TARGETS], "x:", color="red",
            linewidth=1, label="p99 targets (issue 40)")
    ax.set_xlabel("input rows/s (both sides)")
    ax.set_ylabel("produce-to-output latency, s (log)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("logs", nargs="+", metavar="NAME=LOG")
    parser.add_argument("--record", metavar="TITLE")
    args = parser.parse_args()
    series = {}
    for spec in args.logs:
        name, _, path = spec.partition("=")
        series[name] = runs_of(path)
        if not series[name]:
            sys.exit(f"{path}: no latency rows")
    text = table(series)
    print(text)
    if args.record:
        record_round("latency-sweep", args.record, text, lambda png: plot(series, png),
                     "p50 and p99 against the input rate")


if __name__ == "__main__":
    main()
