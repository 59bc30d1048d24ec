"""service/source.py: offset planning (unit), reading ranges (real broker), and streaming queries
over ``changejoin_kafka`` (real broker + the session's local Spark)."""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.kafka_fixture import consume_all, create_topic, produce, recreate_topic
from service.source import (
    RAW_SCHEMA,
    ConsumerPool,
    HeartbeatInputPartition,
    KafkaDataSource,
    KafkaInputPartition,
    KafkaRecord,
    KafkaSourceError,
    KafkaStreamReader,
    SourceOptions,
    _iter_records,
    consumers_created,
    fair_shares,
    register,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows


# --------------------------------------------------------------------------------------------
# Offset planning, without a broker
# --------------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    lags=st.dictionaries(st.integers(0, 7), st.integers(0, 50), max_size=6),
    limit=st.integers(1, 120),
)
def test_fair_shares_are_max_min_fair(lags, limit):
    shares = fair_shares(lags, limit)
    assert set(shares) == set(lags)
    assert sum(shares.values()) == min(limit, sum(lags.values()))
    for p, share in shares.items():
        assert 0 <= share <= lags[p]
        if share < lags[p]:  # capped by the limit: nobody got more than one record more
            assert all(other <= share + 1 for other in shares.values())


class FakeOffsets:
    """Stands in for the driver's AdminClient look-ups."""

    def __init__(self, earliest: Dict[int, int], latest: Dict[int, int]):
        self.earliest, self.latest_ = dict(earliest), dict(latest)

    def partitions(self) -> List[int]:
        return sorted(self.latest_)

    def offsets(self, partitions: Sequence[int], which: str) -> Dict[int, int]:
        src = self.earliest if which == "earliest" else self.latest_
        return {p: src[p] for p in partitions}

    def latest(self) -> Dict[int, int]:
        return dict(self.latest_)


def planning_reader(fake: FakeOffsets, **options: str) -> KafkaStreamReader:
    reader = KafkaStreamReader({"bootstrap.servers": "unused:9092", "topic": "t", **options}, None)
    reader._client = fake  # type: ignore[assignment]
    return reader


def ranges(reader: KafkaStreamReader, start: dict, end: dict):
    return [(p.partition, p.start, p.end) for p in reader.partitions(start, end)]


def test_initial_offsets_earliest_and_latest():
    fake = FakeOffsets(earliest={0: 3, 1: 0}, latest={0: 10, 1: 4})
    assert planning_reader(fake).initialOffset() == {"0": 3, "1": 0}
    assert planning_reader(fake, startingOffsets="latest").initialOffset() == {"0": 10, "1": 4}
    assert json.dumps(planning_reader(fake).initialOffset()) == '{"0": 3, "1": 0}'


def test_latest_offset_respects_the_read_limit_and_plans_one_range_per_partition():
    fake = FakeOffsets(earliest={0: 0, 1: 0, 2: 0}, latest={0: 100, 1: 3, 2: 0})
    reader = planning_reader(fake, maxRecordsPerTrigger="10")
    assert reader.getDefaultReadLimit() == ReadMaxRows(10)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadMaxRows(10))
    assert end == {"0": 7, "1": 3, "2": 0}
    assert ranges(reader, start, end) == [(0, 0, 7), (1, 0, 3)]  # none for the empty partition
    # ReadAllAvailable (e.g. Trigger.Once) ignores maxRecordsPerTrigger.
    assert reader.latestOffset(end, ReadAllAvailable()) == {"0": 100, "1": 3, "2": 0}
    assert reader.reportLatestOffset() == {"0": 100, "1": 3, "2": 0}
    # Nothing new: the same offsets back, so Spark plans no batch.
    assert reader.latestOffset({"0": 100, "1": 3, "2": 0}, ReadMaxRows(10)) == {"0": 100, "1": 3, "2": 0}
    assert planning_reader(fake).getDefaultReadLimit() == ReadAllAvailable()


def test_partitions_that_appear_later_start_at_their_beginning():
    fake = FakeOffsets(earliest={0: 0}, latest={0: 5})
    reader = planning_reader(fake, startingOffsets="latest")
    start = reader.initialOffset()
    assert start == {"0": 5}
    fake.earliest.update({1: 2, 2: 0})
    fake.latest_.update({1: 6, 2: 0})  # partition 1 has records 2..5; partition 2 is empty
    # The micro-batch that first sees partition 1 logs where it starts, and reads none of it...
    logged = reader.latestOffset(start, ReadAllAvailable())
    assert logged == {"0": 5, "1": 2}
    assert ranges(reader, start, logged) == []
    # ...so the next one reads it from the offset in the checkpoint's log, whatever its log start is
    # by the time that micro-batch runs, or runs again after a crash: a replay reads what it read.
    end = reader.latestOffset(logged, ReadAllAvailable())
    assert end == {"0": 5, "1": 6}
    assert ranges(reader, logged, end) == [(1, 2, 6)]
    fake.earliest[1] = 4  # retention moved the log start before a replay
    assert ranges(reader, logged, end) == [(1, 2, 6)]
    # A topic that did not exist when the query started: everything from the beginning.
    assert ranges(reader, {}, {"0": 5, "1": 6}) == [(0, 0, 5), (1, 4, 6)]


def test_available_now_stops_at_the_offsets_seen_when_the_query_started():
    fake = FakeOffsets(earliest={0: 0}, latest={0: 4})
    reader = planning_reader(fake, maxRecordsPerTrigger="3")
    reader.prepareForTriggerAvailableNow()
    fake.latest_[0] = 50
    fake.earliest[1], fake.latest_[1] = 0, 9  # a partition added after the query started
    assert reader.latestOffset({"0": 0}, ReadMaxRows(3)) == {"0": 3}
    assert reader.latestOffset({"0": 3}, ReadMaxRows(3)) == {"0": 4}
    assert reader.latestOffset({"0": 4}, ReadMaxRows(3)) == {"0": 4}


