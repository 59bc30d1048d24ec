"""The rows that travel between the Spark stages of a record's path, defined once.

source -> decode -> [normalize] -> join -> [upsert materializer] -> encode -> sink

**Envelope** (decode's output, the join's and the normalize stage's input, :data:`ENVELOPE_SCHEMA`):

- ``jk``: the grouping key, bytes that are equal exactly when the keys are equal (Spark groups by
  it): the join key of a row (:func:`join_key_group`), the message key of an upsert record on its
  way to the normalize stage (:func:`message_key_group`), one group per source partition for dead
  letters (:func:`dead_letter_group`), :data:`HEARTBEAT_GROUP` for idle heartbeats;
- ``tag``: what the envelope carries (:class:`Tag`): a left or right row, a dead letter, or a
  heartbeat;
- ``kind``: the row's RowKind byte (0-3);
- ``payload``: the pickled row (a tuple in schema order; ``(row, original record)`` for the rows a
  join may drop as late, ``JoinPlan.late_sides``), the dead letter (``deadletters.py``), or None;
- ``event_time``: the row's event time for event-time joins, else NULL;
- ``ts``, ``part``, ``offset``: the Kafka timestamp, partition and offset, which order the records
  of one key deterministically (``processor.ordered_records``).

**Packed envelope** (``STATE_BUCKETS`` > 0): the rows of one bucket of join keys (or of message
keys, on the way to the normalize stage) that one reading task read travel as one envelope,
``jk`` = :func:`bucket_group`, ``tag`` = :attr:`Tag.PACKED`, ``payload`` = the pickled list of
their *entries*, ``event_time`` = the latest of theirs (so the watermark is the same). An entry
is an envelope tuple whose payload is not pickled on its own and whose event time is epoch
milliseconds (:func:`packed_envelope`, :func:`unpacked`): one pickle per pack instead of one per
row, and one row for Spark to shuffle and convert instead of hundreds.

**Join output** (:data:`OUTPUT_SCHEMA`): ``target`` (:class:`Target`), ``kind``, ``payload``,
``okey`` (the output's upsert key, for the upsert materializer stage) and ``seq`` (emission order
within the task). A :attr:`Target.PACKED` row holds consecutive changes of one call (:func:`pack`);
the sink unpacks them (:func:`unpack`). With buckets, a :attr:`Target.KEYED` row carries the
changes of a bucket of upsert keys to the upsert materializer stage.
"""
from __future__ import annotations

import datetime as _dt
import functools
import pickle
import zlib
from enum import IntEnum
from typing import Iterator

ENVELOPE_SCHEMA = (
    "jk binary, tag tinyint, kind tinyint, payload binary, event_time timestamp, ts long, part int, offset long"
)
ENVELOPE_FIELDS = ("jk", "tag", "kind", "payload", "event_time", "ts", "part", "offset")
# Positions of the envelope's fields; Row attribute access is slow on the hot path.
JK, TAG, KIND, PAYLOAD, EVENT_TIME, TS, PART, OFFSET = range(8)


class Tag(IntEnum):
    """What an envelope carries. A row's tag is its side (0 = left, 1 = right)."""

    LEFT = 0
    RIGHT = 1
    DEAD_LETTER = 2
    HEARTBEAT = 3
    PACKED = 4  # entries of one bucket (see the module docstring)
    TALLY = 5  # how many records a reading task read (see tally_envelope)


#: Tags of envelopes that carry no input row: the join and normalize stages pass them by.
NOT_ROWS = (Tag.DEAD_LETTER, Tag.HEARTBEAT, Tag.TALLY)

#: At most this many entries per packed envelope, which bounds a row's size.
PACK_ROWS = 1000

HEARTBEAT_GROUP = b"\x02heartbeat"
_DEAD_LETTER, _HEARTBEAT, _PACKED, _TALLY = (int(Tag.DEAD_LETTER), int(Tag.HEARTBEAT), int(Tag.PACKED),
                                              int(Tag.TALLY))  # plain ints in Spark rows

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def dumps(value) -> bytes:
    """A payload's bytes (pickle protocol 5)."""
    return pickle.dumps(value, protocol=5)


