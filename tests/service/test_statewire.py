"""State calls batched on PySpark's state socket (service/statewire.py), against a fake of Spark's
state server that answers as the JVM's does (tests/support/state_server.py): what is read and
written, in what order, and how many round trips it costs."""
from __future__ import annotations

import pytest
from pyspark.sql.streaming.map_state_client import MapStateClient
from pyspark.sql.streaming.value_state_client import ValueStateClient
from pyspark.sql.types import BinaryType, StructField, StructType

from service import sparkstate
from service.sparkstate import BucketState, KeyCodec, WireCalls
from service.statewire import StateError, StateWire
from tests.support.state_server import StateServer, client

VALUE = StructType([StructField("v", BinaryType(), True)])
KEY = StructType([StructField("k", BinaryType(), True)])


@pytest.fixture
def server():
    server = StateServer()
    yield server
    server.close()


@pytest.fixture
def api(server):
    api = client(server)
    yield api
    api._client_socket.close()


def wire_of(api) -> StateWire:
    wire = StateWire(api)
    wire.install()
    return wire


def test_reads_and_writes_of_a_grouping_key_cost_one_round_trip(server, api):
    wire = wire_of(api)
    api.set_implicit_key((b"bucket-1",))  # sent, not waited for
    wire.write(("v", "bucket", b"value"))
    wire.write(("m", "keys", b"a", b"1"))
    wire.write(("m", "keys", b"b", b"2"))
    wire.write(("t", 1_000, True))
    assert api.sockfile.count == 0
    assert wire.read([("v", "bucket"), ("m", "keys", b"a"), ("m", "keys", b"b"), ("m", "keys", b"c")]) \
        == [b"value", b"1", b"2", None]
    assert api.sockfile.count == 1
    wire.write(("m", "keys", b"a", None))
    wire.write(("v", "bucket", None))
    api.set_implicit_key((b"bucket-2",))
    assert wire.read([("v", "bucket")]) == [None] and api.sockfile.count == 2
    assert server.value("bucket", b"bucket-1") is None and (1_000, b"bucket-1") in server.timers
    assert server.maps[("keys", b"bucket-1")] == {b"b": server.maps[("keys", b"bucket-1")][b"b"]}


def test_pysparks_own_calls_see_the_writes_queued_before_them_and_get_their_own_answers(server, api):
    wire = wire_of(api)
    api.set_implicit_key((b"g",))
    wire.write(("v", "bucket", b"queued"))
    wire.write(("m", "keys", b"k", b"v"))
    # PySpark's clients, as an operator's per-key state or a map iterator uses them
    assert ValueStateClient(api, VALUE).get("bucket") == (b"queued",)
    wire.write(("m", "keys", b"k2", b"v2"))
    assert list(MapStateClient(api, KEY, VALUE).get_key_value_pair("keys", "it")[:2]) == [(b"k",), (b"v",)]
    api.register_timer(7)
    assert wire.read([("m", "keys", b"k2")]) == [b"v2"] and (7, b"g") in server.timers


def test_a_refused_call_is_raised_by_the_next_read_naming_it(server, api):
    wire = wire_of(api)
    wire.write(("v", "bucket", b"x"))  # no implicit key set: Spark's server refuses it
    with pytest.raises(StateError, match="refused to write bucket: no implicit key"):
        wire.read([("v", "bucket")])


def test_many_reads_and_large_values_go_in_windows_without_blocking_either_side(server, api):
    wire = wire_of(api)
    api.set_implicit_key((b"g",))
    big = bytes(range(256)) * 8_192  # 2 MiB
    keys = [b"key%05d" % i for i in range(5_000)]
    for key in keys:
        wire.write(("m", "keys", key, key * 50))
    wire.write(("v", "bucket", big))
    answers = wire.read([("v", "bucket"), *(("m", "keys", key) for key in keys)])
    assert answers[0] == big and answers[1:] == [key * 50 for key in keys]
    # the writes answered every MAX_SENT_BYTES, then the reads in windows of MAX_OWED
    assert api.sockfile.count <= 80  # against 10,001 one by one


def test_one_wire_per_task_whatever_the_stages_state_variables(server, api):
    from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

    handle = StatefulProcessorHandle(api)
    one = sparkstate.state_calls(handle, {}, {})
    two = sparkstate.state_calls(handle, {}, {})
    assert isinstance(one, WireCalls) and one.read.__self__ is two.read.__self__


def test_a_bucket_costs_one_round_trip_however_many_keys_it_touches(server, api):
    """Set the implicit key, read the bucket value and its touched keys, write them back: one
    round trip per bucket, its read (the writes are sent with the next bucket's)."""
    calls = sparkstate.state_calls(__import__("pyspark").sql.streaming.stateful_processor.StatefulProcessorHandle(api),
                                   {}, {})
    for bucket in range(8):
        api.set_implicit_key((b"bucket-%d" % bucket,))
        state = BucketState(calls, {}, "proc", KeyCodec(), hint=("test", bucket), cleanup_grain=1_000)
        keys = [b"k%d-%d" % (bucket, i) for i in range(200)]
        state.read_ahead(keys)
        for i, key in enumerate(keys):
            state.key(key).put(("row", bucket, i))
            state.key(key).register_timer("proc", 60_000 + i)
        state.flush()
    assert api.sockfile.count == 8
    api.set_implicit_key((b"bucket-3",))
    state = BucketState(calls, {}, "proc", KeyCodec(), hint=("test", 3), cleanup_grain=1_000)
    assert state.value(b"k3-7") == ("row", 3, 7)
    assert {ts for ts, key in server.timers} == {60_000, 61_000}