def test_offsets_that_went_back_are_data_loss():
    fake = FakeOffsets(earliest={0: 0}, latest={0: 3})  # e.g. the topic was re-created
    with pytest.raises(KafkaSourceError, match="failOnDataLoss"):
        planning_reader(fake).latestOffset({"0": 10}, ReadAllAvailable())
    # failOnDataLoss=false: the re-created partition is read again from its beginning.
    lenient = planning_reader(fake, failOnDataLoss="false")
    moved_back = lenient.latestOffset({"0": 10}, ReadAllAvailable())
    assert moved_back == {"0": 0}
    assert ranges(lenient, {"0": 10}, moved_back) == []
    assert lenient.latestOffset(moved_back, ReadAllAvailable()) == {"0": 3}
    assert ranges(lenient, moved_back, {"0": 3}) == [(0, 0, 3)]


def test_a_topic_re_created_under_the_same_name_is_data_loss_whatever_its_offsets():
    fake = FakeOffsets(earliest={0: 0, 1: 0}, latest={0: 5, 1: 2})
    fake.topic_id = "id-1"
    start = planning_reader(fake).initialOffset()
    assert start == {"0": 0, "1": 0, "topic_id": "id-1"}
    end = planning_reader(fake).latestOffset(start, ReadAllAvailable())
    assert end == {"0": 5, "1": 2, "topic_id": "id-1"}
    # Deleted and re-created, and written to again: its offsets are past the checkpointed ones,
    # yet the records before them were never read.
    fake.topic_id, fake.latest_ = "id-2", {0: 9, 1: 7}
    with pytest.raises(KafkaSourceError, match=r"re-created \(topic id id-1, now id-2\).*FAIL_ON_DATA_LOSS=false"):
        planning_reader(fake).latestOffset(end, ReadAllAvailable())
    lenient = planning_reader(fake, failOnDataLoss="false")
    moved = lenient.latestOffset(end, ReadAllAvailable())
    assert moved == {"0": 0, "1": 0, "topic_id": "id-2"}  # to the new topic's beginning, reading nothing
    assert ranges(lenient, end, moved) == []
    again = lenient.latestOffset(moved, ReadAllAvailable())
    assert again == {"0": 9, "1": 7, "topic_id": "id-2"}
    assert ranges(lenient, moved, again) == [(0, 0, 9), (1, 0, 7)]
    # The ranges name the topic they are of: a reader never reads them with a consumer of the old one.
    assert [p.topic_id for p in lenient.partitions(moved, again)] == ["id-2", "id-2"]
    # A checkpoint written before offsets named their topic takes the topic's id as it is.
    assert planning_reader(fake).latestOffset({"0": 9, "1": 7}, ReadAllAvailable()) == again


def test_records_deleted_before_they_were_read_are_data_loss_counted_in_the_offset():
    fake = FakeOffsets(earliest={0: 0, 1: 0}, latest={0: 12, 1: 4})
    fake.earliest[0] = 8  # retention deleted offsets 5..7 of partition 0 before they were read
    with pytest.raises(KafkaSourceError, match=r"offsets 5 to 7 \(3 records\) were deleted.*FAIL_ON_DATA_LOSS=false"):
        planning_reader(fake).latestOffset({"0": 5, "1": 4}, ReadAllAvailable())
    lenient = planning_reader(fake, failOnDataLoss="false", maxRecordsPerTrigger="2")
    end = lenient.latestOffset({"0": 5, "1": 4}, ReadMaxRows(2))
    assert end == {"0": 10, "1": 4, "lost": 3}  # on from the log start, with the read limit
    assert ranges(lenient, {"0": 5, "1": 4}, end) == [(0, 5, 10)]  # the reader jumps to the log start
    # The count is cumulative, carried by the offsets (so a replay reports the same).
    end = lenient.latestOffset(end, ReadAllAvailable())
    assert end == {"0": 12, "1": 4, "lost": 3}
    fake.latest_[1], fake.earliest[1] = 9, 6
    assert lenient.latestOffset(end, ReadAllAvailable()) == {"0": 12, "1": 9, "lost": 5}
    # Nothing lost, nothing added to the offsets: checkpoints of earlier versions read the same.
    assert planning_reader(FakeOffsets({0: 0}, {0: 3})).latestOffset({"0": 1}, ReadAllAvailable()) == {"0": 3}


class FakeClock:
    """Wall-clock epoch milliseconds, moved by hand."""

    def __init__(self, now_ms: int = 0):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms


def idle_reader(fake: FakeOffsets, clock: FakeClock, **options: str) -> KafkaStreamReader:
    reader = planning_reader(fake, idleTimeoutMs="1000", **options)
    reader._clock = clock  # type: ignore[assignment]
    return reader


def test_an_idle_topic_gets_heartbeats_an_idle_timeout_apart():
    fake, clock = FakeOffsets(earliest={0: 0}, latest={0: 5}), FakeClock(10_000)
    reader = idle_reader(fake, clock)
    caught_up = {"0": 5}
    assert reader.latestOffset(caught_up, ReadAllAvailable()) == caught_up  # the idle clock starts
    clock.now_ms = 10_999
    assert reader.latestOffset(caught_up, ReadAllAvailable()) == caught_up
    clock.now_ms = 11_000
    beat = reader.latestOffset(caught_up, ReadAllAvailable())
    assert json.dumps(beat) == '{"0": 5, "heartbeat": 11000}'  # partitions first, stable text
    # Spark asks again once the heartbeat's batch is done (here 600 ms later): the idle clock
    # restarts there, so the next heartbeat comes a full timeout after that batch.
    clock.now_ms = 11_600
    assert reader.latestOffset(beat, ReadAllAvailable()) == beat  # the same offset: no batch
    clock.now_ms = 12_599
    assert reader.latestOffset(beat, ReadAllAvailable()) == beat
    clock.now_ms = 12_600
    assert reader.latestOffset(beat, ReadAllAvailable()) == {"0": 5, "heartbeat": 12_600}
    # Records arrive: they are read, the heartbeat is carried along unchanged, the clock restarts.
    fake.latest_[0] = 8
    clock.now_ms = 13_000
    after = reader.latestOffset({"0": 5, "heartbeat": 12_600}, ReadAllAvailable())
    assert after == {"0": 8, "heartbeat": 12_600}
    clock.now_ms = 13_999
    assert reader.latestOffset(after, ReadAllAvailable()) == after
    clock.now_ms = 14_000
    assert reader.latestOffset(after, ReadAllAvailable()) == {"0": 8, "heartbeat": 14_000}
    assert reader.reportLatestOffset() == {"0": 8}  # partitions only (input lag metrics)


