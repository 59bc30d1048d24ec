"""The lookup join end to end: orders from the real Kafka broker, looked up in a PostgreSQL table
that changes between micro-batches, the output read back from Kafka. An upsert input in both
output modes and a composite non-unique key with poison keys: tests/service/test_joins_lookup.py,
on the in-memory query driver with the table in memory.

The table is ``products(product text primary key, name text, price numeric(10,2), tier text)``
in a schema of the test's own; the orders are ``schemas/orders.avsc`` (order_id, product, quantity).
"""
from __future__ import annotations

import time
from decimal import Decimal

import psycopg

from tests.support.kafka_fixture import produce
from tests.support.service_harness import ORDERS, JoinHarness, avro, dead_letters, drop_replays, order, retract_table

LEFT_JOIN = ("SELECT o.order_id, o.product, o.quantity, p.name, p.price FROM orders AS o "
             "LEFT JOIN products FOR SYSTEM_TIME AS OF PROCTIME() AS p ON o.product = p.product")


def execute(url: str, *statements, params=()):
    with psycopg.connect(url, autocommit=True) as conn:
        for sql in statements:
            conn.execute(sql, params)


def products(url: str, schema: str, rows) -> None:
    execute(url, f"CREATE TABLE {schema}.products (product text PRIMARY KEY, name text, price numeric(10,2), tier text)")
    with psycopg.connect(url, autocommit=True) as conn:
        for row in rows:
            conn.execute(f"INSERT INTO {schema}.products VALUES (%s, %s, %s, %s)", row)


def rename(url: str, schema: str, product: str, name: str) -> None:
    execute(url, f"UPDATE {schema}.products SET name = %s WHERE product = %s", params=(name, product))


def harness(kafka_bootstrap, spark, tmp_path, new_topic, url, schema, **env) -> JoinHarness:
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, **{
        "RIGHT_LOOKUP_URL": url, "RIGHT_LOOKUP_TABLE": f"{schema}.products", "RIGHT_TABLE": "products",
        "JOIN_SQL": LEFT_JOIN, "DELIVERY": "at-least-once", **env})
    for variable in ("RIGHT_TOPIC", "RIGHT_SCHEMA_FILE", "RIGHT_PRIMARY_KEY"):
        h.env.pop(variable)
    return h


def rows(changes):
    return [(c.kind, c.row) for c in changes]


def test_left_lookup_over_a_retract_topic_retracts_exactly_what_it_emitted(
        kafka_bootstrap, spark, tmp_path, new_topic, postgres_url, pg_schema):
    products(postgres_url, pg_schema, [("p1", "apple", Decimal("1.50"), "gold"), ("p2", "pear", Decimal("2.00"), "std")])
    h = harness(kafka_bootstrap, spark, tmp_path, new_topic, postgres_url, pg_schema, DELIVERY="exactly-once")
    h.start()
    try:
        h.send_left([("+I", order(1, "p1", 3)), ("+I", order(2, "p2", 1)), ("+I", order(3, "nope", 9))])
        h.service.process_available()
        first = rows(h.changelog())
        assert sorted(first) == sorted([("+I", (1, "p1", 3, "apple", Decimal("1.50"))),
                                        ("+I", (2, "p2", 1, "pear", Decimal("2.00"))),
                                        ("+I", (3, "nope", 9, None, None))])
        # The table changes; order 1 is updated (looked up afresh), order 2 deleted (its old row retracted).
        rename(postgres_url, pg_schema, "p1", "green apple")
        rename(postgres_url, pg_schema, "p2", "pear (ripe)")
        h.send_left([("-U", order(1, "p1", 3)), ("+U", order(1, "p1", 4)), ("-D", order(2, "p2", 1))])
        h.service.process_available()
        second = rows(h.changelog(start=len(first)))
        # (order 1's -U before its +U: one key's changes keep their order)
        assert sorted(second) == sorted([("-U", (1, "p1", 3, "apple", Decimal("1.50"))),
                                         ("+U", (1, "p1", 4, "green apple", Decimal("1.50"))),
                                         ("-D", (2, "p2", 1, "pear", Decimal("2.00")))])
        assert second.index(("-U", (1, "p1", 3, "apple", Decimal("1.50")))) < second.index(
            ("+U", (1, "p1", 4, "green apple", Decimal("1.50"))))
        # A retraction of a row never seen: a dead letter, never a padded retraction.
        h.send_left([("-D", order(9, "p1", 1))])
        h.service.process_available()
        counts = h.service.metrics.registry.get_sample_value
        assert counts("changejoin_lookup_queries_total") >= 2
        assert counts("changejoin_lookup_keys_total") >= 3
    finally:
        h.service.stop()
    kept, replays = drop_replays(h.changelog())
    assert replays == []  # exactly-once
    assert retract_table(kept) == {
        (1, "p1", 4, "green apple", Decimal("1.50")): 1, (3, "nope", 9, None, None): 1}
    letters = dead_letters(kafka_bootstrap, h.service.settings.dead_letter_topic)
    assert [letter.kind for letter in letters] == ["lookup_retraction_unknown"]


