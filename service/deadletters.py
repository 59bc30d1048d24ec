"""The dead letter: why a record could not be used, what it was, and how it is written.

Bad input never stops the service and is never lost: decode turns a record it cannot use into a
letter (:func:`from_record`), the join turns a row it drops as late (a probe row of an event-time
temporal join, a row of a window join for a window that has fired) into one (:func:`late_row`), and encode writes too large output records as one; the sink writes them all to
``DLQ_TOPIC``, rendered by :func:`render`: the original key, value and headers, plus the headers
``reason``, ``reason.detail``, ``source.topic``, ``source.partition`` and ``source.offset``. A
letter is a plain dict (it travels pickled between Spark stages):

    {"reason": str, "detail": str, "original": dict | None, "kind": int | None, "row": tuple | None}

``original`` is what :func:`original` keeps of a Kafka record; a letter without one (a late row
whose record was not kept) is written with the row's text in a ``row`` header and its RowKind in
``rowkind``, and no key or value.
"""
from __future__ import annotations

from enum import StrEnum

from operators import RowKind


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
    NULL_IN_REQUIRED_COLUMN = "null_in_required_column"  # a primary-key or event-time column
    TOO_LARGE = "too_large"  # an output record over MAX_OUTPUT_RECORD_BYTES
    LATE = "late"  # a temporal join's probe row at or behind the watermark, a window join's row for a fired window


class DeadLetterError(Exception):
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
    return {"reason": str(reason), "detail": detail, "original": original(record), "kind": None, "row": None}


def late_row(kind: int, row: tuple, record: dict | None, windows: int | None = None, watermark=None) -> dict:
    """The letter for a row the join dropped as late; ``record`` is its :func:`original` if kept.

    ``windows``: for a window join, how many of the row's windows had fired (one letter per
    record, however many windows it missed)."""
    if windows is None:
        detail = "probe row at or behind the watermark"
    else:
        detail = (f"row for {windows} window(s) that had already fired (window_end - 1 <= watermark "
                  f"{watermark}); dropped from them")
    return {"reason": str(Reason.LATE), "detail": detail, "original": record, "kind": kind, "row": row}


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


def render(letter: dict) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
    """(key, value, headers) of the dead-letter record for ``letter``."""
    record = letter["original"]
    if record is None:
        key = value = None
        headers = [("row", repr(letter["row"]).encode()), ("rowkind", RowKind(letter["kind"]).short.encode())]
        headers += reason_headers(letter["reason"], letter["detail"])
    else:
        key, value, headers = record["key"], record["value"], list(record["headers"])
        headers += reason_headers(letter["reason"], letter["detail"], record["topic"], record["partition"],
                                  record["offset"])
    return key, value, headers