def test_a_topic_with_records_left_to_read_is_not_idle():
    fake, clock = FakeOffsets(earliest={0: 0}, latest={0: 100}), FakeClock(0)
    reader = idle_reader(fake, clock, maxRecordsPerTrigger="10")
    start = {"0": 0}
    for step in range(10):  # nothing is produced, but every batch reads records
        clock.now_ms = 5_000 * (step + 1)
        end = reader.latestOffset(start, ReadMaxRows(10))
        assert end == {"0": 10 * (step + 1)}
        start = end
    clock.now_ms += 999
    assert reader.latestOffset(start, ReadMaxRows(10)) == {"0": 100}
    clock.now_ms += 1
    assert reader.latestOffset(start, ReadMaxRows(10)) == {"0": 100, "heartbeat": clock.now_ms}


def test_records_produced_since_the_last_look_restart_the_idle_clock():
    fake, clock = FakeOffsets(earliest={0: 0}, latest={0: 5}), FakeClock(0)
    reader = idle_reader(fake, clock, maxRecordsPerTrigger="10")
    reader.latestOffset({"0": 5}, ReadMaxRows(10))
    fake.latest_[0] = 6  # produced, and (say) the query has not planned it yet
    clock.now_ms = 1_500
    assert reader.latestOffset({"0": 6}, ReadMaxRows(10)) == {"0": 6}
    clock.now_ms = 2_499
    assert reader.latestOffset({"0": 6}, ReadMaxRows(10)) == {"0": 6}
    clock.now_ms = 2_500
    assert reader.latestOffset({"0": 6}, ReadMaxRows(10)) == {"0": 6, "heartbeat": 2_500}


def test_heartbeat_partitions_are_planned_from_the_offsets_alone():
    fake = FakeOffsets(earliest={0: 0, 1: 0}, latest={0: 9, 1: 9})
    reader = planning_reader(fake, idleTimeoutMs="1000")

    def planned(start, end):
        return [
            ("heartbeat", p.event_time_ms) if isinstance(p, HeartbeatInputPartition) else (p.partition, p.start, p.end)
            for p in reader.partitions(start, end)
        ]

    assert planned({"0": 3, "1": 4}, {"0": 3, "1": 4, "heartbeat": 7_000}) == [("heartbeat", 7_000)]
    assert planned({"0": 3, "1": 4, "heartbeat": 7_000}, {"0": 5, "1": 4, "heartbeat": 8_000}) == [
        (0, 3, 5), ("heartbeat", 8_000),
    ]
    # A range whose heartbeat did not change has none: each heartbeat is read by one batch only.
    assert planned({"0": 3, "1": 4, "heartbeat": 7_000}, {"0": 5, "1": 4, "heartbeat": 7_000}) == [(0, 3, 5)]
    # The same range planned again (a replayed batch) gives the same heartbeat.
    assert planned({"0": 3, "heartbeat": 7_000}, {"0": 3, "heartbeat": 8_000}) == [("heartbeat", 8_000)]


def test_no_heartbeats_without_the_option_or_under_available_now():
    fake, clock = FakeOffsets(earliest={0: 0}, latest={0: 5}), FakeClock(0)
    plain = planning_reader(fake)
    plain._clock = clock  # type: ignore[assignment]
    once = idle_reader(fake, clock)
    once.prepareForTriggerAvailableNow()
    for reader in (plain, once):
        for now in (0, 5_000, 10_000):
            clock.now_ms = now
            assert reader.latestOffset({"0": 5}, ReadAllAvailable()) == {"0": 5}
        # A heartbeat already in the checkpoint (e.g. the option was removed) is carried along.
        assert reader.latestOffset({"0": 5, "heartbeat": 1}, ReadAllAvailable()) == {"0": 5, "heartbeat": 1}


def test_a_heartbeat_partition_reads_the_mappers_heartbeat_rows():
    config = {"mapper.config": json.dumps({"tag": "t"})}
    beating = planning_reader(FakeOffsets({}, {}), mapper="tests.support.echo_mappers:make_beating_mapper", **config)
    assert list(beating.read(HeartbeatInputPartition("t", 1234))) == [(None, None, -1, -1, 1234, "", "theartbeat")]
    echo = planning_reader(FakeOffsets({}, {}), mapper="tests.support.echo_mappers:make_echo_mapper", **config)
    assert list(echo.read(HeartbeatInputPartition("t", 1234))) == []


