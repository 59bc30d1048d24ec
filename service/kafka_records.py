"""How big a Kafka record is for the producer: the one accounting behind the output record limit
(``config.py``), dead letters that must always be writable (``deadletters.py``) and the encoder.

librdkafka refuses (MSG_SIZE_TOO_LARGE) a record whose key + value + serialized headers + 36 bytes
exceed ``message.max.bytes``: 36 is the worst case of the record's own framing in the v2 format
(varints of length, timestamp and offset deltas, key and value lengths, header count, and the
attributes byte). A record that large travels alone in its batch, whose v2 header (61 bytes) counts
against the broker's limit too. A header costs its name and value with a length varint (at most
5 bytes) each.
"""
from __future__ import annotations

#: The header that carries a row's change kind (``ROWKIND_HEADER``'s default): on the output's
#: records, a dead letter of a row, and the input records of the ``rowkind`` format.
DEFAULT_ROWKIND_HEADER = "rowkind"
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000  # librdkafka's default message.max.bytes
RECORD_OVERHEAD = 36
BATCH_HEADER = 61
_VARINT = 5
# The output's own headers, by their longest values: changejoin.batch (a micro-batch id, at most
# 19 digits) and changejoin.seq ("<task>:<index>", at most 10 + 1 + 19); the row kind is 2 bytes.
_OUTPUT_HEADERS = {"changejoin.batch": 19, "changejoin.seq": 30}


def record_bytes(key: bytes | None, value: bytes | None, headers) -> int:
    """What a record counts against ``message.max.bytes`` (and, alone in its batch, the broker's limit)."""
    size = RECORD_OVERHEAD + BATCH_HEADER + (len(key) if key else 0) + (len(value) if value else 0)
    for name, data in headers:
        size += _VARINT + len(name.encode()) + _VARINT + (len(data) if data else 0)
    return size


def output_framing_bytes(rowkind_header: str = DEFAULT_ROWKIND_HEADER) -> int:
    """The room an output record needs within ``message.max.bytes`` besides its key and value
    (215 bytes with the default ROWKIND_HEADER)."""
    headers = {rowkind_header: 2, **_OUTPUT_HEADERS}
    return RECORD_OVERHEAD + BATCH_HEADER + sum(
        _VARINT + len(name.encode()) + _VARINT + size for name, size in headers.items())
