"""The end-to-end latency's arithmetic (service/latency.py): the reading task's fine buckets of ages,
the driver's filing of latencies in the histogram's buckets, and a tally's trip from the decoder
through the encoder's counts to a micro-batch's latencies (pipeline.BatchCounts)."""
from __future__ import annotations

import pickle
from array import array
from collections import Counter

import pytest

from service import latency
from service.envelope import Tag, Target
from service.latency import (AGE_MS, AGES, FINE_BUCKETS, LATENCY_BUCKETS, BatchAges, ReadTally, count_ages,
                             fine_bounds, fine_bucket, fine_histogram)
from service.pipeline import REPLAYED, BatchCounts
from service.source import KafkaRecord
from tests.support.service_harness import ORDERS, avro, order
from tests.support.left_join_stages import encoder_for, plan_for

AGES_TO_CHECK = [*range(0, 70_000), *(2 ** k + d for k in range(16, 63) for d in (-1, 0, 1)), 2 ** 63 - 1]


def test_every_age_falls_in_one_fine_bucket_at_most_an_eighth_wide():
    previous_high = -1
    for bucket in range(fine_bucket(2 ** 63 - 1) + 1):
        low, high = fine_bounds(bucket)
        assert low == previous_high + 1, bucket  # contiguous, increasing, no age in two buckets
        assert high - low + 1 <= max(1, low // 8), bucket
        previous_high = high
    for age in AGES_TO_CHECK:
        low, high = fine_bounds(fine_bucket(age))
        assert low <= age <= high, age
    assert fine_bucket(2 ** 63 - 1) < FINE_BUCKETS
    assert [fine_bucket(a) for a in (0, 1, 15, 16, 17, 18, 31, 32, 100)] == [0, 1, 15, 16, 16, 17, 23, 24, 36]


def test_a_tasks_ages_filed_at_once_fall_in_the_buckets_the_arithmetic_says():
    """fine_histogram (numpy, a task's records at once) agrees with fine_bucket (one age) at every
    edge: each power of two and its neighbours, up to ages of years."""
    reference = 1_700_000_000_000
    ages = [*range(0, 3_000), *(2 ** k + d for k in range(12, 41) for d in (-1, 0, 1)), reference]
    by_bucket, total = fine_histogram(array("q", [reference - a for a in ages]), reference)
    assert by_bucket == Counter(fine_bucket(a) for a in ages) and total == sum(ages)
    assert fine_histogram(array("q"), reference) == ({}, 0)


def record(timestamp_ms, partition=0, offset=0):
    return KafkaRecord("orders", partition, offset, timestamp_ms, None, b"", [])


def test_a_reading_task_tallies_its_records_ages_as_the_arithmetic_says():
    reference = 1_700_000_000_000
    ages = [0, 3, 15, 16, 250, 999, 1_000, 86_400_000, *range(40_000, 41_000, 7)]
    records = [record(reference - age, partition=2, offset=i) for i, age in enumerate(ages)]
    records += [record(reference + 40, partition=2), record(None, partition=3)]  # a clock ahead; no timestamp
    tally = ReadTally(reference)
    assert list(tally.counted(iter(records))) == records  # passed on as they come
    count, at, by_bucket, age_ms = tally.value()
    assert (count, at, tally.partition) == (len(records), reference, 3)
    assert by_bucket == Counter(fine_bucket(a) for a in [*ages, 0])  # ahead of the clock: age 0
    assert age_ms == sum(ages)


def test_a_task_run_again_later_tallies_the_same_bytes(monkeypatch):
    """A reading task's tally goes through Spark's shuffle: run again (a lost executor), it must
    write the same bytes, or Spark (which compares a retried map task's output by checksum) fails
    the job. So the ages are taken at the newest timestamp read, never at a clock."""
    records = [record(1_700_000_000_000 - age, offset=i) for i, age in enumerate([0, 5, 900, 61_000])]
    tallies = []
    for clock in (1_700_000_000_500, 1_700_000_090_000):
        monkeypatch.setattr(latency, "wall_clock_ms", lambda clock=clock: clock)
        tally = ReadTally()
        list(tally.counted(iter(records)))
        tallies.append(pickle.dumps(tally.value()))
    assert tallies[0] == tallies[1]
    assert pickle.loads(tallies[0])[1] == 1_700_000_000_000  # the newest record's timestamp


def test_the_driver_files_each_latency_by_its_fine_buckets_upper_end_and_sums_them_exactly():
    reference = 1_700_000_000_000
    tally = ReadTally(reference)
    ages = [0, 100, 240, 300, 2_000, 7_000_000]
    list(tally.counted(record(reference - age) for age in ages))
    counts: dict = {}
    count_ages(counts, tally.value())
    batch = BatchAges()
    for (target, label), n in counts.items():
        batch.add(target, label, n)
    latencies = batch.latencies(reference + 200)  # committed 200 ms after the task started
    assert latencies.count == len(ages)
    assert latencies.sum_seconds == pytest.approx(sum(a + 200 for a in ages) / 1000)
    filed = {LATENCY_BUCKETS[i] if i < len(LATENCY_BUCKETS) else "+Inf": n for i, n in enumerate(latencies.counts) if n}
    # 200 ms -> 0.25; 300 (fine bucket 96..103 ms + 200) -> 0.5; 440 (240..255 + 200) -> 0.5;
    # 500 (288..319 + 200: up to 519 ms) -> 0.75, never below; 2.2 s -> 3; 7,000.2 s past every bound.
    assert filed == {0.25: 1, 0.5: 2, 0.75: 1, 3.0: 1, "+Inf": 1}


@pytest.mark.parametrize("since", [0, 180, 1_000, 61_000])
def test_no_latency_is_filed_below_its_value_nor_past_an_eighth_above_it(since):
    bounds = [*(round(b * 1000) for b in LATENCY_BUCKETS), float("inf")]
    for age in [*range(0, 5_000), *range(5_000, 4_000_000, 997)]:
        batch = BatchAges()
        batch.add(AGES, f"0:{fine_bucket(age)}", 1)
        (index,) = [i for i, n in enumerate(batch.latencies(since).counts) if n]
        value = age + since
        assert value <= bounds[index], (age, since)  # never below its value
        if index:  # nor in a bucket past the one of value * 9/8
            assert bounds[index - 1] < value + value // 8 + 1, (age, since)


def test_a_driver_clock_behind_the_workers_counts_no_negative_latency():
    reference = 1_700_000_000_000
    batch = BatchAges()
    batch.add(AGES, f"{reference}:0", 5)
    batch.add(AGE_MS, str(reference), 0)
    latencies = batch.latencies(reference - 3_000)
    assert latencies.counts[0] == 5 and latencies.sum_seconds == 0


def test_a_tally_travels_from_the_decoder_through_the_encoders_counts_to_the_batch(monkeypatch):
    """The decoder's tally envelope (its last), the join's TALLY row as the encoder reads it, the
    task's count rows as the driver adds them: every record read has its latency, once."""
    monkeypatch.setattr(latency, "wall_clock_ms", lambda: 1_000_000)
    from service.decode import InputDecoder

    decoder = InputDecoder(plan_for(), 0, "rowkind", None)
    records = [KafkaRecord("orders", 0, i, 1_000_000 - 300 - i, None, avro(ORDERS, order(i, "book", 1)),
                           [("rowkind", b"+I")]) for i in range(50)]
    records.append(KafkaRecord("orders", 0, 50, 1_000_000 - 5_000, None, b"not avro", [("rowkind", b"+I")]))
    envelopes = list(decoder.map_all(records))
    tally = envelopes[-1]
    assert tally[1] == int(Tag.TALLY)  # the join passes it on as a Target.TALLY row
    counts: dict = {}
    written = list(encoder_for(plan_for()).records([(Target.TALLY, tally[2], tally[3], b"")], 1, 0, counts))
    assert written == [] and counts[("input", "left")] == 51
    batch = BatchCounts(1)
    for (target, label), n in counts.items():
        batch.add(target, label, n)
    # A replayed share's counts come back under REPLAYED: read again by this run, measured again.
    for (target, label), n in counts.items():
        batch.add(REPLAYED + target, label, n)
    latencies = batch.ages.latencies(1_000_000 + 700)
    assert latencies.count == 2 * 51 == sum(batch.input.values())
    assert latencies.sum_seconds == pytest.approx(2 * (sum(1_000 + i for i in range(50)) + 5_700) / 1000)
    # The ages are taken at the newest record (1,000,000 - 300 ms), committed 1,000 ms after it:
    # the newest record's latency is exactly 1 s, the next 49 are filed at most an eighth above.
    assert latencies.counts[LATENCY_BUCKETS.index(1.0)] == 2 and latencies.counts[LATENCY_BUCKETS.index(1.5)] == 2 * 49
    assert latencies.counts[LATENCY_BUCKETS.index(10.0)] == 2
    assert pickle.loads(tally[3])[0] == 51