def test_idle_timeout_needs_a_mapper_that_answers_heartbeats():
    from pyspark.sql.types import StringType, StructField, StructType

    def stream_reader(**options: str):
        source = KafkaDataSource({"bootstrap.servers": "b:9092", "topic": "t", "idleTimeoutMs": "1000", **options})
        # Only the field names matter here (a raw schema's are checked); no Spark session needed.
        names = ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
        return source.streamReader(StructType([StructField(n, StringType()) for n in names]))

    config = {"mapper.config": json.dumps({"tag": "t"})}
    assert stream_reader(mapper="tests.support.echo_mappers:make_beating_mapper", **config).opts.idle_timeout_ms == 1000
    with pytest.raises(KafkaSourceError, match="heartbeat"):
        stream_reader(mapper="tests.support.echo_mappers:make_echo_mapper", **config)
    with pytest.raises(KafkaSourceError, match="heartbeat"):
        stream_reader()
    for bad in ("0", "-5", "1s"):
        with pytest.raises(KafkaSourceError, match="idleTimeoutMs"):
            SourceOptions({"bootstrap.servers": "b", "topic": "t", "idleTimeoutMs": bad})


def test_options_are_validated_and_secrets_not_described():
    with pytest.raises(KafkaSourceError, match="topic"):
        SourceOptions({"bootstrap.servers": "b:9092"})
    with pytest.raises(KafkaSourceError, match="bootstrap.servers"):
        SourceOptions({"topic": "t"})
    with pytest.raises(KafkaSourceError, match="startingOffsets"):
        SourceOptions({"bootstrap.servers": "b", "topic": "t", "startingOffsets": "newest"})
    with pytest.raises(KafkaSourceError, match="maxRecordsPerTrigger"):
        SourceOptions({"bootstrap.servers": "b", "topic": "t", "maxRecordsPerTrigger": "0"})
    opts = SourceOptions(
        {
            "bootstrap.servers": "b:9092",
            "topic": "t",
            "kafka.sasl.password": "hunter2",
            "kafka.security.protocol": "SASL_SSL",
            "kafka.enable.auto.commit": "true",
        }
    )
    assert "hunter2" not in opts.describe() and "sasl.password" in opts.describe()
    conf = opts.consumer_config()
    assert conf["sasl.password"] == "hunter2" and conf["security.protocol"] == "SASL_SSL"
    assert conf["enable.auto.commit"] is False  # not overridable
    assert "group.id" in conf


def test_the_reader_pickles_without_its_client():
    import pickle

    reader = planning_reader(FakeOffsets({0: 0}, {0: 1}))
    copy = pickle.loads(pickle.dumps(reader))
    assert copy._client is None and copy.opts.topic == "t"


# --------------------------------------------------------------------------------------------
# Reading offset ranges from a real broker
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_read_range_is_exact(kafka_bootstrap, new_topic):
    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"v{i}" for i in range(10)])
    opts = SourceOptions({"bootstrap.servers": kafka_bootstrap, "topic": topic})
    got = [m.offset() for m in _iter_records(opts, KafkaInputPartition(topic, 0, 3, 7))]
    assert got == [3, 4, 5, 6]
    assert list(_iter_records(opts, KafkaInputPartition(topic, 0, 5, 5))) == []


@pytest.mark.integration
def test_read_fails_clearly_when_the_range_cannot_be_read(kafka_bootstrap, new_topic):
    topic = new_topic()
    produce(kafka_bootstrap, topic, ["a", "b"])
    opts = SourceOptions(
        {"bootstrap.servers": kafka_bootstrap, "topic": topic, "readTimeoutSeconds": "1.5"}
    )
    # Offsets 2..4 do not exist: the reader must not return the 2 records it found as if that
    # were the whole range.
    it = _iter_records(opts, KafkaInputPartition(topic, 0, 0, 5))
    with pytest.raises(KafkaSourceError, match=rf"{topic}\[0\].*offset 2.*ends at 5"):
        list(it)


# --------------------------------------------------------------------------------------------
# Consumers kept from one range to the next (ConsumerPool), on a real broker
# --------------------------------------------------------------------------------------------


def read_values(opts: SourceOptions, topic: str, partition: int, start: int, end: int,
                pool: Optional[ConsumerPool] = None, topic_id: Optional[str] = None) -> List[tuple]:
    part = KafkaInputPartition(topic, partition, start, end, topic_id)
    return [(m.offset(), m.value().decode()) for m in _iter_records(opts, part, pool)]


@pytest.mark.integration
def test_consecutive_ranges_read_exactly_their_records_with_one_consumer(kafka_bootstrap, new_topic):
    """The ranges of consecutive micro-batches, of both partitions, interleaved as Spark hands
    them to one worker: each yields exactly its records, all read by one consumer (this process's
    pool, as a Spark worker's)."""
    topic = new_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(None, f"p{i % 2}-{i // 2}", None, i % 2) for i in range(40)])
    opts = SourceOptions({"bootstrap.servers": kafka_bootstrap, "topic": topic})
    before = consumers_created()
    for partition, start, end in [(0, 0, 5), (1, 0, 3), (0, 5, 12), (0, 12, 13), (1, 3, 20), (0, 13, 20)]:
        assert read_values(opts, topic, partition, start, end) == [
            (o, f"p{partition}-{o}") for o in range(start, end)
        ]
    assert consumers_created() - before <= 1  # none when an earlier test left one of this configuration
    # The next range as it arrives: produced after the reads above, read with the same consumer.
    produce(kafka_bootstrap, topic, [(None, "p0-20", None, 0), (None, "p0-21", None, 0)])
    assert read_values(opts, topic, 0, 20, 22) == [(20, "p0-20"), (21, "p0-21")]
    assert consumers_created() - before <= 1


@pytest.mark.integration
def test_a_replayed_range_reads_exactly_it_again(kafka_bootstrap, new_topic):
    """A micro-batch replayed, a task retried: a range before (or overlapping) what the consumer
    read last is read again exactly, whatever the consumer read or fetched past it."""
    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"v{i}" for i in range(12)])
    opts = SourceOptions({"bootstrap.servers": kafka_bootstrap, "topic": topic})
    pool = ConsumerPool()
    try:
        assert read_values(opts, topic, 0, 0, 12, pool) == [(o, f"v{o}") for o in range(12)]  # to the log's end
        assert read_values(opts, topic, 0, 4, 8, pool) == [(o, f"v{o}") for o in range(4, 8)]
        assert read_values(opts, topic, 0, 6, 12, pool) == [(o, f"v{o}") for o in range(6, 12)]
        assert read_values(opts, topic, 0, 0, 3, pool) == [(0, "v0"), (1, "v1"), (2, "v2")]
        assert (pool.created, pool.closed, pool.idle()) == (1, 0, 1)
    finally:
        pool.close_all()


