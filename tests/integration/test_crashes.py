"""The crash matrix: the service crashed and restarted on the same checkpoint, more input arriving
between restarts, and a broker outage it rides out. The service runs in the test's process, on
the test's Spark, and the crashes crash it at named points (``faults.in_process``): at a task's
point its Python worker is SIGKILLed (at least once, with half its records delivered; exactly once,
the transactional producer dying with its transaction open, as in a killed service), and the
micro-batch fails; at the driver's point the micro-batch fails before Spark records it. What only
a killed process shows (a checkpoint and its lock left by a dead driver, Spark's replay of what it
planned) is shown by tests/integration/test_debezium_join.py's SIGKILL of the whole service
(python -m service run), mid-micro-batch, and by test_cluster.py's of an executor. The broker
outage is ridden out in the test's process too (test_contact.py's, by a service process).

Where each crash point is exercised:

========================  ===============================================  ==========================
delivery                  point                                            output mode: test
========================  ===============================================  ==========================
at-least-once             ``mid-produce`` of the first micro-batch         retract, upsert: 1
at-least-once             ``mid-produce``, the third batch of a run        retract: 1
                          (its first replays one)
at-least-once             ``before-batch-commit``, the third batch         upsert: 1
at-least-once             broker cut while a micro-batch is written        retract: 2
exactly-once              ``before-init`` (service/faults.py)              retract (deployment a): 3
exactly-once              ``mid-produce`` (a transaction open)             upsert (twice): 3
exactly-once              ``before-commit`` (records and marker queued)    retract (a): 3
exactly-once              ``after-commit`` (before the task returns)       retract (a): 3
exactly-once              ``before-batch-commit`` (Spark's commit lost)    upsert, retract (b): 3
exactly-once              a point chosen at random                         retract (b): 3
========================  ===============================================  ==========================

What must hold: at-least-once, the output materializes to the join of the final inputs after
dropping replayed records as a consumer would (a record whose (``changejoin.batch``,
``changejoin.seq``) was seen already is a replay), each interrupted micro-batch replayed, each bad
record dead-lettered once; exactly-once, a ``read_committed`` consumer sees no record twice and the
same tables, while ``read_uncommitted`` shows the aborted attempts (the crashes did land inside
transactions). The expected tables are ``Changelogs``' (computed without Spark, the join an
uninterrupted run writes: tests/integration/test_service_e2e.py and the conformance cases prove it).

The crashes' moments are named to the service (``faults.in_process``); the outage's is chosen by
watching the output topic and the checkpoint's ``commits/`` directory, never by timing: "in the
middle of writing micro-batch B" is "the output topic holds records of batch B and ``commits/B``
does not exist yet". A service process is a new Spark driver (~30 s of a two-core machine before
its first micro-batch); a service in the test's process starts in a second or two.
"""
from __future__ import annotations

import os
import random
import time
from collections import Counter
from typing import Dict

import pytest

from devkit.broker_process import free_port
from devkit.kafka_broker import KafkaBroker
from tests.support.jvm_archives import broker_jvm_options
from tests.support.kafka_fixture import consume_all, create_topic, end_offsets
from service import faults
from service.config import load_settings
from tests.support.service_harness import (JoinHarness, dead_letters, drop_replays, read_changelog, retract_table,
                                           upsert_table)
from tests.support.service_process import (
    CATCH_UP_TIMEOUT_S,
    PARTITIONS,
    START_TIMEOUT_S,
    Changelogs,
    InProcessService,
    caught_up,
    drive,
    send,
    service_env,
    writing_uncommitted_batch,
)
from tests.support.tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration


def assert_upsert_table(changes, log: Changelogs, what: str) -> None:
    """An upsert changelog ends in the join of the final inputs, each row under its own key."""
    table = upsert_table(changes)
    assert sorted(table.values()) == log.upsert_rows(), what
    keys = {}
    for c in changes:  # a key always names one order: a replay writes it under the same key
        if c.row is not None:
            assert keys.setdefault(c.key, c.row[0]) == c.row[0], f"{what}: key {c.key!r} of orders {keys[c.key]} and {c.row[0]}"


