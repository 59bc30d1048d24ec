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
starts empty). There are two layouts, fixed per checkpoint (``JoinPlan.state_buckets``, recorded
in ``changejoin-state.json``; a checkpoint written before buckets is per key).

**In buckets** (``STATE_BUCKETS`` > 0, the default for a new checkpoint). Every state call of
PySpark's ``transformWithState`` is a synchronous round trip to the JVM (~80-140 CPU-us on 2
cores), and PySpark adds one more (it sets the grouping key) and an output Arrow batch per
grouping key and call; grouped by key, a micro-batch pays all that for every key it touches. So
every stage's grouping key is a bucket of its keys (``envelope.bucket_group``, the CRC-32 of the
key's grouping bytes modulo the count), and per bucket (:class:`Buckets`, :class:`BucketState`):

- the value state :data:`BUCKET` (``"bucket"``): the pickle of ``(small, large, timers,
  spark_timer)``: ``small`` = ``{key's grouping bytes: its value bytes}`` for the keys whose
  value bytes are at most :data:`SMALL_VALUE_BYTES` long, all of them together at most
  :data:`BUCKET_VALUE_BYTES` (the largest leave first), so one read and one write of the bucket
  serve them all; ``large`` = ``{grouping bytes: None}``, the keys whose value is an entry of
  :data:`KEYS` (a key stays large until it holds nothing, so a touched bucket never rewrites a
  large key it did not touch); ``timers`` = ``{grouping bytes: (ts, ...)}`` every key's timers,
  ascending; ``spark_timer``, the one Spark timer the bucket has registered: the earliest of them;
- the map state :data:`KEYS` (``"keys"``): ``(grouping bytes,) -> (value bytes,)`` of the large keys;
- in the join stage of a regular join, the map states :data:`JOIN_MAPS`: a split side's entries
  under ``map_key((grouping bytes, entry key))``.

A key's *value bytes* are its value framed as in the per-key layout (below, :class:`KeyCodec`).
Every choice depends only on the values, so a replayed micro-batch writes the same state. The
keys of a bucket are run in the order of their grouping bytes; when the bucket's timer fires,
every key's timer due by then is fired in time order (ties in key order), and one that a timer
registers and is due already fires in the same call, as Flink's timer service does.

**Per key** (``STATE_BUCKETS=0``):

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

from typing import Any, Callable

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

BUCKET = "bucket"  # a bucket's value state (STATE_BUCKETS > 0)
KEYS = "keys"  # a bucket's map state of its large keys' values

SMALL_VALUE_BYTES = 4096
"""A key whose value bytes are longer is kept as a map entry of its own (a *large* key)."""

BUCKET_VALUE_BYTES = 64 * 1024
"""At most this many bytes of small keys' values in one bucket value: what a touched bucket
rewrites, whatever it touched."""

READ_AHEAD_SHARE = 1 / 8
"""Large keys of a bucket a call must touch, as a share of them all, from which it reads them all
in one iteration (:meth:`BucketState.read_ahead`)."""

_UNREAD = object()


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


class KeyCodec:
    """A key's value as stored, framed with the state generation it was written in (see the module
    docstring): a value of an older generation than ``generation`` is upgraded by
    ``upgrade(value, generation)`` when it is decoded."""

    __slots__ = ("generation", "prefix", "upgrade")

    def __init__(self, generation: int = 0, upgrade: Callable[[Any, int], Any] | None = None):
        self.generation = generation
        self.prefix = bytes([GENERATION]) + generation.to_bytes(2, "big") if generation else b""
        self.upgrade = upgrade

    def encode(self, value) -> bytes:
        return self.prefix + dumps(value)

    def decode(self, data: bytes):
        if data[0] != GENERATION:
            generation, value = 0, loads(data)
        else:
            generation, value = int.from_bytes(data[1:3], "big"), loads(data[3:])
        if generation != self.generation:
            value = self.upgrade(value, generation)
        return value


class Buckets:
    """A stage's state variables in the bucket layout (``STATE_BUCKETS`` > 0; module docstring):
    :meth:`open` gives the state of the bucket Spark is calling for, for one call."""

    def __init__(self, handle: StatefulProcessorHandle, timer_domain: str | None, codec: KeyCodec,
                 maps: tuple[str, ...] = ()):
        self._value = handle.getValueState(BUCKET, VALUE_SCHEMA)
        self._keys = handle.getMapState(KEYS, MAP_KEY_SCHEMA, VALUE_SCHEMA)
        self._maps = {name: handle.getMapState(name, MAP_KEY_SCHEMA, VALUE_SCHEMA) for name in maps}
        self._handle = handle
        self._domain = timer_domain
        self._codec = codec

    def open(self) -> "BucketState":
        return BucketState(self._value, self._keys, self._maps, self._handle, self._domain, self._codec)


def join_state(handle: StatefulProcessorHandle, plan: JoinPlan, timer_domain: str | None) -> SparkKeyState | Buckets:
    """The join stage's state: per join key, :data:`JOIN`, and :data:`JOIN_MAPS` where a regular
    join's side too large for the key's value keeps its rows in a map of its own; or its buckets."""
    names = JOIN_MAPS if plan.kind is PlanKind.REGULAR else ()
    upgrade = upgrader(plan.operator, lambda g: (plan.row_upgrade(g, 0), plan.row_upgrade(g, 1)))
    codec = KeyCodec(plan.state_generation, upgrade)
    if plan.state_buckets:
        return Buckets(handle, timer_domain, codec, names)
    maps = {name: handle.getMapState(name, MAP_KEY_SCHEMA, VALUE_SCHEMA) for name in names}
    return SparkKeyState(handle.getValueState(JOIN, VALUE_SCHEMA), handle, timer_domain, codec, maps)


def upsert_state(handle: StatefulProcessorHandle, plan: JoinPlan | None, operator) -> SparkKeyState | Buckets:
    """The upsert materializer's state: per upsert key, :data:`ROWS`, output rows in the plan's
    output generation (0 without a plan); or its buckets."""
    codec = KeyCodec()
    if plan is not None:  # rows of an older output, in today's
        codec = KeyCodec(plan.output_generation, upgrader(operator, lambda g: (plan.output_upgrade(g), None)))
        if plan.state_buckets:
            return Buckets(handle, None, codec)
    return SparkKeyState(handle.getValueState(ROWS, VALUE_SCHEMA), handle, None, codec)


def normalize_state(handle: StatefulProcessorHandle, plan: JoinPlan, side: int, operator) -> SparkKeyState | Buckets:
    """The normalize stage's state of input ``side``: per message key, :data:`LAST`; or its buckets."""
    codec = KeyCodec(plan.state_generation, upgrader(operator, lambda g: (plan.row_upgrade(g, side), None)))
    if plan.state_buckets:
        return Buckets(handle, None, codec)
    return SparkKeyState(handle.getValueState(LAST, VALUE_SCHEMA), handle, None, codec)


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
    the operator declares (``maps``: name -> ``MapState``); values framed by ``codec``."""

    __slots__ = ("_value", "_handle", "_domain", "_codec", "_maps")

    def __init__(self, value_state, handle: StatefulProcessorHandle, timer_domain: str | None,
                 codec: KeyCodec | None = None, maps: dict | None = None):
        self._maps = {name: SparkKeyMap(state) for name, state in (maps or {}).items()}
        self._value = value_state
        self._handle = handle
        self._domain = timer_domain
        self._codec = codec or KeyCodec()

    def get(self):
        value = self._value.get()  # None when the key has no state: one call to the JVM, not two
        return None if value is None else self._codec.decode(value[0])

    def put(self, value) -> None:
        self._value.update((self._codec.encode(value),))

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


class BucketState:
    """One bucket's state during one call (see the module docstring): read at most once, written
    at most once by :meth:`flush`, with a :class:`BucketKey` view per join key for the operators.

    ``value_state`` is the bucket's ValueState, ``keys`` its MapState of large keys, ``maps`` the
    MapStates the operator declares (name -> MapState), ``handle`` registers the bucket's Spark
    timer in ``domain`` (the processor's time mode; timers of another domain are never
    registered, as in the per-key layout)."""

    def __init__(self, value_state, keys, maps: dict, handle, domain: str | None, codec: KeyCodec,
                 small_value_bytes: int | None = None, bucket_value_bytes: int | None = None):
        self._value_state = value_state
        self._keys = keys
        self._maps = maps
        self._handle = handle
        self.domain = domain
        self._codec = codec
        self._small_max = SMALL_VALUE_BYTES if small_value_bytes is None else small_value_bytes
        self._budget = BUCKET_VALUE_BYTES if bucket_value_bytes is None else bucket_value_bytes
        self._loaded = False
        self._small: dict[bytes, bytes] = {}
        self._large: dict[bytes, None] = {}
        self._timers: dict[bytes, tuple] = {}
        self._spark_timer: int | None = None
        # join key group -> value bytes as read or put (None: no value). Values are decoded anew
        # on every read: an operator changes what it read in place, and a call that fails must
        # leave the key as it was.
        self._bytes: dict[bytes, bytes | None] = {}
        self._dirty: dict[bytes, None] = {}  # keys whose value was put
        self._changed = False  # the bucket value must be written

    # -- reading -----------------------------------------------------------------------------
    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        stored = self._value_state.get()
        if stored is not None:
            self._small, self._large, self._timers, self._spark_timer = loads(stored[0])

    def value(self, jk: bytes):
        """The value of join key ``jk``: from the bucket value, or its own map entry."""
        data = self._bytes.get(jk, _UNREAD)
        if data is _UNREAD:
            self._load()
            data = self._small.get(jk)
            if data is None and jk in self._large:
                stored = self._keys.getValue((jk,))
                data = None if stored is None else stored[0]
            self._bytes[jk] = data
        return None if data is None else self._codec.decode(data)

    def key(self, jk: bytes) -> "BucketKey":
        return BucketKey(self, jk)

    def read_ahead(self, keys: list[bytes]) -> None:
        """The values of ``keys`` (about to be read) in as few calls as pays: where they include
        large keys, the bucket's map of large keys is read in one iteration (Spark replies with up
        to 10,000 entries at a time) instead of one call per key, when they are at least
        :data:`READ_AHEAD_SHARE` of its entries (each entry read and not needed costs a few
        microseconds, each call ~100)."""
        if len(keys) < 2:
            return
        self._load()
        large = [jk for jk in keys if jk in self._large and jk not in self._bytes]
        if len(large) < 2 or len(large) < len(self._large) * READ_AHEAD_SHARE:
            return
        for (jk,), (data,) in self._keys.iterator():
            self._bytes.setdefault(jk, data)

    # -- writing -----------------------------------------------------------------------------
    def put(self, jk: bytes, value) -> None:
        self._bytes[jk] = None if value is None else self._codec.encode(value)
        self._dirty[jk] = None

    def register_timer(self, jk: bytes, ts: int) -> None:
        self._load()
        timers = self._timers.get(jk, ())
        if ts not in timers:
            self._timers[jk] = tuple(sorted((*timers, ts)))
            self._changed = True

    def delete_timer(self, jk: bytes, ts: int) -> None:
        self._load()
        timers = self._timers.get(jk, ())
        if ts in timers:
            rest = tuple(t for t in timers if t != ts)
            if rest:
                self._timers[jk] = rest
            else:
                del self._timers[jk]
            self._changed = True

    def due(self, until: int) -> list[tuple[int, bytes]]:
        """The keys' timers at or before ``until``, as ``(ts, join key group)`` in time order,
        ties in key order."""
        self._load()
        return sorted((ts, jk) for jk, timers in self._timers.items() for ts in timers if ts <= until)

    def timer_fired(self, ts: int) -> None:
        """Spark fired the bucket's timer ``ts`` and deletes it after the call."""
        self._load()
        if self._spark_timer == ts:
            self._spark_timer = None
            self._changed = True

    def flush(self) -> None:
        """Write what the call changed: the values put, the bucket value, the bucket's timer."""
        if self._dirty:
            self._load()
            self._flush_values()
        if self._changed or self._dirty:
            self._flush_timer()
        if self._changed:
            if self._small or self._large or self._timers:
                self._value_state.update((dumps((self._small, self._large, self._timers, self._spark_timer)),))
            else:
                self._value_state.clear()
        self._dirty = {}
        self._changed = False

    def _flush_values(self) -> None:
        small, large, keys = self._small, self._large, self._keys
        for jk in sorted(self._dirty):
            data = self._bytes[jk]
            if data is None:
                if jk in large:
                    keys.removeKey((jk,))
                    del large[jk]
                    self._changed = True
                elif small.pop(jk, None) is not None:
                    self._changed = True
                continue
            if jk in large:
                keys.updateValue((jk,), (data,))
            elif len(data) <= self._small_max:
                small[jk] = data
                self._changed = True
            else:
                small.pop(jk, None)
                large[jk] = None
                keys.updateValue((jk,), (data,))
                self._changed = True
        total = sum(map(len, small.values()))
        if total > self._budget:
            for size, jk in sorted(((len(data), jk) for jk, data in small.items()), key=lambda e: (-e[0], e[1])):
                keys.updateValue((jk,), (small.pop(jk),))
                large[jk] = None
                total -= size
                if total <= self._budget:
                    break

    def _flush_timer(self) -> None:
        earliest = min((timers[0] for timers in self._timers.values()), default=None)
        if earliest != self._spark_timer:
            if self._spark_timer is not None:
                self._handle.deleteTimer(self._spark_timer)
            if earliest is not None:
                self._handle.registerTimer(earliest)
            self._spark_timer = earliest
            self._changed = True


