"""Output records per second through the encode step: fastavro's writer against the record writer
compiled per schema, side by side in one run.

    python -m bench.encode_bench [--records 200000] [--rounds 5] [--before PATH] [--record-results]

The rows are the left-pk scenario's output (order_id long, product string, quantity int, price
nullable double), a 9-column output with enums and nullable strings, and the 14 columns of
bench.expressions_bench's query; each round encodes every row with both writers, alternating
which goes first. ``--before PATH`` adds the compiled writer of another checkout (e.g. a ``git
worktree`` of the commit before a change), run in a child process in every round, alternating
with this one. Prints min and median records/s per writer and the ratio of compiled to
fastavro (and to before's compiled); with --record-results appends the round to
bench/results/RESULTS.md.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.harness.report import append_results
from service.avro import ValueEncoder

SCHEMAS = {
    "left-pk output (4 columns)": {"type": "record", "name": "out", "fields": [
        {"name": "order_id", "type": "long"}, {"name": "product", "type": "string"},
        {"name": "quantity", "type": "int"}, {"name": "price", "type": ["null", "double"]}]},
    "wide output (9 columns)": {"type": "record", "name": "wide", "fields": [
        {"name": "id", "type": "long"}, {"name": "customer", "type": "string"},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "amount", "type": "double"}, {"name": "items", "type": "int"},
        {"name": "note", "type": ["null", "string"]}, {"name": "express", "type": "boolean"},
        {"name": "region", "type": ["null", "string"]}, {"name": "discount", "type": ["null", "double"]}]},
    "expressions output (14 columns)": {"type": "record", "name": "expressions", "fields": [
        {"name": "order_id", "type": "long"}, {"name": "product", "type": "string"},
        {"name": "quantity", "type": "int"}, {"name": "price", "type": ["null", "double"]},
        {"name": "total", "type": ["null", "double"]}, {"name": "product_upper", "type": "string"},
        {"name": "currency", "type": "string"}, {"name": "size", "type": "string"},
        {"name": "order_text", "type": "string"}, {"name": "product_length", "type": "int"},
        {"name": "gross", "type": ["null", "double"]}, {"name": "shard", "type": "int"},
        {"name": "label", "type": "string"}, {"name": "distance", "type": "int"}]},
}

#: The child that times another checkout's compiled writer (``--before``): the same rows, by seed.
_CHILD = """
import importlib.util, json, random, sys
sys.path.insert(0, sys.argv[1])  # the other checkout's service, first
spec = importlib.util.spec_from_file_location("encode_bench_here", sys.argv[3])  # this file: the same rows
here = importlib.util.module_from_spec(spec)
spec.loader.exec_module(here)
from service.avro import ValueEncoder
rng = random.Random(7)
print(json.dumps({name: here.rate(ValueEncoder(schema).encode, here.rows_for(schema, int(sys.argv[2]), rng))
                  for name, schema in here.SCHEMAS.items()}))
"""


def rows_for(schema: dict, n: int, rng: random.Random) -> list[tuple]:
    if schema["name"] == "out":
        return [(i, f"product-{rng.randrange(10_000)}", rng.randrange(100), None if i % 7 == 0 else rng.random() * 100)
                for i in range(n)]
    if schema["name"] == "expressions":
        rows = []
        for i in range(n):
            product, quantity, price = f"product-{rng.randrange(10_000)}", rng.randrange(100), rng.random() * 100
            price = None if i % 7 == 0 else price
            rows.append((i, product, quantity, price, None if price is None else quantity * price, product.upper(),
                         "EUR", "bulk" if quantity > 5 else "single", str(i), len(product),
                         None if price is None else round(price * 1.2, 2), i % 7, f"{product}-{quantity}",
                         abs(quantity - 3)))
        return rows
    return [(i, f"customer-{rng.randrange(50_000)}", rng.choice(["NEW", "PAID", "SHIPPED"]), rng.random() * 500,
             rng.randrange(20), None if i % 3 else "leave at the door", i % 2 == 0, rng.choice([None, "EU", "US"]),
             None if i % 5 else 0.1) for i in range(n)]


def rate(encode, rows) -> float:
    start = time.perf_counter()
    for row in rows:
        encode(row)
    return len(rows) / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", type=Path, help="another checkout whose compiled writer runs beside this one's")
    parser.add_argument("--record-results", action="store_true")
    args = parser.parse_args()
    before: dict[str, list[float]] = {name: [] for name in SCHEMAS}

    def run_before() -> None:
        out = subprocess.run([sys.executable, "-c", _CHILD, str(args.before.resolve()), str(args.records), __file__],
                             cwd=args.before, capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": str(args.before.resolve())})
        for name, value in json.loads(out.stdout.strip().splitlines()[-1]).items():
            before[name].append(value)

    rng = random.Random(7)
    writers = {}
    for name, schema in SCHEMAS.items():
        rows = rows_for(schema, args.records, rng)
        compiled = ValueEncoder(schema)
        generic = ValueEncoder(schema)
        generic._compiled = None  # the writer before: fastavro for every record
        assert all(compiled.encode(r) == generic.encode(r) for r in rows[:1000])
        writers[name] = rows, {"fastavro": generic, "compiled": compiled}
    rates = {name: {"fastavro": [], "compiled": []} for name in SCHEMAS}
    for i in range(args.rounds):  # each round: before's child (in turn first or last), then every writer here
        if args.before and i % 2 == 0:
            run_before()
        for name, (rows, encoders) in writers.items():
            for label, encoder in list(encoders.items())[:: 1 if i % 2 == 0 else -1]:
                rates[name][label].append(rate(encoder.encode, rows))
        if args.before and i % 2 == 1:
            run_before()
    table = []
    for name in SCHEMAS:
        row = {"schema": name}
        for label, values in rates[name].items():
            row[f"{label} min"], row[f"{label} median"] = min(values), statistics.median(values)
        row["ratio (median)"] = row["compiled median"] / row["fastavro median"]
        if args.before:
            row["before min"], row["before median"] = min(before[name]), statistics.median(before[name])
            row["vs before (median)"] = row["compiled median"] / row["before median"]
        table.append(row)
    header = ["schema", "fastavro min", "fastavro median", "compiled min", "compiled median", "ratio (median)"]
    if args.before:
        header += ["before min", "before median", "vs before (median)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in table:
        lines.append("| " + " | ".join(row[h] if h == "schema" else f"{row[h]:,.2f}" if "(median)" in h
                                        else f"{row[h]:,.0f}" for h in header) + " |")
    print(f"records/s encoding {args.records:,} rows, {args.rounds} rounds")
    print("\n".join(lines))
    if args.record_results:
        append_results(f"\n## {dt.date.today()} encode: fastavro vs the compiled record writer\n\n"
                       f"`python -m bench.encode_bench --records {args.records} --rounds {args.rounds}"
                       f"{f' --before {args.before}' if args.before else ''} --record-results`"
                       f" (records/s, one process, both writers in every round; this machine is shared, compare the "
                       f"ratio)\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
