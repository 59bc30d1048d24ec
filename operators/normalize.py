"""Changelog normalization for upsert inputs (Flink's ``ChangelogNormalize``).

An upsert topic carries, per message key (the primary key), the latest row, or a tombstone for a
delete. Keeping the last row per key turns it into a full changelog the join can retract from:
the first row of a key is ``+I``, a changed row ``-U`` old / ``+U`` new, a tombstone ``-D`` of
the last row. A repeated identical row and a tombstone for an unknown key change nothing.

:func:`upsert_changes` is that rule for one record. :class:`ChangelogNormalize` applies it as a
stage of its own, keyed by primary key; a join whose join key is part of an upsert input's
primary key applies it itself, against the row it stores for the key (``regular.py``).
"""
from __future__ import annotations

from typing import Iterable

from .rowkind import RowKind
from .rows import identity
from .state import Context, KeyState, Output, Record


def upsert_changes(last: tuple | None, row: tuple | None) -> list[tuple[RowKind, tuple]]:
    """The full-changelog records for upsert record ``row`` (``None`` = tombstone) of a key whose
    current row is ``last`` (``None`` = none)."""
    if row is None:
        return [] if last is None else [(RowKind.DELETE, last)]
    if last is None:
        return [(RowKind.INSERT, row)]
    if identity(row) != identity(last):
        return [(RowKind.UPDATE_BEFORE, last), (RowKind.UPDATE_AFTER, row)]
    return []


class ChangelogNormalize:
    """Keyed by message key; stores the key's last row."""

    def process(self, state: KeyState, records: Iterable[Record], ctx: Context, out: Output) -> None:
        """``records``: the upsert records of one message key in offset order, a row or ``None`` for a
        tombstone (their kind is not read: an upsert topic has no RowKind)."""
        last = state.get()
        before = last
        for record in records:
            row = record[2]
            out.rows.extend(upsert_changes(last, row))
            last = row
        if last is not before:
            if last is None:
                state.clear()
            else:
                state.put(last)

    def on_timer(self, state: KeyState, domain: str, ts: int, ctx: Context, out: Output) -> None:
        """Never called: the stage registers no timers."""

    def map_rows(self, value, left, right):
        """The stored row is an input row of one side: the host passes that side's map as ``left``."""
        return None if value is None else left(value)
