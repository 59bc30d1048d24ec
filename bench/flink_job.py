"""The Flink 2.3 peer of bench/compare.py: the scenario's join as a PyFlink Table API job.

Runs in Flink's own virtualenv (``.cache/flink-venv``, made by compare.py), never in the
project's: PyFlink pins packages PySpark needs in other versions. Everything runs in Flink's JVM
(SQL only, no Python functions); local mini-cluster, streaming mode, RocksDB state backend, no
checkpoints.

    python bench/flink_job.py --bootstrap HOST:PORT --scenario left-pk --parallelism 2 \\
        --orders TOPIC --prices TOPIC --format debezium-json --sink kafka --out TOPIC --jars A.jar,B.jar

The sources are bounded at the topics' end offsets when the job starts ('scan.bounded.mode' =
'latest-offset'), so the job finishes when every preloaded row is processed and written: the
elapsed time is from the submission of the INSERT to its end. Prints one JSON line per event
(``start``, ``end``) for compare.py, which measures CPU and memory around them.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def source(name: str, columns: str, topic: str, bootstrap: str, fmt: str, parallelism: int) -> str:
    return f"""CREATE TABLE {name} ({columns}) WITH (
        'connector' = 'kafka', 'topic' = '{topic}', 'properties.bootstrap.servers' = '{bootstrap}',
        'properties.group.id' = 'flink-bench-{name}', 'scan.startup.mode' = 'earliest-offset',
        'scan.bounded.mode' = 'latest-offset', 'format' = '{fmt}', 'scan.parallelism' = '{parallelism}')"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--scenario", choices=["left-pk", "inner-nopk"], required=True)
    parser.add_argument("--parallelism", type=int, default=1)
    parser.add_argument("--orders", required=True)
    parser.add_argument("--prices", required=True)
    parser.add_argument("--format", choices=["avro", "debezium-json"], required=True,
                        help="the inputs' format: avro (insert-only) or debezium-json (a changelog)")
    parser.add_argument("--sink", choices=["kafka", "blackhole"], default="kafka")
    parser.add_argument("--out", default="")
    parser.add_argument("--jars", required=True, help="comma-separated: Flink's Kafka SQL connector and Avro format")
    args = parser.parse_args()

    from pyflink.table import EnvironmentSettings, TableEnvironment

    t_env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    conf = t_env.get_config()
    conf.set("pipeline.jars", ";".join(Path(j).resolve().as_uri() for j in args.jars.split(",")))
    conf.set("parallelism.default", str(args.parallelism))
    conf.set("state.backend.type", "rocksdb")
    conf.set("taskmanager.numberOfTaskSlots", str(args.parallelism))

    pk = args.scenario == "left-pk"
    # Avro bodies are plain (no registry): Flink derives the reader schema from the columns, so
    # the non-null Avro fields must be NOT NULL columns in the same order as schemas/*.avsc.
    orders_cols = "order_id BIGINT NOT NULL, product STRING NOT NULL, quantity INT NOT NULL"
    prices_cols = "product STRING NOT NULL, price DOUBLE NOT NULL, currency STRING"
    if pk:
        orders_cols += ", PRIMARY KEY (order_id) NOT ENFORCED"
        prices_cols += ", PRIMARY KEY (product) NOT ENFORCED"
        sql = "SELECT o.order_id, o.product, o.quantity, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product"
        out_cols = "order_id BIGINT, product STRING, quantity INT, price DOUBLE"
        out_format = "debezium-json"  # a retract changelog: one message per row of the changelog
    else:
        sql = "SELECT o.order_id, p.price FROM orders o JOIN prices p ON o.product = p.product"
        out_cols = "order_id BIGINT NOT NULL, price DOUBLE NOT NULL"
        out_format = "avro"  # insert-only
    t_env.execute_sql(source("orders", orders_cols, args.orders, args.bootstrap, args.format, args.parallelism))
    t_env.execute_sql(source("prices", prices_cols, args.prices, args.bootstrap, args.format, args.parallelism))
    if args.sink == "kafka":
        t_env.execute_sql(f"""CREATE TABLE sink ({out_cols}) WITH (
            'connector' = 'kafka', 'topic' = '{args.out}', 'properties.bootstrap.servers' = '{args.bootstrap}',
            'format' = '{out_format}', 'sink.delivery-guarantee' = 'at-least-once')""")
    else:
        t_env.execute_sql(f"CREATE TABLE sink ({out_cols}) WITH ('connector' = 'blackhole')")

    emit("start")
    start = time.perf_counter()
    t_env.execute_sql(f"INSERT INTO sink {sql}").wait()
    elapsed = time.perf_counter() - start
    emit("end", elapsed=elapsed)


if __name__ == "__main__":
    main()
