"""The dead letter: why a record could not be used, what it was, and how it is written.

Bad input never stops the service and is never lost: decode turns a record it cannot use into a
letter (:func:`from_record`), the join turns a row it drops as late (a probe row of an event-time
temporal join, a row of a window join for a window that has fired) into one (:func:`late_row`), and encode writes too large output records as one; the sink writes them all to
``DLQ_TOPIC``, rendered by :func:`render`: the original key, value and headers, plus the headers
``reason``, ``reason.detail``, ``source.topic``, ``source.partition`` and ``source.offset``. A
letter is a plain dict (it travels pickled between Spark stages):

    {"reason": str, "detail": str, "original": dict | None, "kind": int | None, "row": tuple | None,
     "source": (topic, partition, offset) | None}

``original`` is what :func:`original` keeps of a Kafka record; a letter without one (a row whose
record was not kept) is written with the row's text in a ``row`` header and its RowKind in
``rowkind``, no key or value, and the ``source.*`` headers its ``source`` gives.
"""
from __future__ import annotations

from enum import StrEnum

from operators import RowKind

from .errors import ChangejoinError
from .kafka_records import DEFAULT_ROWKIND_HEADER, record_bytes


class Reason(StrEnum):
    """Every reason a record is dead-lettered: the ``reason`` header's values."""

    UNDECODABLE = "undecodable"
    UNKNOWN_SCHEMA_ID = "unknown_schema_id"
    SCHEMA_MISMATCH = "schema_mismatch"
    MISSING_ROWKIND = "missing_rowkind"
    UNKNOWN_ROWKIND = "unknown_rowkind"
    ROWKIND_ON_APPEND_TOPIC = "rowkind_on_append_topic"
    TOMBSTONE_ON_RETRACT_TOPIC = "tombstone_on_retract_topic"
    UPSERT_RECORD_WITHOUT_KEY = "upsert_record_without_key"
    UNDECODABLE_KEY = "undecodable_key"  # a tombstone of a directly joined upsert input
    JOIN_ERROR = "join_error"  # the join failed on the key's records (their state is kept as it was)
    NULL_IN_REQUIRED_COLUMN = "null_in_required_column"  # a primary-key or event-time column
    INVALID_EVENT_TIME = "invalid_event_time"  # an event time outside the years 1 to 9999
    TOO_LARGE = "too_large"  # an output record over MAX_OUTPUT_RECORD_BYTES
    DEBEZIUM_MALFORMED = "debezium_malformed"  # a Debezium message that is no valid change envelope
    DEBEZIUM_CHANGE_ON_APPEND_TOPIC = "debezium_change_on_append_topic"  # an update or a delete on an append-only input
    LOOKUP_KEY_INVALID = "lookup_key_invalid"  # a lookup key the table's column cannot hold (out of range...)
    LOOKUP_RETRACTION_UNKNOWN = "lookup_retraction_unknown"  # a lookup join's retraction of a row it does not remember
    LOOKUP_ROW_INVALID = "lookup_row_invalid"  # a table row matched holds a value the join cannot take ('infinity', NaN)
    LATE = "late"  # a temporal join's probe row at or behind the watermark, a window join's row for a fired window
    EXPRESSION_ERROR = "expression_error"  # an expression of JOIN_SQL failed on the row (a CAST Flink fails on...)


class DeadLetterError(ChangejoinError):
    """A record that must become a dead letter, raised where the problem is found."""

    def __init__(self, reason: Reason, detail: str = ""):
        super().__init__(reason, detail)
        self.reason = Reason(reason)
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.reason}: {self.detail}" if self.detail else str(self.reason)


def original(record) -> dict:
    """What a dead letter keeps of the Kafka record it stands for."""
    return {
        "topic": record.topic, "partition": record.partition, "offset": record.offset, "key": record.key,
        "value": record.value, "headers": list(record.headers or ()), "timestamp_ms": record.timestamp_ms,
    }


