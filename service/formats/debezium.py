"""The Debezium change protocol: a change envelope per row change, as changelog rows. Its
encodings are the tenants ``debezium-json`` (``debezium_json.py``) and ``debezium-avro``
(``debezium_avro.py``); the types of its columns are Kafka Connect's (``connect.py``).

Debezium (PostgreSQL, MySQL, SQL Server, Oracle capture through Kafka Connect) writes one message
per row change: ``{"before": {...}, "after": {...}, "op": "c" | "r" | "u" | "d" | "t", "source":
{..., "ts_ms": ...}, "ts_ms": ...}``, with Kafka Connect's JSON converter either bare or wrapped
as ``{"schema": {...}, "payload": <envelope>}`` (``value.converter.schemas.enable``), or with
Confluent's AvroConverter (``debezium-avro``: Confluent's wire format, the envelope an Avro record
whose schema the registry holds: ``debezium_avro.DebeziumAvroDecoder``). Both share the mapping,
which is Flink's ``debezium-json`` format's:

======================  ==========================================================================
``op``                  changes
======================  ==========================================================================
``c`` (create), ``r``   ``+I`` of ``after``
(a snapshot read)
``u`` (update)          ``-U`` of ``before``, ``+U`` of ``after``
``d`` (delete)          ``-D`` of ``before``
``u``, ``d`` of an      none: a dead letter (``debezium_change_on_append_topic``)
append-only input
``t`` (truncate),       none: skipped and counted (so is the tombstone Debezium writes after a
``m`` (a message)       delete, a message with a null value)
======================  ==========================================================================

Keyed inputs (a primary key declared: ``LEFT_PRIMARY_KEY``) are read as upserts of that key
by default instead (``*_CHANGELOG_MODE`` unset, or ``upsert``): ``c``, ``r`` and ``u`` are the
key's new row, ``d`` its delete, and the normalize stage keyed by the primary key derives the
retractions from the row it keeps. So a table captured with PostgreSQL's default ``REPLICA
IDENTITY`` (an update without its before image, a delete whose before image holds only the key)
is read correctly; without a primary key the before images are the only way to retract, and a
message missing one is a dead letter whose detail names ``REPLICA IDENTITY FULL``. A keyed input
declared ``*_CHANGELOG_MODE=retract`` is read by the table above too, as Flink's
``debezium-json`` reads every topic: its before images retract (REPLICA IDENTITY FULL required),
and the planner joins it directly, without the normalize stage; a message without its before
image, or whose before image lacks a NOT NULL column (a key-only image), is a dead letter naming
REPLICA IDENTITY FULL (a key-only image of a table whose other columns are all nullable cannot be
told from a full one). An input declared insert-only (``*_CHANGELOG_MODE=append``: an event or
log table) reads ``c`` and ``r`` as ``+I`` of ``after`` whether or not it has a primary key; a
``u`` or a ``d`` is no insert, so each is a dead letter (``debezium_change_on_append_topic``), and ``t``, ``m`` and
tombstones are skipped as above. Every malformed envelope (not JSON, no ``op``, no ``after`` on a create or an
update, no ``before`` on a delete, a key that differs between before and after) is a dead letter.

``*_EVENT_TIME_COLUMN=source.ts_ms``: the row's last column, :data:`SOURCE_TIME`, is the
envelope's ``source.ts_ms`` as a timestamp, on every change of the message (a ``-U`` or ``-D`` of
the before image too: the time of the change).
"""
from __future__ import annotations

import binascii
import datetime as _dt
from decimal import InvalidOperation

from operators import RowKind

from ..deadletters import DeadLetterError, Reason
from ..envelope import join_key_group
from .base import Format
from .connect import EPOCH, non_null, source_types, unsupported_columns, value_reader

#: ``*_EVENT_TIME_COLUMN`` naming the envelope's ``source.ts_ms`` (the time of the change in the
#: database) as a Debezium input's event time; also the name of the column that carries it, last
#: in the row. A dot is in no Avro field name, so no column of a table can be called that.
SOURCE_TIME = "source.ts_ms"
SOURCE_TIME_TYPE = {"type": "long", "logicalType": "timestamp-millis"}
_INSERT, _UPDATE_BEFORE, _UPDATE_AFTER, _DELETE = (int(k) for k in RowKind)
SKIPPED = ()  # the changes of a message that carries none


