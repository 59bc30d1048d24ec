"""Upsert materializer: turns a changelog into correct upserts for one upsert key.

When the output is keyed by an upsert key that is not the join key, the changes of one upsert key
come from several join keys, i.e. from several tasks, and their relative order is lost (an order
moving from product A to product B is retracted by A's task and re-inserted by B's). Like Flink's
``SinkUpsertMaterializer``, this operator keeps, per upsert key, the rows currently present in the
changelog (in the order they were added) and emits what an upsert sink needs whatever the
interleaving: the latest present row, or a delete when none is left.
"""
from __future__ import annotations

from typing import Iterable

from .rowkind import ACCUMULATE, RowKind
from .rows import identity
from .state import Context, KeyState, Output, Record


class UpsertMaterializer:
    """Keyed by the output's upsert key; stores the rows present for the key, oldest first."""

    def process(self, state: KeyState, records: Iterable[Record], ctx: Context, out: Output) -> None:
        """``records``: the changes of one upsert key (their side is not read), each join task's in
        its own order."""
        rows = list(state.get() or ())
        for _, kind, row in records:
            if kind in ACCUMULATE:
                rows.append(row)
                out.rows.append((RowKind.UPDATE_AFTER if len(rows) > 1 else RowKind.INSERT, row))
                continue
            key = identity(row)
            for i in range(len(rows) - 1, -1, -1):
                if identity(rows[i]) == key:
                    was_latest = i == len(rows) - 1
                    del rows[i]
                    if not rows:
                        out.rows.append((RowKind.DELETE, row))
                    elif was_latest:
                        out.rows.append((RowKind.UPDATE_AFTER, rows[-1]))
                    break
            # A retraction of a row that is not present changes nothing (it was already replaced).
        if rows:
            state.put(tuple(rows))
        else:
            state.clear()

    def on_timer(self, state: KeyState, domain: str, ts: int, ctx: Context, out: Output) -> None:
        """Never called: the stage registers no timers."""

    def map_rows(self, value, left, right):
        """The stored value is output rows, not input rows: each is passed through ``left``, the
        host's map from an older output to today's (``service/checkpoint.py`` says which output
        changes it accepts)."""
        return None if value is None else tuple(left(row) for row in value)
