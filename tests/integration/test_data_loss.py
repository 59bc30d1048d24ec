"""The data loss policy (``FAIL_ON_DATA_LOSS``) end to end, on the real broker.

The service reads and checkpoints some input, stops; more input arrives, and part of it is gone
before the service reads it: deleted from the log's start as retention deletes (``delete_records``),
or the topic deleted and re-created. On restart, with the default (``true``) the service stops by
itself with one fatal line naming the topic and partition and what to do, exit code 1, and leaves
its checkpoint as it was; with ``false`` it goes on from the earliest offset still there, counts
what was lost where that is known, and joins what remains with the join state it had.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Dict, List

import pytest

from service.checkpoint import CheckpointLock

from tests.support.kafka_fixture import end_offsets, recreate_topic
from tests.support.service_harness import JoinHarness, order, price, start_service_process

pytestmark = pytest.mark.integration

JOIN_SQL = (
    "SELECT o.order_id, o.product, o.quantity, p.price FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"
)
EXIT_TIMEOUT_S = 300.0  # how long a failing service may take to start and stop (under load)


def run_until_exit(env: Dict[str, str], workdir: Path, name: str):
    """``python -m service run`` in its own process group until it exits by itself; returns (exit
    code, log lines). A service still running after EXIT_TIMEOUT_S is killed and the test fails."""
    log_path = workdir / f"{name}.log"
    with open(log_path, "wb") as log:
        proc = start_service_process(env, log)
        try:
            code = proc.wait(timeout=EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            raise AssertionError(f"the service did not stop by itself:\n{log_path.read_text()[-5000:]}") from None
        finally:
            try:  # Spark's JVM (same process group) ends with its driver; never leave one behind
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return code, log_path.read_text(errors="replace").splitlines()


def checkpoint_files(checkpoint: Path) -> Dict[str, bytes]:
    """What the checkpoint holds (the lock a running process takes on it, and notes its pid in, is
    none of it: checkpoint.CheckpointLock)."""
    return {str(p.relative_to(checkpoint)): p.read_bytes() for p in sorted(checkpoint.rglob("*"))
            if p.is_file() and p.name != CheckpointLock.NAME}


def assert_stops_with_one_line(env: Dict[str, str], checkpoint: Path, workdir: Path, name: str, *expected: str):
    """The service, started on ``checkpoint``, stops by itself: exit code 1, one fatal JSON line
    whose cause contains each of ``expected``, no traceback, the checkpoint untouched."""
    before = checkpoint_files(checkpoint)
    code, lines = run_until_exit({**env, "LOG_FORMAT": "json"}, workdir, name)
    text = "\n".join(lines)
    assert code == 1, f"exit code {code}:\n{text[-5000:]}"
    fatal, others = [], []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        (fatal if isinstance(record, dict) and record.get("event") == "fatal" else others).append(line)
    assert len(fatal) == 1, f"{len(fatal)} fatal lines:\n{text[-5000:]}"
    fatal = json.loads(fatal[0])
    for part in expected:
        assert part in fatal["cause"], f"{part!r} not in the cause {fatal['cause']!r}"
    # Nothing but that line tells of the failure: no traceback, no JVM stack, no other error; and
    # nothing but JSON lines (no JVM notice, no print of a Spark Python process).
    rest = "\n".join(others)
    not_json = [line for line in others if not line.startswith("{")]
    assert not not_json, "\n".join(not_json)
    assert "Traceback" not in rest and "\tat " not in rest, rest[-5000:]
    errors = [line for line in others if '"level": "ERROR"' in line or " ERROR " in line]
    assert not errors, "\n".join(errors)
    assert checkpoint_files(checkpoint) == before, "the failed start changed the checkpoint"
    return fatal


def delete_records_before(bootstrap: str, topic: str, partition: int, offset: int) -> None:
    """What retention does: the partition's log now starts at ``offset``."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.delete_records([TopicPartition(topic, partition, offset)]).values()
    assert future.result(timeout=30).low_watermark == offset


def lost_records(service) -> float:
    return service.metrics.registry.get_sample_value("changejoin_input_lost_records", {"side": "left"})


