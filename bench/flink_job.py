"""The Flink 2.3 peer of bench/compare.py: the scenario's join as a PyFlink Table API job.

Runs in Flink's own virtualenv (``.cache/flink-venv``, made by bench/harness/peers.py), never in the
project's: PyFlink pins packages PySpark needs in other versions. Everything runs in Flink's JVM
(SQL only, no Python functions); local mini-cluster, streaming mode, RocksDB state backend
(its working directory under ``--state-dir``), no checkpoints.

    python -m bench.flink_job --bootstrap HOST:PORT --scenario left-pk --parallelism 2 \\
        --orders TOPIC --prices TOPIC --format debezium-json --sink kafka --out TOPIC --jars A.jar,B.jar

Scenarios (bench/harness/data.py): ``left-pk``, ``inner-nopk``, their mini-batch variants
``left-pk-mb`` / ``inner-nopk-mb`` (``table.exec.mini-batch.enabled``, ``allow-latency``,
``size`` = ``--mini-batch-size``: Flink's mini-batch join), and ``temporal-left``, an event-time
temporal LEFT join (insert-only Avro orders, debezium-json prices with a primary key; both with
a watermark ``harness.data.WATERMARK_DELAY_S`` behind their event time, as changejoin's).

By default the sources are bounded at the topics' end offsets when the job starts
('scan.bounded.mode' = 'latest-offset'), so the job finishes when every preloaded row is
processed and written: the elapsed time is from the submission of the INSERT to its end.
``--unbounded`` (the latency runs) reads on until the process is stopped, and ``--timed`` joins
the inputs with their time columns (bench/schemas/*_timed.avsc) and selects both into the output.
Prints one JSON line per event (``start``, ``end``) for compare.py, which measures CPU and memory
around them.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

WATERMARK_DELAY_S = 300  # harness.data.WATERMARK_DELAY_S, whole minutes (this runs in Flink's venv: no import)


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def source(name: str, columns: str, topic: str, bootstrap: str, fmt: str, parallelism: int, bounded: bool) -> str:
    bound = "'scan.bounded.mode' = 'latest-offset', " if bounded else ""
    return f"""CREATE TABLE {name} ({columns}) WITH (
        'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}',
        'properties.group.id' = 'flink-bench-{name}-{time.time_ns()}', 'scan.startup.mode' = 'earliest-offset',
        {bound}'format' = '{fmt}', 'scan.parallelism' = '{parallelism}')"""


def tables(scenario: str, timed: bool) -> tuple[str, str, str, str, str]:
    """(orders columns, prices columns, query, output columns, output format) of a scenario."""
    # Avro bodies are plain (no registry): Flink derives the reader schema from the columns, so
    # the non-null Avro fields must be NOT NULL columns in the same order as the .avsc files.
    orders = "order_id BIGINT NOT NULL, product STRING NOT NULL, quantity INT NOT NULL"
    prices = "product STRING NOT NULL, price DOUBLE NOT NULL, currency STRING"
    data = scenario.removesuffix("-mb")
    if data == "temporal-left" or timed:
        orders += ", order_time BIGINT NOT NULL"
        prices += ", price_time BIGINT NOT NULL"
    if data == "temporal-left":
        delay = f"INTERVAL '{WATERMARK_DELAY_S // 60}' MINUTE"  # Calcite: SECOND holds 2 digits
        orders += f", rt AS TO_TIMESTAMP_LTZ(order_time, 3), WATERMARK FOR rt AS rt - {delay}"
        prices += (f", rt AS TO_TIMESTAMP_LTZ(price_time, 3), WATERMARK FOR rt AS rt - {delay}"
                   ", PRIMARY KEY (product) NOT ENFORCED")
        sql = ("SELECT o.order_id, o.product, o.quantity, p.price FROM orders o "
               "LEFT JOIN prices FOR SYSTEM_TIME AS OF o.rt AS p ON o.product = p.product")
        # insert-only (an event-time temporal join of an append-only probe side)
        return orders, prices, sql, "order_id BIGINT NOT NULL, product STRING NOT NULL, quantity INT NOT NULL, price DOUBLE", "avro"
    times = (", o.order_time, p.price_time", ", order_time BIGINT, price_time BIGINT") if timed else ("", "")
    if data == "left-pk":
        orders += ", PRIMARY KEY (order_id) NOT ENFORCED"
        prices += ", PRIMARY KEY (product) NOT ENFORCED"
        sql = f"SELECT o.order_id, o.product, o.quantity, p.price{times[0]} FROM orders o LEFT JOIN prices p ON o.product = p.product"
        # a retract changelog: one message per row of the changelog
        return orders, prices, sql, f"order_id BIGINT, product STRING, quantity INT, price DOUBLE{times[1]}", "debezium-json"
    sql = f"SELECT o.order_id, p.price{times[0]} FROM orders o JOIN prices p ON o.product = p.product"
    out = "order_id BIGINT NOT NULL, price DOUBLE NOT NULL" + (", order_time BIGINT NOT NULL, price_time BIGINT NOT NULL" if timed else "")
    return orders, prices, sql, out, "avro"  # insert-only


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--scenario", choices=["left-pk", "inner-nopk", "left-pk-mb", "inner-nopk-mb", "temporal-left"],
                        required=True)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--orders", required=True)
    parser.add_argument("--prices", required=True)
    parser.add_argument("--format", choices=["avro", "debezium-json"], required=True,
                        help="the inputs' format: avro (insert-only) or debezium-json (a changelog); "
                             "temporal-left: orders avro, prices debezium-json")
    parser.add_argument("--sink", choices=["kafka", "blackhole"], default="kafka")
    parser.add_argument("--out", default="")
    parser.add_argument("--jars", required=True, help="comma-separated: Flink's Kafka SQL connector and Avro format")
    parser.add_argument("--mini-batch-size", type=int, default=1000)
    parser.add_argument("--mini-batch-latency", default="1 s")
    parser.add_argument("--state-dir", help="RocksDB's working directory (state.backend.rocksdb.localdir)")
    parser.add_argument("--unbounded", action="store_true", help="read on until stopped (latency runs)")
    parser.add_argument("--timed", action="store_true", help="inputs with time columns, selected into the output")
    args = parser.parse_args()

    from pyflink.table import EnvironmentSettings, TableEnvironment

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = t_env.get_config()
    conf.set("pipeline.jars", ";".join(Path(j).resolve().as_uri() for j in args.jars.split(",")))
    conf.set("parallelism.default", str(args.parallelism))
    conf.set("state.backend.type", "rocksdb")
    conf.set("taskmanager.numberOfTaskSlots", str(args.parallelism))
    if args.state_dir:
        conf.set("state.backend.rocksdb.localdir", args.state_dir)
    if args.scenario.endswith("-mb"):
        conf.set("table.exec.mini-batch.enabled", "true")
        conf.set("table.exec.mini-batch.allow-latency", args.mini_batch_latency)
        conf.set("table.exec.mini-batch.size", str(args.mini_batch_size))

    orders_cols, prices_cols, sql, out_cols, out_format = tables(args.scenario, args.timed)
    temporal = args.scenario == "temporal-left"
    bounded = not args.unbounded
    t_env.execute_sql(source("orders", orders_cols, args.orders, args.bootstrap,
                             "avro" if temporal else args.format, args.parallelism, bounded))
    t_env.execute_sql(source("prices", prices_cols, args.prices, args.bootstrap,
                             "debezium-json" if temporal else args.format, args.parallelism, bounded))
    if args.sink == "kafka":
        t_env.execute_sql(f"""CREATE TABLE sink ({out_cols}) WITH (
            'connector' = 'kafka', 'topic' = '{args.out}', 'properties.bootstrap.servers' = '{args.bootstrap}',
            'format' = '{out_format}', 'sink.delivery-guarantee' = 'at-least-once')""")
    else:
        t_env.execute_sql(f"CREATE TABLE sink ({out_cols}) WITH ('connector' = 'blackhole')")
    print(t_env.explain_sql(f"INSERT INTO sink {sql}"), file=sys.stderr, flush=True)  # the plan, in the log

    emit("start")
    start = time.perf_counter()
    t_env.execute_sql(f"INSERT INTO sink {sql}").wait()
    elapsed = time.perf_counter() - start
    emit("end", elapsed=elapsed)


if __name__ == "__main__":
    main()
