"""A real Debezium capture of PostgreSQL into Kafka (tests/support/debezium_fixture.py): what the
changelogs the service reads as Debezium inputs look like, proven on Debezium itself.

One table, ``REPLICA IDENTITY FULL``; two rows before the connectors start (the snapshot reads
them, op ``r``), then an insert, two updates of one row and a delete, each its own transaction.
Two connectors capture the same table side by side, one with Connect's JSON converter writing the
schema in every record (``{"schema": ..., "payload": ...}``), one without; both topics must hold
the same changes. A sample of the records, exactly as Debezium wrote them, is kept in
tests/data/debezium/ as the decoder's golden inputs: written when missing (or when
``CHANGEJOIN_RECORD_DEBEZIUM=1``), otherwise checked to still have the same shape.
"""
from __future__ import annotations

import base64
import json
import os
import time
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Dict, List

from tests.support.debezium_fixture import ChangeRecord, DebeziumCapture, read_changes, unique_name

SAMPLES = Path(__file__).resolve().parent.parent / "data" / "debezium"
RECORD_ENV = "CHANGEJOIN_RECORD_DEBEZIUM"

COLUMNS = "id int PRIMARY KEY, name text, tier text, balance numeric(10,2), updated_at timestamptz"
T1 = datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc)
T2 = datetime(2024, 1, 2, 1, 4, 5, tzinfo=timezone.utc)  # written as 03:04:05+02
T3 = datetime(2024, 2, 29, 23, 59, 59, 500000, tzinfo=timezone.utc)
T4 = datetime(2024, 3, 1, 0, 0, 0, 1, tzinfo=timezone.utc)

# The rows as the snapshot reads them.
ALICE = {"id": 1, "name": "alice", "tier": "gold", "balance": Decimal("10.50"), "updated_at": T1}
BOB = {"id": 2, "name": "bob", "tier": "silver", "balance": Decimal("-3.25"), "updated_at": T2}
# After the connectors run.
CAROL = {"id": 3, "name": "carol", "tier": None, "balance": Decimal("99999999.99"), "updated_at": T3}
ALICE_2 = {**ALICE, "tier": "platinum"}
ALICE_3 = {**ALICE_2, "balance": Decimal("12.34"), "updated_at": T4}


def decimal_of(text: str, scale: int = 2) -> Decimal:
    """Connect's Decimal in JSON: base64 of the unscaled value, big-endian two's complement."""
    unscaled = int.from_bytes(base64.b64decode(text), "big", signed=True)
    return Decimal(unscaled).scaleb(-scale)


def row_of(image: Dict[str, Any]) -> Dict[str, Any]:
    """A before/after image as Python values."""
    return {
        **image,
        "balance": None if image["balance"] is None else decimal_of(image["balance"]),
        "updated_at": None if image["updated_at"] is None else datetime.fromisoformat(image["updated_at"]),
    }


