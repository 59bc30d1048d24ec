"""The join, normalize and upsert materializer stages: Spark ``StatefulProcessor``s that run the
operators on Spark's RocksDB-backed state (its state variables and their bytes: ``sparkstate.py``).

Thin adapters from ``transformWithState``'s shape to the operators' calls; they hold no join
logic. Spark calls them per grouping key: a key (join key, message key, upsert key), or with
``STATE_BUCKETS`` a bucket of keys, whose rows arrive packed (``envelope.py``). Within a bucket
the operator still runs per key, in the keys' sorted order, each key's state a view into its
bucket (``sparkstate.py``); what the bucket's keys emit goes out packed together. Per grouping
key and micro-batch a stage makes one state read and one state write, whatever the number of
keys and records (besides the entries of large keys and split sides).

Order of a key's records within a micro-batch: Spark hands a group's rows in no particular order.
They are put back in a deterministic order that keeps every input's per-partition offset order:
the records of each (side, Kafka partition) are sorted by offset, and these runs are merged by
Kafka timestamp, ties broken by side (left first), partition and offset. A replayed micro-batch
therefore processes the same records in the same order and emits the same output; the keys of a
bucket are run in the order of their grouping bytes, and timers in time order, ties by key.
"""
from __future__ import annotations

import heapq
import logging
from typing import Iterator

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from expressions import ExpressionError
from operators import EVENT, PROC, ChangelogNormalize, Context, Output, RowKind, UpsertMaterializer

from . import deadletters
from .deadletters import Reason
from .envelope import (
    ENVELOPE_FIELDS,
    ENVELOPE_SCHEMA,
    EVENT_TIME,
    JK,
    KIND,
    NOT_ROWS,
    OFFSET,
    PACK_LIMIT,
    PACK_ROWS,
    PART,
    PAYLOAD,
    TAG,
    TS,
    Tag,
    Target,
    bucket_group,
    bucket_of,
    dead_letter_group,
    dumps,
    join_key_group,
    loads,
    output_key_group,
    output_route,
    pack,
    packed_envelope,
    unpacked,
)
from .plan import JoinPlan, PlanKind, TimeMode
from .shipping import built
from .sparkstate import Pending, join_state, normalize_state, upsert_state

log = logging.getLogger(__name__)

_OUTPUT, _DEAD_LETTER, _PACKED, _KEYED, _TALLY = (int(t) for t in (Target.OUTPUT, Target.DEAD_LETTER,
                                                                     Target.PACKED, Target.KEYED, Target.TALLY))
_DEAD_LETTER_TAG, _PACKED_TAG, _TALLY_TAG = int(Tag.DEAD_LETTER), int(Tag.PACKED), int(Tag.TALLY)
_EnvelopeRow = Row(*ENVELOPE_FIELDS)  # a named envelope row from a tuple: _EnvelopeRow(*envelope)
_TIMER_ROUNDS = 1000  # a bucket's timers fired in one call, round after round: a bound against a runaway operator


def _plan(plan_json: str) -> JoinPlan:
    """The plan, and with it its operator, built once per worker process (``shipping.py``)."""
    return built(JoinPlan.from_json, plan_json)


def by_key(rows) -> Iterator[tuple[bytes, list]]:
    """Packed envelope rows' entries grouped by key, keys in sorted order; other rows (dead
    letters, heartbeats) are not rows of a key and are left out."""
    groups: dict[bytes, list] = {}
    for r in rows:
        if r[TAG] == _PACKED_TAG:
            for entry in unpacked(r[PAYLOAD]):
                group = groups.get(entry[JK])
                if group is None:
                    group = groups[entry[JK]] = []
                group.append(entry)
    for key in sorted(groups):
        yield key, groups[key]


def ordered_records(rows) -> list:
    """Envelope rows in the deterministic order described in the module docstring."""
    runs: dict[tuple[int, int], list] = {}
    for r in rows:
        run = runs.get((r[TAG], r[PART]))
        if run is None:
            run = runs[(r[TAG], r[PART])] = []
        run.append(r)
    for run in runs.values():
        run.sort(key=lambda r: (r[OFFSET], r[KIND]))  # a record's -U before its +U (a Debezium update)
    if len(runs) == 1:
        return next(iter(runs.values()))
    return list(heapq.merge(*runs.values(), key=lambda r: (r[TS], r[TAG], r[PART], r[OFFSET], r[KIND])))


