"""Join keys in buckets (service/buckets.py): what a bucket stores, and what it costs in state calls."""
from __future__ import annotations

import pytest

from service import sparkstate
from service.sparkstate import BucketState, KeyCodec, ObjectCalls
from tests.support.spark_fakes import FakeHandle, FakeMapState, FakeValueState


class RoundTrips(ObjectCalls):
    """Spark's state of one bucket, faked, reached as the processors reach it: reads in batches
    (each batch one round trip to the JVM), writes sent without waiting."""

    def __init__(self, handle: FakeHandle, values: dict, maps: dict):
        super().__init__(handle, values, maps)
        self.trips, self.written = 0, []

    def read(self, requests):
        self.trips += 1
        return super().read(requests)

    def write(self, request):
        self.written.append(request)
        super().write(request)


class Bucket:
    """One bucket's fake Spark state, opened anew for each call as a processor does."""

    def __init__(self, small: int = 4096, budget: int = 64 * 1024, codec: KeyCodec | None = None,
                 grain: int | None = None, domain: str | None = "proc"):
        self.value, self.keys, self.left = FakeValueState(), FakeMapState(), FakeMapState()
        self.handle = FakeHandle()
        self.small, self.budget, self.codec, self.grain, self.domain = small, budget, codec or KeyCodec(), grain, domain
        self.calls = RoundTrips(self.handle, {sparkstate.BUCKET: self.value},
                                {sparkstate.KEYS: self.keys, "left": self.left})
        self.hint = ("test", object())  # a bucket this process has not seen

    def open(self) -> BucketState:
        self.calls.trips, self.calls.written = 0, []
        return BucketState(self.calls, {"left": self.left}, self.domain, self.codec, self.hint, self.grain,
                           self.small, self.budget)

    def timer_entries(self) -> dict:
        return {k: v for (k,), v in self.keys.entries.items() if k[:1] in (b"\xfd", b"\xfe")}

    def key_entries(self) -> list:
        return sorted(k for (k,) in self.keys.entries if k[:1] not in (b"\xfd", b"\xfe"))


def test_values_of_many_keys_cost_one_round_trip_and_one_write_of_the_bucket():
    b = Bucket()
    state = b.open()
    state.read_ahead([b"k%d" % i for i in range(50)])
    for i in range(50):
        state.key(b"k%d" % i).put(("row", i))
    state.flush()
    assert b.calls.trips == 1 and [w[:2] for w in b.calls.written] == [("v", sparkstate.BUCKET)]
    state = b.open()
    state.read_ahead([b"k%d" % i for i in range(50)] + [b"absent"])
    assert [state.key(b"k%d" % i).get() for i in range(50)] == [("row", i) for i in range(50)]
    assert state.key(b"absent").get() is None
    state.flush()
    assert b.calls.trips == 1 and b.calls.written == []  # nothing changed, nothing written


def test_a_large_value_is_a_map_entry_of_its_own_and_stays_one_until_cleared():
    b = Bucket(small=100)
    state = b.open()
    state.key(b"big").put("x" * 200)
    state.key(b"small").put("y")
    state.flush()
    assert b.key_entries() == [b"big"]
    state = b.open()
    state.read_ahead([b"big"])
    state.key(b"big").put("x")  # shrunk: still a map entry, so the bucket value is not rewritten
    state.flush()
    assert [w[:3] for w in b.calls.written] == [("m", sparkstate.KEYS, b"big")]
    state = b.open()
    assert state.key(b"big").get() == "x" and state.key(b"small").get() == "y"
    state.key(b"big").clear()
    state.flush()
    assert b.keys.entries == {}
    state = b.open()
    state.key(b"small").clear()
    state.flush()
    assert b.value.value is None, "an empty bucket holds no value"


def test_a_key_put_without_being_read_is_found_among_the_large_ones():
    b = Bucket(small=10)
    state = b.open()
    state.key(b"a").put("x" * 50)
    state.flush()
    state = b.open()
    state.key(b"a").put("y" * 50)  # a blind write: the bucket must learn that "a" is a large key
    state.flush()
    assert b.key_entries() == [b"a"] and b.open().key(b"a").get() == "y" * 50
    state = b.open()
    state.key(b"a").clear()
    state.flush()
    assert b.keys.entries == {} and b.value.value is None


