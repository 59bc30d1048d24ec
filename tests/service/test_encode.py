"""Join output -> Kafka records: packed join output is written exactly as one change per row would be.

No Spark session and no broker: the join stage runs on a fake state handle, and the encoder's
records are compared as tuples."""
import pickle

from operators import RowKind
from service.decode import InputDecoder
from service.encode import OutputEncoder
from service.envelope import Target
from service.envelope import pack as pack_changes
from service.envelope import unpack as unpack_changes
from service.processor import JoinProcessor
from service.source import KafkaRecord
from tests.support.spark_fakes import FakeHandle, FakeTimerValues
from tests.support.service_harness import order, price
from tests.support.left_join_stages import encoder_for, envelopes, plan_for


# One join key ("book"), in four calls: orders (one undecodable), a price that matches them, a
# price update, a delete of the price.
CALLS = [
    envelopes(0, [("+I", order(1, "book", 2)), ("+I", order(2, "book", 3)), ("+I", order(3, "book", 1)),
                  ("+I", b"\x00not avro")], 0),
    envelopes(1, [("+I", price("book", 10.0))], 10),
    envelopes(1, [("-U", price("book", 10.0)), ("+U", price("book", 12.5))], 20),
    envelopes(1, [("-D", price("book", 12.5))], 30),
]


def join_rows(pack: bool) -> list:
    join = JoinProcessor(plan_for().to_json(), pack=pack)
    join.init(FakeHandle())
    rows = []
    for call in CALLS:
        rows += join.handleInputRows((b"book",), iter(call), FakeTimerValues())
    return rows


def changes_of(rows) -> list:
    """(target, kind, row or letter) in order, packed rows unpacked."""
    out = []
    for r in rows:
        if r.target == Target.PACKED:
            out += [(Target.OUTPUT, kind, row) for kind, row in unpack_changes(r.payload)]
        else:
            out.append((r.target, r.kind, pickle.loads(r.payload)))
    return out


def test_packed_join_output_holds_the_same_changes_in_the_same_order_with_the_same_seq_numbers():
    packed, single = join_rows(pack=True), join_rows(pack=False)
    assert changes_of(packed) == changes_of(single)
    assert [target for target, *_ in changes_of(single)] == [Target.DEAD_LETTER] + [Target.OUTPUT] * 27
    # One PACKED row per call that emitted changes; the dead letter stays a row of its own.
    assert [r.target for r in packed] == [Target.DEAD_LETTER, Target.PACKED, Target.PACKED, Target.PACKED, Target.PACKED]
    # Each change still takes its own number of the task's sequence: a packed row has its first.
    assert [r.seq for r in single] == list(range(28))
    assert [r.seq for r in packed] == [0, 1, 4, 10, 22]


def test_a_call_with_many_changes_packs_them_into_several_rows_in_order(monkeypatch):
    import service.processor

    monkeypatch.setattr(service.processor, "PACK_LIMIT", 4)
    packed, single = join_rows(pack=True), join_rows(pack=False)
    assert changes_of(packed) == changes_of(single)
    sizes = [len(list(unpack_changes(r.payload))) for r in packed if r.target == Target.PACKED]
    assert sizes == [3, 4, 2, 4, 4, 4, 4, 2]
    # Each packed row's seq is that of its first change.
    first = 1
    for r, size in zip(packed[1:], sizes):
        assert r.seq == single[first].seq
        first += size


def kafka_records(encoder, rows, batch_id=7, task=2):
    counts = {}
    records = list(encoder.records([(r.target, r.kind, r.payload, r.okey) for r in rows], batch_id, task, counts))
    return records, counts


def test_packed_and_single_rows_give_the_same_kafka_records_headers_and_counts():
    plan = plan_for()
    packed, packed_counts = kafka_records(encoder_for(plan), join_rows(pack=True))
    single, single_counts = kafka_records(encoder_for(plan), join_rows(pack=False))
    assert packed == single
    assert packed_counts == single_counts == {("dead_letter", "undecodable"): 1, ("output", "+I"): 15,
                                              ("output", "-U"): 3, ("output", "-D"): 9}
    # Every record has its own changejoin.seq, "<task>:<index>" in order, and the batch.
    assert [dict(r[3])["changejoin.seq"] for r in packed] == [f"2:{i}".encode() for i in range(28)]
    assert all(dict(r[3])["changejoin.batch"] == b"7" for r in packed)
    assert [r[0] for r in packed] == ["out.dlq"] + ["out"] * 27
    assert [dict(r[3])["rowkind"] for r in packed[1:4]] == [b"+I"] * 3
    assert {r[4] for r in packed[1:]} == {2 % 3}  # no message key: the task's partition


