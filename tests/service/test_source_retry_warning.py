"""The source's warning while its brokers do not answer: once a minute, on a clock of the test's.

The end-to-end check (tests/integration/test_contact.py, an outage of a running service) shows the
warning in the service's log, /readyz failing and the outage ridden out; it lasts until the first
warning, which a broker outage of a minute and more would need to show the rate. The rate is proven
here, over ten minutes of retries; and that each attempt waits as long as the client's
``socket.timeout.ms`` says (30 s unless set), which the end-to-end check sets lower.
"""
from __future__ import annotations

import logging
import types

from confluent_kafka import KafkaError, KafkaException

from service import source


class Clock:
    """``time`` for service.source: ``sleep`` moves the clock instead of waiting."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_source_whose_brokers_do_not_answer_warns_once_a_minute_until_they_do(monkeypatch, caplog):
    clock = Clock()
    monkeypatch.setattr(source, "time", types.SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    admins = []
    monkeypatch.setattr(source._OffsetsClient, "_new_admin",
                        lambda self: admins.append(types.SimpleNamespace(poll=lambda timeout: 0)) or admins[-1])
    client = source._OffsetsClient(source.SourceOptions({"bootstrap.servers": "b:9092", "topic": "orders",
                                                         "offsetsTimeoutSeconds": "900"}))
    started, attempts = clock.now, []

    def describe():
        clock.now += 7.0  # each attempt takes a while to fail
        attempts.append(clock.now - started)
        if clock.now - started < 600:  # ten minutes away
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for controller"))
        return [0, 1]

    with caplog.at_level(logging.WARNING, logger="service.source"):
        assert client._retrying("describing partitions", describe) == [0, 1]
    warned = [r for r in caplog.records if r.name == "service.source"]
    assert len(attempts) > 50  # retried every few seconds, each time with a fresh client
    assert len(admins) == len(attempts)
    # the first failure is said at once, then one line a minute: at 7 s, then about every 60 s
    assert 10 <= len(warned) <= 11, [r.getMessage() for r in warned]
    said_at = [float(r.getMessage().split("for ")[1].split(" s")[0]) for r in warned]
    assert said_at[0] == 7.0
    assert all(60 <= b - a < 60 + 12 for a, b in zip(said_at, said_at[1:])), said_at
    assert warned[0].getMessage() == ("topic orders: describing partitions failed, retrying (for 7 s so far, up to "
                                      "900 s): Failed while waiting for controller")


def test_each_attempt_waits_as_long_as_the_clients_socket_timeout_30_s_unless_set(monkeypatch):
    asked = []

    class Admin:
        def poll(self, timeout):
            return 0

        def describe_topics(self, topics, request_timeout):
            asked.append(("describe", request_timeout))
            found = types.SimpleNamespace(topic_id=None, partitions=[types.SimpleNamespace(id=1), types.SimpleNamespace(id=0)])
            return {"orders": types.SimpleNamespace(result=lambda: found)}

        def list_offsets(self, specs, isolation_level, request_timeout):
            asked.append(("offsets", request_timeout))
            return {tp: types.SimpleNamespace(result=lambda: types.SimpleNamespace(offset=5)) for tp in specs}

    monkeypatch.setattr(source._OffsetsClient, "_new_admin", lambda self: Admin())
    for props, timeout in (({}, 30.0), ({"kafka.socket.timeout.ms": "4500"}, 4.5)):
        asked.clear()
        client = source._OffsetsClient(source.SourceOptions({"bootstrap.servers": "b:9092", "topic": "orders", **props}))
        assert client.latest() == {0: 5, 1: 5}
        assert asked == [("describe", timeout), ("offsets", timeout)]
