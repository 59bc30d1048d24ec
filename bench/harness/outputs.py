"""Output topics read back (records, count by kind, the digest of the final table a changelog
materializes to) and the outputs the data fixes (what every run must agree with)."""
from __future__ import annotations

import json
import tempfile
import time
from collections import Counter

from .changejoin import service_settings
from .data import END_ORDER_ID, TIMED_SCHEMAS


def inner_expected(orders, prices) -> int:
    """inner-nopk is insert-only: the join's output is fixed, sum over products of |o| x |p|."""
    o = Counter(row["product"] for _, row in orders)
    p = Counter(row["product"] for _, row in prices)
    return sum(n * p[k] for k, n in o.items())


def _final(changes) -> Counter:
    """The table a changelog materializes to (a multiset of rows as dict items)."""
    table: Counter = Counter()
    for kind, row in changes:
        table[tuple(row.items())] += 1 if kind in ("+I", "+U") else -1
    return table


def table_digest(rows) -> str:
    """The digest of a materialized table: its rows (tuples, each once per count), in a fixed order."""
    import hashlib

    return hashlib.sha256(repr(sorted(rows, key=repr)).encode()).hexdigest()[:12]


def left_pk_expected(orders, prices) -> tuple[int, str]:
    """left-pk's final table, fixed by the data: the LEFT join of the final orders with the final
    prices (both keyed), whatever the interleaving; (rows, digest)."""
    price_of = {dict(row)["product"]: dict(row)["price"] for row, n in _final(prices).items() if n > 0}
    rows = []
    for row, n in _final(orders).items():
        o = dict(row)
        rows += [(o["order_id"], o["product"], o["quantity"], price_of.get(o["product"]))] * n
    return len(rows), table_digest(rows)


def temporal_expected(orders, prices) -> tuple[int, str]:
    """temporal-left's output, fixed by the data: every order (but the closing one) with the price
    of its product's version valid at the order's time (None before the first); (rows, digest)."""
    import bisect

    versions: dict[str, list] = {}
    for kind, row in prices:
        if kind != "-U":  # dropped before the join (changejoin and Flink alike)
            versions.setdefault(row["product"], []).append((row["price_time"], row["price"] if kind != "-D" else None))
    for v in versions.values():
        v.sort(key=lambda tp: tp[0])
    rows = []
    for _, o in orders:
        if o["order_id"] == END_ORDER_ID:
            continue
        v = versions.get(o["product"], [])
        i = bisect.bisect_right(v, o["order_time"], key=lambda tp: tp[0])
        rows.append((o["order_id"], o["product"], o["quantity"], v[i - 1][1] if i else None))
    return len(rows), table_digest(rows)


def end_offsets(consumer, topic: str, required: bool = False) -> dict[int, int] | None:
    """Partition -> end offset of ``topic``; None when the topic does not exist (a KeyError when
    it is ``required``)."""
    from confluent_kafka import TopicPartition

    meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
    if meta is None or meta.error is not None:
        if required:
            raise KeyError(topic)
        return None
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in meta.partitions}


def records(consumer, topic: str, ends: dict[int, int]):
    """Every record of ``topic`` from the beginning up to ``ends`` (``end_offsets``), read
    ``read_committed`` (librdkafka's default). Ends at each partition's end-of-partition event
    (the consumer must have ``enable.partition.eof``: :data:`READER`) or last record: a
    transactional producer's commit records take offsets that no message is delivered for."""
    from confluent_kafka import KafkaError, TopicPartition

    pending = {p: end for p, end in ends.items() if end > 0}
    consumer.assign([TopicPartition(topic, p, 0) for p in pending])
    while pending:
        for msg in consumer.consume(10_000, timeout=5):
            p = msg.partition()
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() >= pending.get(p, msg.offset() + 1):
                    del pending[p]
                continue
            if p not in pending or msg.offset() >= pending[p]:
                continue
            yield msg
            if msg.offset() + 1 >= pending[p]:
                del pending[p]


