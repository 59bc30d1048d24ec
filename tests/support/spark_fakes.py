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


class ExpiredTimer:
    def __init__(self, ts: int):
        self.ts = ts

    def getExpiryTimeInMs(self):
        return self.ts


class KeyedHandle:
    """Spark's side of one task of a ``transformWithState``: state variables and timers of every
    grouping key, each call seeing the state of the key Spark set (its *implicit key*)."""

    def __init__(self):
        self.key = None
        self.values: dict[tuple, object] = {}  # (name, grouping key) -> value
        self.maps: dict[tuple, dict] = {}  # (name, grouping key) -> {(key,): (value,)}
        self.timers: set[tuple[int, object]] = set()  # (ts, grouping key)
        self.calls = 0  # state calls and timer registrations: each a round trip to the JVM in Spark

    def getValueState(self, name, schema):
        return _KeyedValue(self, name)

    def getMapState(self, name, key_schema, value_schema):
        return _KeyedMap(self, name)

    def registerTimer(self, ts):
        self.calls += 1
        self.timers.add((ts, self.key))

    def deleteTimer(self, ts):
        self.calls += 1
        self.timers.discard((ts, self.key))

    def rows(self) -> int:
        """State rows, as Spark's numRowsTotal counts them."""
        return len(self.values) + sum(len(m) for m in self.maps.values())

    def run(self, processor, rows, group, now: int = 5_000, watermark: int = -1, until: int | None = None) -> list:
        """One micro-batch of ``processor``: ``rows`` grouped by ``group(row)`` and handed over per
        grouping key in key order, then the timers due by ``until`` in time order, as Spark does."""
        groups: dict = {}
        for row in rows:
            groups.setdefault(group(row), []).append(row)
        out = []
        for key in sorted(groups):
            self.key = key
            self.calls += 1  # PySpark sets the implicit key
            out += list(processor.handleInputRows((key,), iter(groups[key]), FakeTimerValues(now, watermark)))
        if until is not None:
            for ts, key in sorted(t for t in self.timers if t[0] <= until):
                self.key = key
                self.calls += 1
                out += list(processor.handleExpiredTimer(key=(key,), timerValues=FakeTimerValues(now, watermark),
                                                         expiredTimerInfo=ExpiredTimer(ts)))
                self.timers.discard((ts, key))
        return out


class _KeyedValue:
    def __init__(self, handle: KeyedHandle, name: str):
        self._handle, self._name = handle, name

    def get(self):
        self._handle.calls += 1
        return self._handle.values.get((self._name, self._handle.key))

    def update(self, value):
        self._handle.calls += 1
        self._handle.values[(self._name, self._handle.key)] = value

    def clear(self):
        self._handle.calls += 1
        self._handle.values.pop((self._name, self._handle.key), None)


class _KeyedMap:
    def __init__(self, handle: KeyedHandle, name: str):
        self._handle, self._name = handle, name

    def _entries(self) -> dict:
        return self._handle.maps.setdefault((self._name, self._handle.key), {})

    def getValue(self, key):
        self._handle.calls += 1
        return self._entries().get(key)

    def updateValue(self, key, value):
        self._handle.calls += 1
        self._entries()[key] = value

    def removeKey(self, key):
        self._handle.calls += 1
        entries = self._entries()
        entries.pop(key, None)
        if not entries:
            del self._handle.maps[(self._name, self._handle.key)]

    def iterator(self):
        self._handle.calls += 1
        return iter(sorted(self._entries().items()))

    def clear(self):
        self._handle.calls += 1
        self._handle.maps.pop((self._name, self._handle.key), None)
