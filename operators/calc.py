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

from operator import itemgetter
from typing import Any, Callable

from .state import Context, KeyState, Output


#: How many computed rows an OutputCalc keeps for the retractions to come (per operator, per process):
#: two generations of half as many each.
RECENT_ROWS = 1 << 15


class OutputCalc:
    """A join operator whose output changes go through ``calc``.

    A retraction (-U, -D) is computed as the row it retracts was, so the computed rows of the
    newest inserted rows (+I, +U) are kept, about :data:`RECENT_ROWS`, by joined row: a
    retraction of one of them takes it instead of computing it again. Half of a join's changelog
    is retractions where rows update; the calculation is deterministic (``expressions`` refuses
    the functions that are not), so the output is the same either way."""

    def __init__(self, inner, calc: Callable[[tuple], tuple | None], zero_columns: tuple[int, ...] | None = None):
        """``zero_columns``: the positions of the joined row that may hold a zero of a float or a
        decimal (the only values equal to another that computes otherwise: -0.0 == 0.0); None
        when not known, and every position is looked at."""
        self.inner = inner
        self.calc = calc
        self._recent: dict = {}  # the newest computed rows, by joined row
        self._older: dict = {}  # the generation before: a dict is never evicted from one row at a time
        self._keepable = _keepable(zero_columns)

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
        calc, recent, older, failed = self.calc, self._recent, self._older, out.failed
        generation = RECENT_ROWS // 2
        keepable = self._keepable if generation else _never
        rows = out.rows
        kept = rows[:start]
        append = kept.append
        for kind, row in rows[start:]:
            if kind & 1:  # a retraction (-U 1, -D 3: RowKind's odd bytes): what it retracts computed, if kept
                result = _UNKNOWN
                if keepable(row):
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
                        failed.append((kind, row, str(err)))
                        continue
            else:
                try:
                    result = calc(row)
                except Exception as err:  # noqa: BLE001
                    failed.append((kind, row, str(err)))
                    continue
                if keepable(row):
                    try:
                        recent[row] = result
                    except TypeError:
                        pass
                    else:
                        if len(recent) >= generation:  # a new generation; the oldest goes whole
                            self._older = older = recent
                            self._recent = recent = {}
            if result is not None:
                append((kind, result))
        out.rows = kept


def _keepable(zero_columns: tuple[int, ...] | None) -> Callable[[tuple], bool]:
    """Whether a joined row's computed row may be kept for its retractions: not when it holds a
    zero where a float or a decimal may be. A zero equals a negative zero (and 0 and False), so a
    row holding one may be equal to another that computes to something else (CAST(-0.0 AS
    STRING))."""
    if zero_columns is None:
        return lambda row: 0.0 not in row
    if not zero_columns:
        return lambda row: True
    if len(zero_columns) == 1:
        position = zero_columns[0]
        return lambda row: row[position] != 0.0
    values = itemgetter(*zero_columns)
    return lambda row: 0.0 not in values(row)


def _never(row) -> bool:
    return False


_UNKNOWN = object()