def from_record(record, reason: Reason, detail: str) -> dict:
    """The letter for a Kafka record that cannot be used."""
    return {"reason": str(reason), "detail": detail, "original": original(record), "kind": None, "row": None,
            "source": None}


def skipped_record(record, reason: str) -> dict:
    """A record that carries no row change (a Debezium tombstone or truncate): it travels as a
    letter marked ``skipped``, which the sink counts and does not write."""
    return {"reason": reason, "detail": "", "original": None, "kind": None, "row": None,
            "source": (record.topic, record.partition, record.offset), "skipped": True}


def late_row(kind: int, row: tuple, record: dict | None, windows: int | None = None, watermark=None) -> dict:
    """The letter for a row the join dropped as late; ``record`` is its :func:`original` if kept.

    ``windows``: for a window join, how many of the row's windows had fired (one letter per
    record, however many windows it missed)."""
    if windows is None:
        detail = "probe row at or behind the watermark"
    else:
        detail = (f"row for {windows} window(s) that had already fired (window_end - 1 <= watermark "
                  f"{watermark}); dropped from them")
    return from_row(Reason.LATE, detail, kind, row, record)


def from_row(reason: Reason, detail: str, kind: int, row: tuple, record: dict | None = None,
             source: tuple | None = None) -> dict:
    """The letter for a decoded row the join could not use; ``record`` is its :func:`original` if
    kept, else ``source`` may say where it was read: (topic, partition, offset)."""
    return {"reason": str(reason), "detail": detail, "original": record, "kind": kind, "row": row,
            "source": source}


def reason_headers(reason: str, detail: str, topic=None, partition=None, offset=None) -> list[tuple[str, bytes]]:
    """The headers that say why and where from (origin parts that are unknown are left out)."""
    headers = [("reason", reason.encode()), ("reason.detail", detail.encode()[:1000])]
    if topic is not None:
        headers.append(("source.topic", str(topic).encode()))
    if partition is not None:
        headers.append(("source.partition", str(partition).encode()))
    if offset is not None:
        headers.append(("source.offset", str(offset).encode()))
    return headers


#: Headers a dead letter keeps when it must shrink to be writable: why, where from, which batch.
_ESSENTIAL = frozenset({"reason", "reason.detail", "source.topic", "source.partition", "source.offset",
                        "changejoin.batch", "changejoin.seq"})


def fit(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]], limit: int):
    """(key, value, headers) of a dead-letter record that the producer accepts under ``limit``
    (``message.max.bytes``): when the whole letter would not fit, its value goes first, then its
    key, then the original record's headers; a ``dropped`` header says what went and how big it was."""
    if record_bytes(key, value, headers) <= limit:
        return key, value, headers
    dropped = []
    if value is not None:
        dropped.append(f"value ({len(value)} bytes)")
        value = None
    if key is not None and record_bytes(key, value, headers) + 64 > limit:
        dropped.append(f"key ({len(key)} bytes)")
        key = None
    if record_bytes(key, value, headers) + 64 > limit:
        kept = [h for h in headers if h[0] in _ESSENTIAL]
        gone = [h for h in headers if h[0] not in _ESSENTIAL]
        dropped.append(f"{len(gone)} headers ({sum(len(v or b'') for _, v in gone)} bytes)")
        headers = kept
    return key, value, headers + [("dropped", ", ".join(dropped).encode())]


def render(letter: dict) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """(key, value, headers) of the dead-letter record for ``letter``."""
    record = letter["original"]
    if record is None:
        key = value = None
        headers = [("row", repr(letter["row"]).encode()), (DEFAULT_ROWKIND_HEADER, RowKind(letter["kind"]).short.encode())]
        headers += reason_headers(letter["reason"], letter["detail"], *(letter.get("source") or ()))
    else:
        key, value, headers = record["key"], record["value"], list(record["headers"])
        headers += reason_headers(letter["reason"], letter["detail"], record["topic"], record["partition"],
                                  record["offset"])
    return key, value, headers
