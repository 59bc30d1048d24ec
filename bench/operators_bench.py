"""Events per second through each join type on in-memory state.

    python -m bench.operators_bench [--events 1000000] [--keys 10000] [--batch 1]

A changelog of inserts, -U/+U updates and deletes on both sides (left rows keyed by a unique id
outside the join key, right rows one per join key) is replayed through the real operators. With
``--batch N`` records are grouped per join key in micro-batches of N records, as the Spark
adapter calls the operators (one call per key per batch).
"""
from __future__ import annotations

import argparse
import random
import time

from operators import InputSpec, JoinSpec, JoinType, RowKind, make_join
from operators.testing import LocalRunner

INSERT, UPDATE_BEFORE, UPDATE_AFTER, DELETE = (int(k) for k in RowKind)  # as the service hands kinds over


def changelog(n: int, keys: int, seed: int = 7) -> list[tuple]:
    rng = random.Random(seed)
    left: dict[int, tuple] = {}
    right: dict[int, tuple] = {}
    records = []
    next_id = 0
    while len(records) < n:
        if rng.random() < 0.5:  # left: orders with an id, joined on a customer key
            roll = rng.random()
            if roll < 0.6 or not left:
                next_id += 1
                row = (next_id, rng.randrange(keys), rng.randrange(100))
                left[next_id] = row
                records.append((0, INSERT, row))
            elif roll < 0.9:
                oid = rng.choice(list(left)) if len(left) < 64 else next_id - rng.randrange(min(len(left), 1000))
                old = left.get(oid)
                if old is None:
                    continue
                new = (oid, old[1], rng.randrange(100))
                left[oid] = new
                records += [(0, UPDATE_BEFORE, old), (0, UPDATE_AFTER, new)]
            else:
                oid = next_id - rng.randrange(min(len(left), 1000))
                old = left.pop(oid, None)
                if old is not None:
                    records.append((0, DELETE, old))
        else:  # right: one row per key, inserted then updated
            key = rng.randrange(keys)
            old = right.get(key)
            new = (key, rng.randrange(100))
            right[key] = new
            if old is None:
                records.append((1, INSERT, new))
            else:
                records += [(1, UPDATE_BEFORE, old), (1, UPDATE_AFTER, new)]
    return records[:n]


def spec(join_type: JoinType) -> JoinSpec:
    left = InputSpec(("id", "customer", "amount"), (1,), (0,))
    right = InputSpec(("customer", "tier"), (0,), (0,))
    return JoinSpec(join_type, left, right)


def run(join_type: JoinType, records: list[tuple], batch: int) -> tuple[float, int]:
    keys = (1, 0)
    # The protocol checks are left out: what is timed is the operators (and the routing by key).
    runner = LocalRunner(make_join(spec(join_type)), key=lambda record: record[2][keys[record[0]]], check=False)
    emitted = 0
    start = time.perf_counter()
    for i in range(0, len(records), batch):
        runner.process(records[i : i + batch])
        emitted += len(runner.drain()[0])
    return time.perf_counter() - start, emitted


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    records = changelog(args.events, args.keys)
    print(f"operators: {len(records)} events over {args.keys} keys, batch {args.batch}, in-memory state")
    for join_type in JoinType:
        seconds, emitted = run(join_type, records, args.batch)
        print(f"  {join_type.value:5s} {len(records) / seconds:>10,.0f} events/s  ({emitted:,} rows out, {seconds:.1f} s)")


if __name__ == "__main__":
    main()
