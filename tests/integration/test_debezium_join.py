"""The join of two tables PostgreSQL changes, captured by a real Debezium and read by changejoin,
against the same join computed by PostgreSQL itself on the tables it ends with.

Two tables, ``orders`` (``REPLICA IDENTITY FULL``: updates and deletes carry the whole old row)
and ``customers`` (the default identity: an update carries no before image, a delete only the
key). Rows written before the capture starts are read by Debezium's snapshot (op ``r``); then come
inserts, updates (an order moved to another customer or to no customer, a customer renamed, a
no-op update), deletes, a delete and re-insert of the same key, primary-key changes on both tables
(a delete, its tombstone and a create) and a transaction of several changes, each statement
committed on its own otherwise. Two connectors capture both tables, one with the JSON converter's
embedded schemas, one without, so each table has a topic of each kind; a service reads one of each
table's topics (a schema file in tmp_path stands for the missing embedded schema), both as upserts
of their declared primary key, once ``orders`` without a key (its before images retract), and
once ``orders`` keyed but in retract mode (``LEFT_CHANGELOG_MODE=retract``: its before images
retract, and it joins directly, without the normalize stage).

Each join (``LEFT`` and ``FULL`` with retract output, ``LEFT`` again with ``orders`` read
without a key, ``FULL`` again with ``orders`` in retract mode, ``FULL`` upsert output keyed ``order_id, id``, a key whose columns the join pads)
runs in process on the whole captured changelog and must materialize to PostgreSQL's ``SELECT ...
FROM orders o <JOIN> customers c ON o.customer_id = c.id`` on the final tables, with no dead
letters and every tombstone Debezium wrote skipped and counted. The last test runs the ``FULL``
retract join as a process (at least once) while the tables keep changing, kills it with SIGKILL
while a micro-batch is being written, changes the tables while it is down, restarts it on its
checkpoint, changes the tables again, and compares once it has read everything (the killed
micro-batch's replays are the records written first, and are dropped).

The tables are the module's (one capture): every test first waits until Debezium has written the
records every change made so far implies (counted per statement: an insert or update one per row,
a delete two with its tombstone, a key change three), then compares with the tables as they are.
"""
from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from tests.support.debezium_fixture import ChangeRecord, DebeziumCapture, read_changes, unique_name
from tests.support.kafka_fixture import create_topic
from service.config import load_settings
from tests.support.service_harness import (JoinHarness, dead_letters, drop_replays, read_changelog, retract_table,
                                           upsert_table)
from tests.support.service_process import (
    CATCH_UP_TIMEOUT_S,
    PARTITIONS,
    START_TIMEOUT_S,
    ServiceProcess,
    caught_up,
    committed,
    drive,
    service_env,
    writing_uncommitted_batch,
)

pytestmark = pytest.mark.integration

CUSTOMERS = "id int PRIMARY KEY, name text, tier text, balance numeric(10,2)"
ORDERS = "order_id int PRIMARY KEY, customer_id int, amount numeric(10,2), note text"
DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
#: The tables' rows as Avro records, in Debezium's encodings (for a topic without embedded schemas).
SCHEMA_FILES = {
    "customers": {"type": "record", "name": "customers", "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "tier", "type": ["null", "string"], "default": None},
        {"name": "balance", "type": ["null", DECIMAL], "default": None}]},
    "orders": {"type": "record", "name": "orders", "fields": [
        {"name": "order_id", "type": "int"},
        {"name": "customer_id", "type": ["null", "int"], "default": None},
        {"name": "amount", "type": ["null", DECIMAL], "default": None},
        {"name": "note", "type": ["null", "string"], "default": None}]},
}
COLUMNS = "o.order_id, o.customer_id, o.amount, o.note, c.id, c.name, c.tier, c.balance"
JOINS = {"inner": "JOIN", "left": "LEFT JOIN", "full": "FULL JOIN"}


def join_sql(join: str) -> str:
    return f"SELECT {COLUMNS} FROM orders o {JOINS[join]} customers c ON o.customer_id = c.id"


# --------------------------------------------------------------------------------------------
# The tables, their capture, and what PostgreSQL says
# --------------------------------------------------------------------------------------------


@dataclass
class Step:
    """One statement: the table it changes, and whether it changes primary keys."""

    table: str
    sql: str
    key_change: bool = False


