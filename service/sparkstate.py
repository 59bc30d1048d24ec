"""The operators' state protocol (``operators/state.py``) over Spark's state variables: the
service half of the checkpoint format.

A checkpoint's state has three owners; none repeats the others:

- ``operators/stateformat.py``: the Python value each operator keeps per key (the pickled
  structures, :data:`~operators.STATE_FORMAT_VERSION`).
- ``service/checkpoint.py``: what the state was made for (``changejoin-state.json``: the join's
  facts, and the *generations*, the input schemas and upsert outputs the state has seen).
- this module: where Spark keeps those values, and how their bytes are framed.

Each stateful stage of the query (``pipeline.py``) is one ``transformWithState`` whose
``StatefulProcessor`` (``processor.py``) opens its state variables here, per grouping key. Spark
keeps them in RocksDB under the checkpoint's ``state/`` directory, by name, and checks each one's
schema against the one it recorded: a name or a schema is part of the format (a renamed variable
starts empty).

- ``NormalizeProcessor``, per message key (column ``jk``: ``envelope.message_key_group``): the
  value state :data:`LAST` (``"last"``), the key's last row;
- ``JoinProcessor``, per join key (``jk``: ``envelope.join_key_group``): the value state
  :data:`JOIN` (``"join"``), the key's join state, and in a regular join the map states
  :data:`JOIN_MAPS` (``"left"``, ``"right"``), the entries of a split side
  (``operators/splitside.py``); its timers (processing or event time, ``JoinPlan.time_mode``) are
  Spark's own timer state, in epoch milliseconds;
- ``UpsertProcessor``, per upsert key (``okey``: ``envelope.output_key_group``): the value state
  :data:`ROWS` (``"rows"``), the rows present for the key.

A value state has the schema :data:`VALUE_SCHEMA` (one nullable binary column ``v``); a map state
is keyed by :data:`MAP_KEY_SCHEMA` (one nullable binary column ``k``: the entry key's
:func:`~operators.stateformat.map_key` bytes) with values of :data:`VALUE_SCHEMA`.

How a value's bytes are framed:

- in generation 0 (no schema evolution yet, and every checkpoint written before generations
  existed): the value's pickle (protocol 5, whose first byte is ``0x80``);
- in generation ``g > 0``: :data:`GENERATION` (``0x01``), ``g`` in two bytes big-endian, then the
  pickle.

The normalize and join stages write in the plan's input generation (``JoinPlan.state_generation``),
the upsert stage in its output generation (``JoinPlan.output_generation``). A value read in an
older generation is upgraded as it is read (:func:`upgrader`) and written back in the current one.
A map entry's value is its pickle alone: entries are always in the generation of their key's value
(an operator that upgrades a value rewrites its maps' entries in the same call).
"""
from __future__ import annotations

from typing import Callable

from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.types import BinaryType, StructField, StructType

from operators.regular import MAPS as JOIN_MAPS
from operators.stateformat import map_key

from .envelope import dumps, loads
from .plan import JoinPlan, PlanKind

VALUE_SCHEMA = StructType([StructField("v", BinaryType(), True)])
MAP_KEY_SCHEMA = StructType([StructField("k", BinaryType(), True)])

JOIN = "join"  # JoinProcessor's value state; a regular join's maps are JOIN_MAPS ("left", "right")
ROWS = "rows"  # UpsertProcessor's
LAST = "last"  # NormalizeProcessor's

GENERATION = 0x01  # first byte of a value stored in a state generation > 0 (pickle's own is 0x80)


def upgrader(operator, row_maps: Callable[[int], tuple]) -> Callable:
    """The ``upgrade(value, generation)`` of a :class:`SparkKeyState`: the stored value with its
    rows mapped by ``operator.map_rows(value, *row_maps(generation))``, the maps of each stored
    generation built once (they decode Avro defaults)."""
    built: dict[int, tuple] = {}

    def upgrade(value, generation: int):
        maps = built.get(generation)
        if maps is None:
            maps = built[generation] = row_maps(generation)
        return operator.map_rows(value, *maps)

    return upgrade


def join_state(handle: StatefulProcessorHandle, plan: JoinPlan, timer_domain: str | None) -> SparkKeyState:
    """The join stage's state of one join key: :data:`JOIN`, and :data:`JOIN_MAPS` where a
    regular join's side too large for the key's value keeps its rows in a map of its own."""
    maps = {name: handle.getMapState(name, MAP_KEY_SCHEMA, VALUE_SCHEMA) for name in JOIN_MAPS} \
        if plan.kind is PlanKind.REGULAR else {}
    upgrade = upgrader(plan.operator, lambda g: (plan.row_upgrade(g, 0), plan.row_upgrade(g, 1)))
    return SparkKeyState(handle.getValueState(JOIN, VALUE_SCHEMA), handle, timer_domain, plan.state_generation,
                         upgrade, maps)


def upsert_state(handle: StatefulProcessorHandle, plan: JoinPlan | None, operator) -> SparkKeyState:
    """The upsert materializer's state of one upsert key: :data:`ROWS`, output rows in the plan's
    output generation (0 without a plan)."""
    generation, upgrade = 0, None
    if plan is not None:  # rows of an older output, in today's
        generation = plan.output_generation
        upgrade = upgrader(operator, lambda g: (plan.output_upgrade(g), None))
    return SparkKeyState(handle.getValueState(ROWS, VALUE_SCHEMA), handle, None, generation, upgrade)


def normalize_state(handle: StatefulProcessorHandle, plan: JoinPlan, side: int, operator) -> SparkKeyState:
    """The normalize stage's state of one message key of input ``side``: :data:`LAST`."""
    upgrade = upgrader(operator, lambda g: (plan.row_upgrade(g, side), None))
    return SparkKeyState(handle.getValueState(LAST, VALUE_SCHEMA), handle, None, plan.state_generation, upgrade)


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

    A value is framed with the state generation it was written in (see the module docstring): a
    value of an older generation than ``generation`` is upgraded by ``upgrade(value, generation)``
    when it is read, and stored in the current one when it is written back."""

    __slots__ = ("_value", "_handle", "_domain", "_generation", "_prefix", "_upgrade", "_maps")

    def __init__(self, value_state, handle: StatefulProcessorHandle, timer_domain: str | None,
                 generation: int = 0, upgrade=None, maps: dict | None = None):
        self._maps = {name: SparkKeyMap(state) for name, state in (maps or {}).items()}
        self._value = value_state
        self._handle = handle
        self._domain = timer_domain
        self._generation = generation
        self._prefix = bytes([GENERATION]) + generation.to_bytes(2, "big") if generation else b""
        self._upgrade = upgrade

    def get(self):
        value = self._value.get()  # None when the key has no state: one call to the JVM, not two
        if value is None:
            return None
        data = value[0]
        if data[0] != GENERATION:
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


class Pending:
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
            pending = self._maps[name] = PendingMap(store)
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


class PendingMap:
    """A ``KeyMap`` whose changes wait for :meth:`flush` (see :class:`Pending`)."""

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