def test_the_large_keys_a_call_touches_are_read_in_one_round_trip():
    b = Bucket(small=10)
    state = b.open()
    for i in range(16):
        state.key(b"k%02d" % i).put("x" * 50)
    state.flush()
    state = b.open()
    state.read_ahead([b"k%02d" % i for i in range(4)])  # the bucket seen with large keys: one trip
    assert [state.key(b"k%02d" % i).get() for i in range(4)] == ["x" * 50] * 4
    assert b.calls.trips == 1
    b.hint = ("test", object())  # a process that has not seen the bucket: the value first, then its keys
    state = b.open()
    state.read_ahead([b"k00", b"k01", b"new"])
    assert state.key(b"k01").get() == "x" * 50 and state.key(b"new").get() is None and b.calls.trips == 2


def test_beyond_the_bucket_budget_the_largest_small_values_leave_first():
    b = Bucket(small=1000, budget=1000)
    state = b.open()
    for name, size in ((b"a", 300), (b"b", 500), (b"c", 400), (b"d", 100)):
        state.key(name).put("x" * size)
    state.flush()
    assert b.key_entries() == [b"b"]
    state = b.open()
    assert [len(state.key(k).get()) for k in (b"a", b"b", b"c", b"d")] == [300, 500, 400, 100]


def test_a_bucket_value_stays_within_its_budget_however_many_keys_and_timers_it_holds():
    """The bucket value holds the small keys (at most the budget), a count of the large ones and
    the chunk count of each cleanup slot: nothing per key beyond the budget. One touched key of a
    bucket of 20,000 writes its own entry, its timer's chunk and at most the bounded bucket value,
    nothing of the other keys' entries or timers."""
    b = Bucket(grain=1_000)
    for batch in range(20):
        state = b.open()
        keys = [b"key%06d" % (batch * 1_000 + i) for i in range(1_000)]
        state.read_ahead(keys)
        for i, jk in enumerate(keys):
            state.key(jk).put(("row", jk, "x" * 150))
            state.key(jk).register_timer("proc", 3_600_000 + batch * 1_000 + i)
        state.flush()
    assert len(b.key_entries()) > 19_000
    assert len(b.value.value[0]) < sparkstate.BUCKET_VALUE_BYTES * 1.1
    state = b.open()
    state.read_ahead([b"key000042"])
    state.key(b"key000042").put(("row", "changed"))
    state.key(b"key000042").delete_timer("proc", 3_600_042)
    state.key(b"key000042").register_timer("proc", 9_000_000)
    state.flush()
    assert b.calls.trips <= 2
    written = {w[2] if w[0] == "m" else w[:2] for w in b.calls.written}
    assert written <= {b"key000042", sparkstate.chunk_key(9_000_000, 0), ("v", sparkstate.BUCKET), ("t", 9_000_000)}
    assert sum(len(part) for w in b.calls.written for part in w[2:] if isinstance(part, bytes)) \
        < sparkstate.BUCKET_VALUE_BYTES * 1.1 + 2_000


def test_exact_timers_fire_per_key_as_registered_and_deleted():
    b = Bucket(grain=None, domain="event")
    state = b.open()
    state.key(b"a").register_timer("event", 300)
    state.key(b"b").register_timer("event", 200)
    state.key(b"b").register_timer("event", 500)
    state.key(b"c").register_timer("proc", 100)  # another domain than the processor's: ignored
    state.flush()
    assert b.handle.timers == {200, 300, 500}  # one Spark timer per time, for all the bucket's keys
    state = b.open()
    state.key(b"b").delete_timer("event", 500)
    state.key(b"d").register_timer("event", 300)
    state.flush()
    state = b.open()
    assert state.fire(300, until=300) == [(300, b"a"), (300, b"d")]
    state.flush()
    b.handle.timers.discard(300)  # Spark deletes a timer it fired after the call
    state = b.open()
    assert state.fire(500, until=600) == []  # deleted: fires nothing
    state.flush()
    state = b.open()
    assert state.fire(200, until=600) == [(200, b"b")]
    state.flush()
    assert b.timer_entries() == {}, "fired chunks are removed"