def on(table: str, sql: str, key_change: bool = False) -> Step:
    return Step(table, sql, key_change)


@dataclass
class Tables:
    """The two captured tables; ``records[table]``: how many records each of its topics must hold
    for every change made so far."""

    cdc: DebeziumCapture
    names: Dict[str, str]  # "orders" -> "schema.orders"
    topics: Dict[Tuple[str, bool], str] = field(default_factory=dict)  # (table, schemas) -> topic
    records: Counter = field(default_factory=Counter)
    schema_dir: Optional[Path] = None  # orders.avsc, customers.avsc

    def change(self, *steps: Step) -> None:
        """Run the steps in one transaction, counting the records Debezium will write for them."""
        import psycopg

        records = Counter()
        with psycopg.connect(self.cdc.url) as conn:
            with conn.transaction():
                for step in steps:
                    rows = conn.execute(step.sql.format(**self.names)).rowcount
                    verb = step.sql.split(None, 1)[0].upper()
                    assert rows > 0, f"no row changed: {step.sql}"
                    # An insert or update: one record per row; a delete: the delete and its
                    # tombstone; a primary-key change: a delete, its tombstone and a create.
                    per_row = {"INSERT": 1, "UPDATE": 3 if step.key_change else 1, "DELETE": 2}[verb]
                    records[step.table] += rows * per_row
        self.records.update(records)  # committed

    def each(self, *steps: Step) -> None:
        """Each step in a transaction of its own, in order."""
        for step in steps:
            self.change(step)

    def captured(self, timeout: float = 120.0) -> Dict[Tuple[str, bool], List[ChangeRecord]]:
        """Wait until every topic holds the records of every change made so far; returns them."""
        out = {}
        for (table, schemas), topic in self.topics.items():
            records = read_changes(self.cdc.bootstrap, topic, self.records[table], timeout=timeout)
            assert len(records) == self.records[table], (
                f"{topic}: {len(records)} records, {self.records[table]} expected: "
                f"{[(r.op, r.key_payload) for r in records]}")
            out[table, schemas] = records
        return out

    def expected(self, join: str) -> Counter:
        """PostgreSQL's own join of the tables as they are now."""
        rows = self.cdc.query(f"SELECT {COLUMNS} FROM {self.names['orders']} o {JOINS[join]} "
                              f"{self.names['customers']} c ON o.customer_id = c.id")
        assert rows, f"PostgreSQL's {join} join is empty"
        return Counter(tuple(row) for row in rows)


SNAPSHOT = (
    on("customers", "INSERT INTO {customers} VALUES (1, 'alice', 'gold', 10.50), (2, 'bob', 'silver', -3.25), "
                    "(3, 'carol', NULL, 0.00), (4, 'dave', 'gold', NULL), (7, 'gina', NULL, 100.00)"),
    on("orders", "INSERT INTO {orders} VALUES (100, 1, 25.00, 'first'), (101, 2, 7.50, NULL), (102, 1, 3.10, 'x'), "
                 "(103, 9, 1.00, 'no such customer yet'), (104, NULL, 2.00, 'no customer')"),
)

