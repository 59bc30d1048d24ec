"""A latency sweep across variants: p50 and p99 against the input rate, from ``bench.compare`` runs.

    python -m bench.latency_sweep perkey=LOG buckets=LOG [--record TITLE]

Each LOG is the output ``python -m bench.compare ... --latency left-pk --latency-rate R1,R2,...``
printed (one invocation per variant, e.g. ``--service-env STATE_BUCKETS=0`` and the defaults); its
latency table rows are read back. Printed: one table of every run; with ``--record``, the table and
a plot (p50 and p99 against the rate, one line per variant, and whether the run kept up: the p50
of its last 10 s measured within 1.5x of its first's) are appended to bench/results/.
"""
from __future__ import annotations

import argparse
import re
import sys

from bench.harness.report import record_round

# | scenario | system | rate rows/s | achieved rows/s | outputs measured | p50 ms | p90 ms | p99 ms | max ms | p50 first / last 10 s ms | ...
ROW = re.compile(r"^\| (\S+) \| (\S+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| "
                 r"([\d,]+) \| ([\d,]+) / ([\d,]+) \| ([\d.]+) / ([\d.]+) \|")


def runs_of(path: str) -> list[dict]:
    runs = []
    for line in open(path):
        m = ROW.match(line)
        if m:
            n = [int(g.replace(",", "")) for g in m.groups()[2:11]]
            runs.append({"scenario": m[1], "rate": n[0], "achieved": n[1], "outputs": n[2], "p50": n[3],
                         "p90": n[4], "p99": n[5], "max": n[6], "first": n[7], "last": n[8],
                         "batch_p50": float(m[12]), "kept_up": n[8] <= 1.5 * n[7]})
    return runs


def table(series: dict[str, list[dict]]) -> str:
    lines = ["| variant | rate rows/s | p50 ms | p99 ms | max ms | p50 first / last 10 s ms | kept up | micro-batch p50 s |",
             "|---|---|---|---|---|---|---|---|"]
    for name, runs in series.items():
        for r in runs:
            lines.append(f"| {name} | {r['rate']:,} | {r['p50']:,} | {r['p99']:,} | {r['max']:,} | "
                         f"{r['first']:,} / {r['last']:,} | {'yes' if r['kept_up'] else 'no'} | {r['batch_p50']:.1f} |")
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
    ax.axhline(2.0, color="red", linestyle=":", linewidth=1, label="p99 target 2 s")
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