class DebeziumChanges:
    """One input's Debezium messages -> ``[(RowKind value, row)]``, whatever their encoding.

    ``columns`` and ``avro_types`` (non-null types: see ``avro.type_family``) are the row's;
    ``sources`` each column's Connect type name where an embedded schema told it; ``key`` the
    primary key's column indexes, or None; ``upsert``: read as upserts of that key (see the module
    docstring); ``append``: the input is declared insert-only, so an update or a delete is a dead
    letter (chosen here, once: the other modes' reading is untouched). When the last column is :data:`SOURCE_TIME`, each row carries the envelope's
    ``source.ts_ms`` there (a timestamp); the images fill the columns before it.

    How a message becomes an envelope (a dict) is the format's (:meth:`envelope`); what its
    changes are (:meth:`envelope_changes`) is shared by the JSON and the Avro formats."""

    def __init__(self, columns: tuple[str, ...], avro_types: tuple, nullable: tuple[bool, ...],
                 sources: dict | None, key: tuple[int, ...] | None, upsert: bool, append: bool = False):
        if append and upsert:
            raise ValueError("an append-only Debezium input is not read as upserts")
        self.source_time = columns[-1:] == (SOURCE_TIME,)
        if self.source_time:
            columns, avro_types, nullable = columns[:-1], avro_types[:-1], nullable[:-1]
        self.columns = columns
        self.nullable = nullable
        sources = sources or {}
        self.readers = tuple(value_reader(non_null(t), sources.get(c)) for c, t in zip(columns, avro_types))
        self.key = key
        self.upsert = upsert
        self.append = append
        # why a retracting input's message without a full before image is a dead letter (chosen here)
        self.no_before = _NO_BEFORE_KEYED if key and not upsert else _NO_BEFORE
        if append:
            self._changes = self._insert_changes

    def changes(self, value: bytes | None) -> tuple[list[tuple[int, tuple]], str | None]:
        """(changes, why skipped): the message's changes, or none and why it was skipped
        (``tombstone``, ``truncate``, ``message``); raises :class:`DeadLetterError` when malformed.
        A keyed (upsert) input's delete is the before image, of which only the key is read."""
        if value is None:
            return [], "debezium_tombstone"
        envelope = self.envelope(value)
        if envelope is None:
            return [], "debezium_tombstone"
        return self.envelope_changes(envelope)

    def record_changes(self, record) -> tuple[list[tuple[int, tuple]], str | None]:
        """:meth:`changes` of a Kafka record (the decode step's ``Decoder``)."""
        return self.changes(record.value)

    def message_key(self, record, row: tuple) -> bytes:
        """An upsert input's changes are normalized by the primary key in their images."""
        return join_key_group(self.key_of(row))

    def envelope(self, value: bytes) -> dict | None:
        """The message's envelope (a dict), None for a null payload; a dead letter if it is none.
        The encoding's (``debezium_json.py``, ``debezium_avro.py``)."""
        raise NotImplementedError

    def envelope_changes(self, envelope: dict) -> tuple[list[tuple[int, tuple]], str | None]:
        """:meth:`changes` of an envelope (a dict, whichever format it came in)."""
        op = envelope.get("op")
        if op in ("t", "m"):
            return [], "debezium_truncate" if op == "t" else "debezium_message"
        changes = self._changes(op, envelope.get("before"), envelope.get("after"))
        if self.source_time:
            time = _source_time(envelope)
            changes = [(kind, row + (time,)) for kind, row in changes]
        return changes, None

    def _changes(self, op, before, after) -> list[tuple[int, tuple]]:
        if op in ("c", "r"):
            return [(_UPDATE_AFTER if self.upsert else _INSERT, self._row(after, "after", op))]
        if op == "u":
            new = self._row(after, "after", op)
            if self.upsert:
                if before is not None:
                    self._same_key(self._row(before, "before", op, key_only=True), new)
                return [(_UPDATE_AFTER, new)]
            if before is None:
                raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, self.no_before.format(op="an update"))
            old = self._row(before, "before", op)
            self._same_key(old, new)
            return [(_UPDATE_BEFORE, old), (_UPDATE_AFTER, new)]
        if op == "d":
            if before is None:
                raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, "a delete without its before image" if self.upsert
                                      else self.no_before.format(op="a delete"))
            return [(_DELETE, self._row(before, "before", op, key_only=self.upsert))]
        return self._changes_of_unknown(op)

    def _insert_changes(self, op, before, after) -> list[tuple[int, tuple]]:
        """:meth:`_changes` of an input declared insert-only (``*_CHANGELOG_MODE=append``)."""
        if op in ("c", "r"):
            return [(_INSERT, self._row(after, "after", op))]
        if op in ("u", "d"):
            raise DeadLetterError(Reason.DEBEZIUM_CHANGE_ON_APPEND_TOPIC,
                                  f"op {op!r} ({'an update' if op == 'u' else 'a delete'}) on an input declared "
                                  "append-only (*_CHANGELOG_MODE=append): only c and r are inserts; unset it to "
                                  "read the topic as a changelog")
        return self._changes_of_unknown(op)

    @staticmethod
    def _changes_of_unknown(op):
        raise DeadLetterError(Reason.DEBEZIUM_MALFORMED,
                              "no op" if op is None else f"unknown op {op!r} (expected c, r, u, d, t or m)")

    def key_of(self, row: tuple) -> tuple:
        return tuple(row[i] for i in self.key)

    def _row(self, image, which: str, op: str, key_only: bool = False) -> tuple:
        if not isinstance(image, dict):
            raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, f"op {op!r} without its {which} image")
        values = []
        for i, (column, read) in enumerate(zip(self.columns, self.readers)):
            v = image.get(column)
            if v is None:
                if not self.nullable[i] and not (key_only and i not in self.key):
                    why = (f"column {column} of the {which} image is {'NULL' if column in image else 'missing'}, "
                           "and the column is not nullable")
                    if which == "before" and not self.upsert:  # a before image holding only the key
                        why += "; " + self.no_before.format(op=f"op {op!r}").replace(" without its before image",
                                                                                     " without a full before image", 1)
                    raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, why)
                values.append(None)
                continue
            try:
                values.append(read(v))
            except (ValueError, TypeError, KeyError, InvalidOperation, OverflowError, binascii.Error) as err:
                raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, f"column {column} of the {which} image: {err}") from None
        return tuple(values)

    def _same_key(self, old: tuple, new: tuple) -> None:
        if self.key and self.key_of(old) != self.key_of(new):
            raise DeadLetterError(Reason.DEBEZIUM_MALFORMED,
                                  f"the before image's key {self.key_of(old)!r} differs from the after image's "
                                  f"{self.key_of(new)!r} (Debezium writes a key change as a delete and a create)")