#: Streamed changes, each statement its own transaction unless grouped.
STREAMED = [
    (on("customers", "INSERT INTO {customers} VALUES (5, 'erin', 'bronze', 5.00)"),),
    (on("orders", "INSERT INTO {orders} VALUES (105, 5, 12.00, 'erin''s'), (106, 3, 0.99, NULL)"),),
    (on("customers", "UPDATE {customers} SET name = 'alicia' WHERE id = 1"),),  # renamed, no before image
    (on("orders", "UPDATE {orders} SET customer_id = 2 WHERE order_id = 102"),),  # moved to another customer
    (on("orders", "UPDATE {orders} SET amount = 30.00, note = NULL WHERE order_id = 100"),),
    (on("customers", "UPDATE {customers} SET tier = 'platinum', balance = balance + 1 WHERE id = 2"),),
    (on("customers", "DELETE FROM {customers} WHERE id = 3"),),  # order 106 loses its customer; key-only before
    (on("orders", "DELETE FROM {orders} WHERE order_id = 101"),),
    (on("orders", "UPDATE {orders} SET order_id = 107 WHERE order_id = 100", key_change=True),),
    (on("customers", "UPDATE {customers} SET id = 6 WHERE id = 4", key_change=True),),  # dave's orders: none yet
    (on("orders", "INSERT INTO {orders} VALUES (108, 6, 4.00, 'for dave'), (109, 4, 8.00, 'dave''s old id')"),),
    (  # one transaction of several changes to both tables
        on("customers", "INSERT INTO {customers} VALUES (9, 'ivan', NULL, 1.00)"),  # order 103 finds its customer
        on("orders", "UPDATE {orders} SET note = 'bulk' WHERE customer_id = 2"),
        on("orders", "DELETE FROM {orders} WHERE order_id = 105"),  # erin keeps no order
        on("customers", "INSERT INTO {customers} VALUES (10, 'judy', 'gold', 0.01)"),
        on("orders", "INSERT INTO {orders} VALUES (110, 10, 99999999.99, 'max')"),
        on("customers", "UPDATE {customers} SET name = 'judith' WHERE id = 10"),
    ),
    (on("customers", "UPDATE {customers} SET name = name WHERE id = 5"),),  # changes nothing
    (on("customers", "DELETE FROM {customers} WHERE id = 2"),),  # deleted, then back with other values
    (on("customers", "INSERT INTO {customers} VALUES (2, 'bob', 'bronze', -0.01)"),),
    (on("orders", "UPDATE {orders} SET customer_id = NULL WHERE order_id = 106"),),
    (on("orders", "UPDATE {orders} SET customer_id = 7 WHERE order_id = 104"),),  # from no customer to gina
    (on("orders", "UPDATE {orders} SET amount = -12.34 WHERE order_id = 103"),),
]


@pytest.fixture(scope="module")
def tables(debezium_capture: DebeziumCapture, tmp_path_factory) -> Tables:
    """The two tables with their snapshot rows and streamed changes, captured by two connectors
    (schemas embedded and not); the schema files in a module directory."""
    cdc = debezium_capture
    customers = cdc.create_table("customers", CUSTOMERS, replica_identity_full=False)
    orders = cdc.create_table("orders", ORDERS, replica_identity_full=True, schema=customers.split(".")[0])
    t = Tables(cdc, {"customers": customers, "orders": orders})
    assert cdc.query(f"SELECT relname, relreplident FROM pg_class WHERE oid IN "
                     f"('{customers}'::regclass, '{orders}'::regclass) ORDER BY relname") == [
        ("customers", "d"), ("orders", "f")]
    t.each(*SNAPSHOT)
    captures = {schemas: cdc.capture([customers, orders], schemas=schemas, wait=False,
                                     name=unique_name("join_with_schema" if schemas else "join_without_schema"))
                for schemas in (True, False)}
    for capture in captures.values():
        cdc.connect.wait_running(capture.name)
    for schemas, capture in captures.items():
        for table, name in t.names.items():
            t.topics[table, schemas] = capture.topic(name)
    snapshot = t.captured()  # the snapshot is read: what follows is streamed
    assert {r.op for records in snapshot.values() for r in records} == {"r"}
    for steps in STREAMED:
        t.change(*steps)
    directory = tmp_path_factory.mktemp("debezium-join-schemas")
    for table, schema in SCHEMA_FILES.items():
        (directory / f"{table}.avsc").write_text(json.dumps(schema))
    t.schema_dir = directory
    return t


def test_the_captured_changelogs_hold_every_kind_of_change(tables: Tables) -> None:
    """What the joins below read: snapshot reads, creates, updates, deletes and tombstones in both
    shapes; the default identity's updates without before images, its deletes with only the key."""
    records = tables.captured()
    for (table, schemas), topic_records in records.items():
        ops = Counter(r.op for r in topic_records)
        assert set(ops) == {"r", "c", "u", "d", None}, (table, schemas, ops)
        for r in topic_records:
            if r.value is not None:
                assert (set(r.value) == {"schema", "payload"}) == schemas, (table, schemas, r.value)
        updates = [r.envelope for r in topic_records if r.op == "u"]
        deletes = [r.envelope for r in topic_records if r.op == "d"]
        if table == "customers":  # REPLICA IDENTITY DEFAULT
            assert all(u["before"] is None for u in updates)
            assert all(set(k for k, v in d["before"].items() if v is not None) == {"id"} for d in deletes)
        else:  # FULL
            assert all(u["before"] is not None and u["before"]["amount"] is not None for u in updates)
            assert all(d["before"]["amount"] is not None for d in deletes)


