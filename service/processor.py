"""The join, normalize and upsert materializer stages: Spark ``StatefulProcessor``s that run the
operators on Spark's RocksDB-backed state (its state variables and their bytes: ``sparkstate.py``).

Thin adapters from ``transformWithState``'s shape to the operators' calls; they hold no join
logic. Per join key and micro-batch it makes one state read and one state write (the whole
key's join state is one value), whatever the number of records.

Order of a key's records within a micro-batch: Spark hands a group's rows in no particular order.
They are put back in a deterministic order that keeps every input's per-partition offset order:
the records of each (side, Kafka partition) are sorted by offset, and these runs are merged by
Kafka timestamp, ties broken by side (left first), partition and offset. A replayed micro-batch
therefore processes the same records in the same order and emits the same output.
"""
from __future__ import annotations

import heapq
import logging
from typing import Iterator

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from operators import EVENT, PROC, ChangelogNormalize, Context, Output, UpsertMaterializer

from . import deadletters
from .deadletters import Reason
from .envelope import (
    ENVELOPE_SCHEMA,
    EVENT_TIME,
    KIND,
    NOT_ROWS,
    OFFSET,
    PACK_LIMIT,
    PART,
    PAYLOAD,
    TAG,
    TS,
    Tag,
    Target,
    dumps,
    join_key_group,
    loads,
    output_key_group,
    pack,
)
from .plan import JoinPlan, PlanKind, TimeMode
from .shipping import built
from .sparkstate import Pending, join_state, normalize_state, upsert_state

log = logging.getLogger(__name__)

_OUTPUT, _DEAD_LETTER, _PACKED = int(Target.OUTPUT), int(Target.DEAD_LETTER), int(Target.PACKED)
_DEAD_LETTER_TAG = int(Tag.DEAD_LETTER)


def _plan(plan_json: str) -> JoinPlan:
    """The plan, and with it its operator, built once per worker process (``shipping.py``)."""
    return built(_plan_from_config, {"plan": plan_json})


def _plan_from_config(config: dict) -> JoinPlan:
    return JoinPlan.from_json(config["plan"])


def ordered_records(rows) -> list:
    """Envelope rows in the deterministic order described in the module docstring."""
    runs: dict[tuple[int, int], list] = {}
    for r in rows:
        run = runs.get((r[TAG], r[PART]))
        if run is None:
            run = runs[(r[TAG], r[PART])] = []
        run.append(r)
    for run in runs.values():
        run.sort(key=lambda r: r[OFFSET])
    if len(runs) == 1:
        return next(iter(runs.values()))
    return list(heapq.merge(*runs.values(), key=lambda r: (r[TS], r[TAG], r[PART], r[OFFSET])))