def test_a_timer_registered_while_firing_and_due_already_fires_in_the_same_call():
    b = Bucket(grain=None, domain="event")
    state = b.open()
    state.key(b"a").register_timer("event", 100)
    state.flush()
    state = b.open()
    assert state.fire(100, until=250) == [(100, b"a")]
    state.key(b"a").register_timer("event", 200)
    state.key(b"a").register_timer("event", 900)
    assert state.take_due(250) == [(200, b"a")]
    state.flush()
    assert b.handle.timers == {100, 900}


def test_cleanup_timers_are_kept_per_slot_and_fire_once_per_key_at_its_latest():
    b = Bucket(grain=1_000)
    state = b.open()
    for i, jk in enumerate((b"a", b"b", b"c")):
        state.key(jk).register_timer("proc", 10_100 + i)
    state.flush()
    state = b.open()
    state.key(b"a").delete_timer("proc", 10_100)  # not kept: the cleanup finds nothing at 10_100 anyway
    state.key(b"a").register_timer("proc", 10_900)
    state.key(b"b").register_timer("proc", 12_500)
    state.flush()
    assert b.handle.timers == {11_000, 13_000}  # one Spark timer per slot of the bucket
    state = b.open()
    fired = state.fire(11_000, until=11_000)
    assert fired == [(10_101, b"b"), (10_102, b"c"), (10_900, b"a")]
    state.flush()
    assert set(b.value.value and sparkstate.loads(b.value.value[0])[3]) == {13_000}


def test_a_bucket_of_the_first_layout_is_read_and_written_in_this_one():
    """A checkpoint written before this layout: the bucket value held the index of its large keys
    and every key's timers, and the bucket had one Spark timer at their earliest. It keeps its
    values and timers, and is rewritten in this layout when a call touches it."""
    b = Bucket(small=100, grain=None)
    old_small = {b"s": KeyCodec().encode("small value")}
    b.keys.entries[(b"big",)] = (KeyCodec().encode("x" * 500),)
    b.value.value = (sparkstate.dumps((old_small, {b"big": None}, {b"s": (50, 400), b"big": (70,)}, 50)),)
    b.handle.timers = {50}
    state = b.open()
    assert state.fire(50, until=60) == [(50, b"s")]  # the old Spark timer: every key timer due by then
    assert state.key(b"s").get() == "small value" and state.key(b"big").get() == "x" * 500
    state.flush()
    b.handle.timers.discard(50)
    value = sparkstate.loads(b.value.value[0])
    assert value[0] == "b2" and value[2] == 1, "rewritten with the count of large keys, not their index"
    assert b.handle.timers == {70, 400}
    state = b.open()
    assert state.fire(70, until=70) == [(70, b"big")]


def test_a_value_read_twice_is_decoded_twice_so_changes_in_place_are_not_kept():
    b = Bucket()
    state = b.open()
    state.key(b"a").put({"rows": [1]})
    state.flush()
    state = b.open()
    value = state.key(b"a").get()
    value["rows"].append(2)  # a call that fails after changing what it read: nothing is put
    assert state.key(b"a").get() == {"rows": [1]}


def test_maps_of_two_keys_in_one_bucket_stay_apart():
    b = Bucket()
    state = b.open()
    one, two = state.key(b"one").map("left"), state.key(b"two").map("left")
    one.put(("pk", 1), ["row1"])
    two.put(("pk", 1), ["row2"])
    two.put(("pk", 2), ["row3"])
    assert state.key(b"one").map("right") is None
    assert one.get(("pk", 1)) == ["row1"] and two.get(("pk", 1)) == ["row2"]
    assert sorted(two.items()) == [(("pk", 1), ["row2"]), (("pk", 2), ["row3"])]
    two.clear()
    assert list(two.items()) == [] and list(one.items()) == [(("pk", 1), ["row1"])]


def test_values_of_an_older_generation_are_upgraded_as_they_are_read():
    b = Bucket(codec=KeyCodec(0))
    state = b.open()
    state.key(b"a").put(("old",))
    state.flush()
    b.codec = KeyCodec(2, upgrade=lambda value, generation: (*value, f"from {generation}"))
    state = b.open()
    assert state.key(b"a").get() == ("old", "from 0")
    state.key(b"a").put(("new",))
    state.flush()
    assert b.codec.decode(state._small[b"a"]) == ("new",)
    with pytest.raises(TypeError):
        KeyCodec(1).decode(b.codec.encode(("x",)))  # an older codec meets a newer value: no upgrade known


