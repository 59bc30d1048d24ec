"""Decode: Kafka record bytes -> a typed row with its RowKind, keyed by join key, or a dead letter.

Each input's format (``service/formats/``) turns a record into its changes; one path applies the
rules every format shares. This runs inside the Kafka source's reading task on Spark's Python
workers (the source calls :meth:`InputDecoder.map` for every record), so a record is read,
decoded and keyed in one pass.
Every record becomes one envelope row (``envelope.py``): a left or right row under its join key
(an upsert record that is normalized first: under its message key), or a dead letter. With
``STATE_BUCKETS`` the rows of each bucket of keys that one task reads travel packed instead
(:meth:`InputDecoder.map_all`).

Bad records never stop the service: they travel on as dead letters (``deadletters.py``), which the
sink writes to the dead-letter topic with their reason.
"""
from __future__ import annotations

from typing import Iterable, Iterator

from expressions import ExpressionError
from operators import RowKind

from .avro import SchemaRegistry, to_epoch_millis
from .deadletters import DeadLetterError, Reason
from .deadletters import from_record as dead_letter_of
from .deadletters import original, skipped_record
from .envelope import (
    ENVELOPE_SCHEMA,
    JK,
    PACK_ROWS,
    TAG,
    Tag,
    bucket_of,
    dead_letter_envelope,
    dumps,
    event_time,
    heartbeat_envelope,
    join_key_group,
    message_key_group,
    packed_envelope,
    tally_envelope,
)
from .formats import format_of
from .latency import ReadTally
from .plan import JoinPlan
from .shipping import WorkerConfig, built, registry


