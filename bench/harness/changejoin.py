"""The service as a benchmark runs it: its settings for a scenario, one run on preloaded topics
until every input row is processed, that run as a child process of bench/compare.py, and the
``--variant NAME:VAR=VALUE,,...`` option of ab_bench and restart_bench."""
from __future__ import annotations

import json
import tempfile
import time

from service.app import Service
from service.config import load_settings

from . import ROOT
from .data import TIMED_SCHEMAS, WATERMARK_DELAY_S, data_of, input_format, mini_batch, topics
from .processes import directory_bytes
from .report import percentile


def scenario_sql(scenario: str, mini_batch_size: int = 1000) -> tuple[str, dict]:
    """The join of ``scenario`` and the service settings that go with it (keys, schemas, time)."""
    env = {"MINI_BATCH_SIZE": str(mini_batch_size)} if mini_batch(scenario) else {}
    if input_format(scenario) != "rowkind":  # a bare envelope's row schema: *_SCHEMA_FILE (service_settings)
        env["LEFT_FORMAT"] = env["RIGHT_FORMAT"] = input_format(scenario)
    scenario = data_of(scenario)
    if scenario == "left-pk":
        sql = "SELECT o.order_id, o.product, o.quantity, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product"
        return sql, {"LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product", **env}
    if scenario == "temporal-left":
        sql = ("SELECT o.order_id, o.product, o.quantity, p.price FROM orders o "
               "LEFT JOIN prices FOR SYSTEM_TIME AS OF o.order_time AS p ON o.product = p.product")
        return sql, {"RIGHT_PRIMARY_KEY": "product", "LEFT_EVENT_TIME_COLUMN": "order_time",
                     "RIGHT_EVENT_TIME_COLUMN": "price_time", "LEFT_WATERMARK_DELAY": f"{WATERMARK_DELAY_S}s",
                     "RIGHT_WATERMARK_DELAY": f"{WATERMARK_DELAY_S}s",
                     "LEFT_SCHEMA_FILE": str(TIMED_SCHEMAS / "orders_timed.avsc"),
                     "RIGHT_SCHEMA_FILE": str(TIMED_SCHEMAS / "prices_timed.avsc")}
    return "SELECT o.order_id, p.price FROM orders o JOIN prices p ON o.product = p.product", env


def service_settings(*args, **kwargs):
    """The service's settings for a scenario (:func:`service_environment`'s variables)."""
    return load_settings(service_environment(*args, **kwargs))


def service_environment(bootstrap: str, scenario: str, max_per_trigger: int | None, shuffle_partitions: int | None,
                        checkpoint: str, out: str | None = None, mini_batch_size: int = 1000,
                        orders_topic: str | None = None, prices_topic: str | None = None, sql: str | None = None,
                        extra: dict | None = None) -> dict[str, str]:
    """The service's environment variables for ``scenario``; ``max_per_trigger`` None and
    ``extra`` ``TRIGGER_INTERVAL`` unset: the service's defaults (the latency runs), and
    ``shuffle_partitions`` None its default task count (one per core of ``local[2]``)."""
    default_orders, default_prices, default_out = topics(scenario)
    scenario_query, env = scenario_sql(scenario, mini_batch_size)
    env = {"LEFT_SCHEMA_FILE": str(ROOT / "schemas" / "orders.avsc"),
           "RIGHT_SCHEMA_FILE": str(ROOT / "schemas" / "prices.avsc"), "TRIGGER_INTERVAL": "0",
           # every micro-batch's progress, for the duration percentiles (Spark keeps 100)
           "SPARK_CONF_spark_sql_streaming_numRecentProgressUpdates": "100000", **env, **(extra or {})}
    if max_per_trigger is not None:
        env["MAX_RECORDS_PER_TRIGGER"] = str(max_per_trigger)
    return {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "LEFT_TOPIC": orders_topic or default_orders,
        "RIGHT_TOPIC": prices_topic or default_prices, "OUTPUT_TOPIC": out or default_out,
        "LEFT_TABLE": "orders", "RIGHT_TABLE": "prices", "JOIN_SQL": sql or scenario_query,
        "CHECKPOINT_LOCATION": checkpoint, "SPARK_MASTER": "local[2]", "METRICS_PORT": "0",
        **({} if shuffle_partitions is None else {"SHUFFLE_PARTITIONS": str(shuffle_partitions)}),
        **{k: v for k, v in env.items() if v is not None},
    }


def run_changejoin(bootstrap: str, scenario: str, rows: int, max_per_trigger: int, shuffle_partitions: int,
                   out: str | None = None, on_start=None, on_end=None, mini_batch_size: int = 1000,
                   extra: dict | None = None) -> dict:
    """The service on the preloaded topics until every input row is processed; its figures:
    elapsed seconds, micro-batch durations (ms, sorted), first output (s after the start, when the
    first batch with output was produced), checkpoint size on disk at the end (bytes: offsets,
    commits and the RocksDB state versions Spark keeps)."""
    with tempfile.TemporaryDirectory() as work:
        settings = service_settings(bootstrap, scenario, max_per_trigger, shuffle_partitions, f"{work}/cp", out,
                                    mini_batch_size, extra=extra)
        first_output = []
        service = Service(settings, on_batch=lambda c: first_output.append(time.perf_counter()) if c.output else None)
        service.spark  # noqa: B018 - start Spark before the clock starts
        if on_start:
            on_start()
        start = time.perf_counter()
        query = service.start()
        service.process_available()
        elapsed = time.perf_counter() - start
        if on_end:
            on_end()
        progress = list(query.recentProgress)
        service.stop()
        state_bytes = directory_bytes(f"{work}/cp")
        service.spark.stop()
    durations = sorted(p["durationMs"].get("triggerExecution", 0) for p in progress if p["numInputRows"])
    return {"elapsed": elapsed, "durations": durations, "state_bytes": state_bytes,
            "first_output": first_output[0] - start if first_output else None}


def child_changejoin(args) -> None:
    """One changejoin run in this (child) process, reporting start/end as JSON lines."""
    from .latency import service_env

    emit = lambda event, **f: print(json.dumps({"event": event, **f}), flush=True)  # noqa: E731
    result = run_changejoin(args.bootstrap, args.scenario, args.rows, args.max_per_trigger,
                            args.shuffle_partitions, out=args.out,
                            on_start=lambda: emit("start"), mini_batch_size=args.mini_batch_size,
                            extra=service_env(args) or None)  # changejoin-retract's (compare.one_run)
    d = result["durations"]
    emit("end", elapsed=result["elapsed"], batches=len(d), state_bytes=result["state_bytes"],
         batch_p50=percentile(d, 0.5), batch_p99=percentile(d, 0.99))


def parse_variant(text: str) -> tuple[str, dict]:
    """``NAME:VAR=VALUE,,VAR=VALUE`` -> (NAME, the service variables it adds)."""
    name, _, assignments = text.partition(":")
    extra = {}
    for item in filter(None, assignments.split(",,")):
        key, _, value = item.partition("=")
        extra[key.strip()] = value
    return name, extra
