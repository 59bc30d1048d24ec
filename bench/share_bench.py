"""What holding one producing task's share of a micro-batch costs (``transactions.Share``): taking
it from the encoder with its digest, then reading it back for the transaction, in Python CPU time
per record.

    python -m bench.share_bench [--records 850000] [--rounds 3] [--before PATH] [--record]

The records are shaped as the encoder's plain output path yields them (a fresh tuple and header
list per record, a 60-120 byte value), made by a generator as the encoder's are, with the garbage
collector on, as in a worker. 850,000 records is one task's share of the bulk left-pk benchmark at
200,000 rows per side. Each round runs each system in a child process of its own; ``--before
PATH`` adds the ``Share`` of another checkout (e.g. a ``git worktree`` of the commit before a
change), run alternately with this one. Prints min and median microseconds per record, the bytes
held and whether the share spilled to disk; ``--record`` appends the table to
bench/results/RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, os, random, sys, time
from service.transactions import Share

n = int(sys.argv[1])
rng = random.Random(7)
values = [rng.randbytes(60 + i % 61) for i in range(4096)]
kinds = [("rowkind", b"+I"), ("rowkind", b"-U"), ("rowkind", b"+U"), ("rowkind", b"-D")]
batch = ("changejoin.batch", b"12")


def encoded():
    for i in range(n):
        yield ("out", None, values[i % 4096] + b"", [kinds[i % 4], batch, ("changejoin.seq", b"0:%d" % i)], i % 4)


share = Share()
start = time.process_time()
share.extend(encoded())
digest = share.digest()
taken = time.process_time()
read = sum(1 for _ in share)
done = time.process_time()
assert read == n == share.records
print(json.dumps({"take_us": (taken - start) / n * 1e6, "read_us": (done - taken) / n * 1e6,
                  "total_us": (done - start) / n * 1e6, "spilled": share.spilled,
                  "held_mb": getattr(share, "_bytes", 0) / 1e6}))
share.close()
"""


def run(checkout: Path, records: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run([sys.executable, "-c", _CHILD, str(records)], env=env, cwd=checkout,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=850_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout to run side by side")
    parser.add_argument("--record", action="store_true", help="append the table to bench/results/RESULTS.md")
    args = parser.parse_args(argv)
    systems = [("this", ROOT)] + ([("before", args.before.resolve())] if args.before else [])
    runs: dict[str, list[dict]] = {name: [] for name, _ in systems}
    for round_ in range(args.rounds):
        order = systems if round_ % 2 == 0 else systems[::-1]
        for name, checkout in order:
            result = run(checkout, args.records)
            runs[name].append(result)
            print(f"round {round_ + 1} {name}: {json.dumps(result)}", flush=True)
    rows = ["| system | runs | take µs/record min / median | read µs/record min / median | total µs/record min / "
            "median | vs this (median total) | held MB | spilled |", "|---|---|---|---|---|---|---|---|"]
    base = statistics.median(r["total_us"] for r in runs["this"])
    for name, _ in systems:
        rs = runs[name]

        def pair(key):
            values = [r[key] for r in rs]
            return f"{min(values):.2f} / {statistics.median(values):.2f}"

        total = statistics.median(r["total_us"] for r in rs)
        rows.append(f"| {name} | {len(rs)} | {pair('take_us')} | {pair('read_us')} | {pair('total_us')} | "
                    f"{total / base:.2f} | {statistics.median(r['held_mb'] for r in rs):.0f} | "
                    f"{'yes' if any(r['spilled'] for r in rs) else 'no'} |")
    table = "\n".join(rows)
    print(table)
    if args.record:
        from bench.harness.report import append_results

        command = "python -m bench.share_bench " + " ".join(argv if argv is not None else sys.argv[1:])
        now = datetime.now(timezone.utc)
        append_results(f"\n## {now:%Y-%m-%d %H:%M} UTC share: one task's share held for its transaction\n\n"
                       f"`{command}`\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