class JoinProcessor(StatefulProcessor):
    """Runs one :class:`JoinPlan`'s operator per join key.

    With ``pack`` (the default unless the upsert materializer stage follows), the changes that one
    call (one key's rows, or one expired timer) emits go out together in one PACKED row (or more,
    beyond :data:`~service.envelope.PACK_LIMIT` changes), which the sink unpacks: Spark's per-row
    costs (Row objects, Arrow conversion, the JVM) are then paid once per key and call instead of
    once per change. Without it, every change is one OUTPUT row keyed by its upsert key (``okey``),
    as the upsert materializer stage needs."""

    def __init__(self, plan_json: str, pack: bool | None = None):
        self.plan_json = plan_json
        self.pack = pack

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.plan = _plan(self.plan_json)
        self.operator = self.plan.operator
        if self.pack is None:
            self.pack = not self.plan.upsert_materializer
        self.handle = handle
        self.time_mode = self.plan.time_mode
        domain = {TimeMode.PROCESSING_TIME: PROC, TimeMode.EVENT_TIME: EVENT}.get(self.time_mode)
        self.state = join_state(handle, self.plan, domain)
        # Rows the join may drop as late carry their original record (decode.py): (row, original).
        self.original_sides = self.plan.late_sides
        self.window_join = self.plan.kind is PlanKind.WINDOW
        key = self.plan.output_key
        self.output_key = (lambda row: output_key_group(tuple(row[i] for i in key))) if key else (lambda row: b"")
        self.seq = _TaskSequence()

    def _context(self, timer_values) -> Context:
        now = timer_values.getCurrentProcessingTimeInMs()
        watermark = timer_values.getCurrentWatermarkInMs()
        return Context(now=now if now >= 0 else 0, watermark=watermark if watermark >= 0 else None)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        ordered = ordered_records(rows)
        out = Output()
        letters = [r for r in ordered if r[TAG] == _DEAD_LETTER_TAG]
        # Idle heartbeats (decode.py) only move the watermark: no state, no output.
        records = [(r[TAG], r[KIND], loads(r[PAYLOAD])) for r in ordered if r[TAG] not in NOT_ROWS]
        originals = {}
        if self.original_sides:
            for i, (side, kind, payload) in enumerate(records):
                if side in self.original_sides:
                    records[i] = (side, kind, payload[0])
                    originals[id(payload[0])] = payload[1]
        for r in letters:  # dead letters only pass through: their key holds no state
            yield Row(target=_DEAD_LETTER, kind=0, payload=r[PAYLOAD], okey=key[0], seq=self.seq.take())
        if not records:
            return
        context = self._context(timerValues)
        state = Pending(self.state)
        try:
            self.operator.process(state, records, context, out)
        except Exception as err:  # noqa: BLE001 - one key's failure must not stop the service
            # The key's state stays as it was before these records; they become dead letters.
            detail = self._join_error(key, err)
            rows = [r for r in ordered if r[TAG] not in NOT_ROWS]
            for r, (side, kind, row) in zip(rows, records):
                letter = deadletters.from_row(Reason.JOIN_ERROR, detail, kind, row, originals.get(id(row)),
                                              self._source(side, r))
                yield Row(target=_DEAD_LETTER, kind=kind, payload=dumps(letter), okey=key[0], seq=self.seq.take())
            return
        state.flush()
        yield from self._emit(out, originals, context)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        out = Output()
        domain = EVENT if self.time_mode is TimeMode.EVENT_TIME else PROC
        state = Pending(self.state)
        try:
            self.operator.on_timer(state, domain, expiredTimerInfo.getExpiryTimeInMs(), self._context(timerValues), out)
        except Exception as err:  # noqa: BLE001 - as in handleInputRows; a timer has no records to keep
            self._join_error(key, err)
            return
        state.flush()
        yield from self._emit(out)

    def _join_error(self, key, err: Exception) -> str:
        """Log a key's failure once, with the micro-batch id; the dead letters' detail."""
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        detail = f"{type(err).__name__}: {err}"
        log.error("join_error in micro-batch %s for join key %r: %s; the key's records of this call go to the "
                  "dead-letter topic and its state is kept as it was", batch, key[0], detail, exc_info=err)
        return detail

    def _source(self, side: int, envelope) -> tuple:
        """(topic, partition, offset) of a row's Kafka record (a normalized input's offsets are scaled)."""
        side_plan = self.plan.sides[side]
        offset = envelope[OFFSET] // 4 if side_plan.normalized else envelope[OFFSET]
        return (side_plan.topic, envelope[PART], offset)

    def _emit(self, out: Output, originals: dict | None = None, context: Context | None = None) -> Iterator[Row]:
        if self.pack:
            for i in range(0, len(out.rows), PACK_LIMIT):
                changes = out.rows[i : i + PACK_LIMIT]
                yield Row(target=_PACKED, kind=0, payload=pack(changes), okey=b"", seq=self.seq.take(len(changes)))
        else:
            for kind, row in out.rows:
                yield Row(target=_OUTPUT, kind=kind, payload=dumps(row), okey=self.output_key(row),
                          seq=self.seq.take())
        for kind, row, copies in _late_records(out.late):
            original = (originals or {}).get(id(row))
            if self.window_join:
                letter = deadletters.late_row(kind, row, original, copies, context.watermark if context else None)
            else:
                letter = deadletters.late_row(kind, row, original)
            yield Row(target=_DEAD_LETTER, kind=kind, payload=dumps(letter), okey=b"late", seq=self.seq.take())

    def close(self) -> None:
        pass


