"""The operators' state protocol over Spark's state variables."""
from __future__ import annotations

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.types import BinaryType, StructField, StructType

from operators.stateformat import map_key

from .envelope import dumps, loads

_STATE_SCHEMA = StructType([StructField("v", BinaryType(), True)])
_MAP_KEY_SCHEMA = StructType([StructField("k", BinaryType(), True)])

_GENERATION = 0x01  # first byte of a value stored in a state generation > 0 (pickle's own is 0x80)


class SparkKeyMap:
    """The operators' ``KeyMap`` over a Spark ``MapState``: keys stored as ``map_key`` bytes
    (``operators/stateformat.py``), values as their pickle. A map's entries are always in the
    generation of the key's value: an operator that upgrades a value rewrites its maps' entries
    in the same call (``operators/splitside.py``)."""

    __slots__ = ("_state",)

    def __init__(self, map_state):
        self._state = map_state

    def get(self, key):
        value = self._state.getValue((map_key(key),))
        return None if value is None else loads(value[0])

    def put(self, key, value) -> None:
        self._state.updateValue((map_key(key),), (dumps(value),))

    def remove(self, key) -> None:
        self._state.removeKey((map_key(key),))

    def items(self):
        for key, value in self._state.iterator():
            yield loads(key[0]), loads(value[0])

    def clear(self) -> None:
        self._state.clear()


class SparkKeyState:
    """The operators' ``KeyState`` over one Spark ``ValueState``, the key's timers, and the maps
    the operator declares (``maps``: name -> ``MapState``).

    A value is stored as its pickle, prefixed with ``0x01`` and two bytes of the state generation
    it was written in when that is not 0 (``checkpoint.py``): a value of an older generation is
    upgraded by ``upgrade(value, generation)`` when it is read, and stored in the current one when
    it is written back."""

    __slots__ = ("_value", "_handle", "_domain", "_generation", "_prefix", "_upgrade", "_maps")

    def __init__(self, value_state, handle: StatefulProcessorHandle, timer_domain: str | None,
                 generation: int = 0, upgrade=None, maps: dict | None = None):
        self._maps = {name: SparkKeyMap(state) for name, state in (maps or {}).items()}
        self._value = value_state
        self._handle = handle
        self._domain = timer_domain
        self._generation = generation
        self._prefix = bytes([_GENERATION]) + generation.to_bytes(2, "big") if generation else b""
        self._upgrade = upgrade

    def get(self):
        value = self._value.get()  # None when the key has no state: one call to the JVM, not two
        if value is None:
            return None
        data = value[0]
        if data[0] != _GENERATION:
            generation, value = 0, loads(data)
        else:
            generation, value = int.from_bytes(data[1:3], "big"), loads(data[3:])
        if generation != self._generation:
            value = self._upgrade(value, generation)
        return value

    def put(self, value) -> None:
        self._value.update((self._prefix + dumps(value),))

    def clear(self) -> None:
        self._value.clear()

    def map(self, name: str) -> SparkKeyMap | None:
        return self._maps.get(name)

    def register_timer(self, domain: str, ts: int) -> None:
        if domain == self._domain:
            self._handle.registerTimer(int(ts))

    def delete_timer(self, domain: str, ts: int) -> None:
        if domain == self._domain:
            self._handle.deleteTimer(int(ts))


class _Pending:
    """A KeyState that reads the underlying state at most once and keeps every change (value,
    maps and timers) until :meth:`flush`: a call that fails leaves the key's state as it was."""

    __slots__ = ("_state", "_value", "_loaded", "_dirty", "_timers", "_maps")

    def __init__(self, state):
        self._state, self._value, self._loaded, self._dirty, self._timers = state, None, False, False, []
        self._maps: dict = {}

    def map(self, name: str):
        pending = self._maps.get(name)
        if pending is None:
            store = self._state.map(name)
            if store is None:
                return None
            pending = self._maps[name] = _PendingMap(store)
        return pending

    def get(self):
        if not self._loaded:
            self._value, self._loaded = self._state.get(), True
        return self._value

    def put(self, value) -> None:
        self._value, self._loaded, self._dirty = value, True, True

    def clear(self) -> None:
        self.put(None)

    def register_timer(self, domain: str, ts: int) -> None:
        self._timers.append((True, domain, ts))

    def delete_timer(self, domain: str, ts: int) -> None:
        self._timers.append((False, domain, ts))

    def flush(self) -> None:
        if self._dirty:
            if self._value is None:
                self._state.clear()
            else:
                self._state.put(self._value)
        for pending in self._maps.values():
            pending.flush()
        for register, domain, ts in self._timers:
            (self._state.register_timer if register else self._state.delete_timer)(domain, ts)


class _PendingMap:
    """A ``KeyMap`` whose changes wait for :meth:`flush` (see :class:`_Pending`)."""

    __slots__ = ("_store", "_changes", "_cleared")

    def __init__(self, store):
        self._store, self._changes, self._cleared = store, {}, False

    def get(self, key):
        if key in self._changes:
            return self._changes[key]
        return None if self._cleared else self._store.get(key)

    def put(self, key, value) -> None:
        self._changes[key] = value

    def remove(self, key) -> None:
        self._changes[key] = None

    def items(self):
        if not self._cleared:
            for key, value in self._store.items():
                if key not in self._changes:
                    yield key, value
        for key, value in self._changes.items():
            if value is not None:
                yield key, value

    def clear(self) -> None:
        self._changes.clear()
        self._cleared = True

    def flush(self) -> None:
        if self._cleared:
            self._store.clear()
        for key, value in self._changes.items():
            if value is not None:
                self._store.put(key, value)
            elif not self._cleared:
                self._store.remove(key)