@pytest.mark.parametrize("grain", [None, 100])
def test_the_same_changes_write_the_same_bytes(grain):
    def run():
        b = Bucket(small=50, budget=120, grain=grain)
        state = b.open()
        for i in (5, 3, 9, 1, 7):
            state.key(b"k%d" % i).put("v" * (i * 10))
            state.key(b"k%d" % i).register_timer("proc", 1000 - i)
        state.flush()
        return b.value.value, sorted(b.keys.entries.items()), b.handle.timers

    assert run() == run()


# -- the stages on buckets emit what they emit per key ------------------------------------------------
# Each micro-batch runs through the real decoder and processors on a fake of Spark's state
# (spark_fakes.KeyedHandle), once per key (STATE_BUCKETS=0) and once in buckets; both must write
# the same changes and dead letters, batch by batch.

import copy  # noqa: E402
import io  # noqa: E402
import pickle  # noqa: E402
import random  # noqa: E402
from collections import Counter  # noqa: E402

import fastavro  # noqa: E402

from service.catalog import plan_for  # noqa: E402
from service.config import load_settings  # noqa: E402
from service.envelope import Target, unpack  # noqa: E402
from service.source import KafkaRecord  # noqa: E402
from tests.support.service_harness import ORDERS, PRICES, SHIPMENTS, TIMED_ORDERS, avro  # noqa: E402
from tests.support.service_env import TIMED, VALID  # noqa: E402
from tests.support.stage_query import Query  # noqa: E402



LEFT_PK = {"JOIN_SQL": "SELECT o.order_id, o.product, o.quantity, p.price FROM orders o LEFT JOIN prices p "
                       "ON o.product = p.product"}


def written(rows) -> Counter:
    """What the sink writes for join output rows: changes and dead letters, as a multiset."""
    out = Counter()
    for r in rows:
        if r.target == Target.PACKED:
            out.update(("change", kind, row) for kind, row in unpack(r.payload))
        elif r.target == Target.OUTPUT:
            out[("change", r.kind, pickle.loads(r.payload))] += 1
        elif r.target == Target.TALLY:
            out[("records read", r.kind)] += pickle.loads(r.payload)[0]  # envelope.tally_envelope
        else:
            assert r.target == Target.DEAD_LETTER, r.target
            out[("dead letter", r.kind, repr(sorted(pickle.loads(r.payload).items())))] += 1
    return out


def changelogs(seed: int, batches: int, per_batch: int, keys: int, upsert: bool = False) -> list[list]:
    """Random order and price changelogs (the left-pk benchmark's shape: updates of live orders that
    may move them to another product, price updates and deletes, and a few undecodable records),
    cut into micro-batches. With ``upsert`` both topics are upsert topics: no ``-U``, a delete is a
    tombstone."""
    rng = random.Random(seed)
    orders, prices, offsets = {}, {}, [0, 0]
    out = []
    for _ in range(batches):
        batch = []
        for _ in range(per_batch):
            side = rng.random() < 0.4
            offset = offsets[side]
            offsets[side] += 1
            if rng.random() < 0.01:
                batch.append((int(side), KafkaRecord("prices" if side else "orders", 0, offset, 1000 + offset, b"x",
                                                     b"\x00not avro", [("rowkind", b"+I")])))
                continue
            if not side:
                oid = rng.randrange(keys * 3)
                old = orders.get(oid)
                product = f"p{rng.randrange(keys)}"
                new = {"order_id": oid, "product": product, "quantity": rng.randrange(1, 9)}
                changes = [(b"+I", new)] if old is None else [(b"-U", old), (b"+U", new)]
                if old is not None and rng.random() < 0.2:
                    changes, new = [(b"-D", old)], None
                orders[oid] = new
                if new is None:
                    del orders[oid]
                schema, topic, key = ORDERS, "orders", str(oid).encode()
            else:
                product = f"p{rng.randrange(keys)}"
                old = prices.get(product)
                new = {"product": product, "price": float(rng.randrange(100)), "currency": "EUR"}
                changes = [(b"+I", new)] if old is None else [(b"-U", old), (b"+U", new)]
                prices[product] = new
                schema, topic, key = PRICES, "prices", product.encode()
            for i, (kind, row) in enumerate(changes):
                if upsert and kind in (b"-U", b"-D"):
                    if kind == b"-D":  # an upsert topic's delete: a tombstone
                        batch.append((int(side), KafkaRecord(topic, 0, offset, 1000 + offset, key, None, [])))
                    continue
                batch.append((int(side), KafkaRecord(topic, 0, offset, 1000 + offset, key, avro(schema, row),
                                                     [("rowkind", kind)])))
                if i == 0 and len(changes) > 1:
                    offset = offsets[side]
                    offsets[side] += 1
        out.append(batch)
    return out


