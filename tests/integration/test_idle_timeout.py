"""IDLE_TIMEOUT: an idle input of an event-time temporal join stops holding the watermark back.

The source's heartbeat planning is unit-tested in test_kafka_source.py; here: the heartbeat
envelope, that the join and normalize stages pass it by, and the service end to end."""
import time
from collections import Counter

import pytest

from service import catalog
from service.config import load_settings
from service.decode import InputDecoder
from service.envelope import HEARTBEAT_GROUP, Tag
from tests.support.spark_fakes import FakeTimerValues
from tests.support.service_harness import TEMPORAL, JoinHarness, rate, timed_order

def now_ms() -> int:
    return int(time.time() * 1000)


# --------------------------------------------------------------------------------------------
# The heartbeat envelope and the stages it passes through (no Spark, no Kafka)
# --------------------------------------------------------------------------------------------


def plan_for(**env):
    return catalog.plan_for(load_settings({
        "KAFKA_BOOTSTRAP_SERVERS": "unused:9092", "LEFT_TOPIC": "orders", "RIGHT_TOPIC": "rates",
        "OUTPUT_TOPIC": "out", **TEMPORAL, **env,
    }))


class _Untouchable:
    """A state handle whose state may be opened but not used."""

    def getValueState(self, name, schema):
        return self

    def getMapState(self, name, key_schema, value_schema):
        return self

    def __getattr__(self, name):
        raise AssertionError(f"state used: {name}")


def getCurrentWatermarkInMs(self):
        return 1_000


def test_a_heartbeat_is_one_envelope_that_the_join_and_normalize_stages_pass_by():
    import datetime as dt
    import pickle

    from service.processor import JoinProcessor, NormalizeProcessor

    plan = plan_for()
    beats = list(InputDecoder(plan, 1, "rowkind", None).heartbeat(1_700_000_000_123))
    assert beats == [(
        HEARTBEAT_GROUP, Tag.HEARTBEAT, 0, pickle.dumps(None, protocol=5),
        dt.datetime(2023, 11, 14, 22, 13, 20, 123_000, tzinfo=dt.timezone.utc), 1_700_000_000_123, -1, -1,
    )]
    # Both inputs' heartbeats share one grouping key; the join keeps no state for it and emits nothing.
    both = beats + list(InputDecoder(plan, 0, "rowkind", None).heartbeat(1_700_000_000_456))
    join = JoinProcessor(plan.to_json())
    join.init(_Untouchable())
    assert list(join.handleInputRows((HEARTBEAT_GROUP,), iter(both), FakeTimerValues(5_000, 1_000))) == []
    # An upsert input's normalize stage hands it on unchanged (the watermark is taken after it).
    normalize = NormalizeProcessor(plan_for(RIGHT_CHANGELOG_MODE="upsert").to_json(), 1)
    normalize.init(_Untouchable())
    assert list(normalize.handleInputRows((HEARTBEAT_GROUP,), iter(beats), FakeTimerValues(5_000, 1_000))) == beats


# --------------------------------------------------------------------------------------------
# End to end
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_an_idle_versioned_table_holds_probe_rows_until_the_idle_timeout_lets_the_watermark_go(
    kafka_bootstrap, spark, tmp_path, new_topic
):
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, **TEMPORAL, TRIGGER_INTERVAL="200ms")
    start = h.start

    # The rates topic gets one version, a minute old, and then nothing; orders keep arriving with
    # event times near now.
    start_ms = now_ms()
    h.send_rates([("+I", rate("USD", 1.1, start_ms - 60_000))])
    h.send_orders([("+I", timed_order(1, "USD", 10, start_ms - 2_000)), ("+I", timed_order(2, "USD", 20, now_ms()))])

    # Without IDLE_TIMEOUT the rates' watermark stays at their version's time: the orders wait,
    # however long the service runs.
    service = start()
    try:
        service.process_available()
        time.sleep(2.5)
        service.process_available()
    finally:
        service.stop()
    assert h.retract_table() == Counter()

    # With IDLE_TIMEOUT=1s the idle inputs send heartbeats and the waiting orders are joined.
    h.send_orders([("+I", timed_order(3, "USD", 30, now_ms()))])
    expected = Counter({(1, "USD", 10.0, 1.1): 1, (2, "USD", 20.0, 1.1): 1, (3, "USD", 30.0, 1.1): 1})
    # (The service runs on while the test watches the output: an idle query now runs a heartbeat
    # micro-batch every second or so, which processAllAvailable would keep waiting for.)
    service = start(IDLE_TIMEOUT="1s")
    try:
        deadline = time.monotonic() + 180
        while True:
            time.sleep(1.0)
            table = h.retract_table()
            if table == expected or time.monotonic() > deadline or not service.query.isActive:
                break
    finally:
        service.stop()
    assert service.query.exception() is None
    assert table == expected
    assert h.dead_letters() == []  # nothing late, and no heartbeat ever reaches a topic
