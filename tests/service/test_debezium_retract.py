"""A keyed Debezium side read in retract mode (*_CHANGELOG_MODE=retract: the before images retract,
joined directly) and read as upserts of its key (the default: through the normalize stage) joins
to the same output table, batch after batch: the benchmark's debezium scenario (left-pk's changes
as debezium-json messages with full before images, as REPLICA IDENTITY FULL writes them) run
through each plan's stages without Spark (the ``Query`` harness of tests/support/stage_query.py)."""
from __future__ import annotations

import pickle
from collections import Counter

import pytest

from bench.harness.changejoin import service_settings
from bench.harness.data import changelogs, debezium, json_value, topics
from bench.harness.peers import RETRACT_ENV
from service.catalog import plan_for
from service.envelope import Target, unpack
from service.source import KafkaRecord
from tests.support.stage_query import Query

RETRACT = RETRACT_ENV  # the bench system changejoin-retract's


def stages(checkpoint: str, env: dict, buckets: int) -> Query:
    """One plan's stages (normalize per side where planned, the join, the upsert materializer),
    with Spark's state faked per stage, for the bench's settings plus ``env``."""
    settings = service_settings("127.0.0.1:1", "debezium", 1, 1, checkpoint,
                                extra={**env, "STATE_BUCKETS": str(buckets)})
    return Query.of_plan(plan_for(settings))


def batches(rows: int, per_batch: int) -> list[list]:
    """left-pk's changes as the debezium scenario's messages, the two sides interleaved, in batches."""
    orders, prices = changelogs(rows, 40, "left-pk")
    names = topics("debezium")
    sides = [[(side, KafkaRecord(names[side], 0, offset, 1000 + offset, None, json_value(message), []))
              for offset, (message, _) in enumerate(debezium(changes))]
             for side, changes in enumerate((orders, prices))]
    records = [r for pair in zip(*sides) for r in pair] + sides[0][len(sides[1]):] + sides[1][len(sides[0]):]
    return [records[i:i + per_batch] for i in range(0, len(records), per_batch)]


def table_after(rows, table: Counter) -> Counter:
    """The output table (a multiset of rows) once ``rows`` are applied; dead letters fail."""
    for r in rows:
        assert r.target != Target.DEAD_LETTER, pickle.loads(r.payload)
        if r.target == Target.TALLY:
            continue
        changes = unpack(r.payload) if r.target == Target.PACKED else [(r.kind, pickle.loads(r.payload))]
        for kind, row in changes:
            table[row] += 1 if kind in (0, 2) else -1
            assert table[row] >= 0, f"retracted a row not in the table: {row}"
    return +table


@pytest.mark.parametrize("buckets", [0, 8])
def test_retract_mode_and_upserts_of_the_key_join_to_the_same_table(tmp_path, buckets):
    upserts = stages(str(tmp_path / "u"), {}, buckets)
    retract = stages(str(tmp_path / "r"), RETRACT, buckets)
    assert sorted(upserts.normalize) == [0, 1] and not retract.normalize  # what the mode saves
    assert [s.changelog_mode for s in retract.plan.sides] == ["retract", "retract"]
    tables = (Counter(), Counter())
    work = batches(2_000, 250)
    for i, batch in enumerate(work):
        assert table_after(retract.batch(batch), tables[1]) == table_after(upserts.batch(batch), tables[0]), \
            f"batch {i}"
    assert len(+tables[0]) > 100  # the join did join


def test_a_key_only_before_image_is_a_dead_letter_in_retract_mode(tmp_path):
    retract = stages(str(tmp_path / "r"), RETRACT, 0)
    names = topics("debezium")
    row = {"order_id": 7, "product": "p1", "quantity": 2}
    key_only = {"order_id": 7, "product": None, "quantity": None}
    out = retract.batch([(0, KafkaRecord(names[0], 0, 0, 1000, None, json_value(
        {"before": None, "after": row, "op": "c"}), [])), (0, KafkaRecord(names[0], 0, 1, 1001, None, json_value(
            {"before": key_only, "after": None, "op": "d"}), []))])
    letters = [pickle.loads(r.payload) for r in out if r.target == Target.DEAD_LETTER]
    assert len(letters) == 1 and "REPLICA IDENTITY FULL" in repr(letters[0])