@pytest.mark.integration
def test_ranges_over_transaction_markers_end_right_with_one_consumer(kafka_bootstrap, new_topic):
    """read_committed over a transactional input: committed records, an aborted transaction and
    the markers are gaps in the offsets; a range may end on a gap, hold nothing visible, or end
    where the next visible record lies past it (fetched, then not yielded: the next range starts
    there)."""
    from confluent_kafka import Producer

    topic = new_topic()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}-writer"})
    producer.init_transactions(30)

    offsets: Dict[str, int] = {}

    def written(values):
        for value in values:
            producer.produce(topic, value.encode(), on_delivery=lambda err, msg: offsets.update(
                {msg.value().decode(): msg.offset()}))
        assert producer.flush(30) == 0  # in the log before the transaction ends, aborted or not

    def transaction(values, commit):
        producer.begin_transaction()
        written(values)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)

    transaction(["c0", "c1"], commit=True)         # offsets 0, 1; marker 2
    transaction(["a3", "a4", "a5"], commit=False)  # offsets 3, 4, 5 aborted; marker 6
    transaction(["c7"], commit=True)               # offset 7; marker 8
    producer.begin_transaction()                   # offset 9, open: the last stable offset is 9
    written(["o9"])
    assert offsets == {"c0": 0, "c1": 1, "a3": 3, "a4": 4, "a5": 5, "c7": 7, "o9": 9}

    opts = SourceOptions({"bootstrap.servers": kafka_bootstrap, "topic": topic})
    pool = ConsumerPool()
    try:
        assert read_values(opts, topic, 0, 0, 2, pool) == [(0, "c0"), (1, "c1")]
        assert read_values(opts, topic, 0, 2, 3, pool) == []  # the marker alone
        assert read_values(opts, topic, 0, 3, 7, pool) == []  # aborted and its marker: c7 is past the end
        assert read_values(opts, topic, 0, 7, 9, pool) == [(7, "c7")]  # up to the last stable offset
        producer.commit_transaction(30)                # marker 10
        assert read_values(opts, topic, 0, 9, 11, pool) == [(9, "o9")]
        assert read_values(opts, topic, 0, 0, 11, pool) == [(0, "c0"), (1, "c1"), (7, "c7"), (9, "o9")]
        assert read_values(opts, topic, 0, 1, 8, pool) == [(1, "c1"), (7, "c7")]
        assert (pool.created, pool.closed) == (1, 0)
    finally:
        pool.close_all()


