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


#: How many computed rows an OutputCalc keeps for the retractions to come (per operator, per process):
#: two generations of half as many each.
RECENT_ROWS = 1 << 15
_INSERT, _UPDATE_BEFORE, _UPDATE_AFTER, _DELETE = 0, 1, 2, 3  # RowKind's byte values


class OutputCalc:
    """A join operator whose output changes go through ``calc``.

    A retraction (-U, -D) is computed as the row it retracts was, so the computed rows of the
    newest inserted rows (+I, +U) are kept, about :data:`RECENT_ROWS`, by joined row: a
    retraction of one of them takes it instead of computing it again. Half of a join's changelog
    is retractions where rows update; the calculation is deterministic (``expressions`` refuses
    the functions that are not), so the output is the same either way."""

    def __init__(self, inner, calc: Callable[[tuple], tuple | None]):
        self.inner = inner
        self.calc = calc
        self._recent: dict = {}  # the newest computed rows, by joined row
        self._older: dict = {}  # the generation before: a dict is never evicted from one row at a time

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
        calc, recent, older = self.calc, self._recent, self._older
        generation = RECENT_ROWS // 2
        rows = out.rows
        kept = rows[:start]
        for kind, row in rows[start:]:
            retraction = kind == _UPDATE_BEFORE or kind == _DELETE
            result = _UNKNOWN
            # A zero equals a negative zero (and 0 and False), so a row holding one may be equal to
            # another that computes to something else (CAST(-0.0 AS STRING)): computed, not kept.
            keep = generation and 0.0 not in row
            if retraction and keep:
                try:
                    result = recent.get(row, _UNKNOWN)
                    if result is _UNKNOWN:
                        result = older.get(row, _UNKNOWN)
                except TypeError:  # an unhashable value (a collection type): computed, not kept
                    pass
            if result is _UNKNOWN:
                try:
                    result = calc(row)
                except Exception as err:  # noqa: BLE001 - the expression's failure, named in its message
                    out.failed.append((kind, row, str(err)))
                    continue
                if not retraction and keep:
                    try:
                        recent[row] = result
                    except TypeError:
                        pass
                    else:
                        if len(recent) >= generation:  # a new generation; the oldest goes whole
                            self._older = older = recent
                            self._recent = recent = {}
            if result is not None:
                kept.append((kind, result))
        out.rows = kept


_UNKNOWN = object()