def upsert_table(key: tuple[int, ...]):
    """What an upsert output amounts to (``written`` as a table, batch after batch): the changes of
    one upsert key come from several join keys, whose order the layouts interleave differently,
    so the upserts written in between may differ; the table after each batch may not."""
    table: dict = {}

    def after(rows) -> dict:
        letters = Counter()
        for r in rows:
            if r.target in (Target.DEAD_LETTER, Target.TALLY):
                letters[r.payload] += 1
                continue
            changes = unpack(r.payload) if r.target == Target.PACKED else [(r.kind, pickle.loads(r.payload))]
            for kind, row in changes:
                okey = tuple(row[i] for i in key)
                if kind in (0, 2):
                    table[okey] = row
                elif kind == 3:
                    table.pop(okey, None)
        return {"table": dict(table), "dead letters": letters}

    return after


def same_output(env: dict, batches: list, buckets: int = 8, compare=None, wire: bool = False,
                **times) -> tuple[Query, Query]:
    per_key, bucketed = Query(env, 0), Query(env, buckets, wire)
    seen = {id(per_key): compare() if compare else written, id(bucketed): compare() if compare else written}
    for i, batch in enumerate(batches):
        clock = {name: value(i) for name, value in times.items()}
        assert seen[id(bucketed)](bucketed.batch(batch, **clock)) == seen[id(per_key)](per_key.batch(batch, **clock)), \
            f"batch {i}"
    return per_key, bucketed


@pytest.mark.parametrize("wire", [False, True], ids=["objects", "wire"])
def test_a_left_join_with_primary_keys_writes_the_same_changes_in_buckets(wire):
    per_key, bucketed = same_output(LEFT_PK, changelogs(1, batches=6, per_batch=300, keys=40), wire=wire)
    # what crosses into Spark: far fewer state calls per batch, fewer state rows
    assert bucketed.join[1].calls * 3 < per_key.join[1].calls
    assert bucketed.join[1].rows() < per_key.join[1].rows()


@pytest.mark.parametrize("wire", [False, True], ids=["objects", "wire"])
def test_large_keys_and_full_bucket_values_write_the_same_changes(monkeypatch, wire):
    monkeypatch.setattr(sparkstate, "SMALL_VALUE_BYTES", 300)
    monkeypatch.setattr(sparkstate, "BUCKET_VALUE_BYTES", 1500)
    env = {"LEFT_PRIMARY_KEY": None, "RIGHT_PRIMARY_KEY": None,  # multisets: values grow with every row
           "JOIN_SQL": "SELECT o.order_id, p.price FROM orders o JOIN prices p ON o.product = p.product"}
    rng = random.Random(2)
    batches = [[(0, KafkaRecord("orders", 0, b * 100 + i, 1000, None,
                                avro(ORDERS, {"order_id": b * 100 + i, "product": f"p{rng.randrange(12)}",
                                              "quantity": rng.randrange(1, 9)}), [("rowkind", b"+I")]))
                 for i in range(100)] + batch
               for b, batch in enumerate(changelogs(2, batches=5, per_batch=100, keys=12))]
    _, bucketed = same_output(env, batches, buckets=3, wire=wire)
    _, handle = bucketed.join
    assert any(name == sparkstate.KEYS for name, _ in handle.maps), "no key left its bucket's value"


