"""Interval joins: ``l.k = r.k AND r.t + lower <= l.t <= r.t + upper`` over append-only inputs.

The rules are those of Flink's ``TimeIntervalJoin`` (``RowTimeIntervalJoin`` for event time,
``ProcTimeIntervalJoin`` for processing time), as tests/conformance/README.md section 10 states them.
With ``relL = -lower`` and ``relR = upper``, a left row at time ``t`` matches right rows with time
in ``[t - relR, t + relL]`` and a right row at ``t`` matches left rows in ``[t - relL, t + relR]``.

The *operator time* ``T`` is the combined watermark (event time; 0 while it is below 0 or not yet
known) or the clock (processing time). A row ``x`` of side S at time ``t``:

1. joins every stored row of the other side O within its range (and the extra condition) at once,
   marking both as matched; output rows are always ``+I``;
2. in the same scan, removes every stored O row with time ``<= T - relO - 1`` (null-padding it
   when O is preserved and it never matched);
3. is stored when ``T < t + relS``; otherwise it can never be matched again and, on a preserved
   side without a match, is null-padded at once. Nothing is ever dropped as late;
4. when stored and no clean-up of side S is pending for its key, schedules one at
   ``t + relS + min_cleanup_interval + 1``.

A clean-up of side S at operator time ``T`` removes (and pads) the stored S rows with time
``<= T - relS - 1`` and schedules the next one for the earliest remaining row. One pending
clean-up per key and side, as in Flink: a row stored while one is pending waits for it.

Stored value per join key (builtins only, the checkpoint format)::

    (left_rows, right_rows, left_cleanup, right_cleanup)

``left_rows`` / ``right_rows`` are lists of ``[time, row, matched]`` (time an int, row the input
tuple, matched a bool) in arrival order; ``left_cleanup`` / ``right_cleanup`` are the time (int)
of the side's pending clean-up or None. The key holds one registered timer, in the join's own
domain (EVENT or PROC), at the earlier of the two pending clean-ups. A key with no rows and no
pending clean-up has its state cleared.

Inputs are append-only (the spec refuses others): every record is taken as an insert of its row,
whatever its kind. A row whose time column is NULL has no range: it matches nothing, is never
stored, and is null-padded at once on a preserved side.

A negative-size interval (``lower > upper``) can match nothing: like Flink, which plans no join
at all, preserved rows are null-padded on arrival, the others discarded, and no state is kept.
"""
from __future__ import annotations

from typing import Iterable

from .rowkind import RowKind
from .rows import nulls, row_builder
from .spec import IntervalJoinSpec, null_key_filter
from .state import EVENT, PROC, Context, KeyState, Output

LEFT_ROWS, RIGHT_ROWS, LEFT_CLEANUP, RIGHT_CLEANUP = range(4)
TIME, ROW, MATCHED = range(3)

_INSERT = int(RowKind.INSERT)


class _IntervalBase:
    def __init__(self, spec: IntervalJoinSpec):
        self.spec = spec
        self.time_domain = EVENT if spec.event_time else PROC
        self.output_watermark_delay_ms = spec.output_watermark_delay_ms
        self.preserved = (spec.join_type.left_outer, spec.join_type.right_outer)
        self._build = row_builder(spec.projection)
        self._left_nulls = nulls(spec.left.width)
        self._right_nulls = nulls(spec.right.width)

    def _pad(self, out: Output, side: int, row: tuple) -> None:
        if side == 0:
            out.rows.append((_INSERT, self._build(row, self._right_nulls)))
        else:
            out.rows.append((_INSERT, self._build(self._left_nulls, row)))


    def map_rows(self, value, left, right):
        if value is None or isinstance(self, NegativeSizeIntervalJoin):
            return value
        maps = (left, right)
        rows = [[[entry[TIME], maps[side](entry[ROW]), entry[MATCHED]] for entry in value[side]] for side in (0, 1)]
        return (rows[0], rows[1], value[LEFT_CLEANUP], value[RIGHT_CLEANUP])


class NegativeSizeIntervalJoin(_IntervalBase):
    """``lower > upper``: nothing can match; preserved rows are padded on arrival, nothing is stored."""

    def process(self, state: KeyState, records: Iterable, ctx: Context, out: Output) -> None:
        for side, kind, row in records:
            if self.preserved[side]:
                self._pad(out, side, row)

    def on_timer(self, state: KeyState, domain: str, ts, ctx: Context, out: Output) -> None:
        pass


