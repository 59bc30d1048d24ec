"""Decode: Kafka record bytes -> a typed row with its RowKind, keyed by join key, or a dead letter.

This runs inside the Kafka source's reading task on Spark's Python workers (the source calls
:meth:`InputDecoder.map` for every record), so a record is read, decoded and keyed in one pass.
Every record becomes one *envelope* row (:data:`ENVELOPE_SCHEMA`):

- ``jk``: the join key, encoded so that equal keys have equal bytes (Spark groups by it);
- ``side``: 0 = left, 1 = right, :data:`DEAD_LETTER` = a record that could not be used,
  :data:`HEARTBEAT` = an idle heartbeat (see :meth:`InputDecoder.heartbeat`);
- ``kind``: the RowKind byte (0-3);
- ``row``: the decoded row (a pickled tuple in schema order), or the dead letter's details;
- ``event_time``: the row's event time for temporal joins, else NULL;
- ``ts``, ``part``, ``offset``: the Kafka timestamp, partition and offset, which order the records
  of one key deterministically (see ``processor.py``).

Bad records never stop the service: they travel on as dead letters, which the sink writes to the
dead-letter topic with their reason.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import pickle
from functools import lru_cache
from typing import Iterator

from operators import RowKind

from .avro import DecodeError, SchemaRegistry, ValueDecoder, to_epoch_millis
from .keys import KeyDecoder
from .plan import JoinPlan

log = logging.getLogger(__name__)

ENVELOPE_SCHEMA = (
    "jk binary, side tinyint, kind tinyint, row binary, event_time timestamp, ts long, part int, offset long"
)
DEAD_LETTER = 2
HEARTBEAT = 3
HEARTBEAT_KEY = b"\x02heartbeat"

# Dead-letter reasons (the `reason` header of a dead-letter record).
UNDECODABLE = "undecodable"
UNKNOWN_SCHEMA_ID = "unknown_schema_id"
SCHEMA_MISMATCH = "schema_mismatch"
MISSING_ROWKIND = "missing_rowkind"
UNKNOWN_ROWKIND = "unknown_rowkind"
ROWKIND_ON_APPEND = "rowkind_on_append_topic"
TOMBSTONE_ON_RETRACT = "tombstone_on_retract_topic"
MISSING_KEY = "upsert_record_without_key"
# and keys.UNDECODABLE_KEY: the tombstone of an upsert input joined directly, whose key cannot be read
NULL_KEY = "null_in_required_column"
LATE = "late"
TOO_LARGE = "too_large"

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def encode_join_key(values: tuple) -> bytes:
    """Equal join keys give equal bytes: ``repr`` of a tuple of Avro-decoded values is canonical
    (pickle is not: it shares repeated objects)."""
    return repr(values).encode()


def upsert_key(message_key: bytes) -> bytes:
    """Grouping key of the normalize stage: the upsert topic's message key (its primary key)."""
    return b"\x01" + message_key


def dead_letter_key(partition: int) -> bytes:
    # Dead letters need a grouping key too: one per source partition spreads them over tasks.
    return b"\x00dead-letter:%d" % partition


