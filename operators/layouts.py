"""The three ways an input's rows are kept per join key, behind one interface.

Every layout stores, per join key, a dict of *entries* (or, for a side too large for one value,
a :class:`~operators.splitside.SplitSide` that behaves as one). An entry is a list
``[row, copies, associations, written_at]``:

- ``copies``: how many identical rows it stands for (always 1 when the input has a unique key);
- ``associations``: how many rows of the other side it currently matches (used on outer sides and
  on the left side of SEMI/ANTI joins, Flink's "association count");
- ``written_at``: processing time of the last write, for state TTL.

The layouts differ only in what identifies an entry and in what an accumulate does to an entry
that is already there: it *replaces* it when the input has a unique key and adds a copy when it
does not. The join algorithms never ask which layout they have.
"""
from __future__ import annotations

from operator import itemgetter
from typing import Iterator

from .rows import identity
from .spec import InputSpec, StateLayout

ROW, COPIES, ASSOC, WRITTEN = 0, 1, 2, 3


class SideView:
    replaces = True

    def __init__(self, spec: InputSpec):
        self.ttl = spec.state_ttl_ms

    def entry_key(self, row: tuple):
        raise NotImplementedError

    def visible(self, entry: list, now: int) -> bool:
        return self.ttl is None or entry[WRITTEN] + self.ttl > now

    def entries(self, side: dict, now: int) -> Iterator[list]:
        if self.ttl is None:
            yield from side.values()
        else:
            ttl = self.ttl
            for entry in side.values():
                if entry[WRITTEN] + ttl > now:
                    yield entry

    def replaced(self, side: dict, row: tuple, now: int) -> list | None:
        """The stored entry an accumulate of ``row`` would replace, if any (unique-key layouts)."""
        entry = side.get(self.entry_key(row))
        if entry is None or not self.visible(entry, now):
            return None
        return entry

    def add(self, side: dict, row: tuple, associations: int, now: int) -> None:
        side[self.entry_key(row)] = [row, 1, associations, now]

    def retract(self, side: dict, row: tuple, now: int) -> None:
        side.pop(self.entry_key(row), None)

    def purge(self, side: dict, now: int) -> None:
        """Drop entries whose TTL has passed (they are already invisible)."""
        if self.ttl is not None:
            if not isinstance(side, dict):  # a split side (splitside.py) reads no more than it must
                side.purge(self.ttl, now)
                return
            for key in [k for k, e in side.items() if e[WRITTEN] + self.ttl <= now]:
                del side[key]

    def latest_expiry(self, side: dict) -> int | None:
        if self.ttl is None or not side:
            return None
        if not isinstance(side, dict):
            return side.latest_written() + self.ttl
        return max(e[WRITTEN] for e in side.values()) + self.ttl


class JoinKeyContainsUniqueKey(SideView):
    """The unique key is part of the join key: at most one row per join key."""

    def entry_key(self, row):
        return 0


class InputSideHasUniqueKey(SideView):
    """Rows keyed by their unique key within the join key."""

    def __init__(self, spec: InputSpec):
        super().__init__(spec)
        self._uk = spec.unique_key
        if len(self._uk) == 1:  # the usual case, on the hot path: no generator, no call unless NaN
            (i,) = self._uk
            self.entry_key = lambda row: (row[i],) if row[i] == row[i] else identity((row[i],))
        else:
            values = itemgetter(*self._uk)
            self.entry_key = lambda row: identity(values(row))


class InputSideHasNoUniqueKey(SideView):
    """A multiset: identical rows share one entry with a count of copies (keyed by the row's
    :func:`~operators.rows.identity`, so that rows holding NaN meet too)."""

    replaces = False

    def entry_key(self, row):
        return identity(row)

    def replaced(self, side, row, now):
        return None

    def add(self, side, row, associations, now):
        key = identity(row)
        entry = side.get(key)
        if entry is not None and self.visible(entry, now):
            entry[COPIES] += 1
            entry[ASSOC] = associations
            entry[WRITTEN] = now
        else:
            side[key] = [row, 1, associations, now]

    def retract(self, side, row, now):
        key = identity(row)
        entry = side.get(key)
        if entry is None:
            return
        if not self.visible(entry, now) or entry[COPIES] <= 1:
            del side[key]
        else:
            entry[COPIES] -= 1
            entry[WRITTEN] = now


_LAYOUTS = {
    StateLayout.JOIN_KEY_CONTAINS_UNIQUE_KEY: JoinKeyContainsUniqueKey,
    StateLayout.INPUT_SIDE_HAS_UNIQUE_KEY: InputSideHasUniqueKey,
    StateLayout.INPUT_SIDE_HAS_NO_UNIQUE_KEY: InputSideHasNoUniqueKey,
}


def view_for(spec: InputSpec) -> SideView:
    return _LAYOUTS[spec.layout](spec)