# --------------------------------------------------------------------------------------------
# The service's environment
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    join: str  # inner, left, full
    output_key: Optional[str] = None  # upsert output keyed by these columns; None: retract output
    orders_schemas: bool = True  # the orders topic with embedded schemas (else: a schema file)
    customers_schemas: bool = False
    orders_key: bool = True  # LEFT_PRIMARY_KEY=order_id (else the before images retract)
    orders_mode: Optional[str] = None  # LEFT_CHANGELOG_MODE (retract: the key's before images retract)


def join_env(tables: Tables, v: Variant, bootstrap: str, output: str, checkpoint: Path, **env: str) -> Dict[str, str]:
    out = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "LEFT_TOPIC": tables.topics["orders", v.orders_schemas],
        "RIGHT_TOPIC": tables.topics["customers", v.customers_schemas],
        "OUTPUT_TOPIC": output,
        "LEFT_TABLE": "orders", "RIGHT_TABLE": "customers",
        "LEFT_FORMAT": "debezium-json", "RIGHT_FORMAT": "debezium-json",
        "RIGHT_PRIMARY_KEY": "id",
        "JOIN_SQL": join_sql(v.join),
        "CHECKPOINT_LOCATION": str(checkpoint),
        "TRIGGER_INTERVAL": "0", "METRICS_PORT": "0",
        "DELIVERY": "at-least-once",
        "MAX_RECORDS_PER_TRIGGER": "16",  # a few micro-batches: changes of one row meet across them
        **env,
    }
    if v.orders_key:
        out["LEFT_PRIMARY_KEY"] = "order_id"
    if v.orders_mode:
        out["LEFT_CHANGELOG_MODE"] = v.orders_mode
    if not v.orders_schemas:
        out["LEFT_SCHEMA_FILE"] = str(tables.schema_dir / "orders.avsc")
    if not v.customers_schemas:
        out["RIGHT_SCHEMA_FILE"] = str(tables.schema_dir / "customers.avsc")
    if v.output_key:
        out.update(OUTPUT_MODE="upsert", OUTPUT_KEY=v.output_key)
    return out


def tombstones(records: Dict[Tuple[str, bool], List[ChangeRecord]], table: str, schemas: bool) -> int:
    return sum(r.raw_value is None for r in records[table, schemas])


#: INNER is the part of LEFT and FULL both sides match; upsert output is also the exactly-once
#: path of the SIGKILL test. Each run costs tens of seconds of a 2-core machine: five, not eight.
#: orders-retract-mode: orders (REPLICA IDENTITY FULL) keyed but read by its before images,
#: joined directly without the normalize stage (LEFT_CHANGELOG_MODE=retract).
VARIANTS = {
    "left-retract": Variant("left", orders_schemas=False, customers_schemas=True),
    "full-retract": Variant("full", orders_schemas=True, customers_schemas=True),
    "left-retract-orders-without-key": Variant("left", orders_schemas=True, customers_schemas=False, orders_key=False),
    "full-upsert": Variant("full", output_key="order_id,id", orders_schemas=False, customers_schemas=True),
    "full-retract-orders-retract-mode": Variant("full", orders_schemas=False, customers_schemas=False,
                                                orders_mode="retract"),
}


#: Service runs at once: more overload a 2-core machine (Spark's Python workers then fail to
#: connect back to the JVM within its 10 s).
CONCURRENT_RUNS = 3


@dataclass
class Outcome:
    """What one service run made of the captured topics."""

    table: Counter  # the output materialized: the retract multiset, or the upsert rows
    expected: Counter  # PostgreSQL's join of the tables the topics end with
    kinds: Counter  # the output's change kinds ("" in upsert mode)
    dead_letters: list
    tombstones_skipped: Optional[float]
    tombstones_read: int  # in the two topics the service read
    normalized: Tuple[bool, bool] = (True, True)  # each side through the normalize stage