loads = pickle.loads


def event_time(millis: int) -> _dt.datetime:
    """The ``event_time`` column's value for epoch milliseconds."""
    return _EPOCH + _dt.timedelta(milliseconds=millis)


# -- grouping keys ---------------------------------------------------------------------------------
def join_key_group(values: tuple) -> bytes:
    """Equal join keys give equal bytes: ``repr`` of a tuple of Avro-decoded values is canonical
    (pickle is not: it shares repeated objects)."""
    return repr(values).encode()


def message_key_group(message_key: bytes) -> bytes:
    """Grouping key of the normalize stage: the upsert topic's message key (its primary key)."""
    return b"\x01" + message_key


def dead_letter_group(partition: int) -> bytes:
    """Dead letters need a grouping key too: one per source partition spreads them over tasks."""
    return b"\x00dead-letter:%d" % partition


def output_key_group(values: tuple) -> bytes:
    """Grouping key of the upsert materializer stage: the output's upsert key."""
    return repr(values).encode()


def bucket_of(group: bytes, buckets: int) -> int:
    """The bucket of a grouping key: a stable hash (never Python's salted ``hash``), so that every
    worker and every run puts a key in the same bucket."""
    return zlib.crc32(group) % buckets


def bucket_group(bucket: int, keys: int = 2) -> bytes:
    """Grouping key of a bucket of keys (``STATE_BUCKETS``). ``keys`` is the checkpoint's choice
    (``JoinPlan.bucket_keys``): 2, a key whose hash is the bucket itself (:func:`balanced_group`),
    so that Spark gives bucket ``b`` to task ``b mod P`` at every task count ``P``; 1, the first
    layout's, placed wherever Spark's hash of it falls."""
    if keys == 2:
        return balanced_group(bucket)
    return b"\x03" + bucket.to_bytes(4, "big")


# Spark places a row of a grouping key on task pmod(murmur3_x86_32(key bytes, seed 42), P)
# (HashPartitioning; Murmur3_x86_32.hashUnsafeBytes, 4-byte words read little-endian). Every
# step of that hash is a bijection of 32-bit words, so for a first word chosen from the bucket
# the second word whose hash is exactly the bucket can be computed: an 8-byte key per bucket.
_M32 = 0xFFFFFFFF
_C1, _C2 = 0xCC9E2D51, 0x1B873593
_SEED = 42


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _mix_k1(k: int) -> int:
    return (_rotl((k * _C1) & _M32, 15) * _C2) & _M32


def _mix_h1(h: int, k: int) -> int:
    return (_rotl(h ^ k, 13) * 5 + 0xE6546B64) & _M32