@pytest.mark.parametrize("wire", [False, True], ids=["objects", "wire"])
def test_a_hot_keys_split_side_in_a_shared_bucket_writes_the_same_changes(wire):
    hot = [[(0, KafkaRecord("orders", 0, b * 600 + i, 1000, str(i).encode(),
                            avro(ORDERS, {"order_id": b * 600 + i, "product": "hot", "quantity": 1}),
                            [("rowkind", b"+I")])) for i in range(600)]
           + [(1, KafkaRecord("prices", 0, b, 1000, b"hot", avro(PRICES, {"product": "hot", "price": float(b),
                                                                           "currency": None}),
                              [("rowkind", b"+I" if b == 0 else b"+U")]))]
           for b in range(3)]
    mixed = changelogs(3, batches=3, per_batch=200, keys=6)
    _, bucketed = same_output(LEFT_PK, [h + m for h, m in zip(hot, mixed)], buckets=2, wire=wire)
    assert any(name == "left" for name, _ in bucketed.join[1].maps), "the hot key's side was not split"


@pytest.mark.parametrize("wire", [False, True], ids=["objects", "wire"])
def test_state_ttl_timers_fire_per_key_from_a_few_timers_per_bucket(wire):
    """TTL timers only clean state: a bucket keeps them per slot of a sixteenth of the TTL, one
    Spark timer per slot, however many keys it holds."""
    env = {**LEFT_PK, "STATE_TTL": "1s"}
    per_key, bucketed = same_output(env, changelogs(4, batches=6, per_batch=150, keys=30),
                                    now=lambda i: 10_000 + i * 700, wire=wire)
    per_bucket = Counter(key for _, key in bucketed.join[1].timers)
    assert per_bucket and max(per_bucket.values()) <= 1_000 // (1_000 // 16) + 1
    assert len(bucketed.join[1].timers) < len(per_key.join[1].timers)


def final_left_join(batches: list) -> dict:
    """The LEFT join of the input tables as they stand after ``batches`` of upsert records (each
    topic's latest value per message key; a tombstone deletes), keyed by order id."""
    tables: list[dict] = [{}, {}]
    for batch in batches:
        for side, record in batch:
            if record.value is None:
                tables[side].pop(record.key, None)
            elif not record.value.startswith(b"\x00not"):  # the undecodable records are dead letters
                tables[side][record.key] = fastavro.schemaless_reader(io.BytesIO(record.value),
                                                                      fastavro.parse_schema((ORDERS, PRICES)[side]))
    price = {row["product"]: row["price"] for row in tables[1].values()}
    return {(o["order_id"],): (o["order_id"], o["product"], o["quantity"], price.get(o["product"]))
            for o in tables[0].values()}


@pytest.mark.parametrize("buckets", [0, 8])
def test_orders_moving_between_products_within_a_batch_end_as_the_join_of_the_final_tables(buckets):
    """An order that moves from one product to another several times in one micro-batch reaches
    the upsert materializer from several join keys, in an order no layout keeps (docs/semantics.md,
    order); the upsert table written must still be the join of the input tables, batch after batch."""
    env = {**LEFT_PK, "LEFT_CHANGELOG_MODE": "upsert", "RIGHT_CHANGELOG_MODE": "upsert",
           "OUTPUT_MODE": "upsert", "OUTPUT_KEY": "order_id"}
    batches = changelogs(5, batches=5, per_batch=300, keys=25, upsert=True)
    query, table = Query(env, buckets), upsert_table((0,))
    assert query.normalize and query.upsert, "the plan has no normalize or materializer stage"
    for i, batch in enumerate(batches):
        written_table = {key: tuple(row) for key, row in table(query.batch(batch))["table"].items()}
        assert written_table == final_left_join(batches[:i + 1]), f"batch {i}"


@pytest.mark.parametrize("wire", [False, True], ids=["objects", "wire"])
def test_an_upsert_input_and_an_upsert_materializer_write_the_same_changes_in_buckets(wire):
    env = {**LEFT_PK, "LEFT_CHANGELOG_MODE": "upsert", "RIGHT_CHANGELOG_MODE": "upsert",
           "OUTPUT_MODE": "upsert", "OUTPUT_KEY": "order_id"}
    same_output(env, changelogs(5, batches=5, per_batch=300, keys=25, upsert=True),
                compare=lambda: upsert_table((0,)), wire=wire)


