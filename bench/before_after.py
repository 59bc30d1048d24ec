"""This checkout against another revision: ``bench.compare`` run in both, in ABBA order, side by side.

    python -m bench.before_after --before REV [--runs 3] [--record] [--title TEXT] -- <bench.compare arguments>
    python -m bench.before_after --from-logs DIR [--logs-prefix NAME] [--before REV] [--record] [--title TEXT]

``before`` is ``git worktree add --detach`` of REV in a temporary directory (its ``.cache``, where
the jars are, a link to this checkout's), removed at the end, also on an error or Ctrl-C. Each run
is ``python -m bench.compare <arguments>`` in a child process of this interpreter (this venv) whose
working directory and ``PYTHONPATH`` are that side's checkout, so every module it imports, the
harness included, is that side's. The sides alternate ABBA (this, before, before, this, this,
before, ...): a drift of the machine over the runs (load, heat, page cache) then weighs on both
sides alike. Each run's output goes to ``<dir>/run-<side>-<n>.log`` in a kept directory (printed).

Read back from each log (bench/harness/logs.py, the lines ``bench.compare`` prints): the throughput
runs and the latency table's rows. Printed: per scenario and system, one row per run (side, run,
input rows/s, micro-batch p50/p99, first output, CPU by process, output digest), per side the min
and median of the input rows/s and of the Python CPU seconds, and this/before of the medians; per
latency scenario, system and rate, one row per run (p50, p99, micro-batch p50/p99, CPU) and
this/before of the median p50 and p99. Every run of a scenario must write the same output (the
final table's digest, or where the scenario has none the output count): a difference is reported
first, in capitals.

``--record`` appends the tables, the date and the command to bench/results/RESULTS.md and plots
bench/results/before-after-<date>.png (input rows/s per run by side; latency p50/p99 against the
rate by side). ``--from-logs DIR`` reports (and records) the logs of an earlier invocation, or any
``<prefix>-<this|before>-<n>.log`` files (``--logs-prefix`` picks one prefix when DIR holds several),
without running anything: the sides and run numbers come from the names, the order from ABBA.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.harness import ROOT
from bench.harness.logs import compare_command, expected_outputs, latency_runs, throughput_runs
from bench.harness.report import fmt, record_round

SIDES = ("this", "before")
LOG_NAME = re.compile(r"^(?P<prefix>.+)-(?P<side>this|before)-(?P<n>\d+)\.log$")


def abba(runs: int) -> list[tuple[str, int]]:
    """The order of ``runs`` runs per side: this, before, before, this, this, before, ... as
    (side, run number of that side)."""
    order = []
    for i in range(runs):
        pair = SIDES if i % 2 == 0 else SIDES[::-1]
        order += [(side, i + 1) for side in pair]
    return order


@contextlib.contextmanager
def worktree(root: Path, rev: str):
    """A detached worktree of ``rev`` of the repository at ``root``, in a temporary directory, with
    ``.cache`` linked to ``root``'s; removed (and unregistered) when the block ends, however it ends."""
    parent = Path(tempfile.mkdtemp(prefix="before-after-"))
    path = parent / "before"
    try:
        subprocess.run(["git", "-C", str(root), "worktree", "add", "--detach", str(path), rev], check=True,
                       stdout=subprocess.DEVNULL)
        if (root / ".cache").exists():
            (path / ".cache").symlink_to((root / ".cache").resolve())
        yield path
    finally:
        subprocess.run(["git", "-C", str(root), "worktree", "remove", "--force", str(path)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(parent, ignore_errors=True)
        subprocess.run(["git", "-C", str(root), "worktree", "prune"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def revision(root: Path, rev: str = "HEAD") -> str:
    """``rev``'s short commit id in the repository at ``root``."""
    found = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "--verify", f"{rev}^{{commit}}"],
                           capture_output=True, text=True)
    if found.returncode:
        raise SystemExit(f"--before {rev}: not a commit of {root} ({found.stderr.strip()}): give a commit, branch or tag")
    return found.stdout.strip()


def interrupt(signum, frame):
    raise KeyboardInterrupt


def run_one(checkout: Path, compare_args: list[str], log: Path) -> int:
    """``python -m bench.compare <compare_args>`` in ``checkout`` (working directory and
    ``PYTHONPATH``), stdout and stderr to ``log``; its exit status. On Ctrl-C (which the child gets
    too) the child is given time to stop its broker and Spark, then a SIGTERM (how bench.compare
    stops when run in the background), then killed."""
    env = dict(os.environ, PYTHONPATH=str(checkout))
    with open(log, "w") as out:
        child = subprocess.Popen([sys.executable, "-m", "bench.compare", *compare_args], cwd=checkout, env=env,
                                 stdout=out, stderr=subprocess.STDOUT)
        try:
            return child.wait()
        except KeyboardInterrupt:
            for sig, grace in ((None, 10), (signal.SIGTERM, 120), (signal.SIGKILL, None)):
                if sig:
                    child.send_signal(sig)
                try:
                    child.wait(grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            raise


def measure(root: Path, before: Path, runs: int, compare_args: list[str], logs: Path) -> list[tuple[str, int, Path]]:
    """Every run in ABBA order; the logs written, in that order."""
    done = []
    for side, n in abba(runs):
        log = logs / f"run-{side}-{n}.log"
        print(f"{side} {n}: {log}", flush=True)
        status = run_one(root if side == "this" else before, compare_args, log)
        if status:
            print(f"{side} {n}: bench.compare exited with {status} (see its log)", flush=True)
        done.append((side, n, log))
    return done


def logs_in(directory: Path, prefix: str | None = None) -> list[tuple[str, int, Path]]:
    """The ``<prefix>-<this|before>-<n>.log`` files in ``directory`` as (side, n, path), in ABBA
    order; with several prefixes there, ``prefix`` must say which."""
    found = {}
    for path in directory.iterdir():
        if (m := LOG_NAME.match(path.name)) and (prefix is None or m["prefix"] == prefix):
            found.setdefault(m["prefix"], {})[(m["side"], int(m["n"]))] = path
    if not found:
        raise SystemExit(f"{directory}: no <prefix>-<this|before>-<n>.log files"
                         + (f" with prefix {prefix!r}" if prefix else ""))
    if len(found) > 1:
        raise SystemExit(f"{directory} holds the logs of several invocations ({', '.join(sorted(found))}): "
                         "name one with --logs-prefix")
    (files,) = found.values()
    order = abba(max(n for _, n in files))
    return [(side, n, files[(side, n)]) for side, n in order if (side, n) in files]


def read(logs: list[tuple[str, int, Path]]) -> tuple[list[dict], list[dict], dict, str | None]:
    """The throughput and latency runs of every log, each tagged with its side and run number; what
    the data fixes; the compare command the first log names."""
    through, latency, expected, command = [], [], {}, None
    for side, n, path in logs:
        text = path.read_text(errors="replace")
        mine = [dict(r, side=side, run=n) for r in throughput_runs(text)]
        lat = [dict(r, side=side, run=n) for r in latency_runs(text)]
        if not mine and not lat:  # it failed before any run: a row that says so, not silence
            mine = [{"scenario": "-", "system": "-", "round": 1, "side": side, "run": n,
                     "failed": f"no run in {path.name}: see it"}]
        through += mine
        latency += lat
        expected.update(expected_outputs(text))
        command = command or compare_command(text)
    return through, latency, expected, command


def _med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if a is not None and b else "-"


def _cpu(cpu: dict) -> str:
    return ", ".join(f"{k} {c:.0f}" for k, c in sorted(cpu.items()) if c >= 0.5) or "-"


def _ms_as_s(p50, p99) -> str:
    return "-" if p50 is None else f"{p50 / 1000:.1f} / {p99 / 1000:.1f}"


def output_check(through: list[dict], expected: dict) -> list[str]:
    """One line per scenario: whether every run wrote the same output (the final table's digest;
    without one, the count), and the one the data fixes when the log says."""
    lines = []
    for scenario in dict.fromkeys(r["scenario"] for r in through):
        mine = [r for r in through if r["scenario"] == scenario and "failed" not in r and r["output"] is not None]
        if not mine:
            continue
        key = "digest" if any(r["digest"] for r in mine) else "output"
        got = {f"{r['side']} {r['run']} {r['system']} r{r['round']}": r[key] for r in mine}
        fixed = expected.get(scenario, {}).get("digest" if key == "digest" else "count")
        values = set(got.values()) | ({fixed} if fixed is not None else set())
        what = "final table digest" if key == "digest" else "output count"
        if len(values) == 1:
            lines.append(f"- {scenario}: every run's {what} is {values.pop()}"
                         + (" (fixed by the data)" if fixed is not None else ""))
        else:
            lines.append(f"- **{scenario}: OUTPUT DIFFERS between runs**: {what} "
                         + (f"expected {fixed}, " if fixed is not None else "") + f"got {got}")
    return lines


def throughput_tables(through: list[dict]) -> list[str]:
    if not through:
        return []
    several_rounds = any(r["round"] > 1 for r in through)
    lines = ["| scenario | system | side | run | in rows/s | batch p50 / p99 s | first output s | "
             "CPU s (by process) | peak RSS MB | output digest |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in through:
        run = f"{r['run']}" + (f" r{r['round']}" if several_rounds else "")
        if "failed" in r:
            lines.append(f"| {r['scenario']} | {r['system']} | {r['side']} | {run} | FAILED: {r['failed'][:80]} |"
                         + " |" * 5)
            continue
        lines.append(f"| {r['scenario']} | {r['system']} | {r['side']} | {run} | {r['in_rate']:,.0f} | "
                     f"{_ms_as_s(r['batch_p50'], r['batch_p99'])} | {fmt(r['first_output'], 1)} | {_cpu(r['cpu'])} | "
                     f"{r['peak_rss_mb']:,} | {r['digest'] or (r['output'] if r['output'] is not None else '-')} |")
    lines += ["", "| scenario | system | side | runs | in rows/s min | in rows/s median | Python CPU s min | "
                  "Python CPU s median |", "|---|---|---|---|---|---|---|---|"]
    ratios = []
    for scenario, system in dict.fromkeys((r["scenario"], r["system"]) for r in through):
        med = {}
        for side in SIDES:
            rs = [r for r in through if (r["scenario"], r["system"], r["side"]) == (scenario, system, side)
                  and "failed" not in r]
            if not rs:
                continue
            rates, python = [r["in_rate"] for r in rs], [r["cpu"].get("python") for r in rs]
            med[side] = (_med(rates), _med(python))
            lines.append(f"| {scenario} | {system} | {side} | {len(rs)} | {min(rates):,.0f} | {med[side][0]:,.0f} | "
                         f"{fmt(min((p for p in python if p is not None), default=None), 1)} | {fmt(med[side][1], 1)} |")
        if len(med) == 2:
            ratios.append(f"- {scenario} {system}: this / before, medians: in rows/s "
                          f"{_ratio(med['this'][0], med['before'][0])}, Python CPU s "
                          f"{_ratio(med['this'][1], med['before'][1])}")
    return lines + [""] + ratios


def latency_tables(latency: list[dict]) -> list[str]:
    if not latency:
        return []
    lines = ["| scenario | system | rate rows/s | side | run | achieved rows/s | p50 ms | p99 ms | "
             "batch p50 / p99 s | CPU s (by process) |", "|---|---|---|---|---|---|---|---|---|---|"]
    ratios = []
    for key in dict.fromkeys((r["scenario"], r["system"], r["rate"]) for r in latency):
        scenario, system, rate = key
        rs = [r for r in latency if (r["scenario"], r["system"], r["rate"]) == key]
        rs.sort(key=lambda r: (SIDES.index(r["side"]), r["run"]))
        for r in rs:
            if "failed" in r:
                lines.append(f"| {scenario} | {system} | {rate:,} | {r['side']} | {r['run']} | "
                             f"FAILED: {r['failed'][:80]} |" + " |" * 4)
                continue
            batch = _ms_as_s(r["batch_p50"] and r["batch_p50"] * 1000, r["batch_p99"] and r["batch_p99"] * 1000)
            lines.append(f"| {scenario} | {system} | {rate:,} | {r['side']} | {r['run']} | {r['achieved']:,} | "
                         f"{r['p50']:,} | {r['p99']:,} | {batch} | {_cpu(r['cpu'])} |")
        med = {side: [_med(r[q] for r in rs if r["side"] == side and "failed" not in r) for q in ("p50", "p99")]
               for side in SIDES}
        if all(v is not None for side in SIDES for v in med[side]):
            ratios.append(f"- {scenario} {system} at {rate:,} rows/s: this / before, medians: p50 "
                          f"{_ratio(med['this'][0], med['before'][0])} ({med['this'][0]:,.0f} against "
                          f"{med['before'][0]:,.0f} ms), p99 {_ratio(med['this'][1], med['before'][1])} "
                          f"({med['this'][1]:,.0f} against {med['before'][1]:,.0f} ms)")
    return lines + [""] + ratios


def render(through: list[dict], latency: list[dict], expected: dict, command: str, runs_note: str) -> str:
    checks = output_check(through, expected)
    differs = [c for c in checks if "OUTPUT DIFFERS" in c]
    lines = [f"`{command}`", "", runs_note, ""] + differs + ([""] if differs else [])
    lines += throughput_tables(through)
    if latency:
        lines += ([""] if through else []) + ["Latency (ms, produce to output):", ""] + latency_tables(latency)
    lines += [""] + [c for c in checks if c not in differs]
    return "\n".join(lines).rstrip()


def plot(through: list[dict], latency: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    ok = [r for r in through if "failed" not in r]
    lat = [r for r in latency if "failed" not in r]
    panels = [p for p in ("through", "latency") if (ok if p == "through" else lat)]
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.4), squeeze=False)
    colors = {"this": "tab:blue", "before": "tab:orange"}
    for ax, panel in zip(axes[0], panels):
        if panel == "through":
            labels = [f"{r['side']} {r['run']}\n{r['scenario']}" for r in ok]
            ax.bar(range(len(ok)), [r["in_rate"] for r in ok], color=[colors[r["side"]] for r in ok])
            ax.set_xticks(range(len(ok)), labels, fontsize=7)
            ax.set_ylabel("input rows/s")
            ax.set_title("input rows/s per run, in the order run")
            ax.legend(handles=[Patch(color=color, label=side) for side, color in colors.items()], fontsize=7)
        else:
            for side, color in colors.items():
                mine = [r for r in lat if r["side"] == side]
                for q, marker in (("p50", "s"), ("p99", "o")):
                    ax.scatter([r["rate"] for r in mine], [r[q] / 1000 for r in mine], color=color, marker=marker,
                               s=14, label=f"{side} {q}")
                    rates = sorted({r["rate"] for r in mine})
                    ax.plot(rates, [_med(r[q] for r in mine if r["rate"] == rate) / 1000 for rate in rates],
                            color=color, linestyle="-" if q == "p99" else "--", linewidth=1)
            ax.set_xlabel("input rows/s (both sides)")
            ax.set_ylabel("produce-to-output latency, s (log; line: median)")
            ax.set_yscale("log")
            ax.set_title("latency p50 / p99 per run")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ours, compare_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", metavar="REV", help="the other revision (git), run in a temporary worktree")
    parser.add_argument("--runs", type=int, default=3, help="runs per side, in ABBA order")
    parser.add_argument("--record", action="store_true", help="append to bench/results/RESULTS.md and plot")
    parser.add_argument("--title", help="the recorded section's title (default: this and before's revisions)")
    parser.add_argument("--from-logs", metavar="DIR", type=Path,
                        help="report the <prefix>-<this|before>-<n>.log files in DIR; run nothing")
    parser.add_argument("--logs-prefix", metavar="NAME", help="with --from-logs: only NAME-<side>-<n>.log")
    args = parser.parse_args(ours)
    this = revision(ROOT)
    if args.from_logs:
        logs = logs_in(args.from_logs, args.logs_prefix)
        runs_note = (f"Runs read from {args.from_logs} ({', '.join(p.name for _, _, p in logs)}), in ABBA order "
                     f"(`before`: {args.before or 'another revision'}; reported from this checkout at {this}).")
    else:
        if not args.before:
            parser.error("--before REV (or --from-logs DIR)")
        if args.runs < 1:
            parser.error("--runs: at least 1 per side")
        if not compare_args:
            parser.error("give bench.compare's arguments after --, e.g. -- --rows 200000 --rounds 1 "
                         "--scenarios left-pk --systems changejoin")
        before_rev = revision(ROOT, args.before)
        directory = Path(tempfile.mkdtemp(prefix="before-after-logs-"))
        print(f"logs: {directory}", flush=True)
        signal.signal(signal.SIGTERM, interrupt)  # a background run (SIGINT ignored) stops like Ctrl-C
        interrupted = False
        with worktree(ROOT, args.before) as before:
            try:
                measure(ROOT, before, args.runs, compare_args, directory)
            except KeyboardInterrupt:
                interrupted = True
                print("interrupted: reporting the runs finished so far", flush=True)
        logs = logs_in(directory)
        runs_note = (f"`python -m bench.compare` run {args.runs} times per side in the order "
                     f"{', '.join(f'{s} {n}' for s, n in abba(args.runs))}"
                     + (" (interrupted)" if interrupted else "")
                     + f"; `this`: {this} (with uncommitted changes, if any), `before`: {args.before} ({before_rev}), "
                       f"a worktree of it; logs in {directory}.")
    through, latency, expected, compare = read(logs)
    command = "python -m bench.before_after " + shlex.join(argv)
    runs_note += f" bench.compare's command: `{compare}`." if compare else ""
    text = render(through, latency, expected, command, runs_note)
    print(text)
    if any(c for c in output_check(through, expected) if "OUTPUT DIFFERS" in c):
        print("OUTPUT DIFFERS between runs: see above", file=sys.stderr)
    if args.record and any("failed" not in r for r in through + latency):
        title = args.title or (f"before/after: this against {args.before or 'before'}, from logs" if args.from_logs
                               else f"before/after: this ({this}) against {args.before}")
        record_round("before-after", title, text, lambda png: plot(through, latency, png),
                     "input rows/s per run by side; latency p50/p99 by rate")
    if not args.from_logs:
        print(f"logs: {directory}")


if __name__ == "__main__":
    main()
