"""DELIVERY=exactly-once end to end, in process, on the real broker: the output is the same join as
at-least-once's, written in transactions with progress markers; a micro-batch run again (Spark lost
its commit after every task had committed, as when the driver dies right then) writes nothing again,
where at-least-once writes it twice. What operations do to it: a checkpoint restored from an older
copy, or missing the plan of its last micro-batch, and input whose log start moved before a replay,
stop the service before anything is written again or skipped; a start aborts what any transactional
id the checkpoint used left open. The crash tests (SIGKILL at named points) are in
``test_crashes.py``."""
from __future__ import annotations

import os
import shutil
import uuid
from collections import Counter
from pathlib import Path

import pytest

from tests.support.kafka_fixture import consume_all, end_offsets
from tests.support.service_harness import JoinHarness, drop_replays, order, price, retract_table

pytestmark = pytest.mark.integration

JOIN_SQL = "SELECT o.order_id, o.product, o.quantity, p.price FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"
ENV = {"JOIN_SQL": JOIN_SQL, "SHUFFLE_PARTITIONS": "2", "MAX_RECORDS_PER_TRIGGER": "1000"}


def send_some(h: JoinHarness, first_id: int, n: int) -> None:
    h.send_prices([("+I", price(p, 1.5 + i)) for i, p in enumerate(("book", "pen", "ink"))] if first_id == 1 else [])
    h.send_orders([("+I", order(i, ("book", "pen", "ink", "glue")[i % 4], i)) for i in range(first_id, first_id + n)])
    h.send_orders([(None, b"not avro")])  # a dead letter


def forget_last_commit(checkpoint: Path) -> int:
    """Delete Spark's record that the last micro-batch is done, as if the driver had died after
    every task of it returned and before Spark wrote ``commits/<batch>``. Returns the batch id."""
    commits = checkpoint / "commits"
    last = max(int(n) for n in os.listdir(commits) if n.isdigit())
    for name in (str(last), f".{last}.crc"):
        if (commits / name).exists():
            (commits / name).unlink()
    return last


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_a_micro_batch_run_again_after_its_tasks_committed_writes_nothing_twice(
        kafka_bootstrap, spark, tmp_path, new_topic, delivery):
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, 2, DELIVERY=delivery, **ENV)
    send_some(h, 1, 40)
    h.run()
    before = h.changelog()
    assert before and all(c.kind for c in before)
    batch = forget_last_commit(tmp_path / "checkpoint")

    service = h.run()  # Spark runs that micro-batch again, with the same offsets and state
    after = h.changelog()
    letters = drop_replays([c for c in _letters(h)])
    rerun = [b for b in service.batches if b.batch_id == batch]
    assert rerun, f"batch {batch} was not run again: {[b.batch_id for b in service.batches]}"
    kept, replays = drop_replays(after)
    if delivery == "exactly-once":
        assert replays == [] and letters[1] == [], "a replayed micro-batch was written again"
        assert len(after) == len(before)
        assert rerun[0].committed == [] and sorted(rerun[0].skipped) == sorted(set(rerun[0].skipped)) != []
        # The replay reports what the first run wrote apart: written before, it is not counted again.
        assert sum(n for (target, _), n in rerun[0].replayed.items() if target == "output") == \
            sum(1 for c in before if c.batch == batch) > 0
        assert rerun[0].output == {} and rerun[0].dead_letters == {}
        metrics = service.metrics.registry
        assert metrics.get_sample_value("changejoin_kafka_transactions_total", {"outcome": "replay_skipped"}) == \
            len(rerun[0].skipped)
        assert not any(metrics.get_sample_value("changejoin_output_records_total", {"kind": kind})
                       for kind in ("+I", "-U", "+U", "-D"))
    else:
        # The control: at-least-once writes the batch again (which is what a consumer must drop).
        assert len(replays) == sum(1 for c in before if c.batch == batch) > 0
    # The micro-batch run again is measured again: its records were read again, their latency is
    # to this run's commit (docs/operations.md, end-to-end latency).
    read = sum(sum(b.input.values()) for b in service.batches)
    assert read >= sum(rerun[0].input.values()) > 0
    assert service.metrics.registry.get_sample_value("changejoin_end_to_end_latency_seconds_count") == read
    assert retract_table(kept) == retract_table(drop_replays(before)[0])