class IntervalJoin(_IntervalBase):
    def __init__(self, spec: IntervalJoinSpec):
        assert not spec.negative_size
        super().__init__(spec)
        self.relative = (spec.left_relative_size, spec.right_relative_size)
        self.min_cleanup = spec.min_cleanup_interval_ms
        self.condition = spec.condition
        self.key_can_match = null_key_filter(spec.filter_nulls, spec.left.join_key, spec.right.join_key)
        if spec.event_time:
            time_of = spec.time_of or (lambda v: v)
            columns = (spec.left_time, spec.right_time)
            self._row_time = lambda side, row, now: time_of(row[columns[side]])
        else:
            self._row_time = lambda side, row, now: now

    # -- time ----------------------------------------------------------------------------------
    def _now(self, ctx: Context, fired=None):
        """The current time of the join's domain: the clock, or the combined watermark (None until
        both inputs have one). A timer fires only once that time has reached it."""
        now = ctx.now if self.time_domain == PROC else ctx.watermark
        if fired is not None and (now is None or now < fired):
            now = fired
        return now

    def _operator_time(self, now):
        """``T``: the clock, or the watermark floored at 0 (Flink's operator time)."""
        if self.time_domain == PROC:
            return now
        return now if now is not None and now > 0 else 0

    # -- state ---------------------------------------------------------------------------------
    def _load(self, state: KeyState) -> list:
        value = state.get()
        return [[], [], None, None] if value is None else list(value)

    def _store(self, state: KeyState, value: list, registered) -> None:
        """Write the value back and keep the key's one timer at its earliest pending clean-up."""
        due = self._next_timer(value)
        if due != registered:
            if registered is not None:
                state.delete_timer(self.time_domain, registered)
            if due is not None:
                state.register_timer(self.time_domain, due)
        if value[LEFT_ROWS] or value[RIGHT_ROWS] or due is not None:
            state.put(tuple(value))
        else:
            state.clear()

    @staticmethod
    def _next_timer(value: list):
        pending = [t for t in (value[LEFT_CLEANUP], value[RIGHT_CLEANUP]) if t is not None]
        return min(pending) if pending else None

    # -- the join ------------------------------------------------------------------------------
    def _matches(self, side: int, row: tuple, other: tuple) -> bool:
        cond = self.condition
        if cond is None:
            return True
        return (cond(row, other) if side == 0 else cond(other, row)) is True

    def _emit_pair(self, out: Output, side: int, row: tuple, other: tuple) -> None:
        left, right = (row, other) if side == 0 else (other, row)
        out.rows.append((_INSERT, self._build(left, right)))

    def _expire(self, out: Output, side: int, rows: list, upto) -> list:
        """Remove the rows of ``side`` with time <= ``upto``, padding never-matched ones when the
        side is preserved; returns the remaining rows."""
        keep = []
        pad = self.preserved[side]
        for entry in rows:
            if entry[TIME] <= upto:
                if pad and not entry[MATCHED]:
                    self._pad(out, side, entry[ROW])
            else:
                keep.append(entry)
        return keep

    def process(self, state: KeyState, records: Iterable, ctx: Context, out: Output) -> None:
        value = self._load(state)
        registered = self._next_timer(value)
        T = self._operator_time(self._now(ctx))
        rel = self.relative
        for side, kind, row in records:
            t = self._row_time(side, row, ctx.now)
            other = 1 - side
            matched = False
            if t is None:  # no time, no range: it can match nothing (and is never stored)
                if self.preserved[side]:
                    self._pad(out, side, row)
                continue
            # A side-S row at t matches O rows with time in [t - relO, t + relS].
            low, high = t - rel[other], t + rel[side]
            expired_upto = T - rel[other] - 1
            can_match = self.key_can_match(side, row)
            keep = []
            pad_other = self.preserved[other]
            for entry in value[other]:
                other_time = entry[TIME]
                if can_match and low <= other_time <= high and self.key_can_match(other, entry[ROW]) \
                        and self._matches(side, row, entry[ROW]):
                    self._emit_pair(out, side, row, entry[ROW])
                    entry[MATCHED] = True
                    matched = True
                if other_time <= expired_upto:
                    if pad_other and not entry[MATCHED]:
                        self._pad(out, other, entry[ROW])
                else:
                    keep.append(entry)
            value[other] = keep
            if T < t + rel[side]:
                value[side].append([t, row, matched])
                if value[LEFT_CLEANUP + side] is None:
                    value[LEFT_CLEANUP + side] = t + rel[side] + self.min_cleanup + 1
            elif self.preserved[side] and not matched:
                self._pad(out, side, row)
        self._store(state, value, registered)

    def on_timer(self, state: KeyState, domain: str, ts, ctx: Context, out: Output) -> None:
        value = state.get()
        if value is None:
            return
        value = list(value)
        registered = self._next_timer(value)
        if registered == ts:
            registered = None  # this timer has fired: it is no longer registered
        now = self._now(ctx, ts)
        T = self._operator_time(now)
        # Due clean-ups in time order; the right side first when both are due at the same time.
        due = sorted(
            (value[LEFT_CLEANUP + side], -side, side)
            for side in (0, 1)
            if value[LEFT_CLEANUP + side] is not None and value[LEFT_CLEANUP + side] <= now
        )
        for _, _, side in due:
            rel = self.relative[side]
            rows = self._expire(out, side, value[side], T - rel - 1)
            value[side] = rows
            value[LEFT_CLEANUP + side] = (
                min(e[TIME] for e in rows) + rel + self.min_cleanup + 1 if rows else None
            )
        self._store(state, value, registered)


def make_interval_join(spec: IntervalJoinSpec):
    if spec.negative_size:
        return NegativeSizeIntervalJoin(spec)
    return IntervalJoin(spec)