def shape(doc: Any) -> Any:
    """A JSON document with every leaf replaced by its type's name: what must not change between
    two runs of the same Debezium (names, times, LSNs and transaction ids do)."""
    if isinstance(doc, dict):
        return {k: shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [shape(v) for v in doc]
    return type(doc).__name__


def streamed_payload(record: ChangeRecord) -> Dict[str, Any]:
    """A streamed change without what differs between two connectors reading the same WAL: their
    name (``source.name``) and when each handled it (the envelope's own ``ts_*``)."""
    envelope = {k: v for k, v in record.envelope.items() if k not in ("ts_ms", "ts_us", "ts_ns")}
    envelope["source"] = {k: v for k, v in envelope["source"].items() if k != "name"}
    return envelope


def check_changelog(records: List[ChangeRecord], schemas: bool, table: str, prefix: str,
                    txids: Dict[str, int], started_ms: int, ended_ms: int) -> None:
    schema_name, table_name = table.split(".")
    ops = [(r.key_payload["id"], r.op) for r in records]
    assert ops[:2] in ([(1, "r"), (2, "r")], [(2, "r"), (1, "r")]), ops
    # The streamed changes in commit order, a tombstone right after the delete.
    assert ops[2:] == [(3, "c"), (1, "u"), (1, "u"), (2, "d"), (2, None)], ops
    by_key: Dict[int, List[ChangeRecord]] = {}
    for r in records:
        by_key.setdefault(r.key_payload["id"], []).append(r)
    assert [r.op for r in by_key[1]] == ["r", "u", "u"]
    assert [r.op for r in by_key[2]] == ["r", "d", None]
    assert [r.op for r in by_key[3]] == ["c"]

    # Before and after images: full rows (REPLICA IDENTITY FULL), decoded.
    images = {(r.key_payload["id"], r.op, i): r.envelope for i, r in enumerate(records) if r.envelope}
    expect = {
        (1, "r"): (None, ALICE), (2, "r"): (None, BOB), (3, "c"): (None, CAROL),
        (2, "d"): (BOB, None),
    }
    for (key, op, _), envelope in images.items():
        if (key, op) in expect:
            before, after = expect[key, op]
            assert (envelope["before"] and row_of(envelope["before"])) == before, (key, op, envelope)
            assert (envelope["after"] and row_of(envelope["after"])) == after, (key, op, envelope)
    # The encodings, as text: numeric(10,2) is Connect's Decimal (base64 of the unscaled value's
    # big-endian two's complement; decimal.handling.mode=precise, the default), timestamptz is
    # Debezium's ZonedTimestamp (ISO 8601 in UTC, always six fractional digits).
    assert by_key[1][0].envelope["after"]["balance"] == "BBo="  # 1050 -> 10.50
    assert by_key[2][0].envelope["after"]["balance"] == "/rs="  # -325 -> -3.25
    assert by_key[3][0].envelope["after"]["balance"] == "AlQL4/8="  # 9999999999 -> 99999999.99
    assert by_key[1][0].envelope["after"]["updated_at"] == "2024-01-02T03:04:05.123456Z"
    assert by_key[2][0].envelope["after"]["updated_at"] == "2024-01-02T01:04:05.000000Z"  # was +02
    assert by_key[3][0].envelope["after"]["updated_at"] == "2024-02-29T23:59:59.500000Z"
    assert by_key[1][2].envelope["after"]["updated_at"] == "2024-03-01T00:00:00.000001Z"
    first_u, second_u = by_key[1][1].envelope, by_key[1][2].envelope
    assert (row_of(first_u["before"]), row_of(first_u["after"])) == (ALICE, ALICE_2)
    assert (row_of(second_u["before"]), row_of(second_u["after"])) == (ALICE_2, ALICE_3)

    # Source: the database's own metadata of each change.
    for r in records[:-1]:
        source = r.envelope["source"]
        assert (source["connector"], source["name"], source["db"]) == ("postgresql", prefix, "postgres")
        assert (source["schema"], source["table"]) == (schema_name, table_name)
        assert source["version"].endswith(".Final")
        assert isinstance(source["ts_ms"], int) and isinstance(source["lsn"], int)
        assert started_ms - 5_000 <= source["ts_ms"] <= ended_ms + 5_000, source
        assert source["ts_us"] // 1000 == source["ts_ms"]
        assert r.envelope["ts_ms"] >= source["ts_ms"] - 5_000  # when Debezium handled it
        assert r.envelope["transaction"] is None
    snapshot = [r.envelope["source"] for r in records[:2]]
    assert all(s["snapshot"] in ("true", "first", "last", "first_in_data_collection",
                                 "last_in_data_collection") for s in snapshot), snapshot
    assert snapshot[-1]["snapshot"] in ("last", "last_in_data_collection")
    assert snapshot[0]["txId"] == snapshot[1]["txId"] and snapshot[0]["lsn"] == snapshot[1]["lsn"]
    streamed = [r.envelope["source"] for r in records[2:-1]]
    assert [s["snapshot"] for s in streamed] == ["false"] * 4
    # Each change is its own transaction: Debezium's txId is PostgreSQL's transaction id, and the
    # commit time (source.ts_ms) and log position (source.lsn) grow with the commit order.
    assert [s["txId"] for s in streamed] == [txids[n] for n in ("insert", "update 1", "update 2", "delete")]
    assert [s["lsn"] for s in streamed] == sorted(s["lsn"] for s in streamed)
    assert len({s["lsn"] for s in streamed}) == 4
    assert [s["ts_ms"] for s in streamed] == sorted(s["ts_ms"] for s in streamed)
    assert min(s["lsn"] for s in streamed) > snapshot[0]["lsn"]

    # The tombstone: the deleted row's key, no value.
    tombstone, delete = records[-1], records[-2]
    assert tombstone.raw_value is None and tombstone.raw_key == delete.raw_key

    # The converter's shape.
    for r in records:
        if schemas:
            assert set(r.key) == {"schema", "payload"}
            assert r.key["schema"]["name"] == f"{prefix}.{table}.Key"
            assert r.key["schema"]["fields"] == [{"type": "int32", "optional": False, "field": "id"}]
            assert r.key["payload"] == {"id": r.key_payload["id"]}
            if r.value is not None:
                schema = r.value["schema"]
                assert set(r.value) == {"schema", "payload"}
                assert (schema["type"], schema["name"]) == ("struct", f"{prefix}.{table}.Envelope")
                fields = {f["field"]: f for f in schema["fields"]}
                assert list(fields) == ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"]
                row = {f["field"]: f for f in fields["after"]["fields"]}
                assert row["balance"]["name"] == "org.apache.kafka.connect.data.Decimal"
                assert row["balance"]["parameters"] == {"scale": "2", "connect.decimal.precision": "10"}
                assert row["updated_at"]["name"] == "io.debezium.time.ZonedTimestamp"
                assert fields["source"]["name"] == "io.debezium.connector.postgresql.Source"
        else:
            assert r.key == {"id": r.key_payload["id"]}
            if r.value is not None:
                assert "schema" not in r.value and r.value["op"] in "rcud"
                assert list(r.value)[:5] == ["before", "after", "source", "transaction", "op"]


def check_samples(records: List[ChangeRecord], schemas: bool) -> List[Path]:
    """Write (or check the shape of) one sample per kind of record."""
    by_key: Dict[int, List[ChangeRecord]] = {}
    for r in records:
        by_key.setdefault(r.key_payload["id"], []).append(r)
    cases = {
        "snapshot_read": by_key[1][0], "create": by_key[3][0], "update": by_key[1][1],
        "delete": by_key[2][1], "tombstone": by_key[2][2],
    }
    suffix = "with_schema" if schemas else "without_schema"
    record = os.environ.get(RECORD_ENV) == "1"
    paths = []
    for case, r in cases.items():
        path = SAMPLES / f"{case}.{suffix}.json"
        paths.append(path)
        sample = r.as_sample()
        if record or not path.is_file():
            SAMPLES.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(sample, indent=2) + "\n")
            continue
        kept = json.loads(path.read_text())
        for part in ("key", "value"):
            old, new = kept[part], sample[part]
            assert (old is None) == (new is None), (path, part)
            if old is not None:
                assert shape(json.loads(old)) == shape(json.loads(new)), (
                    f"{path}: Debezium's {part} has another shape now; rerun with {RECORD_ENV}=1 "
                    f"to record it again, and check the decoder")
    return paths