def run_observed(h: JoinHarness, **env):
    """``h.run(**env)``, stopping only once the metrics have seen the last micro-batch's progress
    (Spark hands progress to listeners asynchronously, after the batch is committed)."""
    service = h.start(**env)
    try:
        service.process_available()
        last = service.query.lastProgress["batchId"]
        deadline = time.monotonic() + 60
        while service.metrics.registry.get_sample_value("changejoin_last_committed_batch_id") != last:
            assert time.monotonic() < deadline, "the metrics never saw the last micro-batch"
            time.sleep(0.1)
    finally:
        service.stop()
    return service


@pytest.fixture
def harness(kafka_bootstrap, spark, tmp_path, new_topic):
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, JOIN_SQL=JOIN_SQL)
    h.process_env = {"SPARK_MASTER": "local[2]", "SHUFFLE_PARTITIONS": "2", "LOG_LEVEL": "INFO", **h.env}
    return h


def test_records_deleted_before_they_were_read_stop_the_service_or_are_skipped_keeping_the_state(harness, tmp_path):
    h = harness
    checkpoint = Path(h.env["CHECKPOINT_LOCATION"])
    h.send_prices([("+I", price("book", 12.5)), ("+I", price("pen", 1.5)), ("+I", price("ink", 7.0))])
    h.send_orders([("+I", order(1, "book", 2)), ("+I", order(2, "pen", 3)), ("+I", order(3, "ink", 1))])
    h.run()
    assert h.retract_table() == Counter({(1, "book", 2, 12.5): 1, (2, "pen", 3, 1.5): 1, (3, "ink", 1, 7.0): 1})

    # While the service is stopped: 4 more order changes; retention deletes the first 2 unread.
    h.send_orders([("+I", order(4, "paper", 5)), ("+I", order(5, "book", 9)),
                   ("-D", order(2, "pen", 3)), ("+I", order(6, "ink", 4))])
    delete_records_before(h.bootstrap, h.orders, 0, 5)
    assert end_offsets(h.bootstrap, h.orders) == {0: (5, 7)}

    fatal = assert_stops_with_one_line(h.process_env, checkpoint, tmp_path, "default",
                                       f"topic '{h.orders}' partition 0", "offsets 3 to 4 (2 records)",
                                       "FAIL_ON_DATA_LOSS=false")
    assert fatal["error_type"] == "KafkaSourceError"

    # FAIL_ON_DATA_LOSS=false: on from offset 5 with the state of the first run (order 2's delete
    # retracts its joined row), the 2 lost records counted.
    service = run_observed(h, FAIL_ON_DATA_LOSS="false")
    assert lost_records(service) == 2
    assert h.retract_table() == Counter({(1, "book", 2, 12.5): 1, (3, "ink", 1, 7.0): 1, (6, "ink", 4, 7.0): 1})


def test_a_topic_deleted_and_re_created_stops_the_service_or_is_read_from_its_beginning_keeping_the_state(
        harness, tmp_path):
    h = harness
    checkpoint = Path(h.env["CHECKPOINT_LOCATION"])
    h.send_prices([("+I", price("book", 12.5)), ("+I", price("ink", 7.0))])
    h.send_orders([("+I", order(1, "book", 2)), ("+I", order(2, "ink", 3)), ("+I", order(3, "pen", 1))])
    h.run()
    assert h.retract_table() == Counter({(1, "book", 2, 12.5): 1, (2, "ink", 3, 7.0): 1, (3, "pen", 1, None): 1})

    # While the service is stopped, the topic is deleted (with whatever it held after offset 3) and
    # re-created, and written to beyond the offset the checkpoint reads on from.
    recreate_topic(h.bootstrap, h.orders)
    h.send_orders([("+I", order(i, "book", i)) for i in range(4, 9)] + [("-D", order(1, "book", 2))])
    assert end_offsets(h.bootstrap, h.orders) == {0: (0, 6)}

    fatal = assert_stops_with_one_line(h.process_env, checkpoint, tmp_path, "default",
                                       f"topic '{h.orders}' was deleted and re-created", "FAIL_ON_DATA_LOSS=false")
    assert fatal["error_type"] == "KafkaSourceError"

    # FAIL_ON_DATA_LOSS=false: the new topic is read from its beginning, with the state of the
    # first run (order 1's delete retracts its joined row). How much was lost is not known.
    service = run_observed(h, FAIL_ON_DATA_LOSS="false")
    assert math.isnan(lost_records(service)), "a re-created topic's loss counted as a number"
    assert h.retract_table() == Counter(
        {(2, "ink", 3, 7.0): 1, (3, "pen", 1, None): 1, **{(i, "book", i, 12.5): 1 for i in range(4, 9)}})
