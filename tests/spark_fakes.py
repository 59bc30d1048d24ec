"""Spark's side of a StatefulProcessor, faked for tests that drive the service's processors
without Spark: a handle with value states and timers, and the timer values of a call."""
from __future__ import annotations


class FakeValueState:
    def __init__(self):
        self.value = None

    def exists(self):
        return self.value is not None

    def get(self):
        return self.value

    def update(self, value):
        self.value = value

    def clear(self):
        self.value = None


class FakeHandle:
    """One grouping key's value states (by name) and registered timers."""

    def __init__(self):
        self.states: dict[str, FakeValueState] = {}
        self.timers: set[int] = set()

    def getValueState(self, name, schema):
        return self.states.setdefault(name, FakeValueState())

    def registerTimer(self, ts):
        self.timers.add(ts)

    def deleteTimer(self, ts):
        self.timers.discard(ts)


class FakeTimerValues:
    """The clock and the watermark a call sees (-1: none yet, as Spark says)."""

    def __init__(self, now: int = 5_000, watermark: int = -1):
        self.now, self.watermark = now, watermark

    def getCurrentProcessingTimeInMs(self):
        return self.now

    def getCurrentWatermarkInMs(self):
        return self.watermark