def test_the_table_changes_under_a_running_join_and_rows_it_cannot_carry_are_dead_letters(
        kafka_bootstrap, spark, tmp_path, new_topic, postgres_url, pg_schema):
    """While the service runs, the table loses a column and gains a NOT NULL one that the query
    does not read, and a row gets a numeric NaN the output cannot hold. Nothing stops: a record
    whose key's row holds the NaN, or whose key the column cannot hold, is a dead letter, and on
    this upsert input it retracts its order's previous row. The restart on the same checkpoint is
    accepted (the checkpoint holds only the columns the query reads), and a fixed row joins."""
    products(postgres_url, pg_schema, [("p1", "apple", Decimal("1.50"), "gold"), ("p2", "pear", Decimal("2.00"), "std")])
    execute(postgres_url, f"ALTER TABLE {pg_schema}.products ADD COLUMN legacy text",
            f"INSERT INTO {pg_schema}.products VALUES ('p3', 'fig', 'NaN', 'std', 'x')")
    h = harness(kafka_bootstrap, spark, tmp_path, new_topic, postgres_url, pg_schema, LEFT_CHANGELOG_MODE="upsert")
    upserts = lambda *orders: produce(kafka_bootstrap, h.orders, [  # noqa: E731 - keyed by order_id
        (str(o["order_id"]).encode(), avro(ORDERS, o)) for o in orders])
    h.start()
    try:
        upserts(order(1, "p1", 3), order(2, "p2", 1), order(3, "p3", 1))
        h.service.process_available()
        execute(postgres_url, f"ALTER TABLE {pg_schema}.products DROP COLUMN legacy",
                f"ALTER TABLE {pg_schema}.products ADD COLUMN region text NOT NULL DEFAULT 'eu'",
                f"UPDATE {pg_schema}.products SET price = 'NaN' WHERE product = 'p2'")
        upserts(order(1, "p\x00", 3),  # a key no text column holds
                order(2, "p2", 5),  # p2's row now holds NaN
                order(4, "p1", 2))
        h.service.process_available()
    finally:
        h.service.stop()
    execute(postgres_url, f"UPDATE {pg_schema}.products SET price = 3 WHERE product = 'p3'")
    upserts(order(3, "p3", 7))
    h.run()  # the same checkpoint, the table with its NOT NULL column
    assert h.retract_table() == {(3, "p3", 7, "fig", Decimal("3.00")): 1, (4, "p1", 2, "apple", Decimal("1.50")): 1}
    letters = dead_letters(kafka_bootstrap, h.service.settings.dead_letter_topic)
    details = sorted((letter.kind, letter.headers["source.offset"], letter.headers["reason.detail"].decode())
                     for letter in letters)
    nan = f"table {pg_schema}.products, column price (numeric(10,2)): Decimal('NaN') is not a number the output's"
    assert [(kind, offset) for kind, offset, _ in details] == [
        ("lookup_key_invalid", b"3"), ("lookup_row_invalid", b"2"), ("lookup_row_invalid", b"4")]
    assert details[0][2] == "column product (text): 'p\\x00' contains a NUL character"
    assert details[1][2].startswith(nan) and details[2][2].startswith(nan)