def windowed(seed: int) -> list[list]:
    rng = random.Random(seed)
    batches = []
    for b in range(6):
        batch = []
        for i in range(120):
            at = b * 10_000 + rng.randrange(-15_000, 10_000)  # some rows late for fired windows
            oid = rng.randrange(40)
            if rng.random() < 0.5:
                row = {"order_id": oid, "currency": "EUR", "amount": 1.0, "order_time": at}
                batch.append((0, KafkaRecord("orders", 0, b * 1000 + i, 1000, None, avro(TIMED_ORDERS, row), [])))
            else:
                row = {"ship_id": b * 1000 + i, "order_id": oid, "carrier": "ups", "ship_time": at}
                batch.append((1, KafkaRecord("shipments", 0, b * 1000 + i, 1000, None, avro(SHIPMENTS, row), [])))
        batches.append(batch)
    return batches


@pytest.mark.parametrize("wire", [False, True], ids=["objects", "wire"])
def test_window_join_timers_and_late_rows_are_the_same_in_buckets(wire):
    sql = ("SELECT o.order_id, o.window_start, s.ship_id FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(order_time), "
           "INTERVAL '10' SECOND)) o LEFT JOIN TABLE(TUMBLE(TABLE shipments, DESCRIPTOR(ship_time), "
           "INTERVAL '10' SECOND)) s ON o.order_id = s.order_id AND o.window_start = s.window_start "
           "AND o.window_end = s.window_end")
    same_output({**TIMED, "JOIN_SQL": sql}, windowed(6), buckets=4, watermark=lambda i: 5_000 + i * 10_000, wire=wire)


@pytest.mark.parametrize("wire", [False, True], ids=["objects", "wire"])
def test_an_event_time_temporal_join_is_the_same_in_buckets(wire):
    sql = ("SELECT o.order_id, s.carrier FROM orders o LEFT JOIN shipments FOR SYSTEM_TIME AS OF o.order_time AS s "
           "ON o.order_id = s.order_id")
    env = {**TIMED, "RIGHT_CHANGELOG_MODE": "retract", "RIGHT_PRIMARY_KEY": "order_id", "JOIN_SQL": sql}
    batches = [[(s, KafkaRecord(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value, [("rowkind", b"+I")]))
                for s, r in batch] for batch in windowed(7)]
    same_output(env, batches, buckets=4, watermark=lambda i: 5_000 + i * 10_000, wire=wire)


def test_a_replayed_batch_writes_the_same_rows_with_the_same_sequence_numbers():
    query = Query(LEFT_PK, 8)
    first, second = changelogs(8, batches=2, per_batch=300, keys=40)
    query.batch(first)
    replay = copy.deepcopy(query)
    rows = query.batch(second)
    assert rows and replay.batch(second) == rows


# -- the count is fixed once a checkpoint exists ------------------------------------------------------
import json as _json  # noqa: E402

from service import checkpoint  # noqa: E402
from service.checkpoint import CheckpointMismatch, reconcile  # noqa: E402
from service.plan import DEFAULT_STATE_BUCKETS  # noqa: E402


def bucket_plan(buckets: str | None):
    env = {**VALID, **LEFT_PK} if buckets is None else {**VALID, **LEFT_PK, "STATE_BUCKETS": buckets}
    return plan_for(load_settings(env)), buckets is not None


def test_a_new_checkpoint_takes_the_default_count_and_records_it(tmp_path):
    plan, explicit = bucket_plan(None)
    where = str(tmp_path / "cp")
    assert reconcile(plan, where, buckets_set=explicit).state_buckets == DEFAULT_STATE_BUCKETS > 0
    facts = _json.loads((tmp_path / "cp" / checkpoint.FILE_NAME).read_text())["facts"]
    assert facts["state_buckets"] == DEFAULT_STATE_BUCKETS


def test_unset_the_count_is_the_checkpoints_set_to_another_it_is_refused(tmp_path):
    where = str(tmp_path / "cp")
    reconcile(*bucket_plan("32")[:1], where, buckets_set=True)
    plan, explicit = bucket_plan(None)
    assert reconcile(plan, where, buckets_set=explicit).state_buckets == 32
    assert "STATE_BUCKETS=32" in checkpoint.describe(plan, where, explicit)
    plan, explicit = bucket_plan("256")
    with pytest.raises(CheckpointMismatch) as refused:
        reconcile(plan, where, buckets_set=explicit)
    assert "STATE_BUCKETS: the checkpoint keeps its state in 32 buckets (STATE_BUCKETS=32), not in 256" \
        in str(refused.value)
    assert "INCOMPATIBLE" in checkpoint.describe(plan, where, explicit)


