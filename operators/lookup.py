"""Lookup join: ``stream JOIN table FOR SYSTEM_TIME AS OF PROCTIME()`` against a database table
(Flink's lookup join), INNER and LEFT.

Each stream row joins the table rows its lookup key matches when its micro-batch runs; later
changes of the table never revise earlier output. The host looks the table up before the operator
runs, once per batch of keys (``service/lookup.py``), and hands every accumulate record over with
what its key found. The operator joins, keeps the pairs the join condition accepts and, over a
changelog input, remembers what it emitted for the row: a retraction then retracts exactly those
rows, whatever the table holds by then. Flink retracts by looking the row up again (wrong when the
table changed: its "non-deterministic update"), unless its planner adds a materializing wrapper,
which pads a forgotten row with NULLs and overwrites duplicates; here a retraction of a row the
operator does not remember is reported (:attr:`Output.unmatched`), and duplicates are kept apart.

Records: ``(0, kind, (row, matches))``: ``matches`` is the tuple of table rows the row's lookup key
found (``()`` when none), ``None`` on a retraction (nothing is looked up for it). A tombstone of an
upsert input is a ``-D`` whose row is ``None``.

The host's grouping key is the stream row's identity (:class:`Identity`), and per key the state is

- ``KEY`` (the input has a primary key: every upsert input, a retract input with one): the key's
  current row and the table rows it was joined with, ``(row, joined, expiry)``. An upsert
  replaces it (``-U`` of the old output, ``+U`` of the new; an identical row changes nothing, as
  Flink's changelog normalization before the join); a ``+I`` or ``+U`` of a key that holds a row
  first retracts that row's output;
- ``ROW`` (a retract input without a primary key: the row is its own key): one entry per copy
  of the row, oldest first, ``([joined, ...], expiry)``; a retraction takes the oldest copy's;
- ``NONE`` (an append-only input): nothing; each row is joined and forgotten.

``expiry``: with a state TTL, the processing time from which the key is forgotten (a timer per key,
pushed forward on every write, drops it), else None. A retraction after that is unmatched.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterable

from .rowkind import ACCUMULATE, RowKind
from .rows import identity, nulls, row_builder
from .spec import ConfigurationError, JoinType
from .state import PROC, Context, KeyState, Output

_UPDATE_BEFORE, _UPDATE_AFTER, _INSERT = int(RowKind.UPDATE_BEFORE), int(RowKind.UPDATE_AFTER), int(RowKind.INSERT)


class Identity(str, Enum):
    """What the host groups a lookup join's stream rows by (see the module docstring)."""

    KEY = "key"
    ROW = "row"
    NONE = "none"


@dataclass(frozen=True)
class LookupJoinSpec:
    join_type: JoinType  # INNER or LEFT
    left_width: int
    right_width: int
    identity: Identity
    upsert: bool = False  # the stream is an upsert input (every row +U, tombstones -D of no row)
    condition: Callable[[tuple, tuple], object] | None = None  # the ON clause beyond the lookup key
    projection: tuple[tuple[int, int], ...] | None = None
    state_ttl_ms: int | None = None

    def __post_init__(self):
        if self.join_type not in (JoinType.INNER, JoinType.LEFT):
            raise ConfigurationError(f"a lookup join is INNER or LEFT, not {self.join_type.value}")
        if self.upsert and self.identity is not Identity.KEY:
            raise ConfigurationError("an upsert input is keyed by its primary key")


