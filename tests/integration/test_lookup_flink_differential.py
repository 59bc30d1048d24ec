"""The lookup join against Flink 2.3's JDBC lookup join, row for row: a static PostgreSQL table,
an append-only Avro orders topic on the real Kafka broker, INNER and LEFT.

changejoin runs in process (``JoinHarness``, ``LEFT_CHANGELOG_MODE=append``); Flink runs
bench/flink_lookup_job.py in its own virtualenv (``.cache/flink-venv``, made on first use by
bench/harness/peers.py) with the ``flink-peer`` jars (devkit/jars.py: Flink's JDBC connector and
PostgreSQL's driver from Maven Central), both joins in one job, after changejoin.
The two outputs must be the same multisets of rows: decimals compared as Decimal, NULLs as None.

Slow (see the comment on the test). The first run on a fresh machine also makes Flink's
virtualenv (~850 MB from PyPI) and resolves the jars, minutes more: so without the virtualenv the
test is skipped (saying how to run it) unless ``CHANGEJOIN_TEST_FLINK=1``, and skipped, saying why,
when either cannot be had.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
from collections import Counter
from decimal import Decimal

import psycopg
import pytest

from bench.harness import ROOT
from bench.harness.peers import FLINK_VENV, flink_jars, flink_python
from devkit.jars import JarsError
from tests.support.kafka_fixture import consume_all
from tests.support.service_harness import JoinHarness, order

PRODUCTS = 300
ORDERS = 3000
QUERY = ("SELECT o.order_id, o.product, o.quantity, p.name, p.price FROM orders AS o "
         "{join} products FOR SYSTEM_TIME AS OF PROCTIME() AS p ON o.product = p.product")
#: Keys that must match exactly what PostgreSQL's text equality says, on both sides.
ODD_KEYS = ["", "with space", "P1", "ünïcödé", "emoji 🍐", "quote'd", "back\\slash", "tab\there"]
#: Near misses of present keys: none of them is in the table.
MISSES = ["p1 ", " p1", "p01", "P2", "unicode", "p300", "p-1", "p1\n"]


def flink_peer():
    """(Flink's virtualenv's python, the flink-peer jars), or skip saying why. Flink's virtualenv
    is made by the benchmarks (``./dev bench compare``); the suite does not install ~850 MB for one
    test unless ``CHANGEJOIN_TEST_FLINK=1`` asks for it."""
    if not FLINK_VENV.exists() and os.environ.get("CHANGEJOIN_TEST_FLINK") != "1":
        pytest.skip("Flink's virtualenv (.cache/flink-venv) is not made yet: run ./dev bench compare once, or set "
                    "CHANGEJOIN_TEST_FLINK=1 to make it here (pip install apache-flink, ~850 MB)")
    try:
        python = flink_python()
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"Flink's virtualenv (.cache/flink-venv, pip install apache-flink) cannot be made: {exc}")
    try:
        jars = flink_jars()
    except (OSError, JarsError) as exc:
        pytest.skip(f"the flink-peer jars (Flink's JDBC connector, PostgreSQL's driver) cannot be resolved: {exc}")
    return python, jars


def product_rows(rng: random.Random):
    """(product, name, price) rows: some names and prices NULL, prices of every sign and size."""
    keys = [f"p{i}" for i in range(PRODUCTS)] + ODD_KEYS
    rows = []
    for i, key in enumerate(keys):
        name = None if i % 17 == 3 else f"name {i} {key}"
        price = None if i % 13 == 5 else Decimal(rng.randrange(-10**6, 10**10)).scaleb(-2)
        rows.append((key, name, price))
    rows[7] = (rows[7][0], None, None)
    rows[8] = (rows[8][0], rows[8][1], Decimal("99999999.99"))
    rows[9] = (rows[9][0], rows[9][1], Decimal("0.00"))
    return rows


def order_rows(rng: random.Random):
    """Append-only orders: ~15 % for products the table lacks, some orders repeated identically."""
    rows = []
    for i in range(ORDERS):
        roll = rng.random()
        if roll < 0.05:
            product = rng.choice(ODD_KEYS)
        elif roll < 0.10:
            product = rng.choice(MISSES)
        elif roll < 0.15:
            product = f"p{rng.randrange(PRODUCTS, 2 * PRODUCTS)}"
        else:
            product = f"p{rng.randrange(PRODUCTS)}"
        rows.append(order(i, product, rng.choice([1, 2, 3, 0, -1, 2**31 - 1, -2**31])))
    rows += rng.sample(rows, 50)  # the same order twice: a multiset, no key
    rng.shuffle(rows)
    return rows


def harness(kafka_bootstrap, spark, tmp_path, new_topic, url, schema, join, **env) -> JoinHarness:
    h = JoinHarness(kafka_bootstrap, spark, tmp_path / join, new_topic, partitions=2, **{
        "RIGHT_LOOKUP_URL": url, "RIGHT_LOOKUP_TABLE": f"{schema}.products", "RIGHT_TABLE": "products",
        "JOIN_SQL": QUERY.format(join="LEFT JOIN" if join == "left" else "JOIN"), "DELIVERY": "at-least-once",
        "LEFT_CHANGELOG_MODE": "append", "SHUFFLE_PARTITIONS": "2", **env})
    for variable in ("RIGHT_TOPIC", "RIGHT_SCHEMA_FILE", "RIGHT_PRIMARY_KEY", "LEFT_PRIMARY_KEY"):
        h.env.pop(variable)
    return h


# Slow: 2-3.5 min (the test's call; pytest's fixtures apart) on a 2-core machine shared with other
# test runs (load 10-20): changejoin's two runs 75-100 s (the first one's Spark query warming up
# most of it), then Flink's 35-75 s (its JVM and planning, then the job itself 20-55 s). Less on a
# quiet machine; minutes more on a fresh one (Flink's virtualenv, the jars).
def test_inner_and_left_lookup_joins_match_flinks_jdbc_lookup_join_row_for_row(
        kafka_bootstrap, spark, tmp_path, new_topic, postgres_url, pg_schema):
    python, jars = flink_peer()
    rng = random.Random(20240611)
    products = product_rows(rng)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {pg_schema}.products (product text PRIMARY KEY, name text, price numeric(10,2))")
        with conn.cursor().copy(f"COPY {pg_schema}.products FROM STDIN") as copy:
            for row in products:
                copy.write_row(row)
    orders = order_rows(rng)
    left = harness(kafka_bootstrap, spark, tmp_path, new_topic, postgres_url, pg_schema, "left")
    left.send_left([(None, o, i % 2) for i, o in enumerate(orders)])
    inner = harness(kafka_bootstrap, spark, tmp_path, new_topic, postgres_url, pg_schema, "inner",
                    LEFT_TOPIC=left.orders)

    left.run()
    inner.run()
    # Then Flink, not beside changejoin: on a 2-core machine they would share the cores (for ~20 s
    # less in all), and Spark gives up on a Python worker that is slow to start ("Python worker
    # failed to connect back"), as seen here on a busy machine.
    flink_out = new_topic()
    log = tmp_path / "flink.log"
    with open(log, "w") as output:
        flink = subprocess.run(
            [python, "-m", "bench.flink_lookup_job", "--bootstrap", kafka_bootstrap, "--orders", left.orders,
             "--url", postgres_url, "--table", f"{pg_schema}.products", "--out", flink_out, "--jars", ",".join(jars)],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT, timeout=600)
    assert flink.returncode == 0, f"Flink's job failed (exit {flink.returncode}):\n" + "\n".join(
        log.read_text().splitlines()[-60:])

    flink_rows = {"inner": Counter(), "left": Counter()}
    for record in consume_all(kafka_bootstrap, flink_out):
        r = json.loads(record.value, parse_float=Decimal)
        price = None if r["price"] is None else Decimal(r["price"])
        flink_rows[r["join_kind"]][(r["order_id"], r["product"], r["quantity"], r["name"], price)] += 1
    ours = {"left": left.retract_table(), "inner": inner.retract_table()}
    for h in (left, inner):
        assert {c.kind for c in h.changelog()} == {"+I"}, "an append-only input gives an insert-only output"

    # What the data fixes, so that an empty or trivial output on both sides cannot pass.
    by_key = {p: (n, pr) for p, n, pr in products}
    expected_left = Counter((o["order_id"], o["product"], o["quantity"], *by_key.get(o["product"], (None, None)))
                            for o in orders)
    expected_inner = Counter({row: n for row, n in expected_left.items() if row[1] in by_key})
    assert len(orders) > sum(expected_inner.values()) > len(orders) // 2
    assert any(row[3] is None and row[1] in by_key for row in expected_inner)
    assert any(row[4] is None and row[1] in by_key for row in expected_inner)

    for join, expected in (("inner", expected_inner), ("left", expected_left)):
        mine, theirs = ours[join], flink_rows[join]
        only_ours, only_flink = mine - theirs, theirs - mine
        assert not only_ours and not only_flink, (
            f"{join.upper()}: changejoin and Flink differ: {sum(only_ours.values())} rows only changejoin's "
            f"(e.g. {list(only_ours)[:5]}), {sum(only_flink.values())} only Flink's (e.g. {list(only_flink)[:5]})")
        off = (mine - expected) + (expected - mine)
        assert not off, f"{join.upper()}: both agree, but not with the table: {list(off)[:5]}"
