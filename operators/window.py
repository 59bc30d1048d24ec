"""Window joins: two window table functions (TUMBLE, HOP, CUMULATE) joined on window equality and
the join key, over append-only inputs, in event time (Flink's ``WindowJoinOperator``; the rules
of tests/conformance/README.md section 11).

Each input row is assigned to its windows (``WindowSpec.windows``); every window gives one
*windowed copy* (the row followed by ``window_start``, ``window_end``, ``window_time``), handled
on its own:

- a copy whose window has already fired (``window_end - 1 <= combined watermark``) is late: it is
  dropped, never joined or padded, and reported in ``out.late`` as ``(kind, input row)``, once per
  dropped copy (a HOP row late for two windows appears twice);
- otherwise it is buffered under its key and window. Arriving rows emit nothing.

Inputs are append-only (the spec refuses others): every record is taken as an insert of its row,
whatever its kind. A row whose time column is NULL belongs to no window and is dropped silently,
as Flink's window table function does (it is not late).

When the watermark reaches ``window_end - 1`` the window fires and its buffer is discarded:
INNER emits every matching pair, LEFT / RIGHT / FULL add the null-padded rows (NULL in all columns
of the missing side, its window columns included) of copies without a match, SEMI emits every
left copy with a match, ANTI every left copy without one. All output rows are ``+I``. A pair
matches when the key has no NULL compared with ``=`` and the condition, evaluated on the windowed
rows, is TRUE.

Stored value per join key (builtins only, the checkpoint format)::

    {window_end: [window_start, left_rows, right_rows]}

``window_end`` / ``window_start`` are ints (epoch ms), ``left_rows`` / ``right_rows`` lists of
input row tuples in arrival order (the window columns are added when the window fires). The key
holds one EVENT timer, at ``min(window_end) - 1``; the state is cleared when no window is left.
"""
from __future__ import annotations

from typing import Iterable

from .rowkind import RowKind
from .rows import nulls, row_builder
from .spec import WINDOW_COLUMNS, JoinType, WindowJoinSpec, null_key_filter
from .state import EVENT, Context, KeyState, Output

START, LEFT_ROWS, RIGHT_ROWS = range(3)

_INSERT = int(RowKind.INSERT)


class WindowJoin:
    time_domain = EVENT
    output_watermark_delay_ms = 0

    def __init__(self, spec: WindowJoinSpec):
        self.spec = spec
        self.join_type = spec.join_type
        self.window = spec.window
        self.condition = spec.condition
        self.key_can_match = null_key_filter(spec.filter_nulls, spec.left.join_key, spec.right.join_key)
        self._build = row_builder(spec.projection, right=not spec.join_type.is_semi_anti)
        extra = len(WINDOW_COLUMNS)
        self._left_nulls = nulls(spec.left.width + extra)
        self._right_nulls = nulls(spec.right.width + extra)
        time_of = spec.time_of or (lambda v: v)
        columns = (spec.left_time, spec.right_time)
        self._row_time = lambda side, row: time_of(row[columns[side]])

    def map_rows(self, value, left, right):
        if value is None:
            return None
        return {end: [start, [left(r) for r in lefts], [right(r) for r in rights]]
                for end, (start, lefts, rights) in value.items()}

    @staticmethod
    def _timer_of(value) -> int | None:
        return min(value) - 1 if value else None

    def _store(self, state: KeyState, value: dict, registered) -> None:
        due = self._timer_of(value)
        if due != registered:
            if registered is not None:
                state.delete_timer(EVENT, registered)
            if due is not None:
                state.register_timer(EVENT, due)
        if value:
            state.put(value)
        else:
            state.clear()

    def process(self, state: KeyState, records: Iterable, ctx: Context, out: Output) -> None:
        value = state.get()
        value = {} if value is None else value
        registered = self._timer_of(value)
        watermark = ctx.watermark
        for side, kind, row in records:
            t = self._row_time(side, row)
            if t is None:
                continue  # the window table function drops a row without a time
            for start, end in self.window.windows(t):
                if watermark is not None and end - 1 <= watermark:
                    out.late.append((kind, row))  # its window has fired already
                    continue
                window = value.get(end)
                if window is None:
                    window = value[end] = [start, [], []]
                window[LEFT_ROWS + side].append(row)
        self._store(state, value, registered)

    def on_timer(self, state: KeyState, domain: str, ts, ctx: Context, out: Output) -> None:
        value = state.get()
        if not value:
            return
        registered = self._timer_of(value)
        if registered == ts:
            registered = None  # this timer has fired: it is no longer registered
        watermark = ctx.watermark if ctx.watermark is not None and ctx.watermark > ts else ts
        for end in sorted(e for e in value if e - 1 <= watermark):
            start, lefts, rights = value.pop(end)
            self._fire(out, start, end, lefts, rights)
        self._store(state, value, registered)

    def _fire(self, out: Output, start: int, end: int, lefts: list, rights: list) -> None:
        columns = (start, end, end - 1)
        lefts = [row + columns for row in lefts]
        rights = [row + columns for row in rights]
        cond = self.condition
        build = self._build
        join_type = self.join_type
        emit = out.rows.append

        def partners(left):
            if not rights or not self.key_can_match(0, left):
                return []
            if cond is None:
                return range(len(rights))
            return [j for j, right in enumerate(rights) if cond(left, right) is True]

        if join_type.is_semi_anti:
            want = join_type is JoinType.SEMI
            for left in lefts:
                if bool(partners(left)) == want:
                    emit((_INSERT, build(left, None)))
            return
        matched_right = [False] * len(rights)
        for left in lefts:
            found = partners(left)
            for j in found:
                emit((_INSERT, build(left, rights[j])))
                matched_right[j] = True
            if not found and join_type.left_outer:
                emit((_INSERT, build(left, self._right_nulls)))
        if join_type.right_outer:
            for right, matched in zip(rights, matched_right):
                if not matched:
                    emit((_INSERT, build(self._left_nulls, right)))


def make_window_join(spec: WindowJoinSpec) -> WindowJoin:
    return WindowJoin(spec)
