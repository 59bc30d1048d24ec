"""The ``rowkind`` input format: an Avro value (plain, or Confluent's wire format with a registry) and
the change kind in a header (``ROWKIND_HEADER``: ``+I``, ``-U``, ``+U``, ``-D`` or a byte 0-3), as
Flink's changelog rows; an upsert topic's change kind is its value's presence (a tombstone deletes
the row its message key names, ``keys.py``), an append topic's is ``+I``.
"""
from __future__ import annotations

import logging

from operators import RowKind

from ..avro import ValueDecoder
from ..deadletters import DeadLetterError, Reason
from ..keys import KeyDecoder
from .base import Format, InputSide, ReaderSchemaError, SchemaSource, SchemaSources, schema_file

log = logging.getLogger(__name__)

_DELETE = int(RowKind.DELETE)


class RowKindDecoder:
    """One input's records -> its change (``base.Decoder``)."""

    def __init__(self, side, registry, header: str):
        self.side_plan = side
        self.header = header
        self.mode = side.changelog_mode
        self.decoder = ValueDecoder(side.reader_schema, registry)
        # An upsert input joined directly (planner.py): its tombstones find their rows by the
        # primary key their message key holds (keys.py).
        self.keys = KeyDecoder(side, side.key_format, registry) if side.direct_upsert else None
        primary_key = side.primary_key or ()
        self.primary_key_of = lambda row: tuple(row[i] for i in primary_key)
        self.key_format_warned = False

    def record_changes(self, record) -> tuple[list[tuple[int, tuple | None]], None]:
        kind = self._kind(record)
        if self.mode == "upsert" and record.key is None:
            raise DeadLetterError(Reason.UPSERT_RECORD_WITHOUT_KEY, "an upsert record needs its primary key as message key")
        if record.value is None:
            if self.mode != "upsert":
                raise DeadLetterError(Reason.TOMBSTONE_ON_RETRACT_TOPIC, f"a null value (tombstone) on a {self.mode} topic")
            # A delete on an upsert topic: joined directly, of the row its message key names; else
            # the normalize stage knows which row it removes.
            return [(_DELETE, self._key_row(record) if self.keys is not None else None)], None
        row = self.decoder.decode(record.value)
        if self.keys is not None and not self.key_format_warned:
            self._check_key(record, row)
        return [(int(kind), row)], None

    def message_key(self, record, row) -> bytes:
        """An upsert topic's changes are normalized by their message key."""
        return record.key

    def _key_row(self, record) -> tuple:
        """A row holding only the primary key the tombstone's message key holds (the decode step
        refuses a NULL in it)."""
        row = [None] * len(self.side_plan.columns)
        for index, value in zip(self.side_plan.primary_key, self.keys.decode(record.key)):
            row[index] = value
        return tuple(row)

    def _check_key(self, record, row: tuple) -> None:
        """Warn (once per worker and input) when a message key does not hold its value's primary key
        as ``*_KEY_FORMAT`` reads it: tombstones of such keys would not find their rows."""
        primary_key = self.primary_key_of(row)
        if any(v is None for v in primary_key):
            return  # a dead letter (null_in_required_column)
        if not self.keys.agrees(record.key, primary_key):
            self.key_format_warned = True
            log.warning(
                "%s_KEY_FORMAT=%s: the message key %r of %s[%d]@%d does not read as its value's primary key %r; "
                "tombstones of keys written this way cannot find their rows. Set %s_KEY_FORMAT to how the "
                "keys are written (avro or raw)", self.side_plan.name.upper(), self.side_plan.key_format,
                record.key, record.topic, record.partition, record.offset, primary_key, self.side_plan.name.upper())

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


def _parse_kind(raw) -> RowKind | None:
    try:
        return RowKind.parse(raw)
    except (ValueError, UnicodeDecodeError):
        return None


class RowKindFormat(Format):
    name = "rowkind"
    protocol = "RowKind"
    schema_sources = (SchemaSource.FILE, SchemaSource.REGISTRY)
    message_keys = True

    def reader_schema(self, side: InputSide, sources: SchemaSources) -> dict:
        """``*_SCHEMA_FILE``'s, else the registry's latest ``<topic>-value``."""
        if self.schema_source(side.schema_file) is SchemaSource.FILE:
            return schema_file(side, sources)
        try:
            return sources.latest(f"{side.topic}-value")[1]
        except Exception as err:  # noqa: BLE001 - the registry's error, in one line
            advice = f"; register it or set {side.schema_file_var}" if getattr(err, "kind", None) == "content" else ""
            raise ReaderSchemaError(
                f"SCHEMA_REGISTRY_URL: cannot get the latest schema of subject {side.topic}-value ({err}){advice}"
            ) from None

    def decoder(self, s, registry, rowkind_header: str) -> RowKindDecoder:
        return RowKindDecoder(s, registry, rowkind_header)
