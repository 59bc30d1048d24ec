"""The lookup join's database access (service/database/) against a real PostgreSQL: what a
table's description says, how keys are checked, batched, matched back and cached, and how the
client rides out a server that goes away, a statement that times out and keys the database
refuses. Each test has a schema of its own (``pg_schema``); the restart test its own server."""
from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import pickle
import socket
import time
import uuid

import fastavro
import psycopg
import pytest
from psycopg import sql

from service.database import (
    CacheSettings,
    DatabaseError,
    LookupClient,
    TableInfo,
    describe_table,
    redact,
)

D = decimal.Decimal
UTC = dt.timezone.utc


@pytest.fixture
def db(postgres_url, pg_schema):
    """An autocommit connection whose search_path is this test's schema."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg_schema)))
        yield conn


def client_for(url: str, table: str, keys: tuple[str, ...], **kwargs) -> LookupClient:
    return LookupClient(url, None, describe_table(url, None, table), keys, **kwargs)


def customers(db, schema: str, rows=((1, "ann", "gold"), (2, "bob", None), (3, "cid", "gold"))) -> str:
    db.execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, tier text)")
    with db.cursor() as cur:
        cur.executemany("INSERT INTO customers VALUES (%s, %s, %s)", list(rows))
    return f"{schema}.customers"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# describing a table


def test_the_type_map_and_the_values_the_avro_encoder_takes(postgres_url, pg_schema, db):
    db.execute("CREATE TYPE mood AS ENUM ('happy', 'sad')")
    db.execute("CREATE DOMAIN price AS numeric(8,3) NOT NULL")
    db.execute("CREATE TYPE pair AS (a int, b int)")
    db.execute("""
        CREATE TABLE every (
            i2 smallint, i4 integer NOT NULL, i8 bigint, f4 real, f8 double precision, b boolean,
            t text, vc varchar(20), c char(4), nm name,
            n numeric(10,2), d date, ts timestamp(3), tz timestamptz, tm time, u uuid, ba bytea,
            j json, jb jsonb, e mood, p price,
            -- unsupported
            n_bare numeric, n_neg numeric(5,-2), ia integer[], iv interval, m money, pt point,
            r int4range, cp pair, ttz timetz)""")
    db.execute("ALTER TABLE every DROP COLUMN i8")  # a dropped column is not listed
    info = describe_table(postgres_url, None, f"{pg_schema}.every")
    by = {c.name: c for c in info.columns}
    assert [c.name for c in info.columns][:5] == ["i2", "i4", "f4", "f8", "b"]
    decimal_10_2 = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
    expected = {
        "i2": ("smallint", "int2", "int"), "i4": ("integer", "int4", "int"),
        "f4": ("real", "float4", "float"), "f8": ("double precision", "float8", "double"),
        "b": ("boolean", "bool", "boolean"), "t": ("text", "text", "string"),
        "vc": ("character varying(20)", "varchar", "string"), "c": ("character(4)", "bpchar", "string"),
        "nm": ("name", "name", "string"), "n": ("numeric(10,2)", "numeric", decimal_10_2),
        "d": ("date", "date", {"type": "int", "logicalType": "date"}),
        "ts": ("timestamp(3) without time zone", "timestamp", {"type": "long", "logicalType": "timestamp-micros"}),
        "tz": ("timestamp with time zone", "timestamptz", {"type": "long", "logicalType": "timestamp-micros"}),
        "tm": ("time without time zone", "time", {"type": "long", "logicalType": "time-micros"}),
        "u": ("uuid", "uuid", {"type": "string", "logicalType": "uuid"}), "ba": ("bytea", "bytea", "bytes"),
        "j": ("json", "json", "string"), "jb": ("jsonb", "jsonb", "string"),
        "e": (f"{pg_schema}.mood", f'"{pg_schema}"."mood"', "string"),  # qualified: not on the search_path
        "p": (f"{pg_schema}.price", "numeric", {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 3}),
    }
    for name, (pg_type, cast, avro) in expected.items():
        column = by[name]
        assert (column.pg_type, column.cast, column.avro_type, column.unsupported) == (pg_type, cast, avro, None), name
    assert not by["i4"].nullable and by["i2"].nullable
    assert not by["p"].nullable  # the domain's NOT NULL
    unsupported = {c.name: c.unsupported for c in info.columns if c.avro_type is None}
    assert set(unsupported) == {"n_bare", "n_neg", "ia", "iv", "m", "pt", "r", "cp", "ttz"}
    assert "declare it numeric(p,s)" in unsupported["n_bare"]
    assert "numeric(5,-2)" in unsupported["n_neg"]
    for name, shown in {"ia": "integer[]", "iv": "interval", "m": "money", "pt": "point", "r": "int4range",
                        "cp": "pair", "ttz": "time with time zone"}.items():
        assert shown in unsupported[name], (name, unsupported[name])
    assert TableInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info

    # The values of a row are what fastavro encodes for those Avro types.
    db.execute("""INSERT INTO every (i2, i4, f4, f8, b, t, vc, c, nm, n, d, ts, tz, tm, u, ba, j, jb, e, p)
        VALUES (-2, 4, 0.5, 1e300, true, 'tee', 'vee', 'ab', 'nm', 12.5, '2024-02-29',
                '2024-03-01 12:34:56.789', '2024-03-01 12:00:00+02', '23:59:59.5',
                'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '\\x00ff', '{"b": 1,  "a": 2}', '{"b": 1, "a": 2}',
                'sad', 1.25)""")
    row = LookupClient(postgres_url, None, info, ("i4",)).lookup([(4,)]).rows[(4,)][0]
    got = dict(zip((c.name for c in info.columns), row))
    assert got["n"] == D("12.50") and isinstance(got["n"], D)
    assert got["ts"] == dt.datetime(2024, 3, 1, 12, 34, 56, 789000, tzinfo=UTC)  # naive taken as UTC
    assert got["tz"] == dt.datetime(2024, 3, 1, 10, tzinfo=UTC) and got["tz"].utcoffset() == dt.timedelta(0)
    assert got["u"] == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert got["j"] == '{"b": 1,  "a": 2}' and json.loads(got["jb"]) == {"a": 2, "b": 1}
    assert (got["ba"], got["d"], got["tm"], got["c"], got["e"]) == (
        b"\x00\xff", dt.date(2024, 2, 29), dt.time(23, 59, 59, 500000), "ab  ", "sad")
    supported = [(c, v) for c, v in zip(info.columns, row) if c.avro_type is not None]
    schema = fastavro.parse_schema({"type": "record", "name": "r", "fields": [
        {"name": c.name, "type": ["null", c.avro_type] if c.nullable else c.avro_type} for c, _ in supported]})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, schema, {c.name: v for c, v in supported})
    out.seek(0)
    back = fastavro.schemaless_reader(out, schema)
    assert back["tz"] == got["tz"] and back["n"] == D("12.50") and back["u"] == uuid.UUID(got["u"])


def test_primary_and_unique_keys(postgres_url, pg_schema, db):
    db.execute("""CREATE TABLE keyed (a int, b text, c int, d int, e int, f int,
                    PRIMARY KEY (b, a), UNIQUE (c))""")
    db.execute("CREATE UNIQUE INDEX keyed_d_incl ON keyed (d) INCLUDE (e)")  # key d only
    db.execute("CREATE UNIQUE INDEX keyed_e_partial ON keyed (e) WHERE e > 0")  # partial: no key
    db.execute("CREATE UNIQUE INDEX keyed_f_expr ON keyed (lower(b))")  # expression: no key
    db.execute("CREATE UNIQUE INDEX keyed_c_again ON keyed (c)")  # the same columns once
    db.execute("CREATE INDEX keyed_f ON keyed (f)")  # not unique
    info = describe_table(postgres_url, None, f"{pg_schema}.keyed")
    assert info.primary_key == ("b", "a")
    assert info.unique_keys == (("b", "a"), ("c",), ("d",))

    db.execute("CREATE TABLE loose (x int)")
    db.execute("CREATE VIEW loose_view AS SELECT x, x * 2 AS y FROM loose")
    for name in ("loose", "loose_view"):
        info = describe_table(postgres_url, None, f"{pg_schema}.{name}")
        assert (info.primary_key, info.unique_keys) == (None, ())
    assert [c.name for c in info.columns] == ["x", "y"] and all(c.nullable for c in info.columns)


def test_schema_qualified_quoted_and_search_path_names(postgres_url, pg_schema, db):
    db.execute('CREATE SCHEMA "Odd Schema"')
    try:
        db.execute('CREATE TABLE "Odd Schema"."Cust.Table" ("Id" int PRIMARY KEY, "Full Name" text)')
        db.execute("""INSERT INTO "Odd Schema"."Cust.Table" VALUES (7, 'seven')""")
        info = describe_table(postgres_url, None, ' "Odd Schema" . "Cust.Table" ')
        assert [c.name for c in info.columns] == ["Id", "Full Name"] and info.primary_key == ("Id",)
        client = LookupClient(postgres_url, None, info, ("Id",))
        assert client.lookup([(7,)]).rows == {(7,): ((7, "seven"),)}
        with pytest.raises(DatabaseError, match="no table or view"):
            describe_table(postgres_url, None, '"Odd Schema"."cust.table"')  # quoted: case kept
        with pytest.raises(DatabaseError, match="no table or view"):
            describe_table(postgres_url, None, '"Odd Schema".Cust')  # unquoted: folded to lowercase
        with pytest.raises(DatabaseError, match="expected table or schema.table"):
            describe_table(postgres_url, None, "db.schema.table")
    finally:
        db.execute('DROP SCHEMA "Odd Schema" CASCADE')

    customers(db, pg_schema)
    # Unquoted names fold to lowercase; an unqualified one goes through the URL's search_path, and
    # the URL's options survive the client's own (statement_timeout, TimeZone).
    url = f"{postgres_url}?options=-csearch_path%3D{pg_schema}"
    info = describe_table(url, None, "CUSTOMERS")
    client = LookupClient(url, None, info, ("id",), query_timeout_s=5)
    assert client.lookup([(1,)]).rows[(1,)] == ((1, "ann", "gold"),)
    settings = client._conn.execute("SELECT current_setting('statement_timeout'), current_setting('TimeZone'),"
                                    " current_setting('application_name')").fetchone()
    assert settings == ("5s", "UTC", "changejoin-lookup")
    client.close()


def test_a_missing_table_and_a_server_that_does_not_answer(postgres_url, pg_schema, db):
    with pytest.raises(DatabaseError, match=r"no table or view 'nope' \(search_path: .*\)") as caught:
        describe_table(postgres_url, None, "nope")
    assert str(caught.value).startswith(redact(postgres_url))
    db.execute("CREATE SEQUENCE seq")
    with pytest.raises(DatabaseError, match="is not a table or view"):
        describe_table(postgres_url, None, f"{pg_schema}.seq")

    url = f"postgresql://app:s3cr%40t@127.0.0.1:{closed_port()}/shop?sslmode=disable&password=s3cr%40t"
    assert redact(url) == f"postgresql://app@127.0.0.1:{url.split(':')[3].split('/')[0]}/shop?sslmode=disable"
    with pytest.raises(DatabaseError) as caught:
        describe_table(url, "other-secret", "customers", connect_timeout_s=2)
    message = str(caught.value)
    assert message.startswith(f"cannot connect to {redact(url)}: ") and "refused" in message
    assert "\n" not in message and "s3cr" not in message and "other-secret" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__

    # A lookup gives up after max_retries (8): one line, the attempts, the last error, no password.
    # Its waits double from 0.5 s up to 10 s, jittered by +-20%: at least 36.4 s in all, so that
    # a 30 s outage is ridden out.
    info = describe_table(postgres_url, None, customers(db, pg_schema))
    slept = []
    client = LookupClient(url, "other-secret", info, ("id",), sleep=slept.append)
    with pytest.raises(DatabaseError) as caught:
        client.lookup([(1,)])
    message = str(caught.value)
    assert message.startswith(f"lookup in {redact(url)} ({pg_schema}.customers): gave up after 9 attempts; "
                              f"last error (connection): OperationalError: ")
    assert "refused" in message and caught.value.kind == "connection"
    assert "\n" not in message and "s3cr" not in message and "other-secret" not in message
    nominal = [0.5, 1, 2, 4, 8, 10, 10, 10]
    assert len(slept) == 8 and all(0.8 * n <= s <= 1.2 * n for s, n in zip(slept, nominal)), slept
    assert sum(slept) >= 0.8 * sum(nominal) == pytest.approx(36.4)
    stats = client.take_stats()
    assert (stats.retries, stats.errors, stats.queries) == (8, {"connection": 9}, 0)


# --------------------------------------------------------------------------------------------
# lookups


def test_single_key_several_rows_null_and_missing_keys(postgres_url, pg_schema, db):
    db.execute("CREATE TABLE orders (customer int, item text, qty int)")
    db.execute("INSERT INTO orders VALUES (1, 'tea', 2), (1, 'cake', 1), (2, 'jam', 5), (NULL, 'lost', 0)")
    client = client_for(postgres_url, f"{pg_schema}.orders", ("customer",))
    result = client.lookup(iter([(1,), (2,), (3,), (None,), (1,)]))
    assert sorted(result.rows[(1,)]) == [(1, "cake", 1), (1, "tea", 2)]  # not unique: both rows
    assert result.rows[(2,)] == ((2, "jam", 5),)
    assert result.rows[(3,)] == () and result.rows[(None,)] == ()  # NULL never matches (not 'lost')
    assert result.invalid == {} and len(result.rows) == 4
    stats = client.take_stats()
    assert (stats.queries, stats.keys, stats.rows, len(stats.query_seconds)) == (1, 3, 3, 1)
    assert client.lookup([]).rows == {} and client.take_stats().queries == 0
    assert client.lookup([(None,)]).rows == {(None,): ()} and client.take_stats().queries == 0

    clone = pickle.loads(pickle.dumps(client))  # shipped to a worker: no connection, no cache
    assert clone._conn is None and clone.lookup([(2,)]).rows == {(2,): ((2, "jam", 5),)}
    clone.close()
    client.close()


def test_composite_key(postgres_url, pg_schema, db):
    db.execute("CREATE TABLE prices (shop int, sku text, day date, price numeric(6,2), PRIMARY KEY (shop, sku, day))")
    db.execute("""INSERT INTO prices VALUES (1, 'a', '2024-01-01', 1.10), (1, 'a', '2024-01-02', 1.20),
                  (1, 'b', '2024-01-01', 2.00), (2, 'a', '2024-01-01', 3.00)""")
    client = client_for(postgres_url, f"{pg_schema}.prices", ("shop", "sku"), batch_size=2)
    result = client.lookup([(1, "a"), (1, "b"), (2, "a"), (2, "b"), (None, "a"), (1, None), (1, 5)])
    assert sorted(result.rows[(1, "a")]) == [(1, "a", dt.date(2024, 1, 1), D("1.10")),
                                             (1, "a", dt.date(2024, 1, 2), D("1.20"))]
    assert result.rows[(1, "b")] == ((1, "b", dt.date(2024, 1, 1), D("2.00")),)
    assert result.rows[(2, "a")] == ((2, "a", dt.date(2024, 1, 1), D("3.00")),)
    assert result.rows[(2, "b")] == () == result.rows[(None, "a")] == result.rows[(1, None)]
    assert result.invalid == {(1, 5): "column sku (text): 5 is not a string"}
    stats = client.take_stats()
    assert (stats.queries, stats.keys, stats.rows) == (2, 4, 4)

    three = client_for(postgres_url, f"{pg_schema}.prices", ("shop", "sku", "day"))
    assert three.lookup([(1, "a", dt.date(2024, 1, 2))]).rows == {
        (1, "a", dt.date(2024, 1, 2)): ((1, "a", dt.date(2024, 1, 2), D("1.20")),)}
    with pytest.raises(ValueError, match="tuple of 2"):
        client.lookup([(1,)])
    with pytest.raises(ValueError, match="no column 'nope'"):
        LookupClient(postgres_url, None, client.table, ("nope",))


def test_keys_match_rows_by_value_not_by_spelling(postgres_url, pg_schema, db):
    db.execute("""CREATE TABLE things (n numeric(10,2), u uuid, c char(5), f real, ts timestamp, tz timestamptz,
                                       b bytea, ok boolean, tag text)""")
    db.execute("""INSERT INTO things VALUES
        (1.5, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'ab', 0.1, '2024-01-01 10:00', '2024-01-01 10:00+00',
         '\\xff', true, 'one'),
        (2, NULL, NULL, 'NaN', NULL, NULL, NULL, false, 'two')""")
    table = f"{pg_schema}.things"

    def tags(column, keys):
        result = client_for(postgres_url, table, (column,)).lookup(keys)
        assert result.invalid == {}, result.invalid
        return {k: tuple(r[-1] for r in rows) for k, rows in result.rows.items()}

    assert tags("n", [(D("1.50"),), (D("1.5"),), (2,), (D("2.000"),), (D("1.55"),)]) == {
        (D("1.5"),): ("one",), (2,): ("two",), (D("1.55"),): ()}  # 1.50 == 1.5, 2 == 2.000: one key each
    upper = "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11"
    assert tags("u", [(upper,), ("{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",), (uuid.UUID(upper),)]) == {
        (upper,): ("one",), ("{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",): ("one",), (uuid.UUID(upper),): ("one",)}
    assert tags("c", [("ab",), ("ab   ",), ("ab ",), (" ab",)]) == {
        ("ab",): ("one",), ("ab   ",): ("one",), ("ab ",): ("one",), (" ab",): ()}  # char(n) ignores padding
    nan = float("nan")
    assert tags("f", [(0.1,), (nan,), (0.10000000149011612,)]) == {
        (0.1,): ("one",), (0.10000000149011612,): ("one",), (nan,): ("two",)}  # real: single precision
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert tags("ts", [(dt.datetime(2024, 1, 1, 12, tzinfo=plus_two),), (dt.datetime(2024, 1, 1, 10),),
                       (dt.datetime(2024, 1, 1, 10, tzinfo=UTC),)]) == {  # the last equals the first
        (dt.datetime(2024, 1, 1, 12, tzinfo=plus_two),): ("one",), (dt.datetime(2024, 1, 1, 10),): ("one",)}
    assert tags("tz", [(dt.datetime(2024, 1, 1, 12, tzinfo=plus_two),)]) == {
        (dt.datetime(2024, 1, 1, 10, tzinfo=UTC),): ("one",)}
    assert tags("b", [(b"\xff",), (b"\xfe",)]) == {(b"\xff",): ("one",), (b"\xfe",): ()}
    assert tags("ok", [(True,), (False,)]) == {(True,): ("one",), (False,): ("two",)}


def test_citext_keys_match_case_insensitively(postgres_url, pg_schema, db):
    try:
        db.execute(sql.SQL("CREATE EXTENSION citext SCHEMA {}").format(sql.Identifier(pg_schema)))
    except psycopg.Error as exc:
        pytest.skip(f"no citext here: {exc}")
    db.execute("CREATE TABLE users (email citext, id int)")
    db.execute("INSERT INTO users VALUES ('Ann@Example.org', 1)")
    # citext's = must be on the search_path (as in any query), or text's case-sensitive = is used.
    url = f"{postgres_url}?options=-csearch_path%3D{pg_schema}"
    client = client_for(url, "users", ("email",))
    assert client.table.columns[0].avro_type == "string"
    result = client.lookup([("ann@example.ORG",), ("bob@example.org",)])
    assert result.rows == {("ann@example.ORG",): (("Ann@Example.org", 1),), ("bob@example.org",): ()}


def test_chunks_of_batch_size_in_one_snapshot(postgres_url, pg_schema, db):
    table = customers(db, pg_schema, [(i, f"c{i}", None) for i in range(1, 6)])
    client = client_for(postgres_url, table, ("id",), batch_size=2)
    result = client.lookup([(i,) for i in range(1, 6)])
    assert [result.rows[(i,)][0][1] for i in range(1, 6)] == ["c1", "c2", "c3", "c4", "c5"]
    stats = client.take_stats()
    assert (stats.queries, stats.keys, stats.rows, len(stats.query_seconds)) == (3, 5, 5, 3)

    # A change committed between two chunks is not seen by the later chunks: one snapshot.
    execute = client._execute
    chunks_run = []

    def execute_then_change(conn, chunk, sent):
        rows = execute(conn, chunk, sent)
        chunks_run.append(conn.execute("SELECT now(), statement_timestamp(), txid_current_if_assigned(), "
                                       "current_setting('transaction_isolation'), "
                                       "current_setting('transaction_read_only')").fetchone())
        if len(chunks_run) == 1:
            db.execute("UPDATE customers SET name = upper(name)")  # another session, committed
        return rows

    client._execute = execute_then_change
    result = client.lookup([(i,) for i in range(1, 6)])
    assert [result.rows[(i,)][0][1] for i in range(1, 6)] == ["c1", "c2", "c3", "c4", "c5"]
    assert len(chunks_run) == 3
    assert len({probe[0] for probe in chunks_run}) == 1  # now(): the transaction's start, one for all
    assert len({probe[1] for probe in chunks_run}) == 3  # statement_timestamp(): three statements
    assert {probe[2:] for probe in chunks_run} == {(None, "repeatable read", "on")}  # no xid: read only
    client._execute = execute
    assert client.lookup([(1,)]).rows[(1,)][0][1] == "C1"  # the next call: a new snapshot


def test_keys_the_columns_cannot_hold_are_invalid_and_never_sent(postgres_url, pg_schema, db):
    db.execute("""CREATE TABLE typed (i int, s smallint, n numeric(4,1), t text, v varchar(3), u uuid, d date,
                                      ts timestamptz, tm time, k text)""")
    db.execute("""INSERT INTO typed VALUES (1, 1, 1.0, 'x', 'abc', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11',
                                            '2024-01-01', '2024-01-01Z', '10:00', 'row1')""")
    table = f"{pg_schema}.typed"
    cases = {
        "i": ([(1,)], {(2**40,): "column i (integer): 1099511627776 is out of range",
                       ("abc",): "column i (integer): 'abc' is not an integer",
                       (2.5,): "column i (integer): 2.5 is not an integer"}),
        "s": ([(1,)], {(40000,): "column s (smallint): 40000 is out of range"}),
        "n": ([(D("1.0"),)], {(D("NaN"),): "column n (numeric(4,1)): Decimal('NaN') is not a finite number",
                              (D("Infinity"),): None, (1.5,): "column n (numeric(4,1)): 1.5 is not a decimal number",
                              (D("1E+131072"),): "column n (numeric(4,1)): Decimal('1E+131072') is out of range"}),
        "t": ([("x",)], {("a\x00b",): "column t (text): 'a\\x00b' contains a NUL character",
                         ("\ud800",): "column t (text): '\\ud800' is not valid Unicode text"}),
        "u": ([("A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",)],
              {("not-a-uuid",): "column u (uuid): 'not-a-uuid' is not a UUID", (42,): None}),
        "d": ([(dt.date(2024, 1, 1),)],
              {(dt.datetime(2024, 1, 1),): "column d (date): datetime.datetime(2024, 1, 1, 0, 0) is not a date",
               ("2024-01-01",): None}),
        "ts": ([(dt.datetime(2024, 1, 1, tzinfo=UTC),)], {(dt.date(2024, 1, 1),): None}),
        "tm": ([(dt.time(10),)], {(dt.time(10, tzinfo=UTC),): None}),
    }
    for column, (good, bad) in cases.items():
        client = client_for(postgres_url, table, (column,))
        result = client.lookup(good + list(bad))
        assert set(result.invalid) == set(bad), column
        for key, reason in bad.items():
            assert result.invalid[key].startswith(f"column {column} ("), result.invalid[key]
            if reason is not None:
                assert result.invalid[key] == reason
        assert {k: [r[-1] for r in rows] for k, rows in result.rows.items()} == {good[0]: ["row1"]}, column
        stats = client.take_stats()
        assert (stats.queries, stats.keys) == (1, 1), column  # only the good key went out
    client = client_for(postgres_url, table, ("i",))
    assert client.lookup([(True,)]).invalid == {(True,): "column i (integer): True is not an integer"}
    reason = client.lookup([("x" * 500,)]).invalid[("x" * 500,)]  # a long value is shown cut
    assert reason == f"column i (integer): {repr('x' * 500)[:57]}... is not an integer"
    # A varchar(3) key is not cut to 3 characters (the cast is to text, not varchar(3)).
    client = client_for(postgres_url, table, ("v",))
    found = client.lookup([("abcd",), ("abc",)]).rows
    assert {k: len(rows) for k, rows in found.items()} == {("abcd",): 0, ("abc",): 1}
    db.execute("CREATE TABLE arrays (a int[], j json)")
    for column in ("a", "j"):
        with pytest.raises(ValueError, match=f"column {column} .* cannot be a lookup key"):
            client_for(postgres_url, f"{pg_schema}.arrays", (column,))


def test_a_chunk_the_database_refuses_is_bisected_to_the_bad_keys(postgres_url, pg_schema, db):
    # An enum label Python cannot know: the database refuses the chunk, bisection finds the key.
    db.execute("CREATE TYPE mood AS ENUM ('happy', 'sad', 'ok')")
    db.execute("CREATE TABLE feelings (m mood, who text)")
    db.execute("INSERT INTO feelings VALUES ('happy', 'ann'), ('sad', 'bob'), ('ok', 'cid')")
    client = client_for(postgres_url, f"{pg_schema}.feelings", ("m",), batch_size=4)
    keys = [("happy",), ("meh",), ("sad",), ("ok",), ("angry",), ("nope",)]
    result = client.lookup(keys)
    mood = f"{pg_schema}.mood"
    assert client.table.column("m").pg_type == mood
    assert result.invalid == {
        (label,): f'column m ({mood}): the database refused {label!r}: invalid input value for enum {mood}: "{label}"'
        for label in ("meh", "angry", "nope")}
    assert result.rows == {("happy",): (("happy", "ann"),), ("sad",): (("sad", "bob"),), ("ok",): (("ok", "cid"),)}
    stats = client.take_stats()
    assert stats.errors["data"] >= 4 and stats.retries == 0

    # With the Python checks off, out-of-range ints reach the database: same outcome, and the other
    # chunks of the call keep their snapshot (savepoints).
    customers(db, pg_schema, [(i, f"c{i}", None) for i in range(1, 8)])
    client = client_for(postgres_url, f"{pg_schema}.customers", ("id",), batch_size=3)
    client._kinds = (type(client._kinds[0])(lambda v: (v, v)),)
    result = client.lookup([(1,), (2**40,), (3,), (4,), (5,), (-(2**35),), (7,)])
    assert set(result.invalid) == {(2**40,), (-(2**35),)}
    assert result.invalid[(2**40,)] == "column id (integer): the database refused 1099511627776: integer out of range"
    assert {k[0]: v[0][1] for k, v in result.rows.items()} == {1: "c1", 3: "c3", 4: "c4", 5: "c5", 7: "c7"}


# --------------------------------------------------------------------------------------------
# cache


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_partial_cache(postgres_url, pg_schema, db):
    table = customers(db, pg_schema)
    clock = FakeClock()
    client = client_for(postgres_url, table, ("id",), clock=clock,
                        cache=CacheSettings(max_rows=2, expire_after_write_s=10))

    def look(*ids):
        rows = client.lookup([(i,) for i in ids]).rows
        stats = client.take_stats()
        return ({i: rows[(i,)][0][1] if rows[(i,)] else None for i in ids},
                (stats.queries, stats.keys, stats.cache_hits, stats.cache_misses, stats.cache_evictions))

    assert look(1, 2) == ({1: "ann", 2: "bob"}, (1, 2, 0, 2, 0))
    db.execute("UPDATE customers SET name = 'ANN' WHERE id = 1")
    clock.now += 5
    assert look(1) == ({1: "ann"}, (0, 0, 1, 0, 0))  # from the cache: stale, not queried
    assert look(3) == ({3: "cid"}, (1, 1, 0, 1, 1))  # 2 was least recently used: evicted
    assert look(2, 3) == ({2: "bob", 3: "cid"}, (1, 1, 1, 1, 1))  # 2 again (1 goes), 3 cached
    clock.now += 5  # 3 was written 5 s ago, 2 just now
    assert look(3, 2) == ({3: "cid", 2: "bob"}, (0, 0, 2, 0, 0))
    clock.now += 5  # 3 now 10 s old: expired after write
    assert look(3) == ({3: "cid"}, (1, 1, 0, 1, 0))
    assert look(99) == ({99: None}, (1, 1, 0, 1, 1))  # a missing key is cached by default
    assert look(99) == ({99: None}, (0, 0, 1, 0, 0))
    assert look(1) == ({1: "ANN"}, (1, 1, 0, 1, 1))  # re-read after its eviction: the new name

    no_missing = client_for(postgres_url, table, ("id",), clock=clock, cache=CacheSettings(cache_missing_key=False))
    for _ in range(2):
        no_missing.lookup([(99,), (2,)])
    stats = no_missing.take_stats()
    assert (stats.queries, stats.keys, stats.cache_hits, stats.cache_misses) == (2, 3, 1, 3)

    # Expire-after-access alone: a key read more often than its TTL is never re-read (stale forever).
    hot = client_for(postgres_url, table, ("id",), clock=clock, cache=CacheSettings(expire_after_access_s=6))
    assert hot.lookup([(2,)]).rows[(2,)][0][1] == "bob"
    db.execute("UPDATE customers SET name = 'BOB' WHERE id = 2")
    for _ in range(5):
        clock.now += 5
        assert hot.lookup([(2,)]).rows[(2,)][0][1] == "bob"
    clock.now += 6
    assert hot.lookup([(2,)]).rows[(2,)][0][1] == "BOB"
    assert hot.take_stats().queries == 2

    uncached = client_for(postgres_url, table, ("id",))
    uncached.lookup([(1,)])
    uncached.lookup([(1,)])
    stats = uncached.take_stats()
    assert (stats.queries, stats.cache_hits, stats.cache_misses) == (2, 0, 0)


# --------------------------------------------------------------------------------------------
# retries


def test_a_server_that_goes_away_and_comes_back_then_stays_away(postgres_server):
    url = postgres_server.url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE customers (id int PRIMARY KEY, name text)")
        conn.execute("INSERT INTO customers VALUES (1, 'ann'), (2, 'bob')")
    info = describe_table(url, None, "customers")
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        if len(slept) == 2:
            postgres_server.start()

    client = LookupClient(url, None, info, ("id",), sleep=sleep)
    assert client.lookup([(1,)]).rows == {(1,): ((1, "ann"),)}
    client.take_stats()
    postgres_server.stop()  # the client's connection is cut; reconnecting is refused until the restart
    assert client.lookup([(1,), (2,)]).rows == {(1,): ((1, "ann"),), (2,): ((2, "bob"),)}
    stats = client.take_stats()
    assert (stats.retries, stats.errors) == (2, {"connection": 2})
    assert 0.4 <= slept[0] <= 0.6 and 0.8 <= slept[1] <= 1.2

    # It stays away: a one-line error after max_retries, without the password of the URL.
    postgres_server.kill()
    secret_url = url.replace("postgres@", "postgres:Pa55w0rd@")
    slept.clear()
    quitter = LookupClient(secret_url, "Pa55w0rd", info, ("id",), max_retries=3, sleep=slept.append)
    with pytest.raises(DatabaseError) as caught:
        quitter.lookup([(1,)])
    message = str(caught.value)
    assert message.startswith(f"lookup in {url} (customers): gave up after 4 attempts; last error (connection): ")
    assert "Pa55w0rd" not in message and "\n" not in message
    assert len(slept) == 3 and 1.6 <= slept[2] <= 2.4
    assert quitter.take_stats().errors == {"connection": 4}


def test_a_statement_timeout_is_retried_then_given_up(postgres_url, pg_schema, db):
    table = customers(db, pg_schema)
    holder = psycopg.connect(postgres_url)  # a transaction holding an exclusive lock on the table

    def lock():
        holder.execute(sql.SQL("LOCK TABLE {}.customers IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(pg_schema)))

    try:
        slept = []

        def sleep(seconds):
            slept.append(seconds)
            holder.rollback()  # the lock goes: the retry gets through

        client = client_for(postgres_url, table, ("id",), query_timeout_s=0.5, sleep=sleep)
        lock()
        started = time.monotonic()
        assert client.lookup([(1,)]).rows == {(1,): ((1, "ann", "gold"),)}
        assert 0.4 < time.monotonic() - started < 5
        stats = client.take_stats()
        assert (stats.retries, stats.errors, len(slept)) == (1, {"timeout": 1}, 1)

        lock()
        quitter = client_for(postgres_url, table, ("id",), query_timeout_s=0.5, max_retries=1, sleep=lambda s: None)
        expected = r"gave up after 2 attempts; last error \(timeout\): QueryCanceled: canceling statement due to"
        with pytest.raises(DatabaseError, match=expected) as caught:
            quitter.lookup([(1,)])
        assert caught.value.kind == "timeout"
        stats = quitter.take_stats()
        assert (stats.retries, stats.errors) == (1, {"timeout": 2})
    finally:
        holder.close()


# --------------------------------------------------------------------------------------------
# rows the join cannot take, and a table that changes while the service runs


def test_a_row_value_python_cannot_load_or_the_output_cannot_hold_is_the_rows_fault_not_the_keys(
        postgres_url, pg_schema, db):
    """'infinity' and BC dates, years past 9999, time 24:00 (psycopg cannot load them) and a
    numeric NaN (the output's Avro decimal cannot hold it) make their key's rows unjoinable,
    reported with the column and the value; the other keys of the same statement are answered, and
    nothing is bisected (no data error ever reaches the client)."""
    db.execute("""CREATE TABLE events (id int PRIMARY KEY, d date, ts timestamp, tz timestamptz, tm time,
                                       n numeric(10,2), label text NOT NULL)""")
    db.execute("""INSERT INTO events VALUES
        (1, '2024-01-01', '2024-01-01 10:00', '2024-01-01 10:00Z', '10:00', 1.5, 'good'),
        (2, 'infinity', NULL, NULL, NULL, NULL, 'inf date'),
        (3, NULL, '0044-03-15 BC', NULL, NULL, NULL, 'bc'),
        (4, NULL, NULL, '-infinity', NULL, NULL, 'minus inf'),
        (5, NULL, NULL, NULL, '24:00', NULL, 'midnight'),
        (6, '10000-01-01', NULL, NULL, NULL, NULL, 'far'),
        (7, NULL, NULL, NULL, NULL, 'NaN', 'nan')""")
    table = f"{pg_schema}.events"
    client = client_for(postgres_url, table, ("id",), cache=CacheSettings())
    result = client.lookup([(i,) for i in range(1, 9)])
    assert set(result.rows) == {(1,), (8,)} and result.rows[(8,)] == () and result.invalid == {}
    assert result.rows[(1,)][0][-1] == "good"
    at = f"table {table}, column"
    assert result.bad_rows[(2,)].startswith(f"{at} d (date): 'infinity' cannot be read as a Python value (date too large")
    assert result.bad_rows[(3,)].startswith(f"{at} ts (timestamp without time zone): '0044-03-15 00:00:00 BC' cannot")
    assert result.bad_rows[(4,)].startswith(f"{at} tz (timestamp with time zone): '-infinity' cannot")
    assert result.bad_rows[(5,)].startswith(f"{at} tm (time without time zone): '24:00:00' cannot")
    assert result.bad_rows[(6,)].startswith(f"{at} d (date): '10000-01-01' cannot")
    assert result.bad_rows[(7,)] == (f"{at} n (numeric(10,2)): Decimal('NaN') is not a number the output's Avro "
                                     "decimal(10,2) can hold")
    stats = client.take_stats()
    assert (stats.queries, stats.errors) == (1, {})  # one statement, no bisection

    # Only the columns the join reads matter; a fixed row is read again (a bad one is never cached).
    narrow = LookupClient(postgres_url, None, client.table, ("id",), columns=("id", "label"))
    assert narrow.lookup([(7,)]).rows == {(7,): ((7, "nan"),)}
    db.execute("UPDATE events SET n = 2 WHERE id = 7")
    assert client.lookup([(7,), (1,)]).rows[(7,)][0][5] == D("2.00")
    assert client.take_stats().cache_hits == 1  # 1 came from the cache, 7 did not

    # A NOT NULL dropped while the service runs: a NULL the output's type has no room for.
    db.execute("ALTER TABLE events ALTER COLUMN label DROP NOT NULL")
    db.execute("INSERT INTO events (id) VALUES (9)")
    assert client.lookup([(9,)]).bad_rows == {(9,): f"{at} label (text): NULL, but the column was NOT NULL when the "
                                                     "join was planned (restart the service to take it as nullable)"}


def test_columns_the_join_does_not_read_may_change_and_a_read_column_stops_it_with_one_line(
        postgres_url, pg_schema, db):
    """The client reads only the columns the join uses: dropping, adding (NOT NULL) or retyping
    another column changes nothing. A read column retyped to a type of the same values is taken;
    retyped to other values, or dropped, it stops the lookup with one line saying what changed and
    what to do."""
    db.execute("CREATE TABLE customers (id int PRIMARY KEY, name varchar(20) NOT NULL, legacy text, tier text)")
    db.execute("INSERT INTO customers VALUES (1, 'ann', 'x', 'gold'), (2, 'bob', 'y', NULL)")
    info = describe_table(postgres_url, None, f"{pg_schema}.customers")
    client = LookupClient(postgres_url, None, info, ("id",), columns=("id", "name"))

    def look():
        return client.lookup([(1,), (2,)]).rows

    for _ in range(7):  # prepared on the server from the sixth run on
        assert look() == {(1,): ((1, "ann"),), (2,): ((2, "bob"),)}
    db.execute("ALTER TABLE customers DROP COLUMN legacy")
    db.execute("ALTER TABLE customers ADD COLUMN region text NOT NULL DEFAULT 'eu'")
    db.execute("ALTER TABLE customers ALTER COLUMN tier TYPE varchar(5)")
    assert look() == {(1,): ((1, "ann"),), (2,): ((2, "bob"),)}
    assert client.take_stats().retries == 0

    db.execute("ALTER TABLE customers ALTER COLUMN name TYPE varchar(50)")  # the same values: strings
    assert look() == {(1,): ((1, "ann"),), (2,): ((2, "bob"),)}
    db.execute("ALTER TABLE customers ALTER COLUMN name TYPE int USING length(name)")
    with pytest.raises(DatabaseError) as caught:
        look()
    message = str(caught.value)
    assert caught.value.kind == "table" and "\n" not in message
    assert message == (f"lookup in {redact(postgres_url)} ({pg_schema}.customers): column name changed type from "
                       "character varying(20) to integer while the service ran; the join reads it as Avro string, "
                       "which integer values are not: restart the service to plan the join with the new type (a "
                       "checkpoint whose stored rows cannot take it is refused, naming the column), or restore the "
                       "column's type")

    db.execute("ALTER TABLE customers DROP COLUMN name")
    with pytest.raises(DatabaseError) as caught:
        look()
    assert caught.value.kind == "table"
    assert str(caught.value) == (
        f"lookup in {redact(postgres_url)} ({pg_schema}.customers) failed: UndefinedColumn: column \"name\" does "
        "not exist (the join reads columns id, name: one was dropped or renamed while the service ran, or the "
        "table was; restore it, or change JOIN_SQL / RIGHT_LOOKUP_TABLE and restart)")


def test_a_statement_prepared_before_a_column_changed_type_is_planned_anew(postgres_url, pg_schema, db):
    """psycopg prepares the statement on the server after five runs; PostgreSQL then refuses it
    once a column it returns changed type ("cached plan must not change result type"). The
    connection holding it is replaced and the lookup redone, once, instead of failing every retry
    on that connection."""
    db.execute("CREATE TABLE customers (id int PRIMARY KEY, name varchar(20) NOT NULL)")
    db.execute("INSERT INTO customers VALUES (1, 'ann')")
    client = client_for(postgres_url, f"{pg_schema}.customers", ("id",))
    for _ in range(7):
        assert client.lookup([(1,)]).rows == {(1,): ((1, "ann"),)}
    client.take_stats()
    db.execute("ALTER TABLE customers ALTER COLUMN name TYPE varchar(50)")  # the same values: strings
    for _ in range(3):
        assert client.lookup([(1,)]).rows == {(1,): ((1, "ann"),)}
    stats = client.take_stats()
    assert (stats.retries, stats.errors) == (1, {"query": 1})  # the stale prepared statement, once