class BucketKey:
    """The operators' ``KeyState`` of one join key inside its bucket."""

    __slots__ = ("_bucket", "_jk")

    def __init__(self, bucket: BucketState, jk: bytes):
        self._bucket, self._jk = bucket, jk

    def get(self):
        return self._bucket.value(self._jk)

    def put(self, value) -> None:
        self._bucket.put(self._jk, value)

    def clear(self) -> None:
        self._bucket.put(self._jk, None)

    def map(self, name: str) -> "BucketKeyMap | None":
        state = self._bucket._maps.get(name)
        return None if state is None else BucketKeyMap(state, self._jk)

    def register_timer(self, domain: str, ts: int) -> None:
        if domain == self._bucket.domain:
            self._bucket.register_timer(self._jk, int(ts))

    def delete_timer(self, domain: str, ts: int) -> None:
        if domain == self._bucket.domain:
            self._bucket.delete_timer(self._jk, int(ts))


class BucketKeyMap:
    """The operators' ``KeyMap`` of one join key over its bucket's MapState: entries stored under
    ``map_key((join key group, key))``, values as their pickle."""

    __slots__ = ("_state", "_jk")

    def __init__(self, map_state, jk: bytes):
        self._state, self._jk = map_state, jk

    def get(self, key):
        value = self._state.getValue((map_key((self._jk, key)),))
        return None if value is None else loads(value[0])

    def put(self, key, value) -> None:
        self._state.updateValue((map_key((self._jk, key)),), (dumps(value),))

    def remove(self, key) -> None:
        self._state.removeKey((map_key((self._jk, key)),))

    def items(self):
        """This key's entries; the bucket's map is read whole (only hot keys have entries)."""
        jk = self._jk
        for stored_key, value in self._state.iterator():
            owner, key = loads(stored_key[0])
            if owner == jk:
                yield key, loads(value[0])

    def clear(self) -> None:
        for key, _ in list(self.items()):
            self.remove(key)