def test_the_retract_loop_writes_exactly_what_output_writes_for_each_change():
    """records() writes a retract-mode change itself; output() is the general definition."""
    plan = plan_for()
    encoder = encoder_for(plan)
    records, _ = kafka_records(encoder, join_rows(pack=True), batch_id=7, task=2)
    changes = [(kind, row) for target, kind, row in changes_of(join_rows(pack=True)) if target == Target.OUTPUT]
    expected = [encoder.output(kind, row, ("changejoin.batch", b"7"), ("changejoin.seq", f"2:{i + 1}".encode()), 2)
                for i, (kind, row) in enumerate(changes)]
    assert records[1:] == expected and len(expected) == 27


def test_upsert_output_skips_update_befores_but_they_keep_their_seq_index():
    plan = plan_for(OUTPUT_MODE="upsert", OUTPUT_KEY="order_id,product")
    encoder = encoder_for(plan, OUTPUT_MODE="upsert", OUTPUT_KEY="order_id,product")
    changes = [(RowKind.INSERT, (1, "book", 2, None)), (RowKind.UPDATE_BEFORE, (1, "book", 2, None)),
               (RowKind.UPDATE_AFTER, (1, "book", 3, None)), (RowKind.DELETE, (1, "book", 3, None))]
    counts = {}
    records = list(encoder.records([(Target.PACKED, 0, pack_changes(changes), b"")], 1, 0, counts))
    assert [dict(r[3])["changejoin.seq"] for r in records] == [b"0:0", b"0:2", b"0:3"]
    assert [r[2] is None for r in records] == [False, False, True]  # the delete is a tombstone
    assert len({r[1] for r in records}) == 1 and records[0][1] is not None  # all under the key
    assert all("rowkind" not in dict(r[3]) for r in records)
    assert counts == {("output", "+I"): 1, ("output", "+U"): 1, ("output", "-D"): 1}


def test_upsert_output_writes_a_tombstone_for_a_row_that_leaves_its_key():
    """An order moving from product book to pen, with the product in OUTPUT_KEY and no materializer:
    book's call retracts it and pen's call adds it. The -U is all book's key ever gets, so it must
    delete the key; a -U whose key the same call writes again stays dropped."""
    plan = plan_for(OUTPUT_MODE="upsert", OUTPUT_KEY="order_id,product")
    encoder = encoder_for(plan, OUTPUT_MODE="upsert", OUTPUT_KEY="order_id,product")
    book_call = [(RowKind.UPDATE_BEFORE, (1, "book", 2, 10.0)),
                 (RowKind.UPDATE_BEFORE, (2, "book", 1, 10.0)), (RowKind.UPDATE_AFTER, (2, "book", 5, 10.0))]
    pen_call = [(RowKind.UPDATE_AFTER, (1, "pen", 2, 1.5))]
    counts = {}
    records = list(encoder.records([(Target.PACKED, 0, pack_changes(book_call), b""), (Target.PACKED, 0, pack_changes(pen_call), b"")],
                                   1, 0, counts))
    keys = encoder.keys
    assert [(r[1], r[2] is None) for r in records] == [
        (keys.encode((1, "book")), True),    # order 1 left book: its old key is deleted
        (keys.encode((2, "book")), False),   # order 2 stayed: its -U was dropped, the +U rewrites the key
        (keys.encode((1, "pen")), False),
    ]
    assert [dict(r[3])["changejoin.seq"] for r in records] == [b"0:0", b"0:2", b"0:3"]
    assert counts == {("output", "-D"): 1, ("output", "+U"): 2}


def test_an_upsert_key_column_of_a_padded_side_is_nullable_in_the_key_as_in_the_value():
    """A FULL (or LEFT) join keyed by a column of each side: a padded row's key holds NULL there
    (found by the Debezium join test: the key's schema took the input column's nullability)."""
    sql = "SELECT o.order_id, p.product, p.price FROM orders o FULL JOIN prices p ON o.product = p.product"
    plan = plan_for(JOIN_SQL=sql, OUTPUT_MODE="upsert", OUTPUT_KEY="order_id,product")
    encoder = encoder_for(plan, JOIN_SQL=sql, OUTPUT_MODE="upsert", OUTPUT_KEY="order_id,product")
    batch, seq = (b"changejoin.batch", b"0"), (b"changejoin.seq", b"0:0")
    for row in [(1, None, None), (None, "pen", 1.5), (1, "pen", 1.5)]:  # no price; no order; both
        record = encoder.output(int(RowKind.INSERT), row, batch, seq)
        assert record[0] == "out" and record[1] == encoder.keys.encode(row[:2])


def test_a_too_large_change_in_a_packed_row_goes_to_the_dead_letter_topic_alone():
    plan = plan_for()
    encoder = encoder_for(plan, MAX_OUTPUT_RECORD_BYTES="30")
    changes = [(RowKind.INSERT, (1, "book", 2, None)), (RowKind.INSERT, (2, "x" * 100, 2, None)),
               (RowKind.DELETE, (1, "book", 2, None))]
    counts = {}
    records = list(encoder.records([(Target.PACKED, 0, pack_changes(changes), b"")], 1, 0, counts))
    assert [r[0] for r in records] == ["out", "out.dlq", "out"]
    letter = dict(records[1][3])
    assert letter["reason"] == b"too_large" and letter["changejoin.seq"] == b"0:1"
    assert letter["reason.detail"].startswith(b"+I output record of ")
    assert records[1][2] is None
    assert counts == {("output", "+I"): 1, ("output", "-D"): 1, ("dead_letter", "too_large"): 1}