class LookupJoin:
    """The lookup join for one stream-row identity (see the module docstring)."""

    def __init__(self, spec: LookupJoinSpec):
        self.spec = spec
        self.left_outer = spec.join_type is JoinType.LEFT
        self.condition = spec.condition
        self._build = row_builder(spec.projection)
        self._padding = nulls(spec.right_width)
        self.ttl = spec.state_ttl_ms
        # The TTL timer only drops state that process() no longer sees (it reads an expired key as
        # forgotten, as Flink's TTL never returns an expired value).
        self.cleanup_grain = max(1, self.ttl // 16) if self.ttl else None

    # -- joining ---------------------------------------------------------------------------------
    def joined(self, row: tuple, matches: tuple) -> tuple:
        """The table rows ``row`` joins: those of ``matches`` the condition accepts."""
        if self.condition is None:
            return tuple(matches)
        return tuple(m for m in matches if self.condition(row, m) is True)

    def _emit(self, out: Output, kind: int, row: tuple, joined: tuple) -> None:
        if joined:
            for match in joined:
                out.rows.append((kind, self._build(row, match)))
        elif self.left_outer:
            out.rows.append((kind, self._build(row, self._padding)))

    # -- the operator ----------------------------------------------------------------------------
    def process(self, state: KeyState, records: Iterable, ctx: Context, out: Output) -> None:
        identity_kind = self.spec.identity
        if identity_kind is Identity.NONE:
            for _, kind, (row, matches) in records:
                self._emit(out, kind, row, self.joined(row, matches))
            return
        before = value = state.get()
        if value is not None and value[-1] is not None and value[-1] <= ctx.now:
            value = None  # expired: forgotten, whether or not its timer has fired yet
        if identity_kind is Identity.KEY:
            current = None if value is None else (value[0], value[1])
            for _, kind, (row, matches) in records:
                current = self._keyed(current, kind, row, matches, out)
            value = None if current is None else (current[0], current[1], value[2] if value else None)
        else:
            copies = [] if value is None else list(value[0])
            for _, kind, (row, matches) in records:
                if kind in ACCUMULATE:
                    joined = self.joined(row, matches)
                    self._emit(out, kind, row, joined)
                    copies.append(joined)
                elif copies:
                    self._emit(out, kind, row, copies.pop(0))
                else:
                    out.unmatched.append((kind, row))
            value = (tuple(copies), value[1] if value else None) if copies else None
        self._store(state, before, value, ctx)

    def _keyed(self, current, kind: int, row, matches, out: Output):
        """One record of a stream keyed by primary key; returns the key's (row, joined) after it."""
        if kind in ACCUMULATE:
            if current is not None:
                if self.spec.upsert and identity(current[0]) == identity(row):
                    return current  # an identical upsert changes nothing
                self._emit(out, _UPDATE_BEFORE, current[0], current[1])
                kind = _UPDATE_AFTER
            elif self.spec.upsert:
                kind = _INSERT
            joined = self.joined(row, matches)
            self._emit(out, kind, row, joined)
            return (row, joined)
        if current is not None:
            self._emit(out, kind, current[0], current[1])
        elif not self.spec.upsert:  # a tombstone for a key never seen changes nothing
            out.unmatched.append((kind, row))
        return None

    def _store(self, state: KeyState, before, value, ctx: Context) -> None:
        """Write the key's value if it changed; with a TTL, push the key's clean-up timer."""
        if value is None:
            if before is not None:
                if before[-1] is not None:
                    state.delete_timer(PROC, before[-1])
                state.clear()
            return
        if self.ttl:
            expiry = ctx.now + self.ttl
            if before is not None and before[-1] is not None and before[-1] != expiry:
                state.delete_timer(PROC, before[-1])
            if before is None or before[-1] != expiry:
                state.register_timer(PROC, expiry)
            value = value[:-1] + (expiry,)
        if value != before:
            state.put(value)

    def on_timer(self, state: KeyState, domain: str, ts: int, ctx: Context, out: Output) -> None:
        """The key's state TTL expired: forget it (a later retraction is unmatched)."""
        value = state.get()
        if value is not None and value[-1] is not None and value[-1] <= ts:
            state.clear()

    def map_rows(self, value, left, right):
        """Stored stream rows through ``left``, stored table rows through ``right``."""
        if value is None:
            return None
        if self.spec.identity is Identity.KEY:
            return (left(value[0]), tuple(right(m) for m in value[1]), value[2])
        return (tuple(tuple(right(m) for m in joined) for joined in value[0]), value[1])


def make_lookup_join(spec: LookupJoinSpec) -> LookupJoin:
    return LookupJoin(spec)
