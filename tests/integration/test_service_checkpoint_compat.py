"""Restarts on an existing checkpoint, end to end: the state carries over when RocksDB's changelog
checkpointing is switched on or off, and a checkpoint of the first bucket layout is read and
upgraded. An evolved input schema's stored rows upgraded, through the upsert materializer too, and
another join refused before it touches the state: tests/service/test_joins_restarts.py, on the
in-memory query driver."""
import json
from collections import Counter
from pathlib import Path

import pytest

from tests.support.kafka_fixture import create_topic
from service.session import ROCKSDB_CHANGELOG_CONF
from tests.support.service_harness import DATA, JoinHarness, drop_replays, order, price

pytestmark = pytest.mark.integration

SQL = "SELECT o.*, p.price FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"


@pytest.mark.parametrize("before, after", [("false", "true"), ("true", "false")])
def test_a_checkpoint_resumes_across_a_switch_of_rocksdb_changelog_checkpointing(
        kafka_bootstrap, spark, tmp_path, new_topic, before, after):
    """The service commits RocksDB state as changelog files (config.py); a checkpoint written by a
    version that made snapshots, or by a user who set it off, resumes with its state either way."""
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, JOIN_SQL=SQL)
    previous = spark.conf.get(ROCKSDB_CHANGELOG_CONF, None)
    try:
        spark.conf.set(ROCKSDB_CHANGELOG_CONF, before)
        h.send_prices([("+I", price("book", 12.5)), ("+I", price("pen", 2.0))])
        h.send_orders([("+I", order(1, "book", 2)), ("+I", order(2, "pen", 3))])
        h.run()
        spark.conf.set(ROCKSDB_CHANGELOG_CONF, after)
        # Each change needs the first run's state: the orders to re-join, the prices to join with.
        h.send_prices([("-U", price("book", 12.5)), ("+U", price("book", 13.0))])
        h.send_orders([("-D", order(2, "pen", 3)), ("+I", order(3, "pen", 1))])
        h.run()
    finally:
        if previous is None:
            spark.conf.unset(ROCKSDB_CHANGELOG_CONF)
        else:
            spark.conf.set(ROCKSDB_CHANGELOG_CONF, previous)
    # One of the two runs wrote changelog files: the setting reached the state store.
    state_files = {f.suffix for f in Path(h.env["CHECKPOINT_LOCATION"]).rglob("*") if f.is_file()}
    assert ".changelog" in state_files, state_files
    assert h.retract_table() == Counter({(1, "book", 2, 13.0): 1, (3, "pen", 1, 2.0): 1})


def _topic_id(bootstrap: str, topic: str) -> str:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer is in
    return str(admin.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id)


def _left_join(orders: list, prices: list) -> Counter:
    """The LEFT join of the tables the changes end in (orders by id, prices by product)."""
    table_o, table_p = {}, {}
    for table, key, changes in ((table_o, "order_id", orders), (table_p, "product", prices)):
        for kind, row in changes:
            if kind in ("+I", "+U"):
                table[row[key]] = row
            else:
                table.pop(row[key], None)
    return Counter((o["order_id"], o["product"], o["quantity"],
                    table_p[o["product"]]["price"] if o["product"] in table_p else None) for o in table_o.values())


def test_a_checkpoint_of_the_first_bucket_layout_is_read_and_upgraded_as_it_is_written(
        kafka_bootstrap, spark, tmp_path, new_topic):
    """tests/data/checkpoints/first-layout.tar.gz was written by the first bucket layout (its
    make_first_layout.py): 64 buckets whose values hold the index of their large keys and every
    key's TTL timer, one Spark timer per bucket, grouping keys of that layout. A run on it keeps its
    buckets and grouping keys, reads every key (the hot key's value is a large one), fires the old
    Spark timers (due long ago: the run's TTL is long enough that they expire nothing) and writes
    the buckets it touches in today's layout; its output continues the first run's join."""
    import tarfile

    data = json.loads((DATA / "checkpoints" / "first-layout.json").read_text())
    where = tmp_path / "checkpoint"
    with tarfile.open(DATA / "checkpoints" / "first-layout.tar.gz") as tar:
        tar.extractall(where)
    sides = json.loads((where / "changejoin-state.json").read_text())["facts"]["sides"]
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, **data["settings"])
    h.orders, h.prices = (create_topic(kafka_bootstrap, side["topic"]) for side in sides)  # its topics' names
    h.env.update(LEFT_TOPIC=h.orders, RIGHT_TOPIC=h.prices)
    orders = [(kind, row) for kind, row in data["orders"]]
    prices = [(kind, row) for kind, row in data["prices"]]
    h.send_orders(orders)  # the first run's input again: the checkpoint's offsets are at its end
    h.send_prices(prices)
    ids = {data["topic_ids"]["orders"]: _topic_id(kafka_bootstrap, h.orders),
           data["topic_ids"]["prices"]: _topic_id(kafka_bootstrap, h.prices)}
    # Spark's operator metadata names its state schema files by absolute path: the checkpoint's new one
    for entry in where.glob("state/*/_metadata/v2/*"):
        if not entry.name.startswith("."):
            text = entry.read_text()
            made_at = text[text.index('"file:') + 1:text.index("/state/", text.index('"file:'))]
            entry.write_text(text.replace(made_at, f"file:{where}"))
            (entry.parent / f".{entry.name}.crc").unlink(missing_ok=True)
    for entry in (where / "offsets").iterdir():  # the same records in topics of other ids
        if entry.name.isdigit():
            text = entry.read_text()
            for old, new in ids.items():
                text = text.replace(old, new)
            entry.write_text(text)
            (entry.parent / f".{entry.name}.crc").unlink(missing_ok=True)

    more_orders = [("-U", {"order_id": 1000, "product": "hot", "quantity": 1}),
                   ("+U", {"order_id": 1000, "product": "hot", "quantity": 5}),
                   ("-D", {"order_id": 1001, "product": "hot", "quantity": 1}),
                   ("-U", {"order_id": 0, "product": "p0", "quantity": 2}),
                   ("+U", {"order_id": 0, "product": "p1", "quantity": 2}),
                   ("+I", {"order_id": 500, "product": "p3", "quantity": 7})]
    more_prices = [("-U", {"product": "hot", "price": 99.0, "currency": "EUR"}),
                   ("+U", {"product": "hot", "price": 100.0, "currency": "EUR"}),
                   ("-D", {"product": "p2", "price": 2.0, "currency": "EUR"})]
    h.send_orders(more_orders)
    h.send_prices(more_prices)
    service = h.run(STATE_TTL="36500d")
    assert (service.plan.state_buckets, service.plan.bucket_keys) == (64, 1)
    table = _left_join(orders, prices)  # what the first run's output amounts to
    for change in drop_replays(h.changelog())[0]:
        table[change.row] += 1 if change.kind in ("+I", "+U") else -1
        assert table[change.row] >= 0, f"{change} retracts a row the output does not hold"
    assert +table == _left_join(orders + more_orders, prices + more_prices)
