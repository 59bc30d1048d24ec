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
PySpark's ``transformWithState`` is a round trip to the JVM, and PySpark adds an output Arrow
batch per grouping key and call; grouped by key, a micro-batch would pay that for every key it
touches. So every stage's grouping key is a bucket of its keys (``envelope.bucket_of``, the CRC-32
of the key's grouping bytes modulo the count; ``envelope.bucket_group`` its grouping key, placed by
Spark on task ``b mod P``), and a bucket's calls go in batches (``statewire.py``: the bucket value
and its touched keys' entries read in one round trip, every write sent without waiting). Nothing
per bucket grows with the keys it holds past a fixed budget, so a call costs what it touches.
Per bucket (:class:`Buckets`, :class:`BucketState`):

- the value state :data:`BUCKET` (``"bucket"``): the pickle of ``("b2", small, large, slots)``:
  ``small`` = ``{key's grouping bytes: its value bytes}`` for the keys whose value bytes are at most
  :data:`SMALL_VALUE_BYTES` long, keys and values together at most :data:`BUCKET_VALUE_BYTES` (the
  largest leave first), so one read and one write of the bucket serve them all; ``large``, how many
  keys have their value in an entry of :data:`KEYS` instead (a key stays large until it holds
  nothing, so a touched bucket never rewrites a large key it did not touch; a key that is not
  small is looked up there, in the same round trip as the others); ``slots``, ``{slot: chunks}`` of
  the cleanup timers below;
- the map state :data:`KEYS` (``"keys"``): the large keys' ``(grouping bytes,) -> (value bytes,)``,
  and the bucket's timers: ``chunk_key(slot, n)`` -> the pickled ``[(key, ts, registered), ...]``
  that one call registered (or deleted) at ``slot``, and for an exact slot ``count_key(slot)`` -> its
  number of chunks. A timer at ``ts`` belongs to slot ``ts``; where the operator's timers only clean
  state (``KeyedOperator.cleanup_grain``: state TTL), to the slot ``ts`` rounded up to the grain, a
  deletion is not recorded (the cleanup finds nothing), and the chunk counts are in the bucket
  value's ``slots`` (a few: TTL / grain). A slot with chunks has one Spark timer, at the slot, which
  fires its keys' timers in time order (ties in key order), each key once (a cleanup slot: at its
  latest time there); registering or firing a key's timer writes that key's chunk, never the
  others';
- in the join stage of a regular join, the map states :data:`JOIN_MAPS`: a split side's entries
  under ``map_key((grouping bytes, entry key))``.

