"""End-to-end latency: from an input record's Kafka timestamp to the commit of its micro-batch's output.

``changejoin_end_to_end_latency_seconds`` counts every input record a micro-batch read, once its
output is committed: every producing task's transaction committed (``DELIVERY=exactly-once``) or
every record it produced acknowledged (at-least-once), the moment the driver's ``foreachBatch``
gets the tasks' counts back. A record that made no output (filtered out, a dead letter, a join
with nothing to emit yet) counts too: its micro-batch's output is what a consumer waits for. The
moment is the same for every record of the micro-batch, an upper bound of when its own output
became visible (the share holding it may have committed a little earlier in the same stage).

A record's trip is three hops, and no hop makes or keeps a Python object per record:

* the reading task (``decode.py``) keeps its records' timestamps (:class:`ReadTally`: 8 bytes
  each in an ``array``, appended in the loop that counts the records) and, once it has read them
  all, files their *ages* at the newest of them, ``reference - timestamp`` in milliseconds (a
  reference the input determines, not a clock: a task run again must write the same shuffle
  bytes, or Spark, which compares a retried map task's output by checksum, fails the job when an
  executor is lost after a result task succeeded), in a
  fine log-linear histogram (exact below 16 ms, then 8 sub-buckets per power of two, at most 1/8
  wide), in one vectorized pass (numpy); the task's tally envelope carries it with the record count;
* the producing task that gets the tally (``encode.py``) adds it to its counts, under the reading
  task's reference time (:func:`count_ages`); counts travel to the driver as they did;
* the driver (``pipeline.py``) adds to every age the time from its reference to the commit and
  files it in :data:`LATENCY_BUCKETS` (:class:`BatchAges`), by the fine bucket's upper end: a
  latency is never filed below its value, and at most 1/8 above. The sum is exact (the sum of the
  ages, plus the records times the time since the reference).

A record without a timestamp (none on the Kafka record) is read and counted as input, never as a
latency; an age below 0 (a producer's clock ahead of the worker's) counts as 0.
"""
from __future__ import annotations

import bisect
import time
from array import array
from typing import Iterable, Iterator

#: The histogram's upper bounds in seconds: micro-batches from sub-second to minutes behind.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0,
                   600.0, 1800.0, 3600.0)
#: The targets of a producing task's count rows (``pipeline.BatchCounts``): fine buckets of ages,
#: labelled ``<reference ms>:<fine bucket>``, and the sum of the ages in ms, labelled ``<reference ms>``.
AGES, AGE_MS = "input_age", "input_age_ms"

_SUB_BITS = 3  # 8 sub-buckets per power of two
_EXACT = 2 << _SUB_BITS  # ages below this (16 ms) have a bucket each
#: Fine buckets an age below 2**63 ms can fall in.
FINE_BUCKETS = ((63 - _SUB_BITS) << _SUB_BITS) + _EXACT


def fine_bucket(age_ms: int) -> int:
    """The fine bucket of an age (ms, at least 0): the age itself below 16, else 8 per power of
    two (:func:`fine_histogram` computes the same for a task's records at once)."""
    if age_ms < _EXACT:
        return age_ms
    shift = age_ms.bit_length() - _SUB_BITS - 1
    return (shift << _SUB_BITS) + (age_ms >> shift)


def fine_bounds(bucket: int) -> tuple[int, int]:
    """The smallest and largest age (ms) of a fine bucket."""
    if bucket < _EXACT:
        return bucket, bucket
    shift = (bucket >> _SUB_BITS) - 1
    mantissa = bucket & ((1 << _SUB_BITS) - 1) | (1 << _SUB_BITS)
    return mantissa << shift, ((mantissa + 1) << shift) - 1


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class ReadTally:
    """What one reading task read: how many records, the partition of the last one (its tally's
    grouping key), and their Kafka timestamps, to be filed as ages at :attr:`reference_ms` (the
    newest of them unless given) when the task has read them all (:meth:`value`)."""

    __slots__ = ("reference_ms", "records", "partition", "stamps")

    def __init__(self, reference_ms: int | None = None):
        self.reference_ms = reference_ms  # None: the newest timestamp read (:meth:`value`)
        self.records = 0
        self.partition = 0
        self.stamps = array("q")  # 8 bytes a record, no Python object kept

    def counted(self, records: Iterable) -> Iterator:
        """``records`` (``source.KafkaRecord``) as they come, tallied. The record path's hot loop:
        a count, one attribute read and one append of 8 bytes per record; the arithmetic is done
        once for all of them, vectorized (:func:`fine_histogram`)."""
        append = self.stamps.append
        n = 0
        record = None
        for record in records:
            n += 1
            ts = record.timestamp_ms
            if ts is not None:
                append(ts)
            yield record
        self.records += n
        if record is not None:
            self.partition = record.partition

    def value(self) -> tuple:
        """The tally as its envelope carries it (``envelope.tally_envelope``): (records, reference
        ms, {fine bucket: records}, sum of the ages in ms)."""
        reference = self.reference_ms
        if reference is None:
            reference = max(self.stamps) if len(self.stamps) else 0
        ages, age_ms = fine_histogram(self.stamps, reference)
        return (self.records, reference, ages, age_ms)


