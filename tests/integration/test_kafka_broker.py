"""The test broker itself (devkit/kafka_broker.py): a real Kafka, so multi-record batches get
correct offsets and end offsets, and a restart keeps the data. And its jars (devkit/jars.py)."""
from __future__ import annotations

import pytest

from tests.support.kafka_fixture import consume_all, create_topic, end_offsets
from devkit import jars
from devkit.kafka_broker import KafkaBroker, new_cluster_id
from tests.support.jvm_archives import broker_jvm_options


def produce_batched(bootstrap: str, topic: str, values, partition: int) -> list:
    """Produce ``values`` so that they travel in as few produce requests as possible (one here:
    every record is queued before the first poll, and linger gives librdkafka time to batch)."""
    from confluent_kafka import Producer

    offsets = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200, "batch.num.messages": 10_000,
                         "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value=value, partition=partition,
                         on_delivery=lambda err, msg: offsets.append((err, msg.offset())))
    assert producer.flush(60) == 0
    assert all(err is None for err, _ in offsets), offsets
    return sorted(offset for _, offset in offsets)


def record_batches(partition_dir) -> list:
    """The record count of each batch in a partition's log segments (Kafka's on-disk format: a
    batch starts with baseOffset int64, batchLength int32, ..., and its record count is the int32
    at byte 57)."""
    import struct

    counts = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            (length,) = struct.unpack_from(">i", data, pos + 8)
            (count,) = struct.unpack_from(">i", data, pos + 57)
            counts.append(count)
            pos += 12 + length
    return counts


def latest_offsets(bootstrap: str, topic: str, partitions: int) -> dict:
    """ListOffsets(latest) through the admin client, as the service's source asks."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
                                 request_timeout=30)
    return {tp.partition: f.result().offset for tp, f in futures.items()}


@pytest.mark.integration
def test_multi_record_batches_have_right_offsets_and_a_restart_keeps_them():
    broker = KafkaBroker(jvm_options=broker_jvm_options())  # it makes its own data directory, and removes it on close()
    try:
        bootstrap = broker.start()
        assert bootstrap == broker.bootstrap and bootstrap.startswith("127.0.0.1:")
        assert (broker.data_dir / "logs" / "meta.properties").is_file()
        topic = create_topic(bootstrap, "batched", partitions=2)
        first = [f"a{i}".encode() for i in range(50)]
        second = [f"b{i}".encode() for i in range(7)]
        assert produce_batched(bootstrap, topic, first, partition=0) == list(range(50))
        assert produce_batched(bootstrap, topic, second, partition=1) == list(range(7))
        # The records really went in batches of several records (read from the log segment)...
        batches = record_batches(broker.data_dir / "logs" / f"{topic}-0")
        assert sum(batches) == 50 and max(batches) > 1, batches
        # ... and the end offsets (ListOffsets, watermarks) count every record of every batch.
        assert end_offsets(bootstrap, topic) == {0: (0, 50), 1: (0, 7)}
        assert latest_offsets(bootstrap, topic, 2) == {0: 50, 1: 7}
        assert [r.value for r in consume_all(bootstrap, topic)] == first + second
        # A batch appended after the first one starts at its end.
        assert produce_batched(bootstrap, topic, [b"c0", b"c1", b"c2"], partition=0) == [50, 51, 52]

        port, data_dir = broker.port, broker.data_dir
        broker.stop()
        assert not broker.is_running()
        assert broker.start() == bootstrap and broker.port == port and broker.data_dir == data_dir
        assert end_offsets(bootstrap, topic) == {0: (0, 53), 1: (0, 7)}
        assert latest_offsets(bootstrap, topic, 2) == {0: 53, 1: 7}
        got = consume_all(bootstrap, topic)
        assert [r.value for r in got] == first + [b"c0", b"c1", b"c2"] + second
        assert produce_batched(bootstrap, topic, [b"d0", b"d1"], partition=1) == [7, 8]
    finally:
        broker.close()
    assert not broker.is_running()
    assert not data_dir.exists()


def test_cluster_ids_look_like_kafkas():
    for _ in range(50):
        cluster_id = new_cluster_id()
        assert len(cluster_id) == 22 and not cluster_id.startswith("-")
        assert set(cluster_id) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_the_broker_jars_are_cached_and_kept_apart_from_sparks():
    directory = jars.fetch("kafka-broker")
    assert jars.is_fetched("kafka-broker") and directory == jars.cache_dir("kafka-broker")
    names = {p.name for p in directory.glob("*.jar")}
    assert any(n.startswith("kafka_2.13-4.") for n in names)
    assert not any(n.startswith("spark-") for n in names)


def test_jar_names_without_versions():
    assert jars._artifact_stem("kafka-clients-3.9.2.jar") == "kafka-clients"
    assert jars._artifact_stem("spark-sql-kafka-0-10_2.13-4.3.0.jar") == "spark-sql-kafka-0-10_2.13"
    assert jars._artifact_stem("zstd-jni-1.5.7-17.jar") == "zstd-jni"
    assert jars._artifact_stem("scala-library-2.13.18.jar") == "scala-library"
    assert jars._artifact_stem("jsr305-3.0.0.jar") == "jsr305"


def test_spark_connectors_must_match_the_installed_pyspark():
    import pyspark

    pom = jars.pom("spark-connectors").read_text()
    # The pinned version is the installed PySpark's (the check passes)...
    assert jars._pom_property(pom, "spark.version") == pyspark.__version__
    jars._check_spark_versions(pom)
    # ... and any other version or Scala suffix is refused before Maven runs.
    with pytest.raises(jars.JarsError, match="installed PySpark"):
        jars._check_spark_versions(pom.replace(f"<spark.version>{pyspark.__version__}<", "<spark.version>3.5.1<"))
    with pytest.raises(jars.JarsError, match="Scala"):
        jars._check_spark_versions(pom.replace("<scala.binary.version>2.13<", "<scala.binary.version>2.12<"))


def test_the_service_does_not_load_the_test_broker():
    """The broker and its jars are for tests and benchmarks: the service's own modules never
    import them."""
    import subprocess
    import sys

    code = ("import sys, service.cli, service.app, service.pipeline, service.source, service.sink, service.demo; "
            "print(sorted(m for m in sys.modules if m == 'devkit' or m.startswith('devkit.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
