"""Temporal joins: ``probe JOIN table FOR SYSTEM_TIME AS OF ...`` (INNER and LEFT).

Event time (Flink's ``TemporalRowTimeJoinOperator``): probe rows wait in state until the combined
watermark passes their time, then each joins the latest version of the build row whose version
time is at or before the probe's time. Versions are kept by time within a join key; once the
watermark passes, versions older than the latest one at or before the watermark can never be
used again and are removed. Probe rows that arrive at or behind the watermark are late: they are
dropped and reported, never joined.

Processing time (Flink's ``TemporalProcessTimeJoinOperator``): a probe row joins the build side's
current row of its key when it arrives; nothing waits and nothing is ever revised.

Both support idle-state retention: a processing-time timer per key, pushed to ``now + max``
whenever ``now + min`` is later than the registered one, which drops the key's state when it fires.
"""
from __future__ import annotations

from bisect import bisect_right
from typing import Iterable

from .rowkind import ACCUMULATE, RowKind
from .rows import nulls, row_builder
from .spec import JoinType, TemporalJoinSpec, TemporalKind, null_key_filter
from .state import EVENT, PROC, Context, KeyState, Output

PROBES, VERSIONS, EVENT_TIMER, CLEANUP_TIMER = range(4)


class _TemporalJoin:
    def __init__(self, spec: TemporalJoinSpec):
        self.spec = spec
        self.left_outer = spec.join_type is JoinType.LEFT
        self.condition = spec.condition
        self._build = row_builder(spec.projection)
        self._right_nulls = nulls(spec.right.width)
        self.key_can_match = null_key_filter(spec.filter_nulls, spec.left.join_key, spec.right.join_key)

    def _emit(self, out: Output, kind: int, probe: tuple, build: tuple | None) -> None:
        """Join ``probe`` with ``build`` (None = nothing to join) under the join condition."""
        if build is not None and (self.condition is None or self.condition(probe, build) is True):
            out.rows.append((kind, self._build(probe, build)))
        elif self.left_outer:
            out.rows.append((kind, self._build(probe, self._right_nulls)))

    def _retain(self, state: KeyState, value: list, now: int) -> None:
        """Push the idle-state cleanup timer (Flink's ``registerProcessingCleanupTimer``)."""
        if self.spec.retention_ms is None:
            return
        low, high = self.spec.retention_ms
        current = value[-1]
        if current is None or now + low > current:
            if current is not None:
                state.delete_timer(PROC, current)
            value[-1] = now + high
            state.register_timer(PROC, now + high)