def _letters(h: JoinHarness):
    from tests.support.service_harness import dead_letters

    return dead_letters(h.bootstrap, h.service.settings.dead_letter_topic)


def test_exactly_once_writes_the_same_join_as_at_least_once_with_a_marker_per_transaction(
        kafka_bootstrap, spark, tmp_path, new_topic):
    tables, runs = {}, {}
    for delivery in ("at-least-once", "exactly-once"):
        h = JoinHarness(kafka_bootstrap, spark, tmp_path / delivery, new_topic, 2, DELIVERY=delivery, **ENV)
        send_some(h, 1, 30)
        h.run()
        send_some(h, 31, 30)  # a second run on the same checkpoint: new transactions, new markers
        service = h.run()
        tables[delivery] = h.retract_table()
        runs[delivery] = (h, service)
    assert tables["exactly-once"] == tables["at-least-once"] != Counter()

    h, service = runs["exactly-once"]
    settings = service.settings
    # Every output record and dead letter is in a committed transaction, and every transaction has
    # its marker in the progress topic, keyed by the checkpoint's id and the task partition.
    committed = consume_all(kafka_bootstrap, settings.output_topic)
    everything = consume_all(kafka_bootstrap, settings.output_topic, isolation="read_uncommitted")
    assert [r.value for r in committed] == [r.value for r in everything]
    markers = consume_all(kafka_bootstrap, settings.progress_topic_name)
    assert markers and {m.partition for m in markers} <= {0, 1}
    identity = (tmp_path / "exactly-once" / "checkpoint" / "changejoin-state.json").read_text()
    assert all(m.key.decode().split(":")[0] in identity for m in markers)
    written = sum(sum(b.output.values()) + sum(b.dead_letters.values())
                  for b in service.batches)  # this run's
    assert written > 0
    metrics = service.metrics.registry
    assert metrics.get_sample_value("changejoin_kafka_transactions_total", {"outcome": "committed"}) >= 1
    assert metrics.get_sample_value("changejoin_kafka_transaction_init_seconds_count") >= 1
    assert len(_letters(h)) == 2


def forget_last_plan(checkpoint: Path) -> int:
    """Delete Spark's plan of the last micro-batch and its record that it is done (``offsets/<batch>``
    and ``commits/<batch>``), as an operator getting past a micro-batch by hand would: Spark plans
    that batch id again, for whatever input there is then. Returns the batch id."""
    last = forget_last_commit(checkpoint)
    for name in (str(last), f".{last}.crc"):
        if (checkpoint / "offsets" / name).exists():
            (checkpoint / "offsets" / name).unlink()
    return last


def stopped_by(h: JoinHarness) -> str:
    """Run the service, which must stop with an error; the one line its fatal log line says (the
    ``ProgressMismatch`` raised in the driver or a task, out of Spark's wrapping)."""
    from service.app import python_exception_in

    with pytest.raises(Exception) as stopped:
        h.run()
    error_type, message = python_exception_in(str(stopped.value))
    assert error_type == "ProgressMismatch" and "\n" not in message, str(stopped.value)[-2000:]
    return message


def test_a_micro_batch_planned_again_for_other_offsets_stops_before_anything_is_written(
        kafka_bootstrap, spark, tmp_path, new_topic):
    """Its markers name the offsets it was written for: the batch id planned again, now for more
    input, is not taken for the one written (which would skip the new input's share and lose it)."""
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, 2, DELIVERY="exactly-once", **ENV)
    for first in (1, 41):  # two micro-batches: Spark plans no batch 0 again on existing state
        send_some(h, first, 40)
        h.run()
    before = h.changelog()
    batch = forget_last_plan(tmp_path / "checkpoint")
    assert batch > 0
    send_some(h, 81, 40)
    message = stopped_by(h)
    assert f"micro-batch {batch} was written by task partition" in message
    assert "for other input offsets than the checkpoint now holds for it" in message
    assert h.changelog() == before, "nothing may be written once the markers disagree with the checkpoint"


