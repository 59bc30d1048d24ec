"""Join keys in buckets: the state layout that pays Spark's state calls per bucket of keys.

Why. Every state call of PySpark's ``transformWithState`` is a synchronous round trip to the JVM
(~80-140 CPU-us on 2 cores, JVM and Python together), and PySpark adds one more (it sets the
grouping key) and one output Arrow batch per grouping key and call. Grouped by join key, a
micro-batch pays all of that for every key it touches: three calls and an output batch per key,
whatever the key's rows. Grouped by a *bucket* of join keys, it pays them per touched bucket
(``bench/results/RESULTS.md``, packed buckets). The operators do not change: each still sees one
join key's :class:`~operators.state.KeyState`, here a view into its bucket.

What a bucket stores (the grouping key is :func:`~service.envelope.bucket_group`):

- ValueState ``"bucket"``: the pickle of ``(small, large, timers, spark_timer)``:

  - ``small``: ``{join key group: the key's value bytes}`` for the keys whose value is small
    (at most :data:`SMALL_VALUE_BYTES`, and all of them together at most
    :data:`BUCKET_VALUE_BYTES`): one read and one write of the bucket serve all of them;
  - ``large``: ``{join key group: None}``, the keys whose value is a ``"keys"`` map entry:
    a touched bucket rewrites its small keys only, never a large one it did not touch;
  - ``timers``: ``{join key group: (ts, ...)}``, each key's registered timers, ascending;
  - ``spark_timer``: the one Spark timer the bucket has registered, the earliest of ``timers``.

- MapState ``"keys"``: ``(join key group,) -> (the key's value bytes,)`` for the large keys.
- MapState ``"left"`` / ``"right"`` (regular joins): a split side's entries
  (``operators/splitside.py``) under ``map_key((join key group, entry key))``.

A key's *value bytes* are the key's value as :class:`KeyCodec` frames it, the same bytes the
per-key layout stores in its ValueState. A key moves from ``small`` to ``large`` when its value
outgrows :data:`SMALL_VALUE_BYTES`, or when the bucket's small values outgrow
:data:`BUCKET_VALUE_BYTES` (the largest first); it stays large until it holds nothing. Every
choice depends only on the values, so a replayed micro-batch writes the same state.
"""
from __future__ import annotations

import pickle
from typing import Any, Callable, Iterator

from operators.stateformat import map_key

SMALL_VALUE_BYTES = 4096
"""A key whose value bytes are longer is kept as a map entry of its own (a *large* key)."""

BUCKET_VALUE_BYTES = 64 * 1024
"""At most this many bytes of small keys' values in one bucket value: what a touched bucket
rewrites, whatever it touched."""

_UNREAD = object()
_GENERATION = 0x01  # first byte of a value stored in a state generation > 0 (pickle's own is 0x80)


def dumps(value) -> bytes:
    return pickle.dumps(value, protocol=5)


loads = pickle.loads


class KeyCodec:
    """A key's value as stored: its pickle, prefixed with ``0x01`` and two bytes of the state
    generation it was written in when that is not 0 (``checkpoint.py``). A value of an older
    generation is upgraded by ``upgrade(value, generation)`` when it is decoded."""

    __slots__ = ("generation", "prefix", "upgrade")

    def __init__(self, generation: int = 0, upgrade: Callable[[Any, int], Any] | None = None):
        self.generation = generation
        self.prefix = bytes([_GENERATION]) + generation.to_bytes(2, "big") if generation else b""
        self.upgrade = upgrade

    def encode(self, value) -> bytes:
        return self.prefix + dumps(value)

    def decode(self, data: bytes):
        if data[0] != _GENERATION:
            generation, value = 0, loads(data)
        else:
            generation, value = int.from_bytes(data[1:3], "big"), loads(data[3:])
        if generation != self.generation:
            value = self.upgrade(value, generation)
        return value


class BucketState:
    """One bucket's state during one call (see the module docstring): read at most once, written
    at most once by :meth:`flush`, with a :class:`BucketKey` view per join key for the operators.

    ``value_state`` is the bucket's ValueState, ``keys`` its MapState of large keys, ``maps`` the
    MapStates the operator declares (name -> MapState), ``handle`` registers the bucket's Spark
    timer in ``domain`` (the processor's time mode; timers of another domain are never
    registered, as in the per-key layout)."""

    def __init__(self, value_state, keys, maps: dict, handle, domain: str | None, codec: KeyCodec,
                 small_value_bytes: int = SMALL_VALUE_BYTES, bucket_value_bytes: int = BUCKET_VALUE_BYTES):
        self._value_state = value_state
        self._keys = keys
        self._maps = maps
        self._handle = handle
        self.domain = domain
        self._codec = codec
        self._small_max = small_value_bytes
        self._budget = bucket_value_bytes
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

    def keys_with_state(self) -> Iterator[bytes]:
        """Every join key of the bucket holding a value (after :meth:`flush`: as stored)."""
        self._load()
        yield from self._small
        yield from self._large

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