def _unshift(h: int, s: int) -> int:
    """x from h = x ^ (x >> s)."""
    x = h
    for _ in range(32 // s):
        x = h ^ (x >> s)
    return x


@functools.lru_cache(maxsize=None)
def balanced_group(bucket: int) -> bytes:
    """The 8-byte grouping key of ``bucket`` (< 2**24) whose Spark hash is ``bucket``:
    ``\\x04``, the bucket in 3 bytes, then the word that makes the hash come out so."""
    first = b"\x04" + bucket.to_bytes(3, "big")
    h1 = _mix_h1(_SEED, _mix_k1(int.from_bytes(first, "little")))
    # the final mix undone: fmix(h2, 8) == bucket
    h = _unshift(bucket, 16)
    h = (h * pow(0xC2B2AE35, -1, 1 << 32)) & _M32
    h = _unshift(h, 13)
    h = (h * pow(0x85EBCA6B, -1, 1 << 32)) & _M32
    h2 = _unshift(h, 16) ^ 8
    # h2 == mix_h1(h1, mix_k1(second)): mix_h1 undone, then mix_k1
    k = (((h2 - 0xE6546B64) & _M32) * pow(5, -1, 1 << 32)) & _M32
    k = _rotl(k, 32 - 13) ^ h1
    k = (k * pow(_C2, -1, 1 << 32)) & _M32
    second = (_rotl(k, 32 - 15) * pow(_C1, -1, 1 << 32)) & _M32
    return first + second.to_bytes(4, "little")


# -- envelopes -------------------------------------------------------------------------------------
def dead_letter_envelope(letter: dict, record) -> tuple:
    """A dead letter (``deadletters.py``) for Kafka ``record``."""
    return (dead_letter_group(record.partition), _DEAD_LETTER, 0, dumps(letter), None,
            record.timestamp_ms or 0, record.partition, record.offset)


def packed_envelope(bucket: int, entries: list, keys: int = 2) -> tuple:
    """One bucket's entries (envelope tuples with unpickled payloads and event times in epoch
    milliseconds), in the order read, as one envelope (``keys``: :func:`bucket_group`'s)."""
    first = entries[0]
    times = [e[EVENT_TIME] for e in entries if e[EVENT_TIME] is not None]
    return (bucket_group(bucket, keys), _PACKED, 0, dumps(entries), event_time(max(times)) if times else None,
            first[TS], first[PART], first[OFFSET])


def unpacked(payload: bytes) -> list:
    """The entries of a packed envelope's payload."""
    return loads(payload)


def tally_envelope(side: int, tally: tuple, partition: int) -> tuple:
    """What a reading task read of input ``side`` (its last envelope): ``tally`` is
    ``latency.ReadTally.value()``, the number of Kafka records first, then their ages for the
    end-to-end latency. It travels with the rows to the producing task, which reports it with the
    batch's counts. A packed envelope stands for hundreds of records, so Spark's own count of
    input rows does not count records."""
    return (dead_letter_group(partition), _TALLY, side, dumps(tally), None, 0, partition, -1)


def heartbeat_envelope(event_time_ms: int) -> tuple:
    """An idle heartbeat: only an event time (see ``decode.InputDecoder.heartbeat``)."""
    return (HEARTBEAT_GROUP, _HEARTBEAT, 0, dumps(None), event_time(event_time_ms), event_time_ms, -1, -1)


# -- join output -----------------------------------------------------------------------------------
OUTPUT_SCHEMA = "target tinyint, kind tinyint, payload binary, okey binary, seq long"


class Target(IntEnum):
    """What a join output row is."""

    OUTPUT = 0  # one change: kind = its RowKind, payload = the pickled output row
    DEAD_LETTER = 1  # one dead letter: payload = the pickled letter
    PACKED = 2  # consecutive changes of one call, in order (see pack); kind is unused
    KEYED = 3  # changes of one bucket of upsert keys, for the upsert materializer (STATE_BUCKETS):
    #            payload = the pickled list of (upsert key group, kind, row), in order; okey = the bucket
    TALLY = 4  # records a reading task read: kind = the input side, payload = the pickled tally (tally_envelope)


def output_route(group: bytes) -> bytes:
    """The ``okey`` of a PACKED row: four bytes fixed by the grouping key (a bucket, or a key) whose
    changes it holds. An output without a message key writes them to partition ``route % P``
    (``encode.py``): all changes of a row go to one partition, in order, whichever task computes
    them, also after ``changejoin rescale`` moves the bucket to another task."""
    return zlib.crc32(group).to_bytes(4, "big")


#: At most this many changes per PACKED row, which bounds a row's size when a key emits a lot.
PACK_LIMIT = 1000


def pack(changes: list) -> bytes:
    """The payload of a PACKED row: ``changes`` ((RowKind, row) pairs) as the RowKinds' bytes and
    the list of rows; :func:`unpack` gives the pairs back, in order."""
    return dumps((bytes([kind for kind, _ in changes]), [row for _, row in changes]))


def unpack(payload: bytes) -> Iterator[tuple[int, tuple]]:
    """(kind, row) pairs of a PACKED row, kinds as plain ints."""
    kinds, rows = loads(payload)
    return zip(kinds, rows)