def test_a_checkpoint_restored_from_an_older_copy_stops_before_anything_is_written(
        kafka_bootstrap, spark, tmp_path, new_topic):
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, 2, DELIVERY="exactly-once", **ENV)
    checkpoint = tmp_path / "checkpoint"
    send_some(h, 1, 40)
    h.run()
    shutil.copytree(checkpoint, tmp_path / "copy")  # a snapshot of the volume
    for first in (41, 81):
        send_some(h, first, 40)
        h.run()
    before = h.changelog()
    shutil.rmtree(checkpoint)
    shutil.copytree(tmp_path / "copy", checkpoint)  # restored
    send_some(h, 121, 40)
    message = stopped_by(h)
    assert "is behind its output: micro-batch" in message and "already wrote micro-batch" in message
    assert h.changelog() == before


def test_a_replay_that_reads_fewer_records_than_its_first_run_stops_rather_than_skip(
        kafka_bootstrap, spark, tmp_path, new_topic):
    """Retention moved the log start of an input between a micro-batch's first run and its replay
    (with FAIL_ON_DATA_LOSS=false the replay reads from the new log start): the replay computes other
    records than the committed shares hold, and skipping them would leave the join's state advanced
    on other input than the output was written from."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, 2, DELIVERY="exactly-once", FAIL_ON_DATA_LOSS="false",
                    **ENV)
    send_some(h, 1, 40)
    h.run()
    before = h.changelog()
    forget_last_commit(tmp_path / "checkpoint")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    ends = end_offsets(kafka_bootstrap, h.orders)
    gone = [TopicPartition(h.orders, p, min(5, high)) for p, (_, high) in ends.items()]
    for future in admin.delete_records(gone).values():
        future.result(30)
    message = stopped_by(h)
    assert "computed other records for task partition" in message and "than its first run wrote" in message
    kept, replays = drop_replays(h.changelog())
    assert replays == [] and len(kept) == len(before)


def test_a_start_aborts_what_any_transactional_id_the_checkpoint_used_left_open(
        kafka_bootstrap, spark, tmp_path, new_topic):
    """An earlier KAFKA_TRANSACTIONAL_ID_PREFIX, and ids past today's task count (a checkpoint
    rescaled down), are aborted at start like today's: their open transactions would hold back
    every read_committed reader of the partitions they wrote."""
    from confluent_kafka import Producer

    from service.checkpoint import Checkpoint, record_transactional_ids, used_transactional_ids
    from service.sink import producer_config

    old, new = f"old-{uuid.uuid4().hex[:6]}", f"new-{uuid.uuid4().hex[:6]}"
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, 2, DELIVERY="exactly-once",
                    KAFKA_TRANSACTIONAL_ID_PREFIX=old, **ENV)
    send_some(h, 1, 10)
    h.run()
    store = Checkpoint(str(tmp_path / "checkpoint"))
    assert used_transactional_ids(store) == [f"{old}-0", f"{old}-1"]
    record_transactional_ids(store, new, 4)  # as a rescale from 4 task partitions leaves it
    for tid in (f"{old}-1", f"{new}-3"):  # killed runs left these open
        killed = Producer(producer_config(kafka_bootstrap, {}, transactional_id=tid, transaction_timeout_ms=120_000))
        killed.init_transactions(30)
        killed.begin_transaction()
        killed.produce(h.output, b"left open", partition=0)
        assert killed.flush(30) == 0

    def held_back() -> int:
        committed, everything = (end_offsets(kafka_bootstrap, h.output, isolation) for isolation in
                                 ("read_committed", "read_uncommitted"))
        return sum(everything[p][1] - committed[p][1] for p in everything)

    assert held_back() == 2
    service = h.run(KAFKA_TRANSACTIONAL_ID_PREFIX=new)
    assert held_back() == 0
    assert used_transactional_ids(store) == [f"{new}-{p}" for p in range(4)] + [f"{old}-0", f"{old}-1"]
    assert service.settings.transactional_id_prefix == new
    assert len(consume_all(kafka_bootstrap, f"{old}.progress")) > 0  # the checkpoint kept its progress topic