class EventTimeTemporalJoin(_TemporalJoin):
    def __init__(self, spec: TemporalJoinSpec):
        assert spec.kind is TemporalKind.EVENT_TIME
        super().__init__(spec)
        time_of = spec.time_of or (lambda v: v)
        lt, rt = spec.left_time, spec.right_time
        self._probe_time = lambda row: time_of(row[lt])
        self._version_time = lambda row: time_of(row[rt])

    def _load(self, state: KeyState) -> list:
        value = state.get()
        return [[], {}, None, None] if value is None else list(value)

    def map_rows(self, value, left, right):
        if value is None:
            return None
        probes = [(kind, left(row), time) for kind, row, time in value[PROBES]]
        versions = {time: (kind, right(row)) for time, (kind, row) in value[VERSIONS].items()}
        return (probes, versions, value[EVENT_TIMER], value[CLEANUP_TIMER])

    def _store(self, state: KeyState, value: list) -> None:
        if value[PROBES] or value[VERSIONS] or value[EVENT_TIMER] is not None or value[CLEANUP_TIMER] is not None:
            state.put(tuple(value))
        else:
            state.clear()

    def _timer_at(self, state: KeyState, value: list, ts) -> None:
        """Keep one event-time timer per key, at the smallest time anything waits for."""
        current = value[EVENT_TIMER]
        if current is None or ts < current:
            if current is not None:
                state.delete_timer(EVENT, current)
            value[EVENT_TIMER] = ts
            state.register_timer(EVENT, ts)

    def process(self, state: KeyState, records: Iterable, ctx: Context, out: Output) -> None:
        value = self._load(state)
        watermark = ctx.watermark
        for side, kind, row in records:
            if side == 0:
                time = self._probe_time(row)
                if time is None or (watermark is not None and time <= watermark):
                    out.late.append((kind, row))
                    continue
                value[PROBES].append((kind, row, time))
            else:
                if kind == RowKind.UPDATE_BEFORE and self.spec.drop_update_before_on_right:
                    continue
                time = self._version_time(row)
                if time is None:
                    continue  # a version without a time can never be chosen; the service rejects it earlier
                value[VERSIONS][time] = (kind, row)  # a later message at the same time overwrites
            self._timer_at(state, value, time)
            self._retain(state, value, ctx.now)
        self._store(state, value)

    def on_timer(self, state: KeyState, domain: str, ts, ctx: Context, out: Output) -> None:
        value = self._load(state)
        if domain == PROC:
            if value[CLEANUP_TIMER] == ts:  # idle-state retention: forget the key
                if value[EVENT_TIMER] is not None:
                    state.delete_timer(EVENT, value[EVENT_TIMER])
                state.clear()
            return
        if value[EVENT_TIMER] == ts:
            value[EVENT_TIMER] = None
        pending = self._emit_due(value, ctx.watermark, out)
        if pending is not None:
            self._timer_at(state, value, pending)
        if self.spec.retention_ms is not None:
            if pending is not None or value[VERSIONS]:
                self._retain(state, value, ctx.now)
            elif value[CLEANUP_TIMER] is not None:
                state.delete_timer(PROC, value[CLEANUP_TIMER])
                value[CLEANUP_TIMER] = None
        self._store(state, value)

    def _emit_due(self, value: list, watermark, out: Output):
        """Join every probe row at or before the watermark, in arrival order; drop versions that can
        no longer be chosen. Returns the smallest time still waiting, or None."""
        waiting, due = [], []
        for probe in value[PROBES]:
            (due if probe[2] <= watermark else waiting).append(probe)
        value[PROBES] = waiting
        versions = value[VERSIONS]
        times = sorted(versions)
        if due:
            can_match = self.key_can_match(0, due[0][1])
            for kind, row, time in due:
                at = bisect_right(times, time) - 1
                build = None
                if at >= 0 and can_match:
                    version_kind, version_row = versions[times[at]]
                    if version_kind in ACCUMULATE:
                        build = version_row
                self._emit(out, kind, row, build)
        keep_from = bisect_right(times, watermark) - 1  # the latest version at or before the watermark
        for time in times[: max(keep_from, 0)]:
            del versions[time]
        return min((p[2] for p in waiting), default=None)


class ProcessingTimeTemporalJoin(_TemporalJoin):
    def __init__(self, spec: TemporalJoinSpec):
        assert spec.kind is TemporalKind.PROCESSING_TIME
        super().__init__(spec)

    def process(self, state: KeyState, records: Iterable, ctx: Context, out: Output) -> None:
        value = state.get()
        value = [None, None] if value is None else list(value)  # [current build row, cleanup timer]
        for side, kind, row in records:
            if side == 0:
                build = value[0] if self.key_can_match(0, row) else None
                self._emit(out, kind, row, build)
                if build is not None:
                    self._retain(state, value, ctx.now)
            elif kind in ACCUMULATE:
                value[0] = row
                self._retain(state, value, ctx.now)
            else:
                value[0] = None
                if value[1] is not None:
                    state.delete_timer(PROC, value[1])
                    value[1] = None
        if value[0] is None and value[1] is None:
            state.clear()
        else:
            state.put(tuple(value))

    def on_timer(self, state: KeyState, domain: str, ts, ctx: Context, out: Output) -> None:
        value = state.get()
        if value is not None and value[1] == ts:
            state.clear()

    def map_rows(self, value, left, right):
        if value is None:
            return None
        return (None if value[0] is None else right(value[0]), value[1])


def make_temporal_join(spec: TemporalJoinSpec):
    if spec.kind is TemporalKind.EVENT_TIME:
        return EventTimeTemporalJoin(spec)
    return ProcessingTimeTemporalJoin(spec)
