"""What the end-to-end latency histogram costs a reading task (issue 40, item 4): the tally of the
records it read, with their ages (``latency.ReadTally``: a timestamp appended per record, then one
vectorized pass), against a count alone (the loop without the timestamps), in CPU per record.

    python -m bench.tally_bench [--records 400000] [--rounds 5] [--record]

The records are ``source.KafkaRecord``s with timestamps spread over 30 s, as one reading task's
share of a bulk micro-batch. Each round runs both, alternating which goes first; prints min and
median nanoseconds per record and the difference, which is the histogram's whole cost on the
record path (the producing task adds a task's histogram to its counts once, the driver files it
once per micro-batch). ``--record`` appends the table to bench/results/RESULTS.md.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import datetime, timezone

from service.latency import ReadTally
from service.source import KafkaRecord


def records(n: int) -> list:
    rng = random.Random(7)
    start = 1_795_000_000_000
    return [KafkaRecord(topic="orders", partition=i % 2, offset=i, timestamp_ms=start + rng.randrange(30_000),
                        key=None, value=b"v", headers=None) for i in range(n)]


def with_ages(batch: list) -> float:
    started = time.process_time()
    tally = ReadTally()
    for _ in tally.counted(batch):
        pass
    tally.value()
    return time.process_time() - started


def _counted(records):
    """ReadTally.counted without the timestamps: the count that existed before the histogram."""
    n = 0
    record = None
    for record in records:
        n += 1
        yield record
    if record is not None:
        record.partition  # noqa: B018 - as counted() reads it


def count_only(batch: list) -> float:
    started = time.process_time()
    for _ in _counted(batch):
        pass
    return time.process_time() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    batch = records(args.records)
    times: dict[str, list[float]] = {"count only": [], "count and ages": []}
    for i in range(args.rounds):
        order = [("count only", count_only), ("count and ages", with_ages)][:: 1 if i % 2 == 0 else -1]
        for name, run in order:
            times[name].append(run(batch) / args.records * 1e9)
    lines = ["| tally | runs | ns per record min | ns per record median |", "|---|---|---|---|"]
    for name, values in times.items():
        lines.append(f"| {name} | {len(values)} | {min(values):.0f} | {statistics.median(values):.0f} |")
    extra = statistics.median(times["count and ages"]) - statistics.median(times["count only"])
    summary = f"the ages cost {extra:.0f} ns per input record (median against median)"
    print("\n".join(lines))
    print(summary)
    if args.record:
        from bench.harness.report import append_results

        now = datetime.now(timezone.utc)
        command = "python -m bench.tally_bench " + " ".join(argv if argv is not None else sys.argv[1:])
        append_results(f"\n## {now:%Y-%m-%d %H:%M} UTC tally: what the end-to-end latency histogram costs a reading "
                       f"task\n\n`{command}`\n\n" + "\n".join(lines) + f"\n\n{summary[0].upper() + summary[1:]}.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