A bucket value of the first bucket layout, ``(small, large index, timers, spark_timer)`` (the index
of every large key and every key's timers in the value, one Spark timer at their earliest), is read
as it is and written in this one by the call that touches it: its timers become chunks, its
Spark timer fires what was due by it (``BucketState.fire``). A checkpoint keeps the grouping keys
it began with (``JoinPlan.bucket_keys``): those of the first layout are placed where Spark's hash
of them falls.

A key's *value bytes* are its value framed as in the per-key layout (below, :class:`KeyCodec`).
Every choice depends only on the values, so a replayed micro-batch writes the same state. The
keys of a bucket are run in the order of their grouping bytes; a timer that a timer registers and
is due already fires in the same call, as Flink's timer service does.

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

from pyspark import __version__ as _PYSPARK
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


class ObjectCalls:
    """State calls through PySpark's state objects, one round trip each: the state variables of
    a handle that is not PySpark's (the tests' fakes), and the form :class:`WireCalls` batches."""

    def __init__(self, handle, values: dict, maps: dict):
        self._handle, self._values, self._maps = handle, values, maps

    def read(self, requests: list) -> list:
        out = []
        for request in requests:
            if request[0] == "v":
                stored = self._values[request[1]].get()
            else:
                stored = self._maps[request[1]].getValue((request[2],))
            out.append(None if stored is None else stored[0])
        return out

    def write(self, request: tuple) -> None:
        kind = request[0]
        if kind == "v":
            state = self._values[request[1]]
            state.clear() if request[2] is None else state.update((request[2],))
        elif kind == "m":
            state = self._maps[request[1]]
            if request[3] is None:
                state.removeKey((request[2],))
            else:
                state.updateValue((request[2],), (request[3],))
        else:
            (self._handle.registerTimer if request[2] else self._handle.deleteTimer)(request[1])

    def flush(self) -> None:
        pass


class WireCalls:
    """State calls of a PySpark task batched on its state socket (``statewire.py``): reads in one
    round trip, writes without waiting."""

    def __init__(self, wire):
        self.read, self.write, self.flush = wire.read, wire.write, wire.flush


def state_calls(handle, values: dict, maps: dict):
    """How a stage's state calls reach Spark: batched on the task's state socket when ``handle`` is
    PySpark's, else one by one through the state objects."""
    api = handle._statefulProcessorApiClient if isinstance(handle, StatefulProcessorHandle) else None
    if api is None or not _PYSPARK.startswith("4.3."):  # the protocol statewire.py speaks
        return ObjectCalls(handle, values, maps)
    from .statewire import StateWire

    wire = getattr(api, "_changejoin_wire", None)
    if wire is None:
        wire = api._changejoin_wire = StateWire(api)
        wire.install()
    return WireCalls(wire)


class Buckets:
    """A stage's state variables in the bucket layout (``STATE_BUCKETS`` > 0; module docstring):
    :meth:`open` gives the state of the bucket Spark is calling for, for one call.

    ``stage`` names the stage among the task's (a process remembers, per stage and bucket,
    whether the bucket had large keys: a guess that only decides whether they are read in the
    same round trip as the bucket value). ``cleanup_grain``: the operator's timers only clean state
    (``KeyedOperator.cleanup_grain``): they are kept per slot of that many milliseconds."""

    def __init__(self, handle: StatefulProcessorHandle, timer_domain: str | None, codec: KeyCodec,
                 maps: tuple[str, ...] = (), stage: str = "", cleanup_grain: int | None = None):
        value = handle.getValueState(BUCKET, VALUE_SCHEMA)
        keys = handle.getMapState(KEYS, MAP_KEY_SCHEMA, VALUE_SCHEMA)
        self._maps = {name: handle.getMapState(name, MAP_KEY_SCHEMA, VALUE_SCHEMA) for name in maps}
        self._calls = state_calls(handle, {BUCKET: value}, {KEYS: keys, **self._maps})
        self._domain = timer_domain
        self._codec = codec
        self._stage = stage
        self._grain = cleanup_grain

    def open(self, key: bytes = b"") -> "BucketState":
        """The state of bucket ``key`` (its grouping key) for one call."""
        return BucketState(self._calls, self._maps, self._domain, self._codec, hint=(self._stage, key),
                           cleanup_grain=self._grain)


def join_state(handle: StatefulProcessorHandle, plan: JoinPlan, timer_domain: str | None) -> SparkKeyState | Buckets:
    """The join stage's state: per join key, :data:`JOIN`, and :data:`JOIN_MAPS` where a regular
    join's side too large for the key's value keeps its rows in a map of its own; or its buckets."""
    names = JOIN_MAPS if plan.kind is PlanKind.REGULAR else ()
    upgrade = upgrader(plan.operator, lambda g: (plan.row_upgrade(g, 0), plan.row_upgrade(g, 1)))
    codec = KeyCodec(plan.state_generation, upgrade)
    if plan.state_buckets:
        return Buckets(handle, timer_domain, codec, names, stage="join",
                       cleanup_grain=getattr(plan.operator, "cleanup_grain", None))
    maps = {name: handle.getMapState(name, MAP_KEY_SCHEMA, VALUE_SCHEMA) for name in names}
    return SparkKeyState(handle.getValueState(JOIN, VALUE_SCHEMA), handle, timer_domain, codec, maps)


def upsert_state(handle: StatefulProcessorHandle, plan: JoinPlan | None, operator) -> SparkKeyState | Buckets:
    """The upsert materializer's state: per upsert key, :data:`ROWS`, output rows in the plan's
    output generation (0 without a plan); or its buckets."""
    codec = KeyCodec()
    if plan is not None:  # rows of an older output, in today's
        codec = KeyCodec(plan.output_generation, upgrader(operator, lambda g: (plan.output_upgrade(g), None)))
        if plan.state_buckets:
            return Buckets(handle, None, codec, stage="upsert")
    return SparkKeyState(handle.getValueState(ROWS, VALUE_SCHEMA), handle, None, codec)


def normalize_state(handle: StatefulProcessorHandle, plan: JoinPlan, side: int, operator) -> SparkKeyState | Buckets:
    """The normalize stage's state of input ``side``: per message key, :data:`LAST`; or its buckets."""
    codec = KeyCodec(plan.state_generation, upgrader(operator, lambda g: (plan.row_upgrade(g, side), None)))
    if plan.state_buckets:
        return Buckets(handle, None, codec, stage=f"normalize-{side}")
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


_SIGNED = 1 << 63
_CHUNK = b"\xfd"  # a bucket's timer chunk in KEYS: _CHUNK + slot + chunk number
_COUNT = b"\xfe"  # an exact slot's chunk count in KEYS: _COUNT + slot
_LARGE_HINT: dict[tuple, bool] = {}  # (stage, bucket) -> it had large keys when last seen here


def _slot_bytes(slot: int) -> bytes:
    return (slot + _SIGNED).to_bytes(8, "big")


def chunk_key(slot: int, n: int) -> bytes:
    """The KEYS entry of chunk ``n`` of a bucket's timers at ``slot``. Grouping keys start with
    ``(`` (join and output keys) or ``\\x01`` (message keys), so timers never meet a key."""
    return _CHUNK + _slot_bytes(slot) + n.to_bytes(4, "big")


def count_key(slot: int) -> bytes:
    """The KEYS entry holding how many chunks the exact slot ``slot`` has."""
    return _COUNT + _slot_bytes(slot)


class BucketState:
    """One bucket's state during one call (see the module docstring): the bucket value read once
    and written at most once, the touched keys' entries read in one round trip, every write sent
    at :meth:`flush`, with a :class:`BucketKey` view per key for the operators.

    ``calls`` reaches Spark's state (:class:`WireCalls`, :class:`ObjectCalls`), ``maps`` are the
    MapStates the operator declares (name -> MapState, for iterating a split side), ``domain`` is
    the processor's time mode (timers of another domain are never registered, as in the per-key
    layout). ``hint``: (stage, bucket), under which the process remembers whether the bucket had
    large keys. ``cleanup_grain``: see :class:`Buckets`."""

    def __init__(self, calls, maps: dict, domain: str | None, codec: KeyCodec, hint: tuple = ("", b""),
                 cleanup_grain: int | None = None, small_value_bytes: int | None = None,
                 bucket_value_bytes: int | None = None):
        self._calls = calls
        self._maps = maps
        self.domain = domain
        self._codec = codec
        self._hint = hint
        self._grain = cleanup_grain
        self._small_max = SMALL_VALUE_BYTES if small_value_bytes is None else small_value_bytes
        self._budget = BUCKET_VALUE_BYTES if bucket_value_bytes is None else bucket_value_bytes
        self._loaded = False
        self._small: dict[bytes, bytes] = {}
        self._large = 0  # keys whose value is an entry of KEYS
        self._slots: dict[int, int] = {}  # cleanup slot -> its chunks (cleanup_grain)
        self._stored_large: set[bytes] = set()  # keys known to have a KEYS entry
        # key -> its value bytes as stored (None: no value), once read; and as read or put. Values
        # are decoded anew on every read: an operator changes what it read in place, and a call
        # that fails must leave the key as it was.
        self._read: dict[bytes, bytes | None] = {}
        self._bytes: dict[bytes, bytes | None] = {}
        self._dirty: dict[bytes, None] = {}  # keys whose value was put
        self._timer_ops: list[tuple[bytes, int, bool]] = []  # (key, ts, registered), in call order
        self._legacy: tuple | None = None  # (timers, spark timer) of a bucket value in the first layout
        self._changed = False  # the bucket value must be written

    # -- reading -----------------------------------------------------------------------------
    def _load(self, stored: bytes | None) -> None:
        self._loaded = True
        if stored is None:
            return
        value = loads(stored)
        if type(value[0]) is str:
            _, self._small, self._large, self._slots = value
            return
        # The first bucket layout: (small, large, timers, spark_timer), with the index of its large
        # keys and every key's timers in the value. The call writes it in this one.
        self._small, large, timers, spark_timer = value
        self._large = len(large)
        self._stored_large.update(large)
        self._legacy = (timers, spark_timer)
        self._changed = True

    def read_ahead(self, keys: list[bytes], extra: list | None = None) -> list:
        """Read the stored values of ``keys`` (about to be read or written): the bucket value, and
        the KEYS entries of those not in it, in one round trip where this process saw large keys
        in the bucket before, else in a second one only when it has large keys. ``extra``: more
        read requests for the first round trip; their answers are returned."""
        extra = extra or []
        keys = [jk for jk in keys if jk not in self._read]
        if self._loaded:
            answers = self._calls.read(extra) if extra else []
            self._fetch(keys)
            return answers
        guess = keys if _LARGE_HINT.get(self._hint) else []
        answers = self._calls.read([("v", BUCKET), *(("m", KEYS, jk) for jk in guess), *extra])
        self._load(answers[0])
        for jk, data in zip(guess, answers[1:]):
            if data is not None:
                self._stored_large.add(jk)
                self._read[jk] = data
            else:
                self._read[jk] = self._small.get(jk)
        _LARGE_HINT[self._hint] = self._large > 0
        self._fetch(keys)
        return answers[1 + len(guess):]

    def _fetch(self, keys: list[bytes]) -> None:
        """The stored values of ``keys`` not read yet: from the bucket value, or from KEYS in one
        round trip (a key not among the small ones may be large only where the bucket has any)."""
        missing = []
        for jk in keys:
            if jk in self._read:
                continue
            data = self._small.get(jk)
            if data is not None or not self._large:
                self._read[jk] = data
            else:
                missing.append(jk)
        if missing:
            for jk, data in zip(missing, self._calls.read([("m", KEYS, jk) for jk in missing])):
                if data is not None:
                    self._stored_large.add(jk)
                self._read[jk] = data

    def value(self, jk: bytes):
        """The value of key ``jk``: from the bucket value, or its own KEYS entry."""
        data = self._bytes.get(jk, _UNREAD)
        if data is _UNREAD:
            if jk not in self._read:
                self.read_ahead([jk])
            data = self._read[jk]
        return None if data is None else self._codec.decode(data)

    def key(self, jk: bytes) -> "BucketKey":
        return BucketKey(self, jk)

    # -- writing -----------------------------------------------------------------------------
    def put(self, jk: bytes, value) -> None:
        self._bytes[jk] = None if value is None else self._codec.encode(value)
        self._dirty[jk] = None

    def register_timer(self, jk: bytes, ts: int) -> None:
        self._timer_ops.append((jk, ts, True))

    def delete_timer(self, jk: bytes, ts: int) -> None:
        if self._grain is None:  # a cleanup timer fires anyway, and finds nothing to clean
            self._timer_ops.append((jk, ts, False))

    def flush(self) -> None:
        """Send what the call changed: the values put, the timers, the bucket value. Nothing waits
        for Spark's answers (they are read by the next read)."""
        if not self._loaded:
            if not (self._dirty or self._timer_ops):
                return
            self.read_ahead([])
        if self._dirty:
            self._fetch(list(self._dirty))  # whether a key put without being read is a large one
            self._flush_values()
        if self._legacy is not None:
            timers, spark_timer = self._legacy
            self._legacy = None
            if spark_timer is not None:
                self._calls.write(("t", spark_timer, False))
            self._timer_ops[:0] = [(jk, ts, True) for jk in sorted(timers) for ts in timers[jk]]
        if self._timer_ops:
            self._flush_timers()
        if self._changed:
            if self._small or self._large or self._slots:
                self._calls.write(("v", BUCKET, dumps(("b2", self._small, self._large, self._slots))))
            else:
                self._calls.write(("v", BUCKET, None))
            self._changed = False
        self._calls.flush()

    def _flush_values(self) -> None:
        small, write = self._small, self._calls.write
        for jk in sorted(self._dirty):
            data = self._bytes[jk]
            if jk in self._stored_large:  # a large key stays one until cleared
                write(("m", KEYS, jk, data))
                if data is None:
                    self._stored_large.discard(jk)
                    self._large -= 1
                    self._changed = True
            elif data is None:
                if small.pop(jk, None) is not None:
                    self._changed = True
            elif len(data) <= self._small_max:
                small[jk] = data
                self._changed = True
            else:
                small.pop(jk, None)
                self._spill(jk, data)
        self._dirty = {}
        total = sum(len(jk) + len(data) for jk, data in small.items())
        if total > self._budget:
            for size, jk in sorted(((len(jk) + len(data), jk) for jk, data in small.items()),
                                   key=lambda e: (-e[0], e[1])):
                self._spill(jk, small.pop(jk))
                total -= size
                if total <= self._budget:
                    break

    def _spill(self, jk: bytes, data: bytes) -> None:
        """Key ``jk`` becomes a large key: its value an entry of KEYS."""
        self._calls.write(("m", KEYS, jk, data))
        self._stored_large.add(jk)
        self._large += 1
        self._changed = True
        _LARGE_HINT[self._hint] = True

    # -- timers ------------------------------------------------------------------------------
    def _slot(self, ts: int) -> int:
        grain = self._grain
        return ts if grain is None else -(-ts // grain) * grain

    def _flush_timers(self) -> None:
        """Each slot's timer changes of this call become one new chunk of it, and a slot with its
        first chunk gets its Spark timer. A cleanup slot's chunk count is in the bucket value;
        an exact one's (its slot is its time) is an entry of KEYS, read first."""
        ops, self._timer_ops = self._timer_ops, []
        by_slot: dict[int, dict[bytes, tuple]] = {}
        for jk, ts, registered in ops:
            by_slot.setdefault(self._slot(ts), {})[(jk, ts)] = registered
        write = self._calls.write
        if self._grain is not None:
            counts = [self._slots.get(slot, 0) for slot in sorted(by_slot)]
        else:
            counts = [0 if data is None else int.from_bytes(data, "big")
                      for data in self._calls.read([("m", KEYS, count_key(slot)) for slot in sorted(by_slot)])]
        for (slot, changes), n in zip(sorted(by_slot.items()), counts):
            if n == 0 and not any(changes.values()):
                continue  # only deletions where nothing was registered
            write(("m", KEYS, chunk_key(slot, n), dumps(sorted((jk, ts, r) for (jk, ts), r in changes.items()))))
            if self._grain is not None:
                self._slots[slot] = n + 1
                self._changed = True
            else:
                write(("m", KEYS, count_key(slot), (n + 1).to_bytes(4, "big")))
            if n == 0:
                write(("t", slot, True))

    def fire(self, fired: int, until: int) -> list[tuple[int, bytes]]:
        """Spark fired the bucket's timer ``fired`` (and deletes it after the call): the keys'
        timers it stands for, as ``(ts, key)`` in time order (ties in key order), their chunks
        removed, their keys' values read. A bucket value of the first layout fires every key timer
        due by ``until`` (its one Spark timer was its keys' earliest)."""
        exact = self._grain is None
        answers = self.read_ahead([], [("m", KEYS, count_key(fired))] if exact else None)
        if self._legacy is not None:
            timers, spark_timer = self._legacy
            due = sorted((ts, jk) for jk, times in timers.items() for ts in times if ts <= until)
            later = {jk: tuple(ts for ts in times if ts > until) for jk, times in timers.items()}
            self._legacy = ({jk: times for jk, times in later.items() if times},
                            None if spark_timer == fired else spark_timer)
            self.read_ahead([jk for _, jk in due])
            return due
        if exact:
            n = 0 if answers[0] is None else int.from_bytes(answers[0], "big")
        else:
            n = self._slots.pop(fired, 0)
            self._changed = self._changed or n > 0
        if not n:
            return []
        write = self._calls.write
        chunks = self._calls.read([("m", KEYS, chunk_key(fired, i)) for i in range(n)])
        for i in range(n):
            write(("m", KEYS, chunk_key(fired, i), None))
        if exact:
            write(("m", KEYS, count_key(fired), None))
        live: dict[tuple[bytes, int], bool] = {}
        for chunk in chunks:
            for jk, ts, registered in loads(chunk):
                live[(jk, ts)] = registered
        if exact:
            due = sorted((ts, jk) for (jk, ts), registered in live.items() if registered)
        else:  # one firing per key, at its latest time in the slot: it has moved the others since
            latest: dict[bytes, int] = {}
            for jk, ts in live:
                latest[jk] = max(ts, latest.get(jk, ts))
            due = sorted((ts, jk) for jk, ts in latest.items())
        self.read_ahead([jk for _, jk in due])
        return due

    def take_due(self, until: int) -> list[tuple[int, bytes]]:
        """Timers this call registered that are due by ``until`` already: taken out of what
        :meth:`flush` registers, to be fired in the same call (as Flink's timer service does)."""
        if not self._timer_ops:
            return []
        final: dict[tuple[bytes, int], bool] = {}
        for jk, ts, registered in self._timer_ops:
            final[(jk, ts)] = registered
        due = sorted((ts, jk) for (jk, ts), registered in final.items() if registered and ts <= until)
        if due:
            taken = {(jk, ts) for ts, jk in due}
            self._timer_ops = [op for op in self._timer_ops if (op[0], op[1]) not in taken]
            self.read_ahead([jk for _, jk in due])
        return due


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
        return None if state is None else BucketKeyMap(self._bucket._calls, name, state, self._jk)

    def register_timer(self, domain: str, ts: int) -> None:
        if domain == self._bucket.domain:
            self._bucket.register_timer(self._jk, int(ts))

    def delete_timer(self, domain: str, ts: int) -> None:
        if domain == self._bucket.domain:
            self._bucket.delete_timer(self._jk, int(ts))


class BucketKeyMap:
    """The operators' ``KeyMap`` of one join key over its bucket's MapState ``name``: entries
    stored under ``map_key((join key group, key))``, values as their pickle."""

    __slots__ = ("_calls", "_name", "_state", "_jk")

    def __init__(self, calls, name: str, map_state, jk: bytes):
        self._calls, self._name, self._state, self._jk = calls, name, map_state, jk

    def get(self, key):
        (value,) = self._calls.read([("m", self._name, map_key((self._jk, key)))])
        return None if value is None else loads(value)

    def put(self, key, value) -> None:
        self._calls.write(("m", self._name, map_key((self._jk, key)), dumps(value)))

    def remove(self, key) -> None:
        self._calls.write(("m", self._name, map_key((self._jk, key)), None))

    def items(self):
        """This key's entries; the bucket's map is read whole (only hot keys have entries)."""
        self._calls.flush()
        jk = self._jk
        for stored_key, value in self._state.iterator():
            owner, key = loads(stored_key[0])
            if owner == jk:
                yield key, loads(value[0])

    def clear(self) -> None:
        for key, _ in list(self.items()):
            self.remove(key)
