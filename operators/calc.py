"""The join's output computed from the joined rows: expressions in the select list and a WHERE
kept after the join (Flink's Calc after its join operator), as a wrapper of any join operator.

The wrapped operator emits the joined rows (its projection: the columns the output reads); each
change is passed through ``calc(row) -> row | None`` (``expressions.compile_projection``): None
drops the change (the WHERE is not TRUE for it). A calculation is deterministic, so a
retraction is dropped or kept, and computed, exactly as the row it retracts was: the output
stays a valid changelog. A change whose calculation fails (a CAST Flink fails on, a division by
zero) is not emitted but reported in ``out.failed`` with why, and the host dead-letters it; its
retraction fails the same way, so nothing is left half emitted."""
from __future__ import annotations

from typing import Any, Callable

from .state import Context, KeyState, Output


class OutputCalc:
    """A join operator whose output changes go through ``calc``."""

    def __init__(self, inner, calc: Callable[[tuple], tuple | None]):
        self.inner = inner
        self.calc = calc

    def __getattr__(self, name: str):  # MAPS, state names...: the wrapped operator's
        return getattr(self.inner, name)

    def process(self, state: KeyState, records, ctx: Context, out: Output) -> None:
        start = len(out.rows)
        self.inner.process(state, records, ctx, out)
        self._apply(out, start)

    def on_timer(self, state: KeyState, domain: str, ts: int, ctx: Context, out: Output) -> None:
        start = len(out.rows)
        self.inner.on_timer(state, domain, ts, ctx, out)
        self._apply(out, start)

    def map_rows(self, value: Any, left, right) -> Any:
        return self.inner.map_rows(value, left, right)

    def _apply(self, out: Output, start: int) -> None:
        calc = self.calc
        rows = out.rows
        kept = rows[:start]
        for kind, row in rows[start:]:
            try:
                result = calc(row)
            except Exception as err:  # noqa: BLE001 - the expression's failure, named in its message
                out.failed.append((kind, row, str(err)))
                continue
            if result is not None:
                kept.append((kind, result))
        out.rows = kept
