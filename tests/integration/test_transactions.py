"""service/transactions.py against the real broker: a task's share and its progress marker in one
transaction, the marker read back, fencing of an older attempt (a zombie), the start-up abort of
what a killed run left open, and the errors that name a setting."""
from __future__ import annotations

import json
import uuid

import pytest

from kafka_fixture import consume_all, create_topic, end_offsets
from service.sink import producer_config
from service.transactions import (
    ProgressReader,
    TaskTransaction,
    TransactionError,
    abort_open_transactions,
    marker_key,
    transactional_id,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def delivery(kafka_bootstrap, new_topic):
    """A worker config with exactly-once delivery: an output topic, a progress topic of 2 partitions."""
    output = new_topic(2)
    progress = f"{output}.progress"
    create_topic(kafka_bootstrap, progress, 2)
    return {
        "kafka": {"bootstrap.servers": kafka_bootstrap},
        "delivery": {"prefix": f"test-{uuid.uuid4().hex[:8]}", "progress_topic": progress,
                     "checkpoint_id": uuid.uuid4().hex, "timeout_ms": 30_000},
        "output": output,
    }


def records(topic: str, batch: int, n: int, start: int = 0):
    for i in range(start, start + n):
        yield topic, f"k{i}".encode(), f"batch {batch} value {i}".encode(), [("changejoin.batch", str(batch).encode())]


def values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list:
    return [r.value for r in consume_all(bootstrap, topic, isolation=isolation)]


def test_a_share_and_its_marker_commit_together_and_a_replay_finds_the_marker(kafka_bootstrap, delivery):
    reader = ProgressReader(delivery)
    first = TaskTransaction(delivery, 1, batch_id=7)
    try:
        assert first.written(reader) is None  # nothing of this checkpoint yet
        counts = {("output", "+I"): 5}
        assert first.write(records(delivery["output"], 7, 5), counts) == 5
    finally:
        first.close()
    assert first.init_seconds is not None and first.transaction_seconds is not None
    assert len(values(kafka_bootstrap, delivery["output"])) == 5
    marker = reader.last(1)
    assert marker["batch"] == 7 and marker["records"] == 5 and marker["counts"] == [["output", "+I", 5]]
    assert reader.last(0) is None  # another task partition

    # The same micro-batch again (a replay after a driver crash, a retry): it is written already.
    again = TaskTransaction(delivery, 1, batch_id=7, attempt=1)
    try:
        assert again.written(reader)["batch"] == 7
    finally:
        again.close()
    # The next one is not.
    later = TaskTransaction(delivery, 1, batch_id=8)
    try:
        assert later.written(reader) is None
    finally:
        later.close()


def test_a_marker_of_another_checkpoint_is_not_this_ones_even_far_behind_the_end(kafka_bootstrap, delivery):
    ours = ProgressReader(delivery)
    other = {**delivery, "delivery": {**delivery["delivery"], "checkpoint_id": "another"}}
    task = TaskTransaction(delivery, 0, batch_id=3)
    try:
        task.write(records(delivery["output"], 3, 1), {})
    finally:
        task.close()
    # 40 transactions of another checkpoint after it: 80 offsets (marker + commit record each).
    for batch in range(40):
        t = TaskTransaction(other, 0, batch_id=batch)
        try:
            t.write(iter(()), {})
        finally:
            t.close()
    assert ours.last(0)["batch"] == 3
    assert ProgressReader(other).last(0)["batch"] == 39
    assert ProgressReader({**delivery, "delivery": {**delivery["delivery"], "checkpoint_id": "new"}}).last(0) is None


def test_a_new_attempt_fences_the_older_one_and_only_its_copy_is_visible(kafka_bootstrap, delivery):
    """A zombie: attempt 0 of (partition 0, batch 4) is still producing when attempt 1 starts (its
    executor was lost to the driver, not dead). Attempt 1's init aborts attempt 0's transaction;
    attempt 0's commit then fails; read_committed consumers see one copy."""
    reader, topic = ProgressReader(delivery), delivery["output"]
    zombie = TaskTransaction(delivery, 0, batch_id=4)
    outcome = {}

    def zombie_records():
        yield from records(topic, 4, 3)
        # Attempt 0's transaction is open with 3 records: attempt 1 starts, and commits.
        retry = TaskTransaction(delivery, 0, batch_id=4, attempt=1)
        try:
            assert retry.written(reader) is None
            outcome["retry"] = retry.write(records(topic, 4, 5), {("output", "+I"): 5})
        finally:
            retry.close()
        yield from records(topic, 4, 2, start=3)

    try:
        with pytest.raises(TransactionError, match="fenced"):
            zombie.write(zombie_records(), {("output", "+I"): 5})
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

    topic = delivery["output"]
    tid = transactional_id(delivery["delivery"]["prefix"], 1)
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
    config = {**delivery, "delivery": {**delivery["delivery"], "timeout_ms": 900_001}}  # broker max: 900,000
    with pytest.raises(TransactionError, match="KAFKA_TRANSACTION_TIMEOUT_MS=900001 is above the broker"):
        abort_open_transactions(config, partitions=1)


def test_the_marker_is_a_compacted_record_keyed_by_checkpoint_and_partition(kafka_bootstrap, delivery):
    task = TaskTransaction(delivery, 1, batch_id=2)
    try:
        task.write(records(delivery["output"], 2, 2), {("dead_letter", "decode"): 1, ("output", "+I"): 1})
    finally:
        task.close()
    (marker,) = consume_all(kafka_bootstrap, delivery["delivery"]["progress_topic"])
    assert marker.partition == 1
    assert marker.key == marker_key(delivery["delivery"]["checkpoint_id"], 1)
    assert json.loads(marker.value) == {"batch": 2, "partition": 1, "attempt": 0, "records": 2,
                                        "counts": [["dead_letter", "decode", 1], ["output", "+I", 1]]}


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
            task.write(records(delivery["output"], batch + 1, 1), {("output", "+I"): 1})
        finally:
            task.close()
    assert len(values(kafka_bootstrap, delivery["output"])) == 6


def test_changejoin_abort_transactions_releases_a_stopped_services_open_transaction(kafka_bootstrap, delivery, tmp_path):
    """``changejoin abort-transactions`` with the deployment's environment: a service stopped for
    good leaves no transaction holding read_committed readers back."""
    import subprocess
    import sys
    from pathlib import Path

    from confluent_kafka import Producer

    root = Path(__file__).resolve().parents[2]
    prefix, topic = delivery["delivery"]["prefix"], delivery["output"]
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