def _late_records(late: list) -> list[tuple[int, tuple, int]]:
    """One entry per dropped input record, in order: (kind, row, number of dropped copies).

    A window join reports a late copy per window (a HOP row late for two windows, twice); the
    user's unit is the Kafka record, so it becomes one dead letter, which says how many windows
    it missed. Copies of one record are the same row object."""
    entries: dict[int, list] = {}
    for kind, row in late:
        entry = entries.get(id(row))
        if entry is None:
            entries[id(row)] = [kind, row, 1]
        else:
            entry[2] += 1
    return [tuple(e) for e in entries.values()]


class _TaskSequence:
    """Increasing numbers within this task: the partition id in the high bits, then a counter."""

    __slots__ = ("_next",)

    def __init__(self):
        from pyspark import TaskContext

        context = TaskContext.get()
        self._next = (context.partitionId() if context is not None else 0) << 40

    def take(self, n: int = 1) -> int:
        """The next ``n`` numbers; returns the first."""
        first = self._next
        self._next += n
        return first


class UpsertProcessor(StatefulProcessor):
    """The upsert materializer stage, keyed by the output's upsert key (see ``operators/upsert.py``).

    Used when the output is written as upserts under a key that the join key does not determine:
    the changes of one upsert key then come from several join tasks, in no particular order
    between tasks, and this stage turns them into the correct final upserts."""

    def __init__(self, plan_json: str | None = None):
        self.plan_json = plan_json

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.operator = UpsertMaterializer()
        plan = _plan(self.plan_json) if self.plan_json is not None else None
        self.state = upsert_state(handle, plan, self.operator)
        self.seq = _TaskSequence()

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        ordered = sorted(rows, key=lambda r: r.seq)  # each join task's own order; tasks in turn
        changes = []
        for r in ordered:
            if r.target == _DEAD_LETTER:
                yield Row(target=_DEAD_LETTER, kind=r.kind, payload=r.payload, okey=r.okey, seq=self.seq.take())
            else:
                changes.append((0, r.kind, loads(r.payload)))
        if changes:
            out = Output()
            self.operator.process(self.state, changes, Context(), out)
            for kind, row in out.rows:
                yield Row(target=_OUTPUT, kind=kind, payload=dumps(row), okey=key[0], seq=self.seq.take())

    def close(self) -> None:
        pass


class NormalizeProcessor(StatefulProcessor):
    """The normalize stage of an upsert input, keyed by message key (see ``operators/normalize.py``):
    emits envelopes of a full changelog, keyed by join key, for the join stage."""

    schema = ENVELOPE_SCHEMA

    def __init__(self, plan_json: str, side: int):
        self.plan_json = plan_json
        self.side = side

    def init(self, handle: StatefulProcessorHandle) -> None:
        plan = _plan(self.plan_json)
        join_key_of = plan.join_key_of(self.side)
        self.join_key = lambda row: join_key_group(join_key_of(row))
        self.operator = ChangelogNormalize()
        self.state = normalize_state(handle, plan, self.side, self.operator)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        ordered = ordered_records(rows)
        state = Pending(self.state)
        for r in ordered:
            if r[TAG] in NOT_ROWS:  # passed on to the join stage
                yield r
                continue
            out = Output()
            self.operator.process(state, [(self.side, r[KIND], loads(r[PAYLOAD]))], Context(), out)
            # Each output keeps its record's place; a -U/+U pair gets two consecutive offsets
            # (offset * 4 + i) so the join stage orders them, whatever order the shuffle gives.
            for i, (kind, row) in enumerate(out.rows):
                yield Row(jk=self.join_key(row), tag=self.side, kind=int(kind), payload=dumps(row),
                          event_time=r[EVENT_TIME], ts=r[TS], part=r[PART], offset=r[OFFSET] * 4 + i)
        state.flush()

    def close(self) -> None:
        pass
