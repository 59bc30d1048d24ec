"""A side of a join key too large for one value: its entries in a map of their own.

The regular and semi/anti joins keep a key's two sides in one value (``stateformat.py``), read
and written whole once per call. That is the cheapest form for the usual key, and the wrong one
for a *hot* key: a key holding a million rows would be unpickled and pickled again for every
call that touches it, to change one row. Once a side holds more than ``split_at`` entries, the
join moves it into a :class:`~operators.state.KeyMap` (one map entry per layout entry, under the
same entry key) and keeps only a small marker in its value. A call then reads the entries it
looks up one by one and writes back only those it changed; it reads the whole map only when it
has to look at every row (a record of the other side, which must be matched against all of them).

:class:`SplitSide` looks like the dict of entries the layouts work on (``get``, item assignment,
``pop``, ``values``, ``len``), caches what it has read, and notes what changed: entries set or
removed, and entries read whose mutable fields (copies, associations, written time) were changed
in place. :meth:`SplitSide.flush` writes just those.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable

from .state import KeyMap

_ABSENT = object()


class SplitSide:
    """The entries of one side of one join key, kept in ``store`` (see the module docstring).

    ``count`` is the number of entries in the store, ``latest`` the latest written time among them
    (the state TTL's expiry follows it). With ``row_map`` (a stored generation older than the
    plan's, ``KeyState``), every entry is read, its row mapped, and all are written again under
    the keys ``entry_key`` gives the mapped rows."""

    __slots__ = ("_store", "_cache", "_seen", "_dirty", "_count", "_latest", "_complete")

    def __init__(self, store: KeyMap, count: int, latest: int, row_map: Callable | None = None,
                 entry_key: Callable | None = None):
        self._store = store
        self._cache: dict[Hashable, Any] = {}  # entry key -> entry, or None: known absent / removed
        self._seen: dict[Hashable, tuple] = {}  # entry key -> (entry, copies, assoc, written) as read
        self._dirty: dict[Hashable, None] = {}  # keys set or removed by assignment, in order
        self._count = count
        self._latest = latest
        self._complete = False  # every stored entry is in the cache
        if row_map is not None:
            old = list(store.items())
            store.clear()
            for _, entry in old:
                row = row_map(entry[0])
                self._set(entry_key(row), [row, *entry[1:]])
            self._count = len(old)
            self._complete = True

    @classmethod
    def moved(cls, store: KeyMap, entries: dict) -> "SplitSide":
        """A side that was one dict of ``entries``, now to be written to ``store``."""
        side = cls(store, 0, 0)
        side._complete = True
        for key, entry in entries.items():
            side._set(key, entry)
        side._count = len(entries)
        return side

    # -- the dict of entries the layouts use -----------------------------------------------------
    def get(self, key: Hashable, default=None):
        entry = self._cache.get(key, _ABSENT)
        if entry is _ABSENT:
            if self._complete:
                return default
            entry = self._store.get(key)
            self._cache[key] = entry
            if entry is not None:
                self._seen[key] = (entry, entry[1], entry[2], entry[3])
        return default if entry is None else entry

    def __setitem__(self, key: Hashable, entry: list) -> None:
        if self.get(key) is None:
            self._count += 1
        self._set(key, entry)

    def _set(self, key, entry) -> None:
        self._cache[key] = entry
        self._dirty[key] = None

    def pop(self, key: Hashable, default=None):
        entry = self.get(key)
        if entry is None:
            return default
        self._cache[key] = None
        self._dirty[key] = None
        self._count -= 1
        return entry

    def __delitem__(self, key: Hashable) -> None:
        if self.pop(key, _ABSENT) is _ABSENT:
            raise KeyError(key)

    def _load_all(self) -> None:
        if self._complete:
            return
        cache, seen = self._cache, self._seen
        for key, entry in self._store.items():
            if key not in cache:
                cache[key] = entry
                seen[key] = (entry, entry[1], entry[2], entry[3])
        self._complete = True

    def values(self) -> list:
        self._load_all()
        return [e for e in self._cache.values() if e is not None]

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    # -- what the join asks of a split side ------------------------------------------------------
    def latest_written(self) -> int:
        """The latest written time among the entries, including changes not yet flushed."""
        latest = self._latest
        for entry in self._cache.values():
            if entry is not None and entry[3] > latest:
                latest = entry[3]
        return latest

    def purge(self, ttl: int, now: int) -> None:
        """Drop expired entries: all of them at once when the latest write has expired (the TTL
        timer's case), else those among the entries already read (a full read happens only when
        the join needs every row anyway)."""
        if self.latest_written() + ttl <= now:
            self._store.clear()
            self._cache = {k: None for k in self._cache}
            self._seen.clear()
            self._dirty.clear()
            self._count = 0
            self._complete = True
            return
        for key, entry in list(self._cache.items()):
            if entry is not None and entry[3] + ttl <= now:
                self.pop(key)

    def flush(self) -> list:
        """Write what changed to the store; returns the marker the join keeps in its value:
        ``[count, latest written time]``. The side's last call: the join reads a new one per call."""
        store, seen = self._store, self._seen
        for key in self._dirty:
            entry = self._cache[key]
            if entry is None:
                if key in seen:  # it was stored (a key set and removed within the call never was)
                    store.remove(key)
            else:
                store.put(key, entry)
        for key, (entry, copies, assoc, written) in seen.items():
            if key in self._dirty:
                continue
            if entry[1] != copies or entry[2] != assoc or entry[3] != written:
                store.put(key, entry)
        return [self._count, self.latest_written()]

    def clear(self) -> None:
        self._store.clear()
        self._cache.clear()
        self._seen.clear()
        self._dirty.clear()
        self._count = 0
        self._complete = True
