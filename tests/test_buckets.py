"""Join keys in buckets (service/buckets.py): what a bucket stores, and what it costs in state calls."""
from __future__ import annotations

import pytest

from service.buckets import BucketState, KeyCodec
from tests.spark_fakes import FakeHandle, FakeMapState, FakeValueState


class Counting:
    """Counts the calls made to a fake state (each is one round trip to the JVM in Spark)."""

    def __init__(self, inner, calls: list):
        self._inner, self._calls = inner, calls

    def __getattr__(self, name):
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args):
            self._calls.append(name)
            return attr(*args)

        return call


class Bucket:
    """One bucket's fake Spark state, opened anew for each call as a processor does."""

    def __init__(self, small: int = 4096, budget: int = 64 * 1024, codec: KeyCodec | None = None):
        self.value, self.keys, self.left = FakeValueState(), FakeMapState(), FakeMapState()
        self.handle = FakeHandle()
        self.small, self.budget, self.codec = small, budget, codec or KeyCodec()
        self.calls: list[str] = []

    def open(self, domain: str | None = "proc") -> BucketState:
        self.calls.clear()
        c = self.calls
        return BucketState(Counting(self.value, c), Counting(self.keys, c), {"left": Counting(self.left, c)},
                           Counting(self.handle, c), domain, self.codec, self.small, self.budget)


def test_values_of_many_keys_cost_one_read_and_one_write_of_the_bucket():
    b = Bucket()
    state = b.open()
    for i in range(50):
        state.key(b"k%d" % i).put(("row", i))
    state.flush()
    assert b.calls == ["get", "update"]
    state = b.open()
    assert [state.key(b"k%d" % i).get() for i in range(50)] == [("row", i) for i in range(50)]
    assert state.key(b"absent").get() is None
    state.flush()
    assert b.calls == ["get"]  # nothing changed, nothing written


def test_a_large_value_is_a_map_entry_of_its_own_and_stays_one_until_cleared():
    b = Bucket(small=100)
    state = b.open()
    state.key(b"big").put("x" * 200)
    state.key(b"small").put("y")
    state.flush()
    assert sorted(k for (k,) in b.keys.entries) == [b"big"]
    state = b.open()
    state.key(b"big").put("x")  # shrunk: still a map entry, so the bucket value is not rewritten
    state.flush()
    assert b.calls == ["get", "updateValue"]
    state = b.open()
    assert state.key(b"big").get() == "x" and state.key(b"small").get() == "y"
    state.key(b"big").clear()
    state.flush()
    assert b.keys.entries == {}
    state = b.open()
    state.key(b"small").clear()
    state.flush()
    assert b.value.value is None, "an empty bucket holds no value"


def test_beyond_the_bucket_budget_the_largest_small_values_leave_first():
    b = Bucket(small=1000, budget=1000)
    state = b.open()
    for name, size in ((b"a", 300), (b"b", 500), (b"c", 400), (b"d", 100)):
        state.key(name).put("x" * size)
    state.flush()
    assert sorted(k for (k,) in b.keys.entries) == [b"b"]
    state = b.open()
    assert [len(state.key(k).get()) for k in (b"a", b"b", b"c", b"d")] == [300, 500, 400, 100]


def test_one_spark_timer_per_bucket_at_its_keys_earliest():
    b = Bucket()
    state = b.open()
    state.key(b"a").register_timer("proc", 300)
    state.key(b"b").register_timer("proc", 200)
    state.key(b"b").register_timer("proc", 500)
    state.key(b"c").register_timer("event", 100)  # another domain than the processor's: ignored
    state.flush()
    assert b.handle.timers == {200}
    state = b.open()
    assert state.due(300) == [(200, b"b"), (300, b"a")]
    state.key(b"b").delete_timer("proc", 200)
    state.flush()
    assert b.handle.timers == {300}
    assert b.calls == ["get", "deleteTimer", "registerTimer", "update"]


def test_a_fired_bucket_timer_is_not_deleted_again_and_the_next_one_is_registered():
    b = Bucket()
    state = b.open()
    state.key(b"a").register_timer("proc", 100)
    state.key(b"a").register_timer("proc", 900)
    state.flush()
    state = b.open()
    state.timer_fired(100)
    b.handle.timers.discard(100)  # Spark deletes a timer it fired after the call
    for ts, jk in state.due(100):
        state.delete_timer(jk, ts)
    state.flush()
    assert b.handle.timers == {900}
    assert "deleteTimer" not in b.calls


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


def test_the_same_changes_write_the_same_bytes():
    def run():
        b = Bucket(small=50, budget=120)
        state = b.open()
        for i in (5, 3, 9, 1, 7):
            state.key(b"k%d" % i).put("v" * (i * 10))
            state.key(b"k%d" % i).register_timer("proc", 1000 - i)
        state.flush()
        return b.value.value, sorted(b.keys.entries.items()), b.handle.timers

    assert run() == run()
