"""Changelog normalization for upsert inputs (Flink's ``ChangelogNormalize``).

An upsert topic carries, per message key (the primary key), the latest row, or a tombstone for a
delete. Keeping the last row per key turns it into a full changelog the join can retract from:
the first row of a key is ``+I``, a changed row ``-U`` old / ``+U`` new, a tombstone ``-D`` of
the last row. A repeated identical row and a tombstone for an unknown key change nothing.
"""
from __future__ import annotations

from typing import Iterable

from .rowkind import RowKind
from .state import Context, KeyState, Output


class ChangelogNormalize:
    def process(self, state: KeyState, records: Iterable, ctx: Context, out: Output) -> None:
        """``records``: rows of one message key in offset order; ``None`` stands for a tombstone."""
        last = state.get()
        before = last
        for row in records:
            if row is None:
                if last is not None:
                    out.rows.append((RowKind.DELETE, last))
                    last = None
            elif last is None:
                out.rows.append((RowKind.INSERT, row))
                last = row
            elif row != last:
                out.rows.append((RowKind.UPDATE_BEFORE, last))
                out.rows.append((RowKind.UPDATE_AFTER, row))
                last = row
        if last is not before:
            if last is None:
                state.clear()
            else:
                state.put(last)