@pytest.mark.integration
def test_a_read_that_fails_closes_its_consumer(kafka_bootstrap, new_topic):
    """A timeout or lost records: the consumer is closed, not kept, and the next read makes a new
    one; failOnDataLoss acts on a kept consumer as on a new one."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"v{i}" for i in range(10)])
    opts = SourceOptions({"bootstrap.servers": kafka_bootstrap, "topic": topic, "readTimeoutSeconds": "1"})
    pool = ConsumerPool()
    try:
        assert read_values(opts, topic, 0, 0, 10, pool) == [(o, f"v{o}") for o in range(10)]
        assert (pool.created, pool.idle()) == (1, 1)
        with pytest.raises(KafkaSourceError, match=r"no progress .* at offset 10, the range ends at 12"):
            read_values(opts, topic, 0, 8, 12, pool)  # offsets 10 and 11 do not exist
        assert (pool.closed, pool.idle()) == (1, 0)
        assert read_values(opts, topic, 0, 2, 4, pool) == [(2, "v2"), (3, "v3")]
        assert (pool.created, pool.idle()) == (2, 1)

        # Retention deletes offsets 0..5 under a kept consumer that read them.
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        (future,) = admin.delete_records([TopicPartition(topic, 0, 6)]).values()
        future.result(timeout=30)
        with pytest.raises(KafkaSourceError, match=rf"cannot read {topic}\[0\] offsets 2..10.*failOnDataLoss=false"):
            read_values(opts, topic, 0, 2, 10, pool)
        assert (pool.closed, pool.idle()) == (2, 0)
        lenient = SourceOptions({"bootstrap.servers": kafka_bootstrap, "topic": topic, "failOnDataLoss": "false"})
        assert read_values(lenient, topic, 0, 2, 10, pool) == [(o, f"v{o}") for o in range(6, 10)]
        assert read_values(lenient, topic, 0, 4, 10, pool) == [(o, f"v{o}") for o in range(6, 10)]
        assert (pool.created, pool.idle()) == (3, 1)
    finally:
        pool.close_all()


@pytest.mark.integration
def test_an_abandoned_read_closes_its_consumer(kafka_bootstrap, new_topic):
    """A task that stops reading early (its generator closed, or dropped) gives nothing back."""
    topic = new_topic()
    produce(kafka_bootstrap, topic, [f"v{i}" for i in range(10)])
    opts = SourceOptions({"bootstrap.servers": kafka_bootstrap, "topic": topic})
    pool = ConsumerPool()
    try:
        records = _iter_records(opts, KafkaInputPartition(topic, 0, 0, 10), pool)
        assert next(records).offset() == 0
        records.close()
        assert (pool.created, pool.closed, pool.idle()) == (1, 1, 0)
        assert read_values(opts, topic, 0, 0, 10, pool) == [(o, f"v{o}") for o in range(10)]
        assert (pool.created, pool.closed, pool.idle()) == (2, 1, 1)
    finally:
        pool.close_all()


@pytest.mark.integration
def test_the_pool_closes_the_least_recently_used_and_the_long_idle(kafka_bootstrap, new_topic):
    topic = new_topic()
    produce(kafka_bootstrap, topic, ["x", "y"])
    clock = FakeClock(0)
    pool = ConsumerPool(max_idle=2, idle_timeout_s=300, clock=lambda: clock.now_ms / 1000)

    def options(client_id: str) -> SourceOptions:  # another client property: another configuration
        return SourceOptions({"bootstrap.servers": kafka_bootstrap, "topic": topic, "kafka.client.id": client_id})

    def read(name: str) -> None:
        clock.now_ms += 1_000  # a second between reads
        assert read_values(options(name), topic, 0, 0, 2, pool) == [(0, "x"), (1, "y")]

    try:
        for name in ("a", "b", "c"):
            read(name)
        assert (pool.created, pool.closed, pool.idle()) == (3, 1, 2)  # "a", the oldest, closed
        read("c")
        read("b")
        assert (pool.created, pool.closed, pool.idle()) == (3, 1, 2)
        read("a")  # a new one; "c" is now the least recently used
        assert (pool.created, pool.closed, pool.idle()) == (4, 2, 2)
        read("b")
        assert pool.created == 4
        clock.now_ms += 299_000
        pool.close_idle()
        assert (pool.closed, pool.idle()) == (3, 1)  # "a" was used a second before "b": idle for 300 s now
        clock.now_ms += 1_000
        pool.close_idle()
        assert (pool.created, pool.closed, pool.idle()) == (4, 4, 0)
    finally:
        pool.close_all()


@pytest.mark.integration
def test_a_topic_re_created_is_read_with_a_new_consumer(kafka_bootstrap, new_topic):
    """A consumer that read a topic is not used for a topic re-created under its name (its
    client's metadata is of the deleted one); the new topic reads as it would on a new consumer."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})

    def topic_id(topic: str) -> str:
        return str(admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30).topic_id)

    topic = new_topic()
    produce(kafka_bootstrap, topic, ["old0", "old1", "old2"])
    first = topic_id(topic)
    opts = SourceOptions({"bootstrap.servers": kafka_bootstrap, "topic": topic, "failOnDataLoss": "false"})
    pool = ConsumerPool()
    try:
        assert read_values(opts, topic, 0, 0, 3, pool, first) == [(0, "old0"), (1, "old1"), (2, "old2")]
        recreate_topic(kafka_bootstrap, topic)
        produce(kafka_bootstrap, topic, ["new0", "new1"])
        second = topic_id(topic)
        assert second != first
        assert read_values(opts, topic, 0, 0, 2, pool, second) == [(0, "new0"), (1, "new1")]
        assert (pool.created, pool.closed, pool.idle()) == (2, 1, 1)
        assert read_values(opts, topic, 0, 1, 2, pool, second) == [(1, "new1")]
        assert pool.created == 2
    finally:
        pool.close_all()


# --------------------------------------------------------------------------------------------
# Streaming queries
# --------------------------------------------------------------------------------------------


class Batches:
    """A foreachBatch sink that keeps every micro-batch's rows (in the driver)."""

    def __init__(self, columns: Optional[List[str]] = None):
        self.columns = columns
        self.batches: List[tuple] = []

    def __call__(self, df, batch_id: int) -> None:
        if self.columns:
            df = df.selectExpr(*self.columns)
        self.batches.append((batch_id, [tuple(r) for r in df.collect()]))

    @property
    def rows(self) -> List[tuple]:
        return [row for _, rows in self.batches for row in rows]


RAW_COLUMNS = [
    "topic",
    "partition",
    "offset",
    "unix_millis(timestamp) AS ts",
    "key",
    "value",
    "transform(headers, h -> struct(h.key, h.value)) AS headers",
]


def as_record(row: tuple) -> KafkaRecord:
    topic, partition, offset, ts, key, value, headers = row
    return KafkaRecord(
        topic, partition, offset, ts,
        None if key is None else bytes(key),
        None if value is None else bytes(value),
        [(h[0], None if h[1] is None else bytes(h[1])) for h in headers],
    )


@pytest.fixture(scope="module")
def kspark(spark):
    register(spark)
    return spark