class _FailsOn:
    """The plan's operator, except that it raises for rows of one product after changing state."""

    def __init__(self, operator, product):
        self.operator, self.product = operator, product

    def process(self, state, records, ctx, out):
        for side, kind, row in records:
            if row[1] == self.product:
                state.put("half-written")
                state.register_timer("proc", 1)
                raise ValueError(f"cannot join {row}")
        self.operator.process(state, records, ctx, out)


def test_a_key_whose_join_fails_goes_to_the_dead_letter_topic_and_keeps_its_state():
    join = JoinProcessor(plan_for().to_json())
    handle = FakeHandle()
    join.init(handle)
    join.operator = _FailsOn(join.operator, "pen")
    list(join.handleInputRows((b"book",), iter(CALLS[0]), FakeTimerValues()))
    before = handle.states["join"].value

    pens = envelopes(0, [("+I", order(7, "pen", 1)), ("+I", order(8, "pen", 2))], 40)
    rows = list(join.handleInputRows((b"pen",), iter(pens), FakeTimerValues()))
    assert handle.states["join"].value == before  # the failed call wrote nothing
    letters = [pickle.loads(r.payload) for r in rows]
    assert [r.target for r in rows] == [Target.DEAD_LETTER] * 2
    assert {letter["reason"] for letter in letters} == {"join_error"}
    assert letters[0]["detail"].startswith("ValueError: cannot join")
    assert [letter["row"] for letter in letters] == [(7, "pen", 1), (8, "pen", 2)]

    encoder = encoder_for(plan_for())
    counts = {}
    records = list(encoder.records([(r.target, r.kind, r.payload, r.okey) for r in rows], 3, 0, counts))
    headers = dict(records[0][3])
    assert records[0][0] == "out.dlq" and headers["reason"] == b"join_error"
    assert (headers["source.topic"], headers["source.partition"], headers["source.offset"]) == (b"orders", b"0", b"40")
    assert counts == {("dead_letter", "join_error"): 2}

    # The next records of the key are joined as if the failed ones had never come.
    books = list(join.handleInputRows((b"book",), iter(CALLS[1]), FakeTimerValues()))
    assert any(r.target == Target.PACKED for r in books)


def test_a_dead_letter_of_a_record_near_the_producer_limit_is_written_without_its_value():
    big = KafkaRecord("orders", 0, 5, 1000, b"key", b"\x00" + b"x" * 999_950, [("rowkind", b"+I")])
    (envelope,) = InputDecoder(plan_for(), 0, "rowkind", None).map(big)
    counts = {}
    (letter,) = encoder_for(plan_for()).records([(Target.DEAD_LETTER, 0, envelope[3], b"")], 1, 0, counts)
    topic, key, value, headers = letter
    assert (topic, key, value) == ("out.dlq", b"key", None)
    assert dict(headers)["dropped"] == b"value (999951 bytes)" and dict(headers)["reason"] == b"undecodable"
    assert counts == {("dead_letter", "undecodable"): 1}


def test_an_output_record_over_the_producer_limit_with_its_headers_is_too_large():
    encoder = OutputEncoder(plan_for(), "out", "out.dlq", "retract", "rowkind", 2_000_000, None)
    counts = {}
    records = list(encoder.records([(Target.PACKED, 0, pack_changes([(0, (1, "b" * 999_900, 2, 1.0))]), b"")], 1, 0, counts))
    assert records[0][0] == "out.dlq" and b"message.max.bytes=1000000" in dict(records[0][3])["reason.detail"]


def test_changes_without_a_message_key_go_to_their_grouping_keys_partition_whichever_task_writes_them():
    """A row's changes must stay in one partition, in order, also when `changejoin rescale` moves
    its bucket to another task: the partition follows the grouping key, not the task."""
    from service.envelope import output_route

    encoder = OutputEncoder(plan_for(), "out", "out.dlq", "retract", "rowkind", 1_000_000, None, output_partitions=3)
    partitions = {}
    for group in (b"bucket-a", b"bucket-b", b"bucket-c", b"bucket-d"):
        row = (1, group.decode(), 2, 1.0)
        for task in (0, 1, 4):
            (record,) = encoder.records([(Target.PACKED, 0, pack_changes([(0, row)]), output_route(group))], 1, task, {})
            partitions.setdefault(group, set()).add(record[4])
    assert all(len(p) == 1 for p in partitions.values()), partitions
    assert len({p for ps in partitions.values() for p in ps}) > 1, "every grouping key in one partition"