#: Properties of the consumers that read outputs with :func:`records`.
READER = {"enable.auto.commit": False, "auto.offset.reset": "earliest", "enable.partition.eof": True}


def end_offsets_total(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ends-{time.time_ns()}"})
    try:
        return sum(end_offsets(consumer, topic, required=True).values())
    finally:
        consumer.close()


def output_counts(bootstrap: str, topic: str, materialize=None, skip=None) -> tuple[int, dict, str | None]:
    """Records in ``topic``, read (read_committed) and counted: not its offsets, of which a
    transactional producer's commit records take some. With ``materialize`` (message -> (kind,
    sign, row)), also the count by kind and a digest of the final table the changelog materializes
    to (a multiset: +I/+U add a row, -U/-D remove one); rows for which ``skip`` is true are left out
    of it."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{time.time_ns()}", **READER})
    try:
        ends = end_offsets(consumer, topic)
        if ends is None:
            return 0, {}, None
        if not sum(ends.values()):
            return 0, {}, None
        if materialize is None:
            return sum(1 for _ in records(consumer, topic, ends)), {}, None
        kinds: Counter = Counter()
        table: Counter = Counter()
        total = 0
        for msg in records(consumer, topic, ends):
            total += 1
            label, sign, row = materialize(msg)
            if skip and skip(row):
                kinds["skipped"] += 1
                continue
            kinds[label] += 1
            table[row] += sign
        negative = sum(1 for n in table.values() if n < 0)
        rows = [row for row, n in table.items() for _ in range(max(0, n))]
        kinds["final rows"] = len(rows)
        if negative:
            kinds["NEGATIVE"] = negative
        return total, dict(kinds), table_digest(rows)
    finally:
        consumer.close()


def changejoin_reader(scenario: str, sql: str | None = None, timed: bool = False):
    """(kind, sign, row) of a changejoin output record: Avro body, RowKind in the header."""
    import io

    import fastavro

    from service.catalog import plan_for

    extra = {"LEFT_SCHEMA_FILE": str(TIMED_SCHEMAS / "orders_timed.avsc"),
             "RIGHT_SCHEMA_FILE": str(TIMED_SCHEMAS / "prices_timed.avsc")} if timed else None
    with tempfile.TemporaryDirectory() as work:
        plan = plan_for(service_settings("127.0.0.1:1", scenario, 1, 1, f"{work}/cp", sql=sql, extra=extra))
    schema = fastavro.parse_schema(plan.output_schema)

    def read(msg):
        kind = dict(msg.headers() or [])["rowkind"].decode()
        row = fastavro.schemaless_reader(io.BytesIO(msg.value()), schema)
        return kind, 1 if kind in ("+I", "+U") else -1, tuple(row.values())
    return read


def debezium_reader(msg):
    """(kind, sign, row) of a Flink debezium-json output record (+I/+U -> c, -U/-D -> d)."""
    message = json.loads(msg.value())
    if message["op"] == "c":
        return "c (+I/+U)", 1, tuple(message["after"].values())
    return "d (-U/-D)", -1, tuple(message["before"].values())


def flink_avro_reader(fields: list[tuple[str, object]]):
    """(kind, sign, row) of a Flink ``avro`` output record (insert-only): the schema Flink derives
    from the sink's columns (a nullable column is a union with null first)."""
    import io

    import fastavro

    schema = fastavro.parse_schema({"type": "record", "name": "record",
                                    "fields": [{"name": n, "type": t} for n, t in fields]})

    def read(msg):
        return "+I", 1, tuple(fastavro.schemaless_reader(io.BytesIO(msg.value()), schema).values())
    return read


TEMPORAL_FLINK_FIELDS = [("order_id", "long"), ("product", "string"), ("quantity", "int"), ("price", ["null", "double"])]