@pytest.fixture(scope="module")
def outcomes(tables: Tables, kafka_bootstrap, spark, tmp_path_factory) -> Dict[str, object]:
    """Every variant's service run on the captured topics, all at once (each its own query in a
    session of its own on the session's Spark, its own output topic and checkpoint): a service's first micro-batch costs
    tens of seconds of a loaded machine, and most of it is waiting. Each variant's Outcome, or the
    exception its run raised."""
    records = tables.captured()
    expected = {join: tables.expected(join) for join in JOINS}  # the tables do not change meanwhile
    root = tmp_path_factory.mktemp("debezium-joins")

    def run(name: str, variant: Variant) -> Outcome:
        # A session of its own: a session runs one query named changejoin at a time.
        h = JoinHarness(kafka_bootstrap, spark.newSession(), root / name, lambda partitions=1, create=True: unique_name(name))
        h.output = f"debezium-join-{unique_name(name)}"  # made by the service
        h.env = join_env(tables, variant, kafka_bootstrap, h.output, root / name / "checkpoint")
        service = h.run()
        changes = drop_replays(h.changelog())[0]
        table = Counter(upsert_table(changes).values()) if variant.output_key else retract_table(changes)
        return Outcome(table, expected[variant.join], Counter(c.kind for c in changes), h.dead_letters(),
                       service.metrics.registry.get_sample_value(
                           "changejoin_skipped_input_records_total", {"reason": "debezium_tombstone"}),
                       tombstones(records, "orders", variant.orders_schemas)
                       + tombstones(records, "customers", variant.customers_schemas),
                       tuple(side.normalized for side in service.plan.sides))

    with ThreadPoolExecutor(CONCURRENT_RUNS) as pool:
        futures = {name: pool.submit(run, name, variant) for name, variant in VARIANTS.items()}
        wait(list(futures.values()))
    return {name: (f.exception() or f.result()) for name, f in futures.items()}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_join_of_captured_tables_is_postgres_join(outcomes, name: str) -> None:
    variant = VARIANTS[name]
    outcome = outcomes[name]
    if isinstance(outcome, BaseException):
        raise outcome
    assert outcome.table == outcome.expected, _diff(outcome.table, outcome.expected)
    # numeric(10,2) is decimal(10,2) end to end, NULL is None (amount and balance)
    assert all(isinstance(row[i], Decimal) or row[i] is None for row in outcome.table for i in (2, 7))
    if variant.output_key:
        assert set(outcome.kinds) == {""}
    else:
        assert set(outcome.kinds) <= {"+I", "-U", "+U", "-D"} and outcome.kinds["+I"] > 0
    assert outcome.dead_letters == []
    assert outcome.tombstones_skipped == outcome.tombstones_read
    # orders by its key: through the normalize stage, unless read in retract mode (joined directly)
    assert outcome.normalized == (variant.orders_key and variant.orders_mode != "retract", True)


def _diff(got: Counter, expected: Counter) -> str:
    missing, extra = expected - got, got - expected
    return f"missing (PostgreSQL has, the service not): {sorted(missing.items(), key=repr)}; " \
           f"extra (the service has, PostgreSQL not): {sorted(extra.items(), key=repr)}"


# --------------------------------------------------------------------------------------------
# SIGKILL in the middle, the tables changing meanwhile
# --------------------------------------------------------------------------------------------

#: While the services run (before the kill), while they are down, after the restart.
WHILE_RUNNING = [
    (on("orders", "INSERT INTO {orders} VALUES (200, 1, 1.11, 'during'), (201, 6, 2.22, NULL), (202, 42, 0.00, NULL)"),),
    (on("customers", "UPDATE {customers} SET name = 'al', tier = NULL WHERE id = 1"),),
    (on("orders", "UPDATE {orders} SET customer_id = 10 WHERE order_id = 107"),),
    (on("customers", "DELETE FROM {customers} WHERE id = 7"),),  # order 104 unmatched again
]
WHILE_DOWN = [
    (on("customers", "INSERT INTO {customers} VALUES (42, 'zoe', 'gold', 4.20)"),),  # order 202's customer
    (on("orders", "DELETE FROM {orders} WHERE order_id = 102"),),
    (on("customers", "UPDATE {customers} SET id = 11 WHERE id = 6", key_change=True),),  # orders 108, 201 orphaned
    (on("orders", "UPDATE {orders} SET order_id = 211, customer_id = 11 WHERE order_id = 201", key_change=True),),
]
AFTER_RESTART = [
    (
        on("orders", "INSERT INTO {orders} VALUES (203, 9, 3.33, 'after'), (204, NULL, 4.44, NULL)"),
        on("customers", "UPDATE {customers} SET balance = balance * 2 WHERE id IN (9, 10)"),
    ),
    (on("orders", "UPDATE {orders} SET customer_id = 5, amount = amount - 1 WHERE order_id IN (103, 110)"),),
    (on("customers", "DELETE FROM {customers} WHERE id = 1"),),  # order 200 unmatched
    (on("customers", "INSERT INTO {customers} VALUES (7, 'gina', 'silver', 0.70)"),),  # 104 matched again
]


