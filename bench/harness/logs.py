"""What ``bench.compare`` printed, read back: its per-run throughput lines and its latency table's
rows, so that a comparison made of several invocations (``bench.latency_sweep``,
``bench.before_after``) is computed from the very figures each invocation reported.

The formats are the ones ``bench/compare.py`` (``one_run``) and :func:`.report.render` print; a
line that does not match is not a run (the broker's and Spark's own lines share the log)."""
from __future__ import annotations

import ast
import re

# "  left-pk r1 changejoin: 22.8 s, 17,530 in rows/s, output 3438800 {...} 80cfe324df6b, cpu {...},
#  peak RSS 2452 MB, batch p50/p99 7753/11115 ms, first output 14.3 s, state 3.7 MB[, dead letters N]"
THROUGHPUT = re.compile(
    r"^  (?P<scenario>\S+) r(?P<round>\d+) (?P<system>\S+): (?P<elapsed>[\d.]+) s, (?P<rate>[\d,]+) in rows/s, "
    r"output (?P<output>-|\d+) (?P<kinds>\{.*?\})? ?(?P<digest>[0-9a-f]*), cpu (?P<cpu>\{[^}]*\}), "
    r"peak RSS (?P<rss>\d+) MB, batch p50/p99 (?P<p50>\S+)/(?P<p99>\S+) ms, "
    r"first output (?P<first>\S+) s, state (?P<state>\S+) MB(?:, dead letters (?P<dead>\d+))?\s*$")
THROUGHPUT_FAILED = re.compile(r"^  (?P<scenario>\S+) r(?P<round>\d+) (?P<system>\S+): FAILED (?P<why>.*)$")
# "expected {'final rows': 107720, 'digest': '80cfe324df6b'}": what the data fixes (compare's prepare)
EXPECTED = re.compile(r"^(?P<data>\S+): generated in .* expected (?P<expected>\{.*\})\s*$")

# | scenario | system | rate rows/s | achieved rows/s | outputs measured | p50 ms | p90 ms | p99 ms | max ms |
# p50 first / last 10 s ms | batch p50 / p99 s | CPU s (by process) | peak RSS MB |
LATENCY = re.compile(r"^\| (\S+) \| (\S+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| "
                     r"([\d,]+) \| ([\d,]+) / ([\d,]+) \| (?:([\d.]+) / ([\d.]+)|-) \| ([^|]*) \| ([\d,]+) \|")
LATENCY_FAILED = re.compile(r"^\| (\S+) \| (\S+) \| ([\d,]+) \| failed: ([^|]*)\|")


def _number(text: str):
    """A figure as printed (``1,234``, ``7.8``); None for ``-`` / ``None``."""
    if text in ("-", "None"):
        return None
    value = float(text.replace(",", ""))
    return int(value) if value.is_integer() and "." not in text else value


def throughput_runs(text: str) -> list[dict]:
    """Every throughput run ``text`` reports, in order: as ``bench.compare``'s ``one_run`` returns
    it (``in_rate``, ``cpu`` by process kind, ``batch_p50``/``batch_p99`` ms, ``first_output`` s,
    ``digest`` ...), or ``{"scenario", "round", "system", "failed"}`` for a run that failed."""
    runs = []
    for line in text.splitlines():
        if m := THROUGHPUT.match(line):
            runs.append({"scenario": m["scenario"], "round": int(m["round"]), "system": m["system"],
                         "elapsed": float(m["elapsed"]), "in_rate": _number(m["rate"]),
                         "output": _number(m["output"]),
                         "kinds": ast.literal_eval(m["kinds"]) if m["kinds"] else {},
                         "digest": m["digest"] or None, "cpu": ast.literal_eval(m["cpu"]),
                         "peak_rss_mb": int(m["rss"]), "batch_p50": _number(m["p50"]), "batch_p99": _number(m["p99"]),
                         "first_output": _number(m["first"]), "state_mb": _number(m["state"]),
                         "dead_letters": int(m["dead"]) if m["dead"] else None})
        elif m := THROUGHPUT_FAILED.match(line):
            runs.append({"scenario": m["scenario"], "round": int(m["round"]), "system": m["system"],
                         "failed": m["why"]})
    return runs


def expected_outputs(text: str) -> dict[str, dict]:
    """What the data fixes per data set (``left-pk``: the final table's digest, ``inner-nopk``: the
    output count), as ``bench.compare`` printed it after generating the data."""
    return {m["data"]: ast.literal_eval(m["expected"]) for line in text.splitlines() if (m := EXPECTED.match(line))}


def latency_runs(text: str) -> list[dict]:
    """Every row of the latency table ``text`` holds, in order: rate, achieved rate and output count,
    p50/p90/p99/max and the p50 of the first and last 10 s (ms), ``kept_up`` (the last within 1.5x
    of the first), micro-batch p50/p99 (s, None for systems without micro-batches), CPU seconds by
    process kind and peak RSS; a failed run as ``{"scenario", "system", "rate", "failed"}``."""
    runs = []
    for line in text.splitlines():
        if m := LATENCY.match(line):
            n = [int(g.replace(",", "")) for g in m.groups()[2:11]]
            cpu = {}
            for part in filter(None, (p.strip() for p in m[14].split(","))):
                kind, _, seconds = part.rpartition(" ")
                cpu[kind] = float(seconds)
            runs.append({"scenario": m[1], "system": m[2], "rate": n[0], "achieved": n[1], "outputs": n[2],
                         "p50": n[3], "p90": n[4], "p99": n[5], "max": n[6], "first": n[7], "last": n[8],
                         "batch_p50": float(m[12]) if m[12] else None, "batch_p99": float(m[13]) if m[13] else None,
                         "kept_up": n[8] <= 1.5 * n[7], "cpu": cpu, "peak_rss_mb": int(m[15].replace(",", ""))})
        elif m := LATENCY_FAILED.match(line):
            runs.append({"scenario": m[1], "system": m[2], "rate": int(m[3].replace(",", "")),
                         "failed": m[4].strip()})
    return runs


def compare_command(text: str) -> str | None:
    """The command line ``bench.compare``'s report names (its first line in backquotes)."""
    m = re.search(r"^`(\./dev bench compare [^`]*)`", text, re.MULTILINE)
    return m[1] if m else None