_NO_BEFORE = ("{op} without its before image: without a primary key the before images are the only way to "
              "retract; capture the table with REPLICA IDENTITY FULL, or declare its primary key "
              "(*_PRIMARY_KEY) to read the topic as upserts")
_NO_BEFORE_KEYED = ("{op} without its before image: in retract mode (*_CHANGELOG_MODE=retract) the before images "
                    "retract; capture the table with REPLICA IDENTITY FULL, or unset *_CHANGELOG_MODE to read the "
                    "topic as upserts of its primary key")


def _source_time(envelope: dict) -> _dt.datetime:
    """The envelope's ``source.ts_ms`` as a timestamp (the time of the change in the database)."""
    source = envelope.get("source")
    millis = source.get("ts_ms") if isinstance(source, dict) else None
    if not isinstance(millis, int) or isinstance(millis, bool):
        raise DeadLetterError(Reason.DEBEZIUM_MALFORMED, f"no source.ts_ms (the event time: {SOURCE_TIME} is its "
                              f"*_EVENT_TIME_COLUMN), got {'no source' if source is None else repr(millis)}")
    try:
        return EPOCH + _dt.timedelta(milliseconds=millis)
    except OverflowError:
        raise DeadLetterError(Reason.INVALID_EVENT_TIME, f"source.ts_ms {millis} is not an event time") from None



class DebeziumFormat(Format):
    """What the Debezium formats share: the protocol's questions, answered once."""

    protocol = "Debezium"
    changes_in_messages = True
    envelope_time = SOURCE_TIME
    envelope_time_type = SOURCE_TIME_TYPE

    def source_types(self, schema: dict) -> dict[str, str] | None:
        return source_types(schema)

    def unreadable_columns(self, schema: dict) -> dict[str, str]:
        return unsupported_columns(schema)

    def changelog_mode(self, declared: str, given: bool, primary_key) -> str:
        """The mode ``*_CHANGELOG_MODE`` declares (``append``: an insert-only table; ``retract``:
        the before images retract, REPLICA IDENTITY FULL required; ``upsert``: upserts of the
        primary key, which it requires), and unset, upserts of its primary key when one is
        declared, else ``retract``. A side in retract mode with a primary key joins directly as
        a rowkind one does (no normalize stage: ``SidePlan.normalized``); in upsert mode it is
        never joined directly (its message keys are JSON)."""
        if given:
            return declared
        return "upsert" if primary_key else "retract"

    def explain(self, s) -> str:
        mode = (f"{s.format}: upserts of the primary key (c, r, u: its row; d: its delete)" if s.changelog_mode == "upsert"
                else f"{s.format}: inserts only (append): c, r -> +I; u, d: dead letters "
                "(debezium_change_on_append_topic); tombstones, t and m skipped" if s.changelog_mode == "append"
                else f"{s.format}: c, r -> +I; u -> -U before, +U after; d -> -D before; tombstones and t skipped"
                + ("; the before images retract (REPLICA IDENTITY FULL required); joined directly, no normalize "
                   "stage" if s.primary_key else ""))
        mode += "; row schema " + self.explain_schema(s)
        if s.columns[-1:] == (SOURCE_TIME,):
            mode += f"; column {SOURCE_TIME}: the envelope's source.ts_ms"
        return mode

    def explain_schema(self, s) -> str:
        """Where check-config says the row schema came from."""
        raise NotImplementedError

    def decoder_args(self, s) -> tuple:
        """The protocol's arguments of a side's decoder."""
        return (s.columns, s.avro_types, s.nullable, s.source_types, s.primary_key)
