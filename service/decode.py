"""Decode: Kafka record bytes -> a typed row with its RowKind, keyed by join key, or a dead letter.

This runs inside the Kafka source's reading task on Spark's Python workers (the source calls
:meth:`InputDecoder.map` for every record), so a record is read, decoded and keyed in one pass.
Every record becomes one envelope row (``envelope.py``): a left or right row under its join key
(an upsert record that is normalized first: under its message key), or a dead letter. With
``STATE_BUCKETS`` the rows of each bucket of keys that one task reads travel packed instead
(:meth:`InputDecoder.map_all`).

Bad records never stop the service: they travel on as dead letters (``deadletters.py``), which the
sink writes to the dead-letter topic with their reason.
"""
from __future__ import annotations

import logging
from typing import Iterable, Iterator

from expressions import ExpressionError
from operators import RowKind

from .avro import SchemaRegistry, ValueDecoder, to_epoch_millis
from .deadletters import DeadLetterError, Reason
from .deadletters import from_record as dead_letter_of
from .deadletters import original, skipped_record
from .debezium import DebeziumAvroDecoder, DebeziumDecoder
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
from .keys import KeyDecoder
from .latency import ReadTally
from .plan import JoinPlan
from .shipping import built, registry

log = logging.getLogger(__name__)


class InputDecoder:
    """The source's mapper for one input side."""

    schema = ENVELOPE_SCHEMA

    @classmethod
    def from_config(cls, config: dict) -> "InputDecoder":
        return cls(JoinPlan.from_json(config["plan"]), config["side"], config["rowkind_header"], registry(config))

    def __init__(self, plan: JoinPlan, side: int, rowkind_header: str, registry: SchemaRegistry | None):
        self.side_plan = plan.sides[side]
        self.side = side
        self.header = rowkind_header
        self.decoder = ValueDecoder(self.side_plan.reader_schema, registry)
        self.mode = self.side_plan.changelog_mode
        sp = self.side_plan
        self.key_of = plan.join_key_of(side)
        # Columns that must not be NULL: the primary key, and the event time of an event-time join.
        self.required = tuple(sp.primary_key or ()) + ((sp.time_column,) if sp.time_column is not None else ())
        self.time_column = sp.time_column if plan.is_event_time else None
        # Rows the join may drop as late (probe rows of an event-time temporal join, rows of a window
        # join) carry their original record, so that the dead letter holds its key, value and headers.
        self.keep_original = side in plan.late_sides
        self.topic = sp.topic
        # An upsert input joined directly (planner.py): rows are keyed by join key like any changelog,
        # tombstones by the primary key their message key holds (keys.py).
        self.keys = KeyDecoder(sp, sp.key_format, registry) if sp.direct_upsert else None
        self.primary_key_of = _getter(sp.primary_key or ())
        self.key_format_warned = False
        self.buckets = plan.state_buckets
        self.bucket_keys = plan.bucket_keys
        # What JOIN_SQL computes and filters before the join (SidePlan.calc), after the checks
        # above on the input row; a normalized input's rows go through it after the normalize stage.
        self.calc = sp.input_calc() if not sp.normalized else None
        self.debezium = None
        # A keyed versioned table timed by source.ts_ms: a delete carries its key-only row with its
        # time to the normalize stage, which dates the -D it derives by it (plan.dated_deletes).
        self.delete_times = side in plan.dated_deletes
        if sp.format == "debezium-json":
            self.debezium = DebeziumDecoder(sp.columns, sp.avro_types, sp.nullable, sp.source_types, sp.primary_key,
                                            upsert=sp.changelog_mode == "upsert", append=sp.changelog_mode == "append")
        elif sp.format == "debezium-avro":
            self.debezium = DebeziumAvroDecoder(sp.columns, sp.avro_types, sp.nullable, sp.source_types,
                                                sp.primary_key, sp.changelog_mode == "upsert", sp.reader_schema, registry,
                                                append=sp.changelog_mode == "append")

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
        the watermark moves as if the row had come)."""
        if self.debezium is None:
            entry = self._entry(record)
            return () if entry is None else (entry,)
        try:
            changes, skipped = self.debezium.changes(record.value)
        except DeadLetterError as dead:
            return (self.dead_letter(record, dead.reason, dead.detail),)
        if skipped:
            return (dead_letter_envelope(skipped_record(record, skipped), record),)
        entries = []
        upsert = self.debezium.upsert
        for kind, row in changes:
            delete = upsert and kind == _DELETE
            try:
                for index in (self.required if not delete else self.side_plan.primary_key):
                    if row[index] is None:
                        raise DeadLetterError(Reason.NULL_IN_REQUIRED_COLUMN,
                                              f"column {self.side_plan.columns[index]} is NULL")
                time = None if self.time_column is None or (delete and not self.delete_times) \
                    else self._event_time(row[self.time_column])
            except DeadLetterError as dead:
                return (self.dead_letter(record, dead.reason, dead.detail),)
            if upsert:  # normalized by primary key first (decode's message key grouping, by value)
                group = message_key_group(join_key_group(self.primary_key_of(row)))
                payload = (row if self.delete_times else None) if delete else row
            else:
                group, payload = join_key_group(self.key_of(row)), row
            if self.calc is not None and payload is not None:
                try:
                    calculated = self.calc(payload)
                except ExpressionError as err:
                    return (self.dead_letter(record, Reason.EXPRESSION_ERROR, str(err)),)
                if calculated is None:
                    if time is not None:
                        entries.append(heartbeat_envelope(time))
                    continue
                payload = calculated
                group = join_key_group(self.key_of(payload))
            if self.keep_original and payload is not None and not delete:
                payload = (payload, original(record))
            entries.append(_entry(group, self.side, kind, payload, time, record))
        return entries

    def _entry(self, record) -> tuple:
        """The record's row as a packed envelope's entry (``envelope.py``), or its dead letter."""
        try:
            kind = self._kind(record)
            if self.mode == "upsert" and record.key is None:
                raise DeadLetterError(Reason.UPSERT_RECORD_WITHOUT_KEY, "an upsert record needs its primary key as message key")
            if record.value is None:
                if self.mode != "upsert":
                    raise DeadLetterError(Reason.TOMBSTONE_ON_RETRACT_TOPIC, f"a null value (tombstone) on a {self.mode} topic")
                if self.keys is not None:
                    return self._keyed_delete(record)
                # A delete on an upsert topic: the normalize stage knows which row it removes.
                return _entry(message_key_group(record.key), self.side, int(RowKind.DELETE), None, None, record)
            row = self.decoder.decode(record.value)
            for index in self.required:
                if row[index] is None:
                    raise DeadLetterError(Reason.NULL_IN_REQUIRED_COLUMN, f"column {self.side_plan.columns[index]} is NULL")
            time = None if self.time_column is None else self._event_time(row[self.time_column])
            if self.calc is not None:
                row = self._calculated(row)
                if row is None:
                    return None if time is None else heartbeat_envelope(time)
        except DeadLetterError as dead:
            return self.dead_letter(record, dead.reason, dead.detail)
        payload = (row, original(record)) if self.keep_original else row
        if self.keys is not None and not self.key_format_warned:
            self._check_key(record, row)
        # Normalized upsert records are grouped by their message key first, then by join key.
        normalized = self.mode == "upsert" and self.keys is None
        group = message_key_group(record.key) if normalized else join_key_group(self.key_of(row))
        return _entry(group, self.side, int(kind), payload, time, record)

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

    def _keyed_delete(self, record) -> tuple:
        """A tombstone of an upsert input joined directly: a -D of a row holding only the primary
        key, under the join key (the join deletes the row it stores for that key); an entry."""
        try:
            values = self.keys.decode(record.key)
        except DeadLetterError as err:
            return self.dead_letter(record, err.reason, err.detail)
        row = [None] * len(self.side_plan.columns)
        for index, value in zip(self.side_plan.primary_key, values):
            if value is None:
                return self.dead_letter(record, Reason.NULL_IN_REQUIRED_COLUMN,
                                        f"column {self.side_plan.columns[index]} is NULL")
            row[index] = value
        row = tuple(row)
        if self.calc is not None:  # the join reads only the unique key of a delete: no computed value
            row += (None,) * len(self.side_plan.computed)
        return _entry(join_key_group(self.key_of(row)), self.side, int(RowKind.DELETE), row, None, record)

    def _check_key(self, record, row: tuple) -> None:
        """Warn (once per worker and input) when a message key does not hold its value's primary key
        as ``*_KEY_FORMAT`` reads it: tombstones of such keys would not find their rows."""
        primary_key = self.primary_key_of(row)
        if not self.keys.agrees(record.key, primary_key):
            self.key_format_warned = True
            log.warning(
                "%s_KEY_FORMAT=%s: the message key %r of %s[%d]@%d does not read as its value's primary key %r; "
                "tombstones of keys written this way cannot find their rows. Set %s_KEY_FORMAT to how the "
                "keys are written (avro or raw)", self.side_plan.name.upper(), self.side_plan.key_format,
                record.key, record.topic, record.partition, record.offset, primary_key, self.side_plan.name.upper())

    def heartbeat(self, event_time_ms: int) -> Iterator[tuple]:
        """The source's idle heartbeat (``IDLE_TIMEOUT``): a row that carries only an event time,
        so that this input's watermark moves while it has no records. The join ignores it."""
        yield heartbeat_envelope(event_time_ms)

    def _kind(self, record) -> RowKind:
        raw = None
        for name, value in record.headers or ():
            if name == self.header:
                raw = value
        if self.mode == "append":
            if raw is not None and _parse_kind(raw) is not RowKind.INSERT:
                raise DeadLetterError(Reason.ROWKIND_ON_APPEND_TOPIC, f"header {self.header}={raw!r} on an append-only topic")
            return RowKind.INSERT
        if self.mode == "upsert":
            return RowKind.UPDATE_AFTER
        if raw is None:
            raise DeadLetterError(Reason.MISSING_ROWKIND, f"no {self.header!r} header")
        kind = _parse_kind(raw)
        if kind is None:
            raise DeadLetterError(Reason.UNKNOWN_ROWKIND, f"header {self.header}={raw!r} is not +I, -U, +U, -D or a byte 0-3")
        return kind

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


def _parse_kind(raw) -> RowKind | None:
    try:
        return RowKind.parse(raw)
    except (ValueError, UnicodeDecodeError):
        return None


def _getter(indexes: tuple[int, ...]):
    return lambda row: tuple(row[i] for i in indexes)


def mapper(config: dict) -> InputDecoder:
    """Factory named in the source's ``mapper`` option: the worker config (``shipping.py``) with the
    input's ``side``; one decoder per worker process and side."""
    return built(InputDecoder.from_config, config)