# --------------------------------------------------------------------------------------------
# 1. At least once: killed while writing, mid-way and idle
# --------------------------------------------------------------------------------------------


def test_at_least_once_crashed_while_writing_first_and_mid_way_materializes_like_an_uninterrupted_run(
        kafka_bootstrap, spark, tmp_path, new_topic):
    """In process (``faults.in_process``): at ``mid-produce`` a task has delivered half its records
    and its Python worker is SIGKILLed (every attempt of it); at ``before-batch-commit`` every task
    has delivered its share and the driver fails the micro-batch before Spark records it. Either
    way a consumer has read part of a micro-batch that the next run plans again and writes again."""
    log = Changelogs(seed=20251121)
    chunks = [log.chunk(order_ops=20, price_ops=6, poison=True) for _ in range(3)]

    # One pair of input topics, read by two deployments: retract output and upsert output.
    retract = JoinHarness(kafka_bootstrap, spark, tmp_path / "retract", new_topic, PARTITIONS, **service_env())
    create_topic(kafka_bootstrap, retract.output, PARTITIONS)
    upsert = retract.alongside(tmp_path / "upsert", OUTPUT_TOPIC=new_topic(PARTITIONS), OUTPUT_MODE="upsert",
                               OUTPUT_KEY="order_id")
    deployments = {"retract": retract, "upsert": upsert}
    # crashes[name]: (moment, point, batch, the output topic's end offsets when it crashed)
    crashes: Dict[str, list] = {name: [] for name in deployments}

    def crash_while_writing(moment: str, points: Dict[str, str], later: int) -> None:
        for name, h in deployments.items():
            batch = h.crash(points[name], later=later)
            ends = {p: hi for p, (_, hi) in end_offsets(kafka_bootstrap, h.env["OUTPUT_TOPIC"]).items()}
            crashes[name].append((moment, points[name], batch, ends))

    # 1. Crashed while its first micro-batch is written.
    send(retract, chunks[0])
    crash_while_writing("first output", {"retract": "mid-produce", "upsert": "mid-produce"}, later=0)
    # 2. More input; crashed mid-way, while the third micro-batch of the run is written (the
    #    first one replays what run 1 left unrecorded).
    send(retract, chunks[1])
    crash_while_writing("mid-way", {"retract": "mid-produce", "upsert": "before-batch-commit"}, later=2)
    # 3. The last input; everything joined and committed.
    send(retract, chunks[2])
    for h in deployments.values():
        h.run()

    summary = []
    for name, h in deployments.items():
        changes = read_changelog(kafka_bootstrap, h.env["OUTPUT_TOPIC"], h.service.plan.output_schema)
        kept, replays = drop_replays(changes)
        summary.append(f"{name}: {len(changes)} records, {len(replays)} replays "
                       f"{dict(Counter(c.batch for c in replays))}, crashes {crashes[name]}")
        for moment, point, batch, ends in crashes[name]:
            before = [c.batch == batch for c in changes if c.offset < ends.get(c.partition, 0)]
            after = [c.batch == batch for c in changes if c.offset >= ends.get(c.partition, 0)]
            assert any(before), f"{name}: crashed at {point} of batch {batch} ({moment}) before any of its output"
            # Written again by a later run: the crash did not lose the micro-batch.
            assert any(after), (
                f"{name}: crashed while writing batch {batch} ({moment}), which no later run wrote again "
                f"({summary[-1]})")
        # Every poison record is in the dead-letter topic exactly once, replays dropped, whatever the crashes.
        letters, _ = drop_replays(dead_letters(kafka_bootstrap, load_settings(h.env).dead_letter_topic))
        assert Counter(c.kind for c in letters) == Counter({r: n * len(chunks) for r, n in Changelogs.POISON_REASONS.items()})
        assert len({(c.headers["source.partition"], c.headers["source.offset"]) for c in letters}) == len(letters)
        assert sum(b"value (999899 bytes)" in c.headers.get("dropped", b"") for c in letters) == len(chunks)
        if h is retract:
            assert retract_table(kept) == log.retract_table(), summary[-1]
        else:
            assert_upsert_table(changes, log, summary[-1])
    print("\n".join(summary))


