"""The client's partial cache, its counters and what a lookup returns.

**Cache** (``CacheSettings``, off unless given): Flink's partial cache, per client. An LRU of at
most ``max_rows`` keys (each with all its rows; an evicted key counts in ``cache_evictions``),
expired ``expire_after_write_s`` after it was fetched and, if set, ``expire_after_access_s`` after it
was last read (an expired key is a miss, not an eviction). Expire-after-access alone can keep a hot
key stale **forever**: a key read more often than its TTL never expires, so set
expire-after-write as well. Keys without rows are cached only with ``cache_missing_key``. Keys
served from the cache are not queried.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field


@dataclass
class CacheSettings:
    max_rows: int = 100_000  # keys held (each with all its rows), as Flink's max-rows
    expire_after_write_s: float | None = None
    expire_after_access_s: float | None = None  # alone, a hot key can stay stale forever
    cache_missing_key: bool = True


@dataclass
class LookupStats:
    """Counters since the last ``take_stats()``. ``queries`` and ``query_seconds`` count every
    statement executed, also in attempts that were retried and while bisecting, and ``keys`` the
    keys those statements sent; ``cache_*`` count distinct keys (only with a cache)."""

    queries: int = 0
    keys: int = 0
    rows: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_evictions: int = 0
    retries: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # connection, timeout, conflict, data, query
    query_seconds: list[float] = field(default_factory=list)


@dataclass
class LookupResult:
    rows: dict[tuple, tuple[tuple, ...]]  # each valid key -> its rows (the columns read; () = none)
    invalid: dict[tuple, str]  # keys the key columns cannot hold -> why
    # Keys whose rows hold a value the join cannot take (``LookupClient._row_problem``) -> why,
    # naming the column and the value: the key is fine, its rows are not.
    bad_rows: dict[tuple, str] = field(default_factory=dict)


class _Cache:
    """LRU by canonical key with expire-after-write and expire-after-access."""

    def __init__(self, settings: CacheSettings):
        self.settings = settings
        self._entries: OrderedDict[tuple, list] = OrderedDict()  # key -> [rows, written, accessed]

    def get(self, key: tuple, now: float):
        entry = self._entries.get(key)
        if entry is None:
            return None
        s = self.settings
        if (s.expire_after_write_s is not None and now - entry[1] >= s.expire_after_write_s) or (
            s.expire_after_access_s is not None and now - entry[2] >= s.expire_after_access_s
        ):
            del self._entries[key]
            return None
        entry[2] = now
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: tuple, rows: tuple, now: float) -> int:
        """Stores a key's rows; returns how many keys were evicted for room."""
        if self.settings.max_rows <= 0 or (not rows and not self.settings.cache_missing_key):
            return 0
        self._entries[key] = [rows, now, now]
        self._entries.move_to_end(key)
        evicted = 0
        while len(self._entries) > self.settings.max_rows:
            self._entries.popitem(last=False)
            evicted += 1
        return evicted

    def __len__(self) -> int:
        return len(self._entries)