def test_sigkill_mid_batch_while_tables_change_then_restart(tables: Tables, kafka_bootstrap, tmp_path, new_topic):
    tables.captured()
    # Many small micro-batches, so that the kill lands while there is more to read.
    slow = {"MAX_RECORDS_PER_TRIGGER": "6"}
    runs = {  # one service: a second one doubles the test's time on 2 cores
        "retract": (Variant("full", orders_schemas=True, customers_schemas=False), {}),
    }
    services = []
    for name, (variant, extra) in runs.items():
        output = create_topic(kafka_bootstrap, new_topic(create=False), PARTITIONS)  # as the watcher reads it
        env = service_env(**join_env(tables, variant, kafka_bootstrap, output, tmp_path / name / "checkpoint",
                                     **slow, **extra))
        services.append(ServiceProcess(name, env, tmp_path))
    kills = {}
    try:
        for svc in services:
            svc.start()
        drive({svc: committed(0) for svc in services}, "the first commit", START_TIMEOUT_S)
        for steps in WHILE_RUNNING:
            tables.change(*steps)
        mins = {svc: svc.next_batch() for svc in services}  # the next batch with output, from now on
        kills = drive({svc: writing_uncommitted_batch(mins[svc]) for svc in services},
                      "output of an uncommitted micro-batch", START_TIMEOUT_S, action=ServiceProcess.kill)
        for svc, batch in kills.items():
            assert batch not in svc.commits(), f"{svc.name}: batch {batch} was committed before the kill"
        for steps in WHILE_DOWN:
            tables.change(*steps)
        mins = {svc: svc.next_batch() for svc in services}
        for svc in services:
            # The killed micro-batch's range is in Spark's offset log, so its replay reads what it
            # read before; the batches after it may be large, to catch up in few of them.
            svc.env = {**svc.env, "MAX_RECORDS_PER_TRIGGER": "10000"}
            svc.start()
        drive({svc: committed(mins[svc]) for svc in services}, "the first commit after the restart", START_TIMEOUT_S)
        for steps in AFTER_RESTART:
            tables.change(*steps)
        records = tables.captured()
        ends = {svc: [records[table, schemas][-1].offset + 1 for table, schemas in (
            ("orders", runs[svc.name][0].orders_schemas), ("customers", runs[svc.name][0].customers_schemas))]
            for svc in services}
        drive({svc: caught_up({"orders": Counter({0: ends[svc][0]}), "prices": Counter({0: ends[svc][1]})})
               for svc in services}, "all changes to be joined", CATCH_UP_TIMEOUT_S, action=ServiceProcess.kill)
    finally:
        for svc in services:
            svc.close()

    (retract,) = services
    changes = read_changelog(kafka_bootstrap, retract.env["OUTPUT_TOPIC"], retract.plan.output_schema)
    print(f"{retract.name}: killed while writing batch {kills[retract]}, committed {retract.commits()}, "
          f"{len(changes)} records, replayed batches {dict(Counter(c.batch for c in drop_replays(changes)[1]))}")
    # At least once: the killed micro-batch is written again, the very records written first; its
    # replays dropped, the changelog materializes to PostgreSQL's FULL join.
    kept, replays = drop_replays(changes)
    assert kills[retract] in {c.batch for c in replays}, f"batch {kills[retract]}, killed while written, not replayed"
    expected = tables.expected("full")
    assert retract_table(kept) == expected, _diff(retract_table(kept), expected)
    assert dead_letters(kafka_bootstrap, load_settings(retract.env).dead_letter_topic) == []
    assert retract.runs == 2