# --------------------------------------------------------------------------------------------
# 2. At least once: a broker outage while a micro-batch is written
# --------------------------------------------------------------------------------------------


@pytest.fixture
def proxied_broker(tmp_path):
    """A dedicated KRaft broker reachable only through a TcpProxy (its metadata sends clients to
    the proxy); yields the proxy."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        pytest.skip("the outage test needs its own local broker behind a proxy, and "
                    "KAFKA_BOOTSTRAP_SERVERS points the tests at an external broker")
    broker_port = free_port()
    proxy = TcpProxy(("127.0.0.1", broker_port)).start()
    broker = KafkaBroker(port=broker_port, advertised=proxy.address, data_dir=str(tmp_path / "kafka"),
                         jvm_options=broker_jvm_options())
    try:
        broker.start()
        yield proxy
    finally:
        broker.close()
        proxy.stop()


def test_at_least_once_rides_out_a_broker_outage_while_writing(proxied_broker, spark, tmp_path):
    """In the test's process and on its Spark (tests/integration/test_contact.py rides out an
    outage in a service process, /readyz and its log lines)."""
    proxy = proxied_broker
    bootstrap = proxy.address
    names = iter(range(100))

    def new_topic(partitions: int = 1, create: bool = True) -> str:
        name = f"outage-{next(names)}"
        return create_topic(bootstrap, name, partitions) if create else name

    log = Changelogs(seed=7)
    h = JoinHarness(bootstrap, spark, tmp_path, new_topic, PARTITIONS, **service_env())
    create_topic(bootstrap, h.output, PARTITIONS)
    svc = InProcessService("outage", h)
    try:
        send(h, log.chunk(order_ops=24, price_ops=6))
        svc.start()
        # The outage starts while a micro-batch is being written (its reads are done, its writes not).
        batch = drive({svc: writing_uncommitted_batch(1)}, "output of an uncommitted batch", START_TIMEOUT_S)[svc]
        cut = proxy.cut()
        assert cut > 0, "the service had no connection to cut"
        outage_end = time.monotonic() + 10.0  # the outage lasts 10 s by design
        while time.monotonic() < outage_end:
            assert svc.alive(), f"the service stopped during the outage: {svc.log_tail()}"
            time.sleep(0.2)
        assert proxy.refused > 0, "the service did not try to reconnect during the outage"
        proxy.restore()
        assert svc.alive(), f"the service stopped during the outage: {svc.log_tail()}"
        send(h, log.chunk(order_ops=12, price_ops=4))
        drive({svc: caught_up(log.sent)}, "all input to be joined after the outage", CATCH_UP_TIMEOUT_S)
        assert batch in svc.commits(), f"batch {batch}, interrupted by the outage, was never committed"
        assert svc.alive()
        svc.service.stop()
        assert svc.service.query.exception() is None
    finally:
        svc.close()
    changes = read_changelog(bootstrap, h.output, h.service.plan.output_schema)
    kept, replays = drop_replays(changes)
    print(f"outage: cut {cut} connections, refused {proxy.refused}; {len(changes)} records, "
          f"{len(replays)} duplicates {Counter(c.batch for c in replays)}")
    assert retract_table(kept) == log.retract_table()
    assert len(h.services) == 1  # one run: ridden out, never restarted


# --------------------------------------------------------------------------------------------
# 3. Exactly once: every named point, and two deployments on one output topic (in process)
# --------------------------------------------------------------------------------------------

EXACTLY_ONCE = {"DELIVERY": "exactly-once", "MAX_RECORDS_PER_TRIGGER": "40",
                "KAFKA_TRANSACTION_TIMEOUT_MS": "600000"}  # a crashed run's transaction stays open till fenced
#: The point each run crashes deployment a (retract) and the upsert deployment at: every point once,
#: and each output mode crashed inside an open transaction and after a commit its micro-batch did
#: not record. Deployment b (retract, on a's output topic) crashes at ``before-batch-commit`` in
#: the first run, while a's transaction is open, and at a point chosen at random in the third.
RUNS = [("before-commit", "mid-produce"), ("after-commit", "before-batch-commit"), ("before-init", "mid-produce")]
assert {p for run in RUNS for p in run} | {"before-batch-commit"} == set(faults.POINTS)
#: Deployment b's orders: ids from here on, so that the output tells a's and b's apart.
B_FIRST_ID = 500_000


def written(bootstrap: str, topic: str, schema: dict, mine=lambda order_id: True) -> int:
    """How many records of ``topic`` a ``read_uncommitted`` consumer reads (aborted ones too); of an
    output topic, those of the orders ``mine`` says are one deployment's."""
    import io

    import fastavro

    parsed = fastavro.parse_schema(schema) if schema else None
    count = 0
    for record in consume_all(bootstrap, topic, isolation="read_uncommitted"):
        if parsed is None or record.value is None:
            count += 1
        elif mine(next(iter(fastavro.schemaless_reader(io.BytesIO(record.value), parsed, None).values()))):
            count += 1
    return count