def test_crashed_after_its_lookups_a_replayed_micro_batch_joins_the_rows_they_found(
        kafka_bootstrap, spark, tmp_path, new_topic, postgres_url, pg_schema):
    """The micro-batch fails once its output is written and before Spark records it, as when the
    driver dies there (``faults.in_process`` at ``before-batch-commit``); the table changes before
    the restart. The replay joins the rows pinned by the crashed run, so it writes the very
    records written first, and a later retraction retracts them. (LOOKUP_CACHE is ``none``: no
    worker keeps a row it read.)"""
    products(postgres_url, pg_schema, [("p1", "apple", Decimal("1.50"), "gold")])
    h = harness(kafka_bootstrap, spark, tmp_path, new_topic, postgres_url, pg_schema)
    h.send_left([("+I", order(1, "p1", 3))])
    assert h.crash("before-batch-commit") == 0
    assert h.next_batch() == 0  # micro-batch 0 not committed
    assert list((tmp_path / "checkpoint" / "changejoin" / "lookups" / "0").iterdir()), "micro-batch 0's lookups"
    rename(postgres_url, pg_schema, "p1", "green apple")
    h.start()
    try:
        h.service.process_available()
        assert h.next_batch() == 1  # micro-batch 0 replayed and committed
        h.send_left([("-D", order(1, "p1", 3))])
        h.service.process_available()
    finally:
        h.service.stop()
    kept, replays = drop_replays(h.changelog())  # asserts each replay is the record written first
    assert [(c.kind, c.row) for c in replays] == [("+I", (1, "p1", 3, "apple", Decimal("1.50")))]
    assert rows(kept) == [("+I", (1, "p1", 3, "apple", Decimal("1.50"))), ("-D", (1, "p1", 3, "apple", Decimal("1.50")))]


def test_the_database_stopped_for_20_seconds_is_ridden_out(kafka_bootstrap, spark, tmp_path, new_topic,
                                                           postgres_server):
    """The database stops while lookups are asked of it: they are retried until it is back. The
    outage lasts until the lookups have tried to reconnect three times (through a proxy that counts
    the attempts the stopped server did not answer), not a fixed 20 s: that the retries wait long
    enough to ride out 30 s (at least 36.4 s in all) is proven on the client's own clock
    (tests/integration/test_lookup_database.py)."""
    from tests.support.tcp_proxy import TcpProxy

    url = postgres_server.url
    execute(url, "CREATE SCHEMA shop")
    products(url, "shop", [(f"p{i}", f"name{i}", Decimal(i), "std") for i in range(10)])
    proxy = TcpProxy(("127.0.0.1", postgres_server.port)).start()
    h = harness(kafka_bootstrap, spark, tmp_path, new_topic, url.replace(f":{postgres_server.port}/", f":{proxy.port}/"),
                "shop")
    h.start()
    try:
        h.send_left([("+I", order(i, f"p{i % 10}", 1)) for i in range(20)])
        h.service.process_available()
        postgres_server.stop()
        h.send_left([("+I", order(i, f"p{i % 10}", 1)) for i in range(20, 40)])
        deadline = time.monotonic() + 120
        while proxy.unreachable < 3:  # the lookups of the new orders retried, three times, with the server down
            assert time.monotonic() < deadline, "the lookups did not try to reconnect while the database was down"
            time.sleep(0.1)
        postgres_server.start()
        h.service.process_available()
        retries = h.service.metrics.registry.get_sample_value("changejoin_lookup_retries_total")
    finally:
        h.service.stop()
        proxy.stop()
    assert retries and retries >= 1
    assert h.retract_table() == {(i, f"p{i % 10}", 1, f"name{i % 10}", Decimal(i % 10).quantize(Decimal("0.01"))): 1
                                 for i in range(40)}


