"""Changes per second through the decode step, outside Spark: left-pk's changes read as ``rowkind``
(an Avro body, the change kind in a header) against the same changes as ``debezium-json``.

    python -m bench.format_bench [--rows 100000] [--rounds 5] [--profile] [--record-results]

The records are what bench.compare's debezium scenario preloads (bench/harness/data.py: left-pk's
changelogs, Avro with a ``rowkind`` header, and the same changes as bare debezium-json envelopes,
a -U/+U pair one ``u`` message), as the Kafka source hands them to a reading task. Each round runs
both formats, alternating which goes first, through:

- ``decode step``: ``InputDecoder.map_all`` of both sides, as a Python worker runs it (the values
  decoded, each row keyed and packed into its bucket's envelope; with the primary keys declared a
  debezium-json row goes to the normalize stage, keyed by its primary key);
- ``values only``: the value decoder alone (``ValueDecoder.decode`` of every Avro body against
  ``DebeziumDecoder.changes`` of every envelope).

Prints min and median microseconds per change (a ``u`` message carries two) and the ratio, and with
``--profile`` where ``DebeziumDecoder.changes`` spends its time (cProfile, one pass over the
envelopes, by own time). ``--record-results`` appends the table to bench/results/RESULTS.md.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone

from bench.harness.changejoin import service_settings
from bench.harness.data import ORDERS, PRICES, body, changelogs, debezium, json_value
from bench.harness.report import append_results
from service.catalog import plan_for
from service.decode import InputDecoder
from service.source import KafkaRecord

FORMATS = {"rowkind": "left-pk", "debezium-json": "debezium"}  # format -> bench.compare scenario


def records(rows: int, keys: int) -> dict[str, tuple[list, list]]:
    """Each format's records of left-pk's two changelogs (orders, prices)."""
    orders, prices = changelogs(rows, keys, "left-pk")

    def rowkind(changes, schema):
        return [KafkaRecord("in", 0, i, 1, None, body(schema, row), [("rowkind", kind.encode())])
                for i, (kind, row) in enumerate(changes)]

    def envelopes(changes):
        return [KafkaRecord("in", 0, i, 1, None, json_value(m), None) for i, (m, _) in enumerate(debezium(changes))]

    return {"rowkind": (rowkind(orders, ORDERS), rowkind(prices, PRICES)),
            "debezium-json": (envelopes(orders), envelopes(prices))}


def decoders() -> dict[str, tuple[InputDecoder, InputDecoder]]:
    with tempfile.TemporaryDirectory() as work:
        plans = {f: plan_for(service_settings("127.0.0.1:1", s, 1, 1, f"{work}/{s}")) for f, s in FORMATS.items()}
    return {f: (InputDecoder(plan, 0, "rowkind", None), InputDecoder(plan, 1, "rowkind", None))
            for f, plan in plans.items()}


def decode_step(decoder: InputDecoder, recs) -> int:
    return sum(1 for _ in decoder.map_all(recs))


def values_only(decoder: InputDecoder, recs) -> int:
    if hasattr(decoder.format, "changes"):  # a Debezium format's: the message's changes
        changes = decoder.format.changes
        return sum(len(changes(r.value)[0]) for r in recs)
    decode = decoder.format.decoder.decode  # rowkind's Avro value decoder
    return sum(1 for r in recs if decode(r.value) is not None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="changes per side")
    parser.add_argument("--keys", type=int, help="join keys (default rows / 20, as bench.compare)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true", help="cProfile DebeziumDecoder.changes over the envelopes")
    parser.add_argument("--record-results", action="store_true")
    args = parser.parse_args()
    keys = args.keys or max(1, args.rows // 20)
    started = datetime.now(timezone.utc)
    recs, decs = records(args.rows, keys), decoders()
    changes = 2 * args.rows
    us: dict[tuple[str, str], list[float]] = {}
    for rnd in range(args.rounds):
        for fmt in list(FORMATS)[:: 1 if rnd % 2 == 0 else -1]:
            for what, run in (("decode step", decode_step), ("values only", values_only)):
                t0 = time.perf_counter()
                for side in (0, 1):
                    run(decs[fmt][side], recs[fmt][side])
                us.setdefault((what, fmt), []).append((time.perf_counter() - t0) / changes * 1e6)
    lines = ["| step | format | records | us per change, min | median | vs rowkind (median) |", "|---|---|---|---|---|---|"]
    for what in ("decode step", "values only"):
        base = statistics.median(us[(what, "rowkind")])
        for fmt in FORMATS:
            values = us[(what, fmt)]
            lines.append(f"| {what} | {fmt} | {sum(len(r) for r in recs[fmt]):,} | {min(values):.2f} | "
                         f"{statistics.median(values):.2f} | {statistics.median(values) / base:.2f}x |")
    report = "\n".join(lines)
    print(f"{changes:,} changes (left-pk, {args.rows:,} per side, {keys:,} keys), {args.rounds} rounds\n{report}")
    profile = ""
    if args.profile:
        decoder = decs["debezium-json"]
        profiler = cProfile.Profile()
        profiler.enable()
        for side in (0, 1):
            values_only(decoder[side], recs["debezium-json"][side])
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats("tottime").print_stats(12)
        profile = out.getvalue()
        print(profile)
    if args.record_results:
        append_results(f"\n## {started:%Y-%m-%d %H:%M} UTC decode: rowkind against debezium-json, outside Spark\n\n"
                       f"`python -m bench.format_bench --rows {args.rows} --rounds {args.rounds}` (one process, "
                       f"both formats in every round, alternating; microseconds per change, {changes:,} changes; "
                       "this machine is shared: compare the ratio)\n\n" + report + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