class InputDecoder:
    """The source's mapper for one input side."""

    schema = ENVELOPE_SCHEMA

    @classmethod
    def from_config(cls, config: WorkerConfig) -> "InputDecoder":
        return cls(JoinPlan.from_json(config.plan), config.side, config.rowkind_header, registry(config))

    def __init__(self, plan: JoinPlan, side: int, rowkind_header: str, registry: SchemaRegistry | None):
        self.side_plan = sp = plan.sides[side]
        self.side = side
        # The input's format (service/formats/) turns a record into its changes; what follows is
        # the same for every format.
        self.format = format_of(sp.format).decoder(sp, registry, rowkind_header)
        self.key_of = plan.join_key_of(side)
        # Columns that must not be NULL: the primary key, and the event time of an event-time join
        # (of an upsert input's delete, which holds only its key: the primary key).
        self.required = tuple(sp.primary_key or ()) + ((sp.time_column,) if sp.time_column is not None else ())
        self.primary_key = tuple(sp.primary_key or ())
        self.time_column = sp.time_column if plan.is_event_time else None
        # Rows the join may drop as late (probe rows of an event-time temporal join, rows of a window
        # join) carry their original record, so that the dead letter holds its key, value and headers.
        self.keep_original = side in plan.late_sides
        self.topic = sp.topic
        # An upsert input is grouped by its primary key (the format's message key) for the
        # normalize stage, unless it is joined directly (planner.py): then by join key like any
        # changelog, its deletes holding the primary key (keys.py).
        self.upsert = sp.changelog_mode == "upsert"
        self.direct = sp.direct_upsert
        self.buckets = plan.state_buckets
        self.bucket_keys = plan.bucket_keys
        # What JOIN_SQL computes and filters before the join (SidePlan.calc), after the checks
        # above on the input row; a normalized input's rows go through it after the normalize stage.
        self.calc = sp.input_calc() if not sp.normalized else None
        # A delete joined directly reads only its unique key: no computed value.
        self.padding = (None,) * len(sp.computed) if self.calc is not None else ()
        # A keyed versioned table timed by source.ts_ms: a delete carries its key-only row with its
        # time to the normalize stage, which dates the -D it derives by it (plan.dated_deletes).
        self.delete_times = side in plan.dated_deletes

    def map(self, record) -> Iterator[tuple]:
        """The record's envelopes: its rows' (a Debezium update has two), or a dead letter."""
        for entry in self._entries(record):
            yield _envelope(entry)

    def map_all(self, records: Iterable) -> Iterator[tuple]:
        """The envelopes of a reading task's records. With buckets, the rows of each bucket go
        packed (``envelope.packed_envelope``), at most :data:`~service.envelope.PACK_ROWS` a pack,
        the last packs in bucket order once the records are read; dead letters go as they come.
        Last, the task's tally of the records it read (``envelope.tally_envelope``): how many,
        and their ages for the end-to-end latency (``latency.py``)."""
        read = ReadTally()
        records = read.counted(records)
        if not self.buckets:
            for record in records:
                for entry in self._entries(record):
                    yield _envelope(entry)
        else:
            buckets, keys, packs = self.buckets, self.bucket_keys, {}
            for entry in (e for record in records for e in self._entries(record)):
                if entry[TAG] > _RIGHT:
                    yield entry
                    continue
                bucket = bucket_of(entry[JK], buckets)
                pack = packs.get(bucket)
                if pack is None:
                    pack = packs[bucket] = []
                pack.append(entry)
                if len(pack) >= PACK_ROWS:
                    yield packed_envelope(bucket, pack, keys)
                    del packs[bucket]
            for bucket in sorted(packs):
                yield packed_envelope(bucket, packs[bucket], keys)
        if read.records:
            yield tally_envelope(self.side, read.value(), read.partition)

    def _entries(self, record) -> tuple | list:
        """The record's rows as packed envelopes' entries, or its dead letter (nothing for a row
        JOIN_SQL filters out before the join; an event-time join gets its time as a heartbeat, so
        the watermark moves as if the row had come). Its format gives its changes; the rules that
        follow (required columns, event time, JOIN_SQL's input calc, grouping) are every format's."""
        try:
            changes, skipped = self.format.record_changes(record)
        except DeadLetterError as dead:
            return (self.dead_letter(record, dead.reason, dead.detail),)
        if skipped:
            return (dead_letter_envelope(skipped_record(record, skipped), record),)
        entries = []
        for kind, row in changes:
            delete = self.upsert and kind == _DELETE
            time = None
            try:
                if row is not None:  # None: a delete known by its message key alone
                    for index in (self.required if not delete else self.primary_key):
                        if row[index] is None:
                            raise DeadLetterError(Reason.NULL_IN_REQUIRED_COLUMN,
                                                  f"column {self.side_plan.columns[index]} is NULL")
                    if self.time_column is not None and (not delete or self.delete_times):
                        time = self._event_time(row[self.time_column])
                if delete:
                    payload = row if self.direct or self.delete_times else None
                    if payload is not None and self.padding:
                        payload += self.padding
                elif self.calc is not None:
                    payload = self._calculated(row)
                    if payload is None:
                        if time is not None:
                            entries.append(heartbeat_envelope(time))
                        continue
                else:
                    payload = row
            except DeadLetterError as dead:
                return (self.dead_letter(record, dead.reason, dead.detail),)
            if self.upsert and not self.direct:  # normalized by primary key first
                group = message_key_group(self.format.message_key(record, row))
            else:
                group = join_key_group(self.key_of(payload))
            if self.keep_original and not delete:
                payload = (payload, original(record))
            entries.append(_entry(group, self.side, kind, payload, time, record))
        return entries

    def _calculated(self, row: tuple) -> tuple | None:
        """The row as JOIN_SQL gives it to the join (None: filtered out), or a dead letter."""
        try:
            return self.calc(row)
        except ExpressionError as err:
            raise DeadLetterError(Reason.EXPRESSION_ERROR, str(err)) from None

    def _event_time(self, value) -> int:
        """The row's event time in epoch milliseconds, or a dead letter for a value that is no time
        Spark (or Python) can hold: epoch milliseconds outside the years 1 to 9999."""
        try:
            millis = to_epoch_millis(value)
            event_time(millis)  # raises where the event_time column could not hold it
            return millis
        except (OverflowError, ValueError, TypeError) as err:
            column = self.side_plan.columns[self.time_column]
            raise DeadLetterError(Reason.INVALID_EVENT_TIME,
                                  f"column {column}: {value!r} is not an event time ({err})") from None

    def heartbeat(self, event_time_ms: int) -> Iterator[tuple]:
        """The source's idle heartbeat (``IDLE_TIMEOUT``): a row that carries only an event time,
        so that this input's watermark moves while it has no records. The join ignores it."""
        yield heartbeat_envelope(event_time_ms)

    def dead_letter(self, record, reason: Reason, detail: str) -> tuple:
        return dead_letter_envelope(dead_letter_of(record, reason, detail), record)


_RIGHT = int(Tag.RIGHT)
_DELETE = int(RowKind.DELETE)


def _envelope(entry: tuple) -> tuple:
    """The envelope of an entry (a row's: its payload pickled, its event time a timestamp) or of a
    dead letter (an envelope already)."""
    if entry[TAG] > _RIGHT:
        return entry
    jk, side, kind, payload, time, ts, part, offset = entry
    return (jk, side, kind, dumps(payload), None if time is None else event_time(time), ts, part, offset)


def _entry(jk: bytes, side: int, kind: int, payload, time_ms: int | None, record) -> tuple:
    """A row of Kafka ``record`` as a packed envelope's entry."""
    return (jk, side, kind, payload, time_ms, record.timestamp_ms or 0, record.partition, record.offset)


def mapper(config: dict) -> InputDecoder:
    """Factory named in the source's ``mapper`` option: the worker config (``shipping.py``) with the
    input's ``side``, as the source reads it from its options; one decoder per worker process and side."""
    return built(InputDecoder.from_config, WorkerConfig.from_json_dict(config))
