"""DELIVERY=exactly-once end to end, in process, on the real broker: the output is the same join as
at-least-once's, written in transactions with progress markers; a micro-batch run again (Spark lost
its commit after every task had committed, as when the driver dies right then) writes nothing again,
where at-least-once writes it twice. The crash tests (SIGKILL at named points) are in
``test_exactly_once_crashes.py``."""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest

from kafka_fixture import consume_all
from service_harness import JoinHarness, drop_replays, order, price, retract_table

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
        # The replay reports what the first run wrote (from the markers), not nothing.
        assert sum(rerun[0].output.values()) == sum(1 for c in before if c.batch == batch)
        metrics = service.metrics.registry
        assert metrics.get_sample_value("changejoin_kafka_transactions_total", {"outcome": "replay_skipped"}) == \
            len(rerun[0].skipped)
    else:
        # The control: at-least-once writes the batch again (which is what a consumer must drop).
        assert len(replays) == sum(1 for c in before if c.batch == batch) > 0
    assert retract_table(kept) == retract_table(drop_replays(before)[0])


def _letters(h: JoinHarness):
    from service_harness import dead_letters

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