def fine_histogram(stamps: array, reference_ms: int) -> tuple[dict[int, int], int]:
    """Records by the :func:`fine_bucket` of their age at ``reference_ms``, and the sum of their
    ages, for Kafka timestamps (``array('q')`` of Unix ms), with numpy: :func:`fine_bucket`'s
    arithmetic on the whole array, the bit length from ``frexp``'s exponent (exact: an age, at most
    the reference since timestamps are not negative, is below 2**53 ms)."""
    if not len(stamps):
        return {}, 0
    import numpy as np  # only where records are read

    ages = reference_ms - np.frombuffer(stamps, dtype=np.int64)
    np.maximum(ages, 0, out=ages)  # a producer's clock ahead of the worker's: age 0
    bit_lengths = np.frexp(ages.astype(np.float64))[1].astype(np.int64)
    shifts = np.maximum(bit_lengths - (_SUB_BITS + 1), 0)
    buckets = np.where(ages < _EXACT, ages, (shifts << _SUB_BITS) + (ages >> shifts))
    counts = np.bincount(buckets)
    return {int(b): int(counts[b]) for b in np.flatnonzero(counts)}, int(ages.sum())


def count_ages(counts: dict, tally: tuple) -> None:
    """A producing task's counts get a tally's ages (``ReadTally.value``), as rows the driver adds
    up (:class:`BatchAges`)."""
    _, reference, ages, age_ms = tally
    prefix = f"{reference}:"
    for bucket, n in ages.items():
        key = (AGES, prefix + str(bucket))
        counts[key] = counts.get(key, 0) + n
    if ages:
        key = (AGE_MS, str(reference))
        counts[key] = counts.get(key, 0) + age_ms


class Latencies:
    """A micro-batch's latencies: records per :data:`LATENCY_BUCKETS` bound (not cumulative; the
    last one past every bound), their sum in seconds."""

    __slots__ = ("counts", "sum_seconds")

    def __init__(self):
        self.counts = [0] * (len(LATENCY_BUCKETS) + 1)
        self.sum_seconds = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)


class BatchAges:
    """On the driver: the ages a micro-batch's producing tasks reported, by reading task (its
    reference time)."""

    def __init__(self):
        self.by_reference: dict[int, dict[int, int]] = {}
        self.age_ms: dict[int, int] = {}

    def add(self, target: str, label: str, n: int) -> None:
        """One count row (:data:`AGES` or :data:`AGE_MS`)."""
        if target == AGES:
            reference, bucket = label.split(":")
            ages = self.by_reference.setdefault(int(reference), {})
            ages[int(bucket)] = ages.get(int(bucket), 0) + n
        else:
            self.age_ms[int(label)] = self.age_ms.get(int(label), 0) + n

    def latencies(self, committed_ms: int) -> Latencies:
        """The latencies of the records, their output committed at ``committed_ms`` (Unix ms)."""
        out = Latencies()
        bounds_ms = [round(b * 1000) for b in LATENCY_BUCKETS]
        total_ms = 0
        for reference, ages in self.by_reference.items():
            since = max(0, committed_ms - reference)  # a worker's clock ahead of the driver's: 0
            for bucket, n in ages.items():
                out.counts[bisect.bisect_left(bounds_ms, fine_bounds(bucket)[1] + since)] += n
                total_ms += n * since
            total_ms += self.age_ms.get(reference, 0)
        out.sum_seconds = total_ms / 1000.0
        return out