def test_a_partial_cache_serves_a_key_until_it_expires(kafka_bootstrap, spark, tmp_path, new_topic, postgres_url,
                                                       pg_schema):
    products(postgres_url, pg_schema, [("p1", "apple", Decimal("1.50"), "gold")])
    h = harness(kafka_bootstrap, spark, tmp_path, new_topic, postgres_url, pg_schema, LOOKUP_CACHE="partial",
                LOOKUP_CACHE_EXPIRE_AFTER_WRITE="4s", LEFT_CHANGELOG_MODE="append", SPARK_CONF_spark_python_worker_reuse="true")
    h.start()
    names = []
    try:
        for i in range(3):
            h.send_left([(None, order(i, "p1", 1))])
            h.service.process_available()
        rename(postgres_url, pg_schema, "p1", "green apple")
        time.sleep(4.5)  # every worker's entry has expired
        h.send_left([(None, order(9, "p1", 1))])
        h.service.process_available()
        get = h.service.metrics.registry.get_sample_value
        hits = get("changejoin_lookup_cache_total", {"result": "hit"})
        names = [c.row[3] for c in h.changelog()]
    finally:
        h.service.stop()
    assert names == ["apple", "apple", "apple", "green apple"]
    assert hits and hits >= 1  # three micro-batches on at most two Python workers: one at least was a hit


def test_check_config_reads_the_catalog_and_hides_the_password(postgres_url, pg_schema):
    import subprocess
    import sys

    from tests.support.service_harness import SCHEMAS

    products(postgres_url, pg_schema, [])
    execute(postgres_url, f"ALTER TABLE {pg_schema}.products ADD COLUMN tags text[]",
            "ALTER USER postgres PASSWORD 'hunter2'")
    env = {"PATH": "/usr/bin:/bin", "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "LEFT_TOPIC": "orders",
           "OUTPUT_TOPIC": "out", "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders.avsc"), "LEFT_PRIMARY_KEY": "order_id",
           "RIGHT_LOOKUP_URL": postgres_url.replace("postgres@", "postgres:hunter2@"), "RIGHT_TABLE": "products",
           "RIGHT_LOOKUP_TABLE": f"{pg_schema}.products", "JOIN_SQL": LEFT_JOIN}
    run = lambda **more: subprocess.run([sys.executable, "-m", "service", "check-config"], env={**env, **more},  # noqa: E731
                                        capture_output=True, text=True, timeout=120)
    proc = run()
    assert proc.returncode == 0, proc.stderr
    assert "kind: lookup" in proc.stdout
    assert "column price: numeric(10,2) -> Avro {\"type\": \"bytes\", \"logicalType\": \"decimal\"" in proc.stdout
    assert "column tags: text[] -> not read" in proc.stdout and "primary key (product)" in proc.stdout
    assert "hunter2" not in proc.stdout + proc.stderr
    missing = run(RIGHT_LOOKUP_TABLE=f"{pg_schema}.nope")
    assert missing.returncode == 2 and "RIGHT_LOOKUP_URL:" in missing.stderr and "nope" in missing.stderr
    unreachable = run(RIGHT_LOOKUP_URL="postgresql://app:hunter2@127.0.0.1:1/shop")
    assert unreachable.returncode == 2 and "cannot connect to postgresql://app@127.0.0.1:1/shop" in unreachable.stderr
    assert "hunter2" not in unreachable.stderr
    execute(postgres_url, "ALTER USER postgres PASSWORD NULL")
