"""Late rows of a window join become dead letters with their original Kafka record.

No Spark session and no broker: records are decoded by the real decoder, joined by the real
JoinProcessor on a fake state handle, and the letters rendered as the sink writes them."""
import pickle

from service import deadletters
from service.catalog import plan_for
from service.config import load_settings
from service.decode import InputDecoder
from service.envelope import EVENT_TIME, PAYLOAD, Target, unpack
from service.processor import JoinProcessor
from service.source import KafkaRecord
from tests.support.service_harness import SHIPMENTS, TIMED_ORDERS, avro
from tests.support.spark_fakes import FakeHandle, FakeTimerValues
from tests.support.service_env import TIMED, VALID


def window_plan(function="TUMBLE(TABLE {t}, DESCRIPTOR({c}), INTERVAL '10' SECOND)", join="LEFT JOIN"):
    left, right = function.format(t="orders", c="order_time"), function.format(t="shipments", c="ship_time")
    sql = (f"SELECT o.order_id, o.window_start, s.ship_id FROM TABLE({left}) o {join} TABLE({right}) s "
           "ON o.order_id = s.order_id AND o.window_start = s.window_start AND o.window_end = s.window_end")
    return plan_for(load_settings({**VALID, **TIMED, "STATE_BUCKETS": "0", "JOIN_SQL": sql}))


class _Expired:
    def __init__(self, ts):
        self.ts = ts

    def getExpiryTimeInMs(self):
        return self.ts


def expire(join, handle, ts, watermark):
    """Spark's expiry of an event-time timer: it is removed, then handed to the processor."""
    handle.timers.discard(ts)
    return join.handleExpiredTimer((b"1",), FakeTimerValues(1_000_000, watermark), _Expired(ts))


def envelopes(plan, side, rows, first_offset):
    decoder = InputDecoder(plan, side, "rowkind", None)
    schema, topic = (TIMED_ORDERS, "orders") if side == 0 else (SHIPMENTS, "shipments")
    out = []
    for i, row in enumerate(rows):
        out += decoder.map(KafkaRecord(topic, 0, first_offset + i, 5_000 + i, b"k%d" % i, avro(schema, row),
                                       [("rowkind", b"+I"), ("trace", b"t%d" % i)]))
    return out


def order(order_id, at):
    return {"order_id": order_id, "currency": "EUR", "amount": 1.0, "order_time": at}


def shipment(ship_id, order_id, at):
    return {"ship_id": ship_id, "order_id": order_id, "carrier": "ups", "ship_time": at}


def output_of(rows):
    changes, letters = [], []
    for r in rows:
        if r.target == Target.PACKED:
            changes += list(unpack(r.payload))
        elif r.target == Target.DEAD_LETTER:
            letters.append(pickle.loads(r.payload))
    return changes, letters


def test_both_inputs_carry_their_original_record_and_an_event_time():
    plan = window_plan()
    for side, row in ((0, order(1, 12_000)), (1, shipment(7, 1, 15_000))):
        (env,) = envelopes(plan, side, [row], 40)
        payload, original = pickle.loads(env[PAYLOAD])
        assert original["offset"] == 40 and original["key"] == b"k0" and ("trace", b"t0") in original["headers"]
        assert env[EVENT_TIME] is not None


def test_a_window_join_fires_on_the_watermark_and_dead_letters_rows_of_either_side_for_fired_windows():
    plan = window_plan()
    join = JoinProcessor(plan.to_json())
    handle = FakeHandle()
    join.init(handle)
    first = envelopes(plan, 0, [order(1, 12_000)], 0) + envelopes(plan, 1, [shipment(7, 1, 15_000)], 0)
    assert output_of(join.handleInputRows((b"1",), iter(first), FakeTimerValues(1_000_000, -1))) == ([], [])
    assert handle.timers == {19_999}  # the window [10 s, 20 s) fires when the watermark reaches 19 999
    changes, _ = output_of(expire(join, handle, 19_999, 25_000))
    assert changes == [(0, (1, 10_000, 7))]
    assert handle.states["join"].value is None  # a fired window leaves no state
    # Now rows for that window are late, on either side; a row for a later window is not.
    late = envelopes(plan, 0, [order(2, 18_000)], 1) + envelopes(plan, 1, [shipment(8, 1, 11_000)], 1) \
        + envelopes(plan, 0, [order(3, 26_000)], 2)
    changes, letters = output_of(join.handleInputRows((b"1",), iter(late), FakeTimerValues(1_000_000, 25_000)))
    assert changes == []
    assert [(letter["reason"], letter["original"]["topic"], letter["original"]["offset"]) for letter in letters] == [
        ("late", "orders", 1), ("late", "shipments", 1)]
    key, value, headers = deadletters.render(letters[1])
    assert key == b"k0" and value == avro(SHIPMENTS, shipment(8, 1, 11_000))
    headers = dict(headers)
    assert headers["trace"] == b"t0" and headers["reason"] == b"late"
    assert headers["source.topic"] == b"shipments" and headers["source.offset"] == b"1"
    assert b"1 window(s) that had already fired" in headers["reason.detail"]
    assert handle.timers == {29_999}  # order 3 waits for its own window


def test_a_hop_row_late_for_several_windows_is_one_dead_letter():
    plan = window_plan("HOP(TABLE {t}, DESCRIPTOR({c}), INTERVAL '5' SECOND, INTERVAL '15' SECOND)",
                       join="JOIN")
    join = JoinProcessor(plan.to_json())
    handle = FakeHandle()
    join.init(handle)
    # At watermark 20 000 the windows ending at 15 s and 20 s have fired; a row at 12 s belongs to
    # [0, 15), [5, 20) and [10, 25): late for two of them, still joined in the third.
    rows = envelopes(plan, 0, [order(1, 12_000)], 0)
    changes, letters = output_of(join.handleInputRows((b"1",), iter(rows), FakeTimerValues(1_000_000, 20_000)))
    assert changes == [] and len(letters) == 1
    assert "2 window(s)" in letters[0]["detail"] and letters[0]["original"]["offset"] == 0
    rows = envelopes(plan, 1, [shipment(7, 1, 14_000)], 0)
    changes, letters = output_of(join.handleInputRows((b"1",), iter(rows), FakeTimerValues(1_000_000, 20_000)))
    assert len(letters) == 1
    assert handle.timers == {24_999}
    changes, _ = output_of(expire(join, handle, 24_999, 30_000))
    assert changes == [(0, (1, 10_000, 7))]
