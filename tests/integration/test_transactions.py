"""service/transactions.py against the real broker: a task's share and its progress marker in one
transaction, opened only once the share is complete, the marker read back (past another producer's
open transaction, never below the checkpoint's origin in the topic, and not further than a bound),
fencing of an older attempt (a zombie), the start-up abort of what a killed run left open, and the
errors that name a setting."""
from __future__ import annotations

import json
import uuid

import pytest

from tests.support.kafka_fixture import consume_all, create_topic, end_offsets
from tests.support.service_process import wait_until
from dataclasses import replace

from service.shipping import Delivery
from service.sink import producer_config
from service.transactions import (
    ProgressReader,
    Share,
    TaskTransaction,
    TransactionError,
    abort_open_transactions,
    marker_key,
    transactional_id,
    written_already,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def delivery(kafka_bootstrap, new_topic):
    """Exactly-once delivery's part of a worker config: an output topic, a progress topic of 2 partitions."""
    output = new_topic(2)
    progress = f"{output}.progress"
    create_topic(kafka_bootstrap, progress, 2)
    return Delivery(prefix=f"test-{uuid.uuid4().hex[:8]}", progress_topic=progress, timeout_ms=30_000,
                    location="/ck", output_topic=output, kafka=(("bootstrap.servers", kafka_bootstrap),),
                    checkpoint_id=uuid.uuid4().hex, partitions=2)


def records(topic: str, batch: int, n: int, start: int = 0):
    for i in range(start, start + n):
        yield topic, f"k{i}".encode(), f"batch {batch} value {i}".encode(), [("changejoin.batch", str(batch).encode())]


def share(topic: str, batch: int, n: int, start: int = 0) -> Share:
    return Share.of(records(topic, batch, n, start))


def values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list:
    return [r.value for r in consume_all(bootstrap, topic, isolation=isolation)]


def test_a_share_and_its_marker_commit_together_and_a_replay_finds_the_marker(kafka_bootstrap, delivery):
    reader = ProgressReader(delivery)
    first = TaskTransaction(delivery, 1, batch_id=7)
    try:
        assert first.committed(reader) is None  # nothing of this checkpoint yet
        counts = {("output", "+I"): 5}
        assert first.write(share(delivery.output_topic, 7, 5), counts, "input of 7") == 5
    finally:
        first.close()
    assert first.init_seconds is not None and first.transaction_seconds is not None
    # commit_transaction() returns once the coordinator has logged the commit; the markers that end
    # the transaction in each partition follow (the service reads after init_transactions(), which
    # waits for them): until then a read_committed reader sees the transaction as open.
    wait_until(lambda: len(values(kafka_bootstrap, delivery.output_topic)) == 5, 30, "the committed share", interval=0.2)
    assert len(values(kafka_bootstrap, delivery.output_topic)) == 5
    wait_until(lambda: reader.last(1) is not None, 30, "the committed marker", interval=0.2)
    marker = reader.last(1)
    assert marker["batch"] == 7 and marker["records"] == 5 and marker["counts"] == [["output", "+I", 5]]
    assert marker["input"] == "input of 7" and marker["output"] == share(delivery.output_topic, 7, 5).digest()
    assert reader.last(0) is None  # another task partition

    # The same micro-batch again (a replay after a driver crash, a retry): it is written already.
    again = TaskTransaction(delivery, 1, batch_id=7, attempt=1)
    try:
        assert written_already(again.committed(reader), 7, 1, "input of 7", share(delivery.output_topic, 7, 5), delivery)
    finally:
        again.close()
    # The next one is not.
    later = TaskTransaction(delivery, 1, batch_id=8)
    try:
        assert not written_already(later.committed(reader), 8, 1, "input of 8", share(delivery.output_topic, 8, 5), delivery)
    finally:
        later.close()


def test_a_marker_of_another_checkpoint_is_not_this_ones_even_far_behind_the_end(kafka_bootstrap, delivery):
    ours = ProgressReader(delivery)
    other = replace(delivery, checkpoint_id="another")
    task = TaskTransaction(delivery, 0, batch_id=3)
    try:
        task.write(share(delivery.output_topic, 3, 1), {})
    finally:
        task.close()
    # 40 transactions of another checkpoint after it: 80 offsets (marker + commit record each).
    for batch in range(40):
        t = TaskTransaction(other, 0, batch_id=batch)
        try:
            t.write(Share(), {})
        finally:
            t.close()
    assert ours.last(0)["batch"] == 3
    assert ProgressReader(other).last(0)["batch"] == 39
    assert ProgressReader(replace(delivery, checkpoint_id="new")).last(0) is None


def test_a_new_attempt_fences_the_older_one_and_only_its_copy_is_visible(kafka_bootstrap, delivery):
    """A zombie: attempt 0 of (partition 0, batch 4) is still producing when attempt 1 starts (its
    executor was lost to the driver, not dead). Attempt 1's init aborts attempt 0's transaction;
    attempt 0's commit then fails; read_committed consumers see one copy."""
    reader, topic = ProgressReader(delivery), delivery.output_topic
    zombie = TaskTransaction(delivery, 0, batch_id=4)
    outcome = {}

    class Meanwhile(Share):
        """The zombie's share: after 3 of its records, attempt 1 starts, and commits."""

        def __iter__(self):
            for i, record in enumerate(super().__iter__()):
                if i == 3:
                    retry = TaskTransaction(delivery, 0, batch_id=4, attempt=1)
                    try:
                        assert not written_already(retry.committed(reader), 4, 0, None, share(topic, 4, 5), delivery)
                        outcome["retry"] = retry.write(share(topic, 4, 5), {("output", "+I"): 5})
                    finally:
                        retry.close()
                yield record

    zombies = Meanwhile()
    zombies.extend(records(topic, 4, 5))
    try:
        with pytest.raises(TransactionError, match="fenced"):
            zombie.write(zombies, {("output", "+I"): 5})
    finally:
        zombie.close()
    assert outcome["retry"] == 5
    committed = values(kafka_bootstrap, topic)
    assert sorted(committed) == sorted(v for _, _, v, _ in records(topic, 4, 5))
    everything = values(kafka_bootstrap, topic, "read_uncommitted")
    assert len(everything) > len(committed), "the zombie's aborted records must be in the log (else this proves nothing)"
    assert reader.last(0)["attempt"] == 1


def test_the_start_up_abort_releases_what_a_killed_run_left_open(kafka_bootstrap, delivery):
    from confluent_kafka import Producer

    topic = delivery.output_topic
    tid = transactional_id(delivery.prefix, 1)
    killed = Producer(producer_config(kafka_bootstrap, {}, transactional_id=tid, transaction_timeout_ms=60_000))
    killed.init_transactions(30)
    killed.begin_transaction()
    for record in records(topic, 9, 10):
        killed.produce(record[0], record[2], record[1])
    assert killed.flush(30) == 0
    # As if its process were gone: never committed, never closed (close() would abort it).
    def stable_and_high():
        return (sum(hi for _, hi in end_offsets(kafka_bootstrap, topic).values()),
                sum(hi for _, hi in end_offsets(kafka_bootstrap, topic, "read_uncommitted").values()))

    assert stable_and_high() == (0, 10)  # read_committed readers are held at offset 0
    seconds = abort_open_transactions(delivery, partitions=2)
    assert seconds < 30
    stable, high = stable_and_high()
    assert stable == high > 10  # released: the abort marker follows the records
    assert values(kafka_bootstrap, topic) == []
    assert len(values(kafka_bootstrap, topic, "read_uncommitted")) == 10
    with pytest.raises(Exception):
        killed.commit_transaction(10)  # fenced


def test_a_timeout_above_the_brokers_maximum_names_the_setting(delivery):
    config = replace(delivery, timeout_ms=900_001)  # broker max: 900,000
    with pytest.raises(TransactionError, match="KAFKA_TRANSACTION_TIMEOUT_MS=900001 is above the broker"):
        abort_open_transactions(config, partitions=1)


def test_the_marker_is_a_compacted_record_keyed_by_checkpoint_and_partition(kafka_bootstrap, delivery):
    task = TaskTransaction(delivery, 1, batch_id=2)
    try:
        task.write(share(delivery.output_topic, 2, 2), {("dead_letter", "decode"): 1, ("output", "+I"): 1}, "in")
    finally:
        task.close()
    (marker,) = consume_all(kafka_bootstrap, delivery.progress_topic)
    assert marker.partition == 1
    assert marker.key == marker_key(delivery.checkpoint_id, 1)
    assert json.loads(marker.value) == {"batch": 2, "partition": 1, "attempt": 0, "records": 2,
                                        "counts": [["dead_letter", "decode", 1], ["output", "+I", 1]],
                                        "input": "in", "output": share(delivery.output_topic, 2, 2).digest()}


def test_a_task_without_output_leaves_no_initialization_behind_to_fence_the_next_one(kafka_bootstrap, delivery):
    """A task with no output closes its producer without a transaction; its init must be over by
    then, or it could end after the next micro-batch's producer of the same partition started and
    fence it (that task would fail)."""
    for batch in range(0, 12, 2):
        empty = TaskTransaction(delivery, 0, batch_id=batch)
        empty.close()  # at once, as a task whose rows turn out to be none
        assert empty.init_seconds is not None
        task = TaskTransaction(delivery, 0, batch_id=batch + 1)
        try:
            task.write(share(delivery.output_topic, batch + 1, 1), {("output", "+I"): 1})
        finally:
            task.close()
    # the last commit's markers follow its commit_transaction() (see the first test)
    wait_until(lambda: len(values(kafka_bootstrap, delivery.output_topic)) == 6, 30, "every task's record",
               interval=0.2)
    assert len(values(kafka_bootstrap, delivery.output_topic)) == 6


def test_changejoin_abort_transactions_releases_a_stopped_services_open_transaction(kafka_bootstrap, delivery, tmp_path):
    """``changejoin abort-transactions`` with the deployment's environment: a service stopped for
    good leaves no transaction holding read_committed readers back."""
    import subprocess
    import sys
    from pathlib import Path

    from confluent_kafka import Producer

    root = Path(__file__).resolve().parents[2]
    prefix, topic = delivery.prefix, delivery.output_topic
    killed = Producer(producer_config(kafka_bootstrap, {}, transactional_id=transactional_id(prefix, 1),
                                      transaction_timeout_ms=60_000))
    killed.init_transactions(30)
    killed.begin_transaction()
    killed.produce(topic, b"left open", partition=1)
    assert killed.flush(30) == 0
    env = {"PATH": "/usr/bin:/bin", "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "LEFT_TOPIC": "orders",
           "RIGHT_TOPIC": "prices", "OUTPUT_TOPIC": topic, "KAFKA_TRANSACTIONAL_ID_PREFIX": prefix,
           "SHUFFLE_PARTITIONS": "2", "CHECKPOINT_LOCATION": str(tmp_path / "checkpoint"),
           "LEFT_SCHEMA_FILE": str(root / "schemas" / "orders.avsc"), "RIGHT_SCHEMA_FILE": str(root / "schemas" / "prices.avsc"),
           "JOIN_SQL": "SELECT o.order_id, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product"}
    assert sum(hi for _, hi in end_offsets(kafka_bootstrap, topic).values()) == 0  # held back
    proc = subprocess.run([sys.executable, "-m", "service", "abort-transactions"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"transactional ids {prefix}-0 .. -1: nothing left open" in proc.stdout
    assert sum(hi for _, hi in end_offsets(kafka_bootstrap, topic).values()) == 2  # the record and its abort marker
    assert values(kafka_bootstrap, topic) == []
    proc = subprocess.run([sys.executable, "-m", "service", "abort-transactions"], cwd=root,
                          env={**env, "DELIVERY": "at-least-once"}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "DELIVERY is not exactly-once" in proc.stderr


def test_the_marker_read_waits_for_another_producers_open_transaction_to_end(kafka_bootstrap, delivery):
    """Two deployments with their own prefixes sharing one progress topic: one is killed inside a
    transaction (its marker sent, not committed); the other commits its micro-batch after it.
    read_committed reading ends at the open transaction: a reader that trusted what it saw there
    would find the micro-batch before and write this one again. It waits for the other transaction
    to end instead (here: until the other deployment's restart aborts it)."""
    import logging
    import threading

    from confluent_kafka import Producer

    topic, progress = delivery.output_topic, delivery.progress_topic
    ours = TaskTransaction(delivery, 0, batch_id=5)
    try:
        ours.write(share(topic, 5, 1), {})
    finally:
        ours.close()
    other_id = f"other-{uuid.uuid4().hex[:6]}-0"
    other = Producer(producer_config(kafka_bootstrap, {}, transactional_id=other_id, transaction_timeout_ms=60_000))
    other.init_transactions(30)
    other.begin_transaction()
    other.produce(progress, b'{"batch": 0}', b"another checkpoint:0", 0)
    assert other.flush(30) == 0  # open, and never committed: its process is gone
    after = TaskTransaction(delivery, 0, batch_id=6)
    try:
        after.write(share(topic, 6, 1), {})  # committed, behind the open transaction
    finally:
        after.close()

    waiting = threading.Event()

    class Waiting(logging.Handler):
        def emit(self, record):
            if "another producer's transaction is open" in record.getMessage():
                waiting.set()

    handler = Waiting()
    logging.getLogger("service.transactions").addHandler(handler)
    found, reader = {}, ProgressReader(delivery)
    reading = threading.Thread(target=lambda: found.update(marker=reader.last(0)))
    try:
        reading.start()
        while not waiting.is_set() and reading.is_alive():
            waiting.wait(0.05)
        # The other deployment comes back: its start-up abort ends the transaction.
        Producer(producer_config(kafka_bootstrap, {}, transactional_id=other_id,
                                 transaction_timeout_ms=60_000)).init_transactions(30)
        reading.join(60)
    finally:
        logging.getLogger("service.transactions").removeHandler(handler)
        reader.close()
    assert found["marker"]["batch"] == 6


def test_the_marker_read_gives_up_with_one_line_when_the_topic_holds_too_much(kafka_bootstrap, delivery, monkeypatch):
    from service import transactions

    other = replace(delivery, checkpoint_id="another")
    for batch in range(30):  # 60 offsets of another checkpoint
        t = TaskTransaction(other, 0, batch_id=batch)
        try:
            t.write(Share(), {})
        finally:
            t.close()
    monkeypatch.setattr(transactions, "SCAN_LIMIT", 40)
    reader = ProgressReader(delivery)
    with pytest.raises(TransactionError) as gave_up:
        reader.last(0)
    reader.close()
    message = str(gave_up.value)
    assert message.startswith(f"PROGRESS_TOPIC={delivery.progress_topic} partition 0: no progress "
                              f"marker of this checkpoint in the 40 offsets before offset 60")
    assert "give this deployment a PROGRESS_TOPIC of its own" in message and "\n" not in message


def test_a_new_checkpoint_never_reads_the_markers_before_its_origin(kafka_bootstrap, delivery):
    """A new checkpoint on a progress topic with history: its first read of each partition stops at
    the topic's end offsets when the checkpoint began (``transactions.progress_origin``), instead of
    reading the partition back to its start for a key it has never written."""
    from service.transactions import progress_origin

    other = replace(delivery, checkpoint_id="an older checkpoint")
    for batch in range(50):
        t = TaskTransaction(other, 0, batch_id=batch)
        try:
            t.write(Share(), {})
        finally:
            t.close()
    origin = progress_origin(delivery, delivery.progress_topic, 2)
    assert origin == [100, 0]
    fresh = replace(delivery, origin=tuple(origin))
    reader = ProgressReader(fresh)
    assert reader.last(0) is None and reader.last(1) is None
    assert reader.scanned == 0
    task = TaskTransaction(fresh, 0, batch_id=0)
    try:
        task.write(share(delivery.output_topic, 0, 1), {})
    finally:
        task.close()
    assert reader.last(0)["batch"] == 0 and reader.scanned == 1
    # A checkpoint of an earlier changejoin, whose origin is not known: read back to the log start.
    unknown = ProgressReader(replace(delivery, checkpoint_id="never written"))
    assert unknown.last(0) is None and unknown.scanned == 51
    reader.close()
    unknown.close()


def test_a_tasks_transaction_begins_only_once_the_join_has_given_it_its_whole_share(kafka_bootstrap, delivery,
                                                                                     monkeypatch):
    """The join's output reaches the producing task as the join computes it (its keys, then its
    timers, then the state's commit); a transaction open meanwhile would be open for all of that,
    and a micro-batch whose join takes longer than the transaction timeout would fail every retry."""
    import confluent_kafka
    import pyarrow as pa

    from service.pipeline import _produce_transaction

    begun = []

    class Watched(confluent_kafka.Producer):
        def begin_transaction(self, *args):
            begun.append(True)
            return super().begin_transaction(*args)

    monkeypatch.setattr(confluent_kafka, "Producer", Watched)
    topic, taken_while_open = delivery.output_topic, []

    def join_output():
        for i in range(3):
            taken_while_open.append(bool(begun))
            yield pa.RecordBatch.from_pylist([{"target": 0, "kind": 0, "payload": b"row %d" % i}])

    def rows(arrows):
        for arrow in arrows:
            columns = arrow.to_pydict()
            yield from zip(columns["target"], columns["kind"], columns["payload"])

    class Encoder:
        def records(self, rows, batch_id, task, counts):
            for _, _, payload in rows:
                counts[("output", "+I")] = counts.get(("output", "+I"), 0) + 1
                yield topic, None, payload, [("changejoin.batch", str(batch_id).encode())], task

    report = []
    _produce_transaction(delivery, None, 9, 0, 0, join_output(), rows, Encoder(), {}, report, {"input": "in", "replay": False})
    assert taken_while_open == [False, False, False] and begun == [True]
    assert ("transaction", "committed", 0) in report
    assert sorted(values(kafka_bootstrap, topic)) == [b"row 0", b"row 1", b"row 2"]