def stream(spark, bootstrap: str, topic: str, **options: str):
    reader = (
        spark.readStream.format("changejoin_kafka")
        .option("bootstrap.servers", bootstrap)
        .option("topic", topic)
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def run_available_now(df, checkpoint: str, sink: Batches) -> None:
    query = (
        df.writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None


def assert_in_offset_order(rows: List[KafkaRecord]) -> None:
    seen: Dict[int, int] = {}
    for r in rows:
        assert r.offset > seen.get(r.partition, -1), f"{r.partition}:{r.offset} after {seen}"
        seen[r.partition] = r.offset


@pytest.mark.integration
def test_reads_every_record_exactly_once_in_offset_order(kspark, kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    records = []
    for i in range(40):
        key = None if i % 9 == 4 else f"k{i % 5}"
        value = None if i % 7 == 2 else f"value {i}"
        headers = [("n", str(i).encode()), ("nil", None)] if i % 3 == 0 else None
        records.append((key, value, headers, i % 2))
    produce(kafka_bootstrap, topic, records)
    expected = consume_all(kafka_bootstrap, topic)
    assert len(expected) == 40

    df = stream(kspark, kafka_bootstrap, topic)
    assert df.schema.simpleString() == kspark.createDataFrame([], RAW_SCHEMA).schema.simpleString()
    sink = Batches(RAW_COLUMNS)
    run_available_now(df, str(tmp_path / "ckpt"), sink)

    got = [as_record(r) for r in sink.rows]
    for _, rows in sink.batches:
        assert_in_offset_order([as_record(r) for r in rows])
    assert sorted(got, key=lambda r: (r.partition, r.offset)) == expected


@pytest.mark.integration
def test_max_records_per_trigger_splits_into_fair_batches(kspark, kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(None, f"a{i}", None, 0) for i in range(20)])
    produce(kafka_bootstrap, topic, [(None, f"b{i}", None, 1) for i in range(10)])

    sink = Batches(["partition", "offset"])
    df = stream(kspark, kafka_bootstrap, topic, maxRecordsPerTrigger="7")
    run_available_now(df, str(tmp_path / "ckpt"), sink)

    sizes = [len(rows) for _, rows in sink.batches if rows]
    assert all(size <= 7 for size in sizes), sizes
    assert len(sizes) >= 5, sizes  # 30 records, at most 7 per batch
    first = sink.batches[0][1]
    assert {p for p, _ in first} == {0, 1}  # both partitions get a share
    rows = sink.rows
    assert sorted(rows) == [(0, o) for o in range(20)] + [(1, o) for o in range(10)]
    assert len(rows) == len(set(rows))
    assert_in_offset_order([KafkaRecord(None, p, o, None, None, None, []) for p, o in rows])


@pytest.mark.integration
def test_restart_on_the_same_checkpoint_continues_without_duplicates_or_losses(
    kspark, kafka_bootstrap, new_topic, tmp_path
):
    topic = new_topic(partitions=2)
    checkpoint = str(tmp_path / "ckpt")
    produce(kafka_bootstrap, topic, [(f"k{i}", f"first {i}", None, i % 2) for i in range(10)])

    def run(sink: Batches) -> None:
        query = (
            stream(kspark, kafka_bootstrap, topic, maxRecordsPerTrigger="4")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .start()
        )
        try:
            query.processAllAvailable()
        finally:
            query.stop()
        assert query.exception() is None

    first = Batches(["partition", "offset", "CAST(value AS STRING)"])
    run(first)
    assert sorted(v for _, _, v in first.rows) == sorted(f"first {i}" for i in range(10))

    produce(kafka_bootstrap, topic, [(f"k{i}", f"second {i}", None, i % 2) for i in range(13)])
    second = Batches(["partition", "offset", "CAST(value AS STRING)"])
    run(second)
    assert sorted(v for _, _, v in second.rows) == sorted(f"second {i}" for i in range(13))
    assert min(b for b, _ in second.batches) > max(b for b, _ in first.batches)

    # And once more with nothing new: nothing is read again.
    third = Batches(["partition", "offset"])
    run(third)
    assert third.rows == []


@pytest.mark.integration
def test_a_running_query_reads_each_micro_batch_with_the_consumers_its_workers_kept(
    kspark, kafka_bootstrap, new_topic, tmp_path
):
    """Spark reuses its Python workers from task to task: over six micro-batches of two partitions,
    a worker creates a consumer at its first read at most (none if an earlier query left it one of
    this configuration), not one per micro-batch or partition."""
    topic = new_topic(partitions=2)
    sink = Batches()
    query = (
        stream(kspark, kafka_bootstrap, topic, mapper="tests.support.echo_mappers:make_consumer_counting_mapper")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        for step in range(6):
            produce(kafka_bootstrap, topic, [(None, f"{step}-{i}", None, i % 2) for i in range(4)])
            query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted((part, off) for _, part, off, _ in sink.rows) == [(p, o) for p in (0, 1) for o in range(12)]
    ranges_read: Dict[int, set] = {}  # worker process -> the (micro-batch, partition) ranges it read
    consumers_seen: Dict[int, set] = {}  # worker process -> its count of consumers created, as its reads saw it
    for batch_id, rows in sink.batches:
        for pid, part, _, consumers in rows:
            ranges_read.setdefault(pid, set()).add((batch_id, part))
            consumers_seen.setdefault(pid, set()).add(consumers)
    assert sum(len(r) for r in ranges_read.values()) >= 12
    assert max(len(r) for r in ranges_read.values()) >= 2, ranges_read  # a worker read several ranges...
    assert all(len(c) == 1 for c in consumers_seen.values()), consumers_seen  # ...creating no consumer after its first


@pytest.mark.integration
def test_starting_offsets_latest_skips_what_was_there(kspark, kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    produce(kafka_bootstrap, topic, [(None, f"old {i}", None, i % 2) for i in range(6)])
    sink = Batches(["CAST(value AS STRING)"])
    query = (
        stream(kspark, kafka_bootstrap, topic, startingOffsets="latest")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        query.processAllAvailable()
        produce(kafka_bootstrap, topic, [(None, f"new {i}", None, i % 2) for i in range(4)])
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(v for (v,) in sink.rows) == [f"new {i}" for i in range(4)]


@pytest.mark.integration
def test_a_topic_created_later_is_read_from_its_beginning(kspark, kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic(create=False)
    sink = Batches(["CAST(value AS STRING)"])
    query = (
        stream(kspark, kafka_bootstrap, topic, startingOffsets="latest")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        query.processAllAvailable()
        create_topic(kafka_bootstrap, topic, 1)
        produce(kafka_bootstrap, topic, ["x", "y", "z"])
        query.processAllAvailable()
    finally:
        query.stop()
    assert [v for (v,) in sink.rows] == ["x", "y", "z"]


@pytest.mark.integration
def test_mapper_hook_turns_records_into_rows(kspark, kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    produce(
        kafka_bootstrap,
        topic,
        [
            ("a", "one", [("h1", b"x"), ("h2", None)], 0),
            ("b", "skip", None, 0),
            ("c", "twice", None, 1),
            (None, None, None, 1),
        ],
    )
    df = stream(
        kspark,
        kafka_bootstrap,
        topic,
        mapper="tests.support.echo_mappers:make_echo_mapper",
        **{"mapper.config": json.dumps({"tag": "t"})},
    )
    assert [f.name for f in df.schema.fields] == [
        "k", "v", "part", "off", "ts_ms", "header_keys", "tag",
    ]
    sink = Batches()
    run_available_now(df, str(tmp_path / "ckpt"), sink)
    rows = sorted(sink.rows, key=lambda r: (r[2], r[3], r[6]))
    assert [(k, v, p, o, h, tag) for k, v, p, o, _, h, tag in rows] == [
        ("a", "one", 0, 0, "h1,h2", "t0"),
        ("c", "twice", 1, 0, "", "t0"),
        ("c", "twice", 1, 0, "", "t1"),
        (None, None, 1, 1, "", "t0"),
    ]
    assert all(isinstance(r[4], int) and r[4] > 0 for r in rows)


@pytest.mark.integration
def test_a_mapper_that_cannot_be_imported_is_a_clear_error(kspark, kafka_bootstrap, new_topic):
    with pytest.raises(Exception, match="cannot import mapper module 'no_such_module'"):
        stream(kspark, kafka_bootstrap, new_topic(), mapper="no_such_module:factory")


@pytest.mark.integration
def test_a_running_query_survives_a_broker_restart(kspark, restartable_broker, tmp_path):
    """The broker goes away under a running query and comes back with its data (a Kafka restart
    keeps topics and records): the query rides it out and reads what is produced afterwards,
    with the default failOnDataLoss (nothing was lost)."""
    import time

    bootstrap = restartable_broker.bootstrap
    create_topic(bootstrap, "restarted", 2)
    produce(bootstrap, "restarted", [(None, f"before {i}", None, i % 2) for i in range(6)])
    sink = Batches(["CAST(value AS STRING)"])
    query = (
        stream(kspark, bootstrap, "restarted")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        query.processAllAvailable()
        assert sorted(v for (v,) in sink.rows) == [f"before {i}" for i in range(6)]
        restartable_broker.stop()
        time.sleep(2)  # the query keeps polling a broker that is not there
        assert query.isActive
        restartable_broker.start()
        produce(bootstrap, "restarted", [(None, f"after {i}", None, i % 2) for i in range(3)])
        deadline = time.monotonic() + 120
        while len(sink.rows) < 9 and time.monotonic() < deadline and query.isActive:
            query.processAllAvailable()
            time.sleep(0.2)
    finally:
        query.stop()
    assert query.exception() is None
    assert sorted(v for (v,) in sink.rows) == sorted(
        [f"before {i}" for i in range(6)] + [f"after {i}" for i in range(3)]
    )


@pytest.mark.integration
def test_raw_rows_as_tuples_match_raw_rows_as_arrow(kspark, kafka_bootstrap, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    produce(
        kafka_bootstrap,
        topic,
        [(f"k{i}", None if i == 3 else f"v{i}", [("h", b"x")] if i % 2 else None, i % 2) for i in range(8)],
    )
    results = []
    for raw_arrow in ("true", "false"):
        sink = Batches(RAW_COLUMNS)
        run_available_now(
            stream(kspark, kafka_bootstrap, topic, rawArrow=raw_arrow),
            str(tmp_path / f"ckpt-{raw_arrow}"),
            sink,
        )
        results.append(sorted(as_record(r) for r in sink.rows))
    assert len(results[0]) == 8
    assert results[0] == results[1]


@pytest.mark.integration
def test_a_schema_other_than_the_raw_one_needs_a_mapper(kspark, kafka_bootstrap, new_topic):
    with pytest.raises(Exception, match="without a mapper"):
        (
            kspark.readStream.format("changejoin_kafka")
            .schema("a string")
            .option("bootstrap.servers", kafka_bootstrap)
            .option("topic", new_topic())
            .load()
            .writeStream.format("noop")
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )


def test_mapper_secret_is_merged_into_the_mappers_config():
    from service.source import KafkaSourceError, load_mapper

    mapper = load_mapper("tests.support.echo_mappers:make_echo_mapper", json.dumps({"tag": "public"}),
                         json.dumps({"tag": "s"}))
    assert mapper.tag == "s"
    assert load_mapper("tests.support.echo_mappers:make_echo_mapper", json.dumps({"tag": "public"})).tag == "public"
    with pytest.raises(KafkaSourceError, match="mapper.secret"):
        load_mapper("tests.support.echo_mappers:make_echo_mapper", json.dumps({"tag": "t"}), "[1]")


@pytest.mark.integration
def test_a_transactional_input_is_read_up_to_its_last_stable_offset_committed_records_only(
        kspark, kafka_bootstrap, new_topic, tmp_path):
    """Another changejoin's (or Flink's) exactly-once output as input: the records of aborted
    transactions are never read, and an open transaction holds the micro-batch at the last stable
    offset (read_committed) until it commits."""
    from confluent_kafka import Producer

    topic = new_topic()
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"{topic}-writer"})
    producer.init_transactions(30)

    def transaction(values, commit):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value.encode())
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)

    transaction(["c1", "c2"], commit=True)
    transaction(["a1", "a2", "a3"], commit=False)
    transaction(["c3"], commit=True)
    producer.begin_transaction()  # left open while the query runs
    producer.produce(topic, b"o1")
    assert producer.flush(30) == 0

    checkpoint = str(tmp_path / "ckpt")
    first = Batches(RAW_COLUMNS)
    run_available_now(stream(kspark, kafka_bootstrap, topic), checkpoint, first)
    assert [as_record(r).value for r in first.rows] == [b"c1", b"c2", b"c3"]

    producer.commit_transaction(30)
    second = Batches(RAW_COLUMNS)
    run_available_now(stream(kspark, kafka_bootstrap, topic), checkpoint, second)
    assert [as_record(r).value for r in second.rows] == [b"o1"]