def test_a_checkpoint_written_before_buckets_keeps_its_state_per_key(tmp_path):
    """Its facts have no count: its state is per key, and stays so, never read as buckets."""
    where = tmp_path / "cp"
    plan, explicit = bucket_plan("0")
    reconcile(plan, str(where), buckets_set=explicit)
    stored = _json.loads((where / checkpoint.FILE_NAME).read_text())
    del stored["facts"]["state_buckets"]
    (where / checkpoint.FILE_NAME).write_text(_json.dumps(stored))
    plan, explicit = bucket_plan(None)
    assert reconcile(plan, str(where), buckets_set=explicit).state_buckets == 0
    with pytest.raises(CheckpointMismatch, match="keeps its state per key"):
        reconcile(*bucket_plan("1024")[:1], str(where), buckets_set=True)


def test_a_checkpoint_with_state_and_no_facts_file_is_taken_as_per_key(tmp_path):
    (tmp_path / "cp" / "commits").mkdir(parents=True)
    (tmp_path / "cp" / "commits" / "0").write_text("v1")
    plan, explicit = bucket_plan(None)
    assert reconcile(plan, str(tmp_path / "cp"), buckets_set=explicit).state_buckets == 0


def test_a_keyed_debezium_versioned_table_timed_by_source_ts_ms_ends_a_version_at_its_delete():
    """source.ts_ms as both inputs' event time (debezium-json): the normalize stage dates the -D
    it derives from a delete (whose image holds only the key) by the delete's source.ts_ms, so the
    version ends there, not at the deleted row's own time; the same in both layouts."""
    import json as _json

    from tests.support.service_env import DATA

    env = {"LEFT_SCHEMA_FILE": str(DATA / "orders_timed.avsc"), "RIGHT_SCHEMA_FILE": str(DATA / "rates.avsc"),
           "RIGHT_TABLE": "rates", "LEFT_PRIMARY_KEY": None, "RIGHT_PRIMARY_KEY": "currency",
           "LEFT_FORMAT": "debezium-json", "RIGHT_FORMAT": "debezium-json",
           "LEFT_EVENT_TIME_COLUMN": "source.ts_ms", "RIGHT_EVENT_TIME_COLUMN": "source.ts_ms",
           "JOIN_SQL": 'SELECT o.order_id, r.rate FROM orders o JOIN rates FOR SYSTEM_TIME AS OF o."source.ts_ms" '
                       'AS r ON o.currency = r.currency'}
    # (op, currency, rate, source.ts_ms); the delete's before image holds the key only (REPLICA IDENTITY DEFAULT)
    versions = [("c", "USD", 1.1, 1_000), ("c", "GBP", 0.8, 1_500), ("u", "USD", 1.2, 3_000), ("d", "GBP", None, 4_000)]
    orders = [(1, "USD", 999), (2, "USD", 2_000), (3, "GBP", 3_999), (4, "GBP", 4_000), (5, "USD", 3_500)]

    def record(side, offset, envelope):
        return side, KafkaRecord(("orders", "rates")[side], 0, offset, 0, None, _json.dumps(envelope).encode(), [])

    records = [record(1, i, {"op": op, "before": {"currency": cur, "rate": None, "rate_time": None} if op == "d" else None,
                             "after": None if op == "d" else {"currency": cur, "rate": rate, "rate_time": 0},
                             "source": {"ts_ms": ts}}) for i, (op, cur, rate, ts) in enumerate(versions)]
    records += [record(0, i, {"op": "c", "after": {"order_id": oid, "currency": cur, "amount": 1.0, "order_time": 0},
                              "source": {"ts_ms": ts}}) for i, (oid, cur, ts) in enumerate(orders)]

    def rate_at(currency, at):
        current = None
        for op, cur, rate, ts in versions:
            if cur == currency and ts <= at:
                current = None if op == "d" else rate
        return current

    expected = Counter(("change", 0, (oid, rate_at(cur, ts))) for oid, cur, ts in orders if rate_at(cur, ts) is not None)
    expected.update({("records read", 0): len(orders), ("records read", 1): len(versions)})
    assert expected[("change", 0, (3, 0.8))] == 1  # GBP's version holds until its delete at 4000
    for buckets in (0, 16):
        query = Query(env, buckets)
        out = written(query.batch(records)) + written(query.batch([], watermark=10_000))
        assert out == expected, buckets