class InputDecoder:
    """The source's mapper for one input side."""

    schema = ENVELOPE_SCHEMA

    def __init__(self, plan: JoinPlan, side: int, rowkind_header: str, registry: SchemaRegistry | None):
        self.side_plan = plan.sides[side]
        self.side = side
        self.header = rowkind_header
        self.decoder = ValueDecoder(self.side_plan.reader_schema, registry)
        self.mode = self.side_plan.changelog_mode
        sp = self.side_plan
        self.key_of = _getter(sp.join_key)
        # Columns that must not be NULL: the primary key, and the event time of a temporal join.
        self.required = tuple(sp.primary_key or ()) + ((sp.time_column,) if sp.time_column is not None else ())
        self.time_column = sp.time_column if plan.kind == "temporal_event_time" else None
        # Probe rows of an event-time join may turn out late in the join: they carry their
        # original record so that the dead letter holds the original key, value and headers.
        self.keep_original = plan.kind == "temporal_event_time" and side == 0
        self.topic = sp.topic
        # An upsert input joined directly (plan.py): rows are keyed by join key like any changelog,
        # tombstones by the primary key their message key holds (keys.py).
        self.keys = KeyDecoder(sp, sp.key_format, registry) if sp.direct_upsert else None
        self.primary_key_of = _getter(sp.primary_key or ())
        self.key_format_warned = False

    def map(self, record) -> Iterator[tuple]:
        try:
            kind = self._kind(record)
            if self.mode == "upsert" and record.key is None:
                raise _Dead(MISSING_KEY, "an upsert record needs its primary key as message key")
            if record.value is None:
                if self.mode != "upsert":
                    raise _Dead(TOMBSTONE_ON_RETRACT, f"a null value (tombstone) on a {self.mode} topic")
                if self.keys is not None:
                    yield self._keyed_delete(record)
                    return
                # A delete on an upsert topic: the normalize stage knows which row it removes.
                yield (upsert_key(record.key), self.side, int(RowKind.DELETE), pickle.dumps(None), None,
                       record.timestamp_ms or 0, record.partition, record.offset)
                return
            try:
                row = self.decoder.decode(record.value)
            except DecodeError as err:
                raise _Dead(err.reason, err.detail) from None
            for index in self.required:
                if row[index] is None:
                    raise _Dead(NULL_KEY, f"column {self.side_plan.columns[index]} is NULL")
        except _Dead as dead:
            yield self.dead_letter(record, dead.reason, dead.detail)
            return
        event_time = None
        if self.time_column is not None:
            millis = to_epoch_millis(row[self.time_column])
            event_time = _EPOCH + _dt.timedelta(milliseconds=millis)
        payload = (row, _original(record)) if self.keep_original else row
        if self.keys is not None and not self.key_format_warned:
            self._check_key(record, row)
        # Normalized upsert records are grouped by their message key first, then by join key.
        normalized = self.mode == "upsert" and self.keys is None
        key = upsert_key(record.key) if normalized else encode_join_key(self.key_of(row))
        yield (
            key, self.side, int(kind), pickle.dumps(payload, protocol=5),
            event_time, record.timestamp_ms or 0, record.partition, record.offset,
        )

    def _keyed_delete(self, record) -> tuple:
        """A tombstone of an upsert input joined directly: a -D of a row holding only the primary
        key, under the join key (the join deletes the row it stores for that key)."""
        try:
            values = self.keys.decode(record.key)
        except DecodeError as err:
            return self.dead_letter(record, err.reason, err.detail)
        row = [None] * len(self.side_plan.columns)
        for index, value in zip(self.side_plan.primary_key, values):
            if value is None:
                return self.dead_letter(record, NULL_KEY, f"column {self.side_plan.columns[index]} is NULL")
            row[index] = value
        row = tuple(row)
        return (encode_join_key(self.key_of(row)), self.side, int(RowKind.DELETE), pickle.dumps(row, protocol=5),
                None, record.timestamp_ms or 0, record.partition, record.offset)

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
        yield (HEARTBEAT_KEY, HEARTBEAT, 0, pickle.dumps(None), _EPOCH + _dt.timedelta(milliseconds=event_time_ms),
               event_time_ms, -1, -1)

    def _kind(self, record) -> RowKind:
        raw = None
        for name, value in record.headers or ():
            if name == self.header:
                raw = value
        if self.mode == "append":
            if raw is not None and _parse_kind(raw) is not RowKind.INSERT:
                raise _Dead(ROWKIND_ON_APPEND, f"header {self.header}={raw!r} on an append-only topic")
            return RowKind.INSERT
        if self.mode == "upsert":
            return RowKind.UPDATE_AFTER
        if raw is None:
            raise _Dead(MISSING_ROWKIND, f"no {self.header!r} header")
        kind = _parse_kind(raw)
        if kind is None:
            raise _Dead(UNKNOWN_ROWKIND, f"header {self.header}={raw!r} is not +I, -U, +U, -D or a byte 0-3")
        return kind

    def dead_letter(self, record, reason: str, detail: str) -> tuple:
        letter = {"reason": reason, "detail": detail, **_original(record)}
        return (
            dead_letter_key(record.partition), DEAD_LETTER, 0, pickle.dumps(letter, protocol=5), None,
            record.timestamp_ms or 0, record.partition, record.offset,
        )


def _original(record) -> dict:
    """What a dead letter keeps of the record it stands for."""
    return {
        "topic": record.topic, "partition": record.partition, "offset": record.offset, "key": record.key,
        "value": record.value, "headers": list(record.headers or ()), "timestamp_ms": record.timestamp_ms,
    }


class _Dead(Exception):
    def __init__(self, reason: str, detail: str):
        self.reason, self.detail = reason, detail


def _parse_kind(raw) -> RowKind | None:
    try:
        return RowKind.parse(raw)
    except (ValueError, UnicodeDecodeError):
        return None


def _getter(indexes: tuple[int, ...]):
    return lambda row: tuple(row[i] for i in indexes)


@lru_cache(maxsize=8)
def _cached(config_json: str) -> InputDecoder:
    config = json.loads(config_json)
    plan = JoinPlan.from_json(config["plan"])
    registry = None
    if config.get("registry_url"):
        registry = SchemaRegistry(config["registry_url"], config.get("registry_auth"))
    return InputDecoder(plan, config["side"], config["rowkind_header"], registry)


def mapper(config: dict) -> InputDecoder:
    """Factory named in the source's ``mapper`` option; one decoder per worker process and side."""
    return _cached(json.dumps(config, sort_keys=True))


def mapper_config(plan: JoinPlan, side: int, rowkind_header: str, registry_url: str | None) -> dict:
    """The source's ``mapper.config``; the registry's credentials travel apart, as ``registry_auth``
    in ``mapper.secret`` (see ``pipeline.py``)."""
    return {"plan": plan.to_json(), "side": side, "rowkind_header": rowkind_header, "registry_url": registry_url}