class JoinProcessor(StatefulProcessor):
    """Runs one :class:`JoinPlan`'s operator per join key.

    With ``pack`` (the default unless the upsert materializer stage follows), the changes that one
    call (one key's or one bucket's rows, or expired timers) emits go out together in one PACKED
    row (or more, beyond :data:`~service.envelope.PACK_LIMIT` changes), which the sink unpacks:
    Spark's per-row costs (Row objects, Arrow conversion, the JVM) are then paid once per call
    instead of once per change. Without it, every change is one OUTPUT row keyed by its upsert key
    (``okey``), as the upsert materializer stage needs; with buckets, the changes of each bucket of
    upsert keys go together in one KEYED row keyed by that bucket."""

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
        self.domain = {TimeMode.PROCESSING_TIME: PROC, TimeMode.EVENT_TIME: EVENT}.get(self.time_mode)
        self.state = join_state(handle, self.plan, self.domain)
        self.buckets = self.plan.state_buckets
        self.bucket_keys = self.plan.bucket_keys
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
        rows = list(rows)
        for r in rows:  # dead letters and tallies only pass through: their key holds no state
            if r[TAG] == _DEAD_LETTER_TAG:
                yield Row(target=_DEAD_LETTER, kind=0, payload=r[PAYLOAD], okey=key[0], seq=self.seq.take())
            elif r[TAG] == _TALLY_TAG:
                yield Row(target=_TALLY, kind=r[KIND], payload=r[PAYLOAD], okey=key[0], seq=self.seq.take())
        # Idle heartbeats (decode.py) only move the watermark: no state, no output.
        if self.buckets:
            groups = list(by_key(rows))
            if not groups:
                return
            bucket = self.state.open(key[0])
            context = self._context(timerValues)
            changes: list = []
            bucket.read_ahead([jk for jk, _ in groups])
            for jk, entries in groups:
                yield from self._process(bucket.key(jk), jk, ordered_records(entries), context, changes)
                if len(changes) >= PACK_LIMIT:
                    yield from self._emit(changes, key[0])
                    changes = []
            bucket.flush()
            yield from self._emit(changes, key[0])
            return
        entries = [(r[JK], r[TAG], r[KIND], loads(r[PAYLOAD]), None, r[TS], r[PART], r[OFFSET])
                   for r in ordered_records(rows) if r[TAG] not in NOT_ROWS]
        if entries:
            changes = []
            yield from self._process(self.state, key[0], entries, self._context(timerValues), changes)
            yield from self._emit(changes, key[0])

    def _process(self, key_state, jk: bytes, entries: list, context: Context, changes: list) -> Iterator[Row]:
        """Run the operator on one key's ``entries`` (envelope tuples, payloads unpickled, in order):
        its changes are added to ``changes``, its late rows and failures are yielded as dead letters."""
        records = [(e[TAG], e[KIND], e[PAYLOAD]) for e in entries]
        originals = {}
        if self.original_sides:
            for i, (side, kind, payload) in enumerate(records):
                if side in self.original_sides:
                    records[i] = (side, kind, payload[0])
                    originals[id(payload[0])] = payload[1]
        out = Output()
        state = Pending(key_state)
        try:
            self.operator.process(state, records, context, out)
        except Exception as err:  # noqa: BLE001 - one key's failure must not stop the service
            # The key's state stays as it was before these records; they become dead letters.
            detail = self._join_error(jk, err)
            for e, (side, kind, row) in zip(entries, records):
                letter = deadletters.from_row(Reason.JOIN_ERROR, detail, kind, row, originals.get(id(row)),
                                              self._source(side, e))
                yield Row(target=_DEAD_LETTER, kind=kind, payload=dumps(letter), okey=jk, seq=self.seq.take())
            return
        state.flush()
        changes += out.rows
        yield from self._late(out, originals, context)
        if out.unmatched:
            yield from self._unmatched(out, entries)
        if out.failed:
            yield from self._failed(out)

    def _unmatched(self, out: Output, entries: list) -> Iterator[Row]:
        """A lookup join's retractions of rows it does not remember (its state TTL expired, or it
        never saw them): dead letters, never padded output."""
        where = {id(e[PAYLOAD][0]): e for e in entries}
        for kind, row in out.unmatched:
            e = where.get(id(row))
            letter = deadletters.from_row(
                Reason.LOOKUP_RETRACTION_UNKNOWN, "a retraction of a row the lookup join does not remember (never "
                "seen, or forgotten after LEFT_STATE_TTL): the rows it joined are unknown, nothing is retracted",
                kind, row, None, None if e is None else self._source(0, e))
            yield Row(target=_DEAD_LETTER, kind=kind, payload=dumps(letter), okey=b"unmatched", seq=self.seq.take())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        domain = EVENT if self.time_mode is TimeMode.EVENT_TIME else PROC
        context = self._context(timerValues)
        fired = expiredTimerInfo.getExpiryTimeInMs()
        if not self.buckets:
            changes: list = []
            yield from self._on_timer(self.state, key[0], domain, fired, context, changes)
            yield from self._emit(changes, key[0])
            return
        # The bucket's Spark timer stands for its keys' timers of one slot (sparkstate.py): fire
        # them in time order; one that a timer registers and is already due fires in the next round.
        until = timerValues.getCurrentWatermarkInMs() if domain == EVENT else timerValues.getCurrentProcessingTimeInMs()
        bucket = self.state.open(key[0])
        due = bucket.fire(fired, until)
        changes = []
        for _ in range(_TIMER_ROUNDS):
            if not due:
                break
            for ts, jk in due:
                yield from self._on_timer(bucket.key(jk), jk, domain, ts, context, changes)
            due = bucket.take_due(until)
        else:
            raise RuntimeError(f"timers still due after {_TIMER_ROUNDS} rounds: an operator registers timers "
                               "that are due already")
        bucket.flush()
        yield from self._emit(changes, key[0])

    def _on_timer(self, key_state, jk: bytes, domain: str, ts: int, context: Context, changes: list) -> Iterator[Row]:
        out = Output()
        state = Pending(key_state)
        try:
            self.operator.on_timer(state, domain, ts, context, out)
        except Exception as err:  # noqa: BLE001 - as in _process; a timer has no records to keep
            self._join_error(jk, err)
            return
        state.flush()
        changes += out.rows
        yield from self._late(out, None, context)
        if out.failed:
            yield from self._failed(out)

    def _failed(self, out: Output) -> Iterator[Row]:
        """Output changes whose computed output failed (operators/calc.py): dead letters naming the
        expression, with the joined row the expressions read."""
        for kind, row, why in out.failed:
            letter = deadletters.from_row(Reason.EXPRESSION_ERROR, why, kind, row)
            yield Row(target=_DEAD_LETTER, kind=kind, payload=dumps(letter), okey=b"expression", seq=self.seq.take())

    def _join_error(self, jk: bytes, err: Exception) -> str:
        """Log a key's failure once, with the micro-batch id; the dead letters' detail."""
        from pyspark import TaskContext

        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        detail = f"{type(err).__name__}: {err}"
        log.error("join_error in micro-batch %s for join key %r: %s; the key's records of this call go to the "
                  "dead-letter topic and its state is kept as it was", batch, jk, detail, exc_info=err)
        return detail

    def _source(self, side: int, envelope) -> tuple:
        """(topic, partition, offset) of a row's Kafka record (a normalized input's offsets are scaled)."""
        side_plan = self.plan.sides[side]
        offset = envelope[OFFSET] // 4 if side_plan.normalized else envelope[OFFSET]
        return (side_plan.topic, envelope[PART], offset)

    def _emit(self, changes: list, group: bytes) -> Iterator[Row]:
        """The changes of one call for the grouping key ``group``: packed, their ``okey`` its route
        (``envelope.route``), by which an output without a message key picks their partition."""
        if self.pack:
            route = output_route(group)
            for i in range(0, len(changes), PACK_LIMIT):
                chunk = changes[i : i + PACK_LIMIT]
                yield Row(target=_PACKED, kind=0, payload=pack(chunk), okey=route, seq=self.seq.take(len(chunk)))
        elif self.buckets:
            keyed: dict[int, list] = {}
            for kind, row in changes:
                okey = self.output_key(row)
                keyed.setdefault(bucket_of(okey, self.buckets), []).append((okey, kind, row))
            for bucket in sorted(keyed):
                yield Row(target=_KEYED, kind=0, payload=dumps(keyed[bucket]), okey=bucket_group(bucket, self.bucket_keys),
                          seq=self.seq.take())
        else:
            for kind, row in changes:
                yield Row(target=_OUTPUT, kind=kind, payload=dumps(row), okey=self.output_key(row),
                          seq=self.seq.take())

    def _late(self, out: Output, originals: dict | None, context: Context) -> Iterator[Row]:
        for kind, row, copies in _late_records(out.late):
            original = (originals or {}).get(id(row))
            if self.window_join:
                letter = deadletters.late_row(kind, row, original, copies, context.watermark)
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
    """The upsert materializer stage, keyed by the output's upsert key (see ``operators/upsert.py``),
    or by a bucket of upsert keys.

    Used when the output is written as upserts under a key that the join key does not determine:
    the changes of one upsert key then come from several join tasks, in no particular order
    between tasks, and this stage turns them into the correct final upserts."""

    def __init__(self, plan_json: str | None = None):
        self.plan_json = plan_json

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.operator = UpsertMaterializer()
        plan = _plan(self.plan_json) if self.plan_json is not None else None
        self.state = upsert_state(handle, plan, self.operator)
        self.buckets = plan.state_buckets if plan is not None else 0
        self.seq = _TaskSequence()

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        ordered = sorted(rows, key=lambda r: r.seq)  # each join task's own order; tasks in turn
        changes: dict[bytes, list] = {}
        for r in ordered:
            if r.target in (_DEAD_LETTER, _TALLY):
                yield Row(target=r.target, kind=r.kind, payload=r.payload, okey=r.okey, seq=self.seq.take())
            elif r.target == _KEYED:
                for okey, kind, row in loads(r.payload):
                    changes.setdefault(okey, []).append((0, kind, row))
            else:
                changes.setdefault(key[0], []).append((0, r.kind, loads(r.payload)))
        if not changes:
            return
        if not self.buckets:
            out = Output()
            self.operator.process(self.state, changes[key[0]], Context(), out)
            for kind, row in out.rows:
                yield Row(target=_OUTPUT, kind=kind, payload=dumps(row), okey=key[0], seq=self.seq.take())
            return
        bucket = self.state.open(key[0])
        out = Output()
        bucket.read_ahead(sorted(changes))
        for okey in sorted(changes):
            state = Pending(bucket.key(okey))
            self.operator.process(state, changes[okey], Context(), out)
            state.flush()
        bucket.flush()
        for i in range(0, len(out.rows), PACK_LIMIT):
            chunk = out.rows[i : i + PACK_LIMIT]
            yield Row(target=_PACKED, kind=0, payload=pack(chunk), okey=b"", seq=self.seq.take(len(chunk)))

    def close(self) -> None:
        pass


