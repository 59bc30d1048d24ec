"""Flink 2.3's JDBC lookup join over PostgreSQL, the peer of changejoin's lookup join in
tests/integration/test_lookup_flink_differential.py: INNER and LEFT in one job, written to Kafka.

Runs in Flink's own virtualenv (``.cache/flink-venv``, bench/harness/peers.py), from the
repository's root, with the ``flink-peer`` jars (Kafka SQL connector, Avro format, JDBC connector
and PostgreSQL's driver; ``python -m devkit.jars classpath flink-peer``):

    python -m bench.flink_lookup_job --bootstrap HOST:PORT --orders TOPIC \\
        --url postgresql://USER[:PASSWORD]@HOST:PORT/DB --table SCHEMA.products --out TOPIC \\
        --jars A.jar,B.jar

The orders are an append-only topic of plain Avro bodies (``schemas/orders.avsc``, no registry,
as flink_job.py reads them), bounded at the topic's end offsets when the job starts
('scan.bounded.mode' = 'latest-offset'), with ``proc_time AS PROCTIME()``. The table is
``products(product text primary key, name text, price numeric(10,2))``, read by Flink's 'jdbc'
connector (one ``SELECT ... WHERE product = ?`` per key), by default through its partial lookup
cache, missing keys cached too (``--cache none``: every row asks the table). The table is static
while the job runs, so the cache changes no row, only the time (about half of the job's). The job is

    SELECT o.order_id, o.product, o.quantity, p.name, p.price FROM orders AS o
    [LEFT] JOIN products FOR SYSTEM_TIME AS OF o.proc_time AS p ON o.product = p.product

both joins in one streaming job (a UNION ALL tagged with the join), local mini-cluster,
parallelism 1. The topic ``--out`` (made beforehand: the test broker creates no topic by itself)
gets one JSON message per output row, ``{"join_kind": "inner" | "left", "order_id": ..., "product":
..., "quantity": ..., "name": ..., "price": ...}``, the DECIMAL a plain JSON number with its scale
(read it with ``parse_float=Decimal``), NULL as null. (Flink's Kafka sink, not ``collect()``: the
rows coming back one by one through Py4J took longer than the join.) Prints one JSON line per
event (``start``, ``end``) on stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

QUERY = ("SELECT '{tag}' AS join_kind, o.order_id, o.product, o.quantity, p.name, p.price FROM orders AS o "
         "{join} products FOR SYSTEM_TIME AS OF o.proc_time AS p ON o.product = p.product")
JOINS = {"inner": "JOIN", "left": "LEFT JOIN"}


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def jdbc(url: str) -> tuple[str, str, str]:
    """``postgresql://user[:password]@host[:port]/db[?params]`` -> (JDBC URL, user, password)."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres"):
        raise SystemExit(f"--url: not a postgresql:// URL: {parts.scheme}://...")
    host = parts.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    query = f"?{parts.query}" if parts.query else ""
    return (f"jdbc:postgresql://{host}{port}{parts.path or '/'}{query}",
            unquote(parts.username or ""), unquote(parts.password or ""))


def sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--orders", required=True, help="the orders topic (plain Avro, schemas/orders.avsc)")
    parser.add_argument("--url", required=True, help="the database, postgresql://USER[:PASSWORD]@HOST:PORT/DB")
    parser.add_argument("--table", required=True, help="the products table, [SCHEMA.]NAME")
    parser.add_argument("--joins", default="inner,left", help="comma-separated: inner, left")
    parser.add_argument("--out", required=True, help="the output topic (JSON), made beforehand")
    parser.add_argument("--jars", required=True, help="comma-separated: the flink-peer jars")
    parser.add_argument("--cache", choices=["partial", "none"], default="partial",
                        help="Flink's lookup cache: partial (every key, hits and misses, kept) or none")
    parser.add_argument("--explain", action="store_true", help="print the plan on stderr first")
    args = parser.parse_args()
    joins = [j for j in args.joins.split(",") if j]
    if not joins or any(j not in JOINS for j in joins):
        parser.error(f"--joins: a comma-separated list of {', '.join(JOINS)}")
    url, user, password = jdbc(args.url)

    from pyflink.table import EnvironmentSettings, TableEnvironment

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = t_env.get_config()
    conf.set("pipeline.jars", ";".join(Path(j).resolve().as_uri() for j in args.jars.split(",")))
    conf.set("parallelism.default", "1")
    # Plain Avro bodies (no registry): the reader schema comes from the columns, so the non-null
    # fields are NOT NULL columns in the order of schemas/orders.avsc.
    t_env.execute_sql(f"""CREATE TABLE orders (
        order_id BIGINT NOT NULL, product STRING NOT NULL, quantity INT NOT NULL, proc_time AS PROCTIME()
    ) WITH (
        'connector' = 'kafka', 'topic' = {sql_string(args.orders)},
        'properties.bootstrap.servers' = {sql_string(args.bootstrap)},
        'properties.group.id' = 'flink-lookup-{time.time_ns()}', 'scan.startup.mode' = 'earliest-offset',
        'scan.bounded.mode' = 'latest-offset', 'format' = 'avro')""")
    cache = "'lookup.cache' = 'NONE'"
    if args.cache == "partial":
        cache = ("'lookup.cache' = 'PARTIAL', 'lookup.partial-cache.max-rows' = '1000000', "
                 "'lookup.partial-cache.cache-missing-key' = 'true'")
    # Flink wants both or neither: a user without a password (trust authentication) gets ''.
    credentials = f", 'username' = {sql_string(user)}, 'password' = {sql_string(password)}" if user else ""
    t_env.execute_sql(f"""CREATE TABLE products (
        product STRING, name STRING, price DECIMAL(10, 2), PRIMARY KEY (product) NOT ENFORCED
    ) WITH (
        'connector' = 'jdbc', 'url' = {sql_string(url)}, 'table-name' = {sql_string(args.table)}{credentials},
        {cache})""")
    sql = " UNION ALL ".join(QUERY.format(tag=j, join=JOINS[j]) for j in joins)
    t_env.execute_sql(f"""CREATE TABLE sink (
        join_kind STRING, order_id BIGINT, product STRING, quantity INT, name STRING, price DECIMAL(10, 2)
    ) WITH (
        'connector' = 'kafka', 'topic' = {sql_string(args.out)},
        'properties.bootstrap.servers' = {sql_string(args.bootstrap)}, 'sink.delivery-guarantee' = 'at-least-once',
        'format' = 'json', 'json.encode.decimal-as-plain-number' = 'true')""")
    if args.explain:
        print(t_env.explain_sql(f"INSERT INTO sink {sql}"), file=sys.stderr, flush=True)

    emit("start")
    start = time.perf_counter()
    t_env.execute_sql(f"INSERT INTO sink {sql}").wait()
    emit("end", elapsed=time.perf_counter() - start)


if __name__ == "__main__":
    main()