def test_debezium_captures_postgres_changes(debezium_capture: DebeziumCapture) -> None:
    cdc = debezium_capture
    table = cdc.create_table("customers", COLUMNS)
    insert = f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s)"
    cdc.execute(insert, (1, "alice", "gold", Decimal("10.50"), T1))
    cdc.execute(f"INSERT INTO {table} VALUES (2, 'bob', 'silver', -3.25, '2024-01-02 03:04:05+02')")
    started_ms = int(time.time() * 1000)

    # Both connectors at once: their JVM work overlaps.
    captures = {
        True: cdc.capture([table], schemas=True, name=unique_name("with_schema"), wait=False),
        False: cdc.capture([table], schemas=False, name=unique_name("without_schema"), wait=False),
    }
    for capture in captures.values():
        cdc.connect.wait_running(capture.name)
    for capture in captures.values():  # the snapshot is done: the rest is streamed
        snapshot = read_changes(cdc.bootstrap, capture.topic(table), 2)
        assert [r.op for r in snapshot] == ["r", "r"]

    txid = "pg_current_xact_id()::text::bigint"
    txids = {
        "insert": cdc.query(f"{insert} RETURNING {txid}", (3, "carol", None, Decimal("99999999.99"), T3)),
        "update 1": cdc.query(f"UPDATE {table} SET tier = 'platinum' WHERE id = 1 RETURNING {txid}"),
        "update 2": cdc.query(f"UPDATE {table} SET balance = 12.34, updated_at = %s WHERE id = 1 "
                             f"RETURNING {txid}", (T4,)),
        "delete": cdc.query(f"DELETE FROM {table} WHERE id = 2 RETURNING {txid}"),
    }
    txids = {name: rows[0][0] for name, rows in txids.items()}
    ended_ms = int(time.time() * 1000)

    changelogs = {}
    for schemas, capture in captures.items():
        records = read_changes(cdc.bootstrap, capture.topic(table), 7)
        assert len(records) == 7, [(r.op, r.key_payload) for r in records]
        assert all(r.partition == 0 for r in records)
        # Debezium's own headers (extended.headers.enabled, on by default): which connector, task
        # and run wrote the record; nothing about the change itself.
        for r in records:
            headers = dict(r.headers)
            assert all(name.startswith("__debezium.context.") for name in headers), r.headers
            assert headers.get("__debezium.context.connectorLogicalName") == capture.topic_prefix.encode()
        check_changelog(records, schemas, table, capture.topic_prefix, txids, started_ms, ended_ms)
        check_samples(records, schemas)
        changelogs[schemas] = records

    # The same changes in both topics: only the schema, the connector's name and when each
    # connector handled a change differ.
    with_schema, without_schema = changelogs[True], changelogs[False]
    assert [r.key_payload for r in with_schema] == [r.key_payload for r in without_schema]
    for a, b in zip(with_schema[2:-1], without_schema[2:-1]):
        assert streamed_payload(a) == streamed_payload(b)
    assert with_schema[-1].raw_value is None and without_schema[-1].raw_value is None