_DELETE_KIND = int(RowKind.DELETE)


def _letter_envelope(letter: dict, ts: int, part: int, offset: int) -> tuple:
    """A dead letter found by the normalize stage, as an envelope for the join stage to pass on."""
    return (dead_letter_group(part), int(Tag.DEAD_LETTER), 0, dumps(letter), None, ts, part, offset)


class NormalizeProcessor(StatefulProcessor):
    """The normalize stage of an upsert input, keyed by message key (see ``operators/normalize.py``)
    or by a bucket of message keys: emits envelopes of a full changelog, keyed by join key (packed
    per bucket of join keys), for the join stage."""

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
        self.buckets = plan.state_buckets
        self.bucket_keys = plan.bucket_keys
        self.topic = plan.sides[self.side].topic
        self.calc = plan.sides[self.side].input_calc()  # JOIN_SQL's filter and computed columns, after normalizing
        if self.calc is not None:
            self._plain_normalize = self._normalize
            self._normalize = self._normalize_calculated
        if self.side in plan.dated_deletes:  # chosen once: the other inputs' records take the plain path
            self.source_time = plan.sides[self.side].time_column
            self._normalize = self._normalize_dated

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        if self.buckets:
            yield from self._buckets(key[0], rows)
            return
        ordered = ordered_records(rows)
        state = Pending(self.state)
        for r in ordered:
            if r[TAG] in NOT_ROWS:  # passed on to the join stage
                yield r
                continue
            for kind, row, offset in self._normalize(state, r[KIND], loads(r[PAYLOAD]), r[OFFSET]):
                if kind < 0:  # a dead letter (_normalize_calculated)
                    yield _EnvelopeRow(*_letter_envelope(row, r[TS], r[PART], r[OFFSET]))
                    continue
                yield Row(jk=self.join_key(row), tag=self.side, kind=kind, payload=dumps(row),
                          event_time=r[EVENT_TIME], ts=r[TS], part=r[PART], offset=offset)
        state.flush()

    def _buckets(self, key: bytes, rows) -> Iterator[Row]:
        rows = list(rows)
        for r in rows:
            if r[TAG] in NOT_ROWS:  # passed on to the join stage
                yield r
        groups = list(by_key(rows))
        if not groups:
            return
        bucket = self.state.open(key)
        packs: dict[int, list] = {}
        bucket.read_ahead([message_key for message_key, _ in groups])
        for message_key, entries in groups:
            state = Pending(bucket.key(message_key))
            for e in ordered_records(entries):
                for kind, row, offset in self._normalize(state, e[KIND], e[PAYLOAD], e[OFFSET]):
                    if kind < 0:  # a dead letter (_normalize_calculated)
                        yield _EnvelopeRow(*_letter_envelope(row, e[TS], e[PART], e[OFFSET]))
                        continue
                    jk = self.join_key(row)
                    packs.setdefault(bucket_of(jk, self.buckets), []).append(
                        (jk, self.side, kind, row, e[EVENT_TIME], e[TS], e[PART], offset))
            state.flush()
        bucket.flush()
        for b in sorted(packs):
            entries = packs[b]
            for i in range(0, len(entries), PACK_ROWS):
                yield _EnvelopeRow(*packed_envelope(b, entries[i : i + PACK_ROWS], self.bucket_keys))

    def _normalize(self, state, kind: int, payload, offset: int) -> list[tuple[int, tuple, int]]:
        """The full changelog of one upsert record: (kind, row, offset) of each change. Each keeps
        its record's place; a -U/+U pair gets two consecutive offsets (offset * 4 + i) so the join
        stage orders them, whatever order the shuffle gives."""
        out = Output()
        self.operator.process(state, [(self.side, kind, payload)], Context(), out)
        return [(int(k), row, offset * 4 + i) for i, (k, row) in enumerate(out.rows)]

    def _normalize_calculated(self, state, kind: int, payload, offset: int) -> list[tuple[int, tuple, int]]:
        """:meth:`_normalize`, each change then as JOIN_SQL gives it to the join: filtered out, or
        with its computed columns; a change whose expression fails is a dead letter (its kind
        -1, :meth:`handleInputRows` writes it)."""
        out = []
        for k, row, o in self._plain_normalize(state, kind, payload, offset):
            try:
                calculated = self.calc(row)
            except ExpressionError as err:
                out.append((-1, deadletters.from_row(Reason.EXPRESSION_ERROR, str(err), k, row,
                                                     source=(self.topic, None, offset)), o))
                continue
            if calculated is not None:
                out.append((k, calculated, o))
        return out

    def _normalize_dated(self, state, kind: int, payload, offset: int) -> list[tuple[int, tuple, int]]:
        """:meth:`_normalize` of a versioned table whose deletes are dated (``plan.dated_deletes``):
        a delete's payload is its key-only row with its source.ts_ms (decode.py), not a tombstone,
        and the -D derived from the stored row takes that time."""
        if kind != _DELETE_KIND:
            return NormalizeProcessor._normalize(self, state, kind, payload, offset)
        changes = NormalizeProcessor._normalize(self, state, kind, None, offset)
        if payload is None:
            return changes
        i, time = self.source_time, payload[self.source_time]
        return [(k, (*row[:i], time, *row[i + 1:]), o) for k, row, o in changes]

    def close(self) -> None:
        pass
