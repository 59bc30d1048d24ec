"""Spark's side of a StatefulProcessor, faked for tests that drive the service's processors
without Spark: a handle with value and map states and timers, and the timer values of a call."""
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


class FakeMapState:
    """A MapState of one grouping key: (key,) -> (value,) tuples, iterated in key order as
    RocksDB iterates them."""

    def __init__(self):
        self.entries: dict[tuple, tuple] = {}

    def getValue(self, key):
        return self.entries.get(key)

    def updateValue(self, key, value):
        self.entries[key] = value

    def removeKey(self, key):
        self.entries.pop(key, None)

    def iterator(self):
        return iter(sorted(self.entries.items()))

    def clear(self):
        self.entries.clear()


class FakeHandle:
    """One grouping key's value and map states (by name) and registered timers."""

    def __init__(self):
        self.states: dict[str, FakeValueState] = {}
        self.maps: dict[str, FakeMapState] = {}
        self.timers: set[int] = set()

    def getValueState(self, name, schema):
        return self.states.setdefault(name, FakeValueState())

    def getMapState(self, name, key_schema, value_schema):
        return self.maps.setdefault(name, FakeMapState())

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