def replays_skipped(h: JoinHarness) -> int:
    """How many task partitions of the micro-batches the runs of ``h`` ran again found their
    share committed already and wrote nothing again ("written before, not again")."""
    return sum(len(batch.skipped) for service in h.services for batch in service.batches)


def test_exactly_once_crashed_at_every_point_two_deployments_on_one_topic_read_committed_sees_each_record_once(
        kafka_bootstrap, spark, tmp_path, new_topic):
    """In process, on the test's Spark (``faults.in_process``): at a task's point its Python worker
    is SIGKILLed, the transactional producer dying with its transaction open as in a killed
    service, and the query stops; at ``before-batch-commit`` the driver fails the micro-batch
    before Spark records it. Each restart is a new service on the checkpoint, which fences the
    dead producers. Deployments a (retract) and ``upsert`` read one pair of input topics; b
    (retract, input of its own) writes a's output topic, each with its own
    KAFKA_TRANSACTIONAL_ID_PREFIX (as the docs ask) and the default PROGRESS_TOPIC. In the first run
    a crashes inside a transaction and stays down; then b crashes after its tasks committed a
    micro-batch and comes back while a's transaction is still open. Reading progress markers
    read_committed ends at the first open transaction: had they shared a progress topic, b would
    not have seen its own marker behind a's open one and would have written the micro-batch again."""
    rng = random.Random(20261128)
    log = Changelogs(seed=20261126)
    chunks = [log.chunk(order_ops=16, price_ops=5, poison=i < 2) for i in range(len(RUNS) + 1)]
    log_b = Changelogs(seed=rng.randrange(1 << 30))
    log_b.next_id = B_FIRST_ID

    a = JoinHarness(kafka_bootstrap, spark, tmp_path / "a", new_topic, PARTITIONS,
                    **service_env(**EXACTLY_ONCE, KAFKA_TRANSACTIONAL_ID_PREFIX="deploy-a"))
    create_topic(kafka_bootstrap, a.output, PARTITIONS)
    b = JoinHarness(kafka_bootstrap, spark, tmp_path / "b", new_topic, PARTITIONS,
                    **service_env(**EXACTLY_ONCE, OUTPUT_TOPIC=a.output, KAFKA_TRANSACTIONAL_ID_PREFIX="deploy-b"))
    upsert = a.alongside(tmp_path / "upsert", OUTPUT_TOPIC=new_topic(PARTITIONS), OUTPUT_MODE="upsert",
                         OUTPUT_KEY="order_id")
    del upsert.env["KAFKA_TRANSACTIONAL_ID_PREFIX"]  # the default one, of its output topic
    kills = []

    def more_b_input():
        send(b, log_b.chunk(order_ops=16, price_ops=5))

    for i, (chunk, run) in enumerate(zip(chunks, RUNS)):
        send(a, chunk)
        points = {"a": (a, run[0]), "upsert": (upsert, run[1])}
        if i == 2:  # b too, at a point chosen at random
            more_b_input()
            points["b"] = (b, rng.choice(faults.POINTS))
        kills.append({name: (point, h.crash(point)) for name, (h, point) in points.items()})
        if i == 0:
            # b: its tasks commit a micro-batch (after a's transaction was left open), and it
            # crashes before Spark records it as done; it comes back while a's transaction is
            # still open, replays that micro-batch and finds it written.
            more_b_input()
            kills[-1]["b"] = ("before-batch-commit", b.crash("before-batch-commit"))
            b.run()
            assert replays_skipped(b) > 0, "b wrote the micro-batch its crash left unrecorded again"
    # The last run: no crash; the last input; everything joined and committed.
    send(a, chunks[-1])
    more_b_input()
    for h in (a, upsert, b):
        h.run()

    output = a.output
    changes = read_changelog(kafka_bootstrap, output, a.service.plan.output_schema)
    assert written(kafka_bootstrap, output, None) > len(changes), \
        f"no crash landed inside a transaction (kills {kills})"
    summary = []
    for name, h, h_log, mine in (("a", a, log, lambda order_id: order_id < B_FIRST_ID),
                                 ("upsert", upsert, log, lambda order_id: True),
                                 ("b", b, log_b, lambda order_id: order_id >= B_FIRST_ID)):
        plan = h.service.plan
        own = read_changelog(kafka_bootstrap, h.env["OUTPUT_TOPIC"], plan.output_schema)
        own = [c for c in own if c.row is None or mine(c.row[0])]
        _, replays = drop_replays(own)
        assert replays == [], f"{name}: read_committed sees records twice: {replays[:5]} (kills {kills})"
        letters_topic = load_settings(h.env).dead_letter_topic
        letters = [c for c in dead_letters(kafka_bootstrap, letters_topic) if h is not b]  # b's input has none
        summary.append(f"{name}: {len(own)} output and {len(letters)} dead-letter records committed, "
                       f"{len(h.services)} runs, {replays_skipped(h)} shares found written")
        # The log holds each committed micro-batch once; after a crash inside a transaction it also holds the
        # aborted records, which only read_uncommitted shows (without transactions they would be duplicates
        # above): output records or dead letters, whichever the crashed task's share held.
        if h is not b:
            attempts = written(kafka_bootstrap, h.env["OUTPUT_TOPIC"], plan.output_schema, mine) + \
                written(kafka_bootstrap, letters_topic, None)
            assert attempts > len(own) + len(letters), summary[-1]
            # Crashed after a commit that Spark did not record: the replay found it and wrote nothing again.
            assert replays_skipped(h) > 0, summary[-1]
            assert drop_replays(letters)[1] == []
            assert Counter(c.kind for c in letters) == Counter({r: n * 2 for r, n in Changelogs.POISON_REASONS.items()})
        if h is upsert:
            assert_upsert_table(own, h_log, f"{summary[-1]} (kills {kills})")
        else:
            assert retract_table(own) == h_log.retract_table(), f"{summary[-1]} (kills {kills})"  # never below zero, too
    assert {load_settings(h.env).progress_topic_name for h in (a, b)} == {"deploy-a.progress", "deploy-b.progress"}
    print("\n".join(summary), kills)
