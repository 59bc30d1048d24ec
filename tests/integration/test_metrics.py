"""Metrics, health/readiness endpoints and JSON logs (service/metrics.py, service/logs.py, app.py)."""
from __future__ import annotations

import json
import logging
import math
import socket
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.logs import JsonFormatter
from service.metrics import (JoinMetrics, MetricsServer, descendant_python_rss, input_lag, ready_window_seconds,
                             unix_seconds)
from service.latency import LATENCY_BUCKETS, Latencies
from service.pipeline import BatchCounts


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def progress(batch_id, left=0, right=0, left_end=None, left_latest=None, duration_ms=250, state_rows=None):
    """A StreamingQueryProgress dict shaped as Spark 4.3 reports it for the service's query."""
    def source(rows, end, latest):
        return {"description": "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStream@1",
                "startOffset": None, "endOffset": end, "latestOffset": latest, "numInputRows": rows}

    out = {
        "id": "q", "runId": "r", "name": "changejoin", "batchId": batch_id, "numInputRows": left + right,
        "durationMs": {"addBatch": duration_ms - 10, "triggerExecution": duration_ms},
        "sources": [source(left, left_end or {"0": left}, left_latest or {"0": left}),
                    source(right, {"0": right}, {"0": right})],
        "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
        "stateOperators": [],
    }
    if state_rows is not None:
        out["stateOperators"] = [{
            "operatorName": "transformWithStateInPySparkExec", "numRowsTotal": state_rows,
            "memoryUsedBytes": 6332, "customMetrics": {"rocksdbSstFileSize": 1343, "numValueStateVars": 1},
        }]
    return out


def value(metrics: JoinMetrics, name: str, **labels):
    return metrics.registry.get_sample_value(name, labels)


# --------------------------------------------------------------------------------------------
# The metrics registry, fed with fake progress and counts
# --------------------------------------------------------------------------------------------


def test_progress_feeds_input_batch_and_state_metrics():
    m = JoinMetrics()
    assert value(m, "changejoin_last_committed_batch_id") == -1
    m.observe_progress(progress(0, left=3, right=1, duration_ms=1500, state_rows=2,
                                left_end={"0": 2, "1": 1}, left_latest={"0": 4, "1": 3}))
    m.observe_progress(progress(1, left=2, right=0, duration_ms=40))
    # Spark's numInputRows counts rows, and a row packs a bucket's records: input counts come from
    # the reading tasks' tallies (BatchCounts.input), never from the progress.
    assert value(m, "changejoin_input_records_total", side="left") == 0
    m.observe_batch(BatchCounts(0, input={"left": 3_000, "right": 1_000}))
    m.observe_batch(BatchCounts(1, input={"left": 2_000}))
    assert value(m, "changejoin_input_records_total", side="left") == 5_000
    assert value(m, "changejoin_input_records_total", side="right") == 1_000
    assert value(m, "changejoin_batch_duration_seconds_count") == 2
    assert value(m, "changejoin_batch_duration_seconds_sum") == pytest.approx(1.54)
    assert value(m, "changejoin_batch_duration_seconds_bucket", le="0.05") == 1
    assert value(m, "changejoin_batch_input_records_count") == 2
    assert value(m, "changejoin_batch_input_records_sum") == 6_000
    assert value(m, "changejoin_last_committed_batch_id") == 1
    op = "transformWithStateInPySparkExec"
    assert value(m, "changejoin_state_rows", operator=op) == 2
    assert value(m, "changejoin_state_bytes", operator=op, kind="memory") == 6332
    assert value(m, "changejoin_state_bytes", operator=op, kind="sst_files") == 1343
    assert value(m, "changejoin_last_progress_timestamp_seconds") == pytest.approx(time.time(), abs=60)


def test_input_lag_is_latest_minus_end_per_partition():
    m = JoinMetrics()
    m.observe_progress(progress(0, left=3, left_end={"0": 2, "1": 1}, left_latest={"0": 4, "1": 3}))
    assert value(m, "changejoin_input_lag_records", side="left", partition="0") == 2
    assert value(m, "changejoin_input_lag_records", side="left", partition="1") == 2
    assert value(m, "changejoin_input_lag_records", side="right", partition="0") == 0
    m.observe_progress(progress(1, left=4, left_end={"0": 4, "1": 3}, left_latest={"0": 4, "1": 3}))
    assert value(m, "changejoin_input_lag_records", side="left", partition="0") == 0
    # No latest offset reported (the source returned None), or a partition only in one of them.
    assert input_lag({"endOffset": {"0": 1}, "latestOffset": None}) == {}
    assert input_lag({"endOffset": {"0": 5}, "latestOffset": {"0": 3, "1": 2}}) == {"0": 0}


def test_records_lost_before_they_were_read_come_from_the_source_offsets():
    m = JoinMetrics()
    m.observe_progress(progress(1, left=5, left_end={"0": 9, "lost": 4}, left_latest={"0": 9}))
    assert value(m, "changejoin_input_lost_records", side="left") == 4
    assert value(m, "changejoin_input_lag_records", side="left", partition="0") == 0  # "lost" is no partition
    assert value(m, "changejoin_input_lost_records", side="right") == 0  # none lost: 0, not absent


def test_a_re_created_topic_makes_the_sides_loss_unknown_not_zero():
    m = JoinMetrics()
    m.observe_progress(progress(1, left=2, left_end={"0": 2, "topic_id": "a"}))
    assert value(m, "changejoin_input_lost_records", side="left") == 0
    recreated = progress(2, left_end={"0": 0, "topic_id": "b"})
    recreated["sources"][0]["startOffset"] = {"0": 2, "topic_id": "a"}  # the batch that moves to the new log
    m.observe_progress(recreated)
    assert math.isnan(value(m, "changejoin_input_lost_records", side="left"))
    later = progress(3, left=3, left_end={"0": 3, "topic_id": "b"})
    later["sources"][0]["startOffset"] = {"0": 0, "topic_id": "b"}
    m.observe_progress(later)
    assert math.isnan(value(m, "changejoin_input_lost_records", side="left")), "the unknown loss was forgotten"
    assert value(m, "changejoin_input_lost_records", side="right") == 0


def test_a_side_is_caught_up_after_a_batch_that_left_nothing_unread(monkeypatch):
    now = {"t": 5000.0}
    monkeypatch.setattr(time, "time", lambda: now["t"])
    m = JoinMetrics()
    now["t"] = 5001.0
    m.observe_progress(progress(0, left=3, left_end={"0": 2, "1": 1}, left_latest={"0": 4, "1": 1}))
    # 2 unread in partition 0: behind since the start
    assert value(m, "changejoin_input_caught_up_timestamp_seconds", side="left") == 5000
    assert value(m, "changejoin_input_caught_up_timestamp_seconds", side="right") == 5001
    now["t"] = 5010.0
    m.observe_progress(progress(1, left=2, left_end={"0": 4, "1": 1}, left_latest={"0": 4, "1": 1}))
    assert value(m, "changejoin_input_caught_up_timestamp_seconds", side="left") == 5010
    now["t"] = 5020.0
    m.observe_progress(progress(2, left=0, left_end={"0": 4, "1": 1}, left_latest={"0": 9, "1": 1}))
    assert value(m, "changejoin_input_caught_up_timestamp_seconds", side="left") == 5010  # behind again
    assert value(m, "changejoin_input_caught_up_timestamp_seconds", side="right") == 5020


def test_watermark_and_newest_event_time_come_from_the_progress_event_time():
    m = JoinMetrics()
    m.observe_progress(progress(0, left=1))  # no event time (not an event-time join): nothing set
    assert value(m, "changejoin_watermark_timestamp_seconds") == 0
    p = progress(1, left=1)
    p["eventTime"] = {"avg": "2026-11-26T10:00:00.000Z", "max": "2026-11-26T10:00:05.500Z",
                      "min": "2026-11-26T09:59:00.000Z", "watermark": "2026-11-26T09:58:00.000Z"}
    m.observe_progress(p)
    assert value(m, "changejoin_watermark_timestamp_seconds") == unix_seconds("2026-11-26T09:58:00Z") == 1795687080
    assert value(m, "changejoin_event_time_max_timestamp_seconds") == 1795687205.5
    assert unix_seconds(None) is None and unix_seconds("not a time") is None


def test_topics_trigger_interval_and_jvm_heap():
    m = JoinMetrics(topics=("orders", "prices"), trigger_interval_s=0.5)
    assert value(m, "changejoin_input_topic_info", side="left", topic="orders") == 1
    assert value(m, "changejoin_input_topic_info", side="right", topic="prices") == 1
    assert value(m, "changejoin_trigger_interval_seconds") == 0.5
    m.observe_jvm_memory(used=100, committed=300, maximum=1000)
    assert [value(m, "changejoin_jvm_memory_bytes", area=a) for a in ("used", "committed", "max")] == [100, 300, 1000]
    # Known label values are served at 0 before anything happens: a panel on them is never empty.
    assert value(m, "changejoin_input_records_total", side="right") == 0
    assert value(m, "changejoin_output_records_total", kind="-U") == 0
    assert value(m, "changejoin_dead_letter_records_total", reason="late") == 0
    assert value(m, "changejoin_kafka_transactions_total", outcome="committed") == 0
    assert value(m, "changejoin_lookup_cache_total", result="evicted") == 0
    assert value(m, "changejoin_lookup_errors_total", kind="timeout") == 0
    # The driver's own process, under the service's prefix; its start time tells a restart.
    assert value(m, "changejoin_process_start_time_seconds") <= time.time()
    assert value(m, "changejoin_process_resident_memory_bytes") > 0


def test_python_workers_memory_sums_the_python_descendants_of_the_driver(tmp_path):
    page = __import__("os").sysconf("SC_PAGE_SIZE")

    def process(pid, ppid, comm, pages):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) S {ppid} 1 1 0 -1\n")
        (tmp_path / str(pid) / "statm").write_text(f"9999 {pages} 10 1 0 5 0\n")

    process(10, 1, "python3.11", 1000)        # the driver: not counted
    process(11, 10, "java", 5000)             # the Spark JVM: not Python
    process(12, 11, "python3", 7)             # PySpark's daemon
    process(13, 12, "python3", 5)             # a worker it forked
    process(14, 11, "bash (x) y", 3)          # not Python, odd name
    process(20, 1, "python3", 100)            # another process's child: not ours
    (tmp_path / "self").mkdir()
    assert descendant_python_rss(10, tmp_path) == 12 * page
    assert descendant_python_rss(20, tmp_path) == 0
    assert descendant_python_rss(10, tmp_path / "missing") == 0


def test_batch_counts_feed_output_dead_letter_and_late_metrics():
    m = JoinMetrics()
    m.observe_batch(BatchCounts(0, output={"+I": 3, "-D": 1}, dead_letters={"undecodable": 2}))
    m.observe_batch(BatchCounts(1, output={"+I": 1}, dead_letters={"late": 4}))
    assert value(m, "changejoin_output_records_total", kind="+I") == 4
    assert value(m, "changejoin_output_records_total", kind="-D") == 1
    assert value(m, "changejoin_dead_letter_records_total", reason="undecodable") == 2
    assert value(m, "changejoin_dead_letter_records_total", reason="late") == 4
    assert value(m, "changejoin_late_probe_rows_total") == 4


def latencies(*counts_and_sum):
    """A micro-batch's latencies (latency.Latencies): records per bucket of LATENCY_BUCKETS (the
    rest 0), then their sum."""
    *counts, total = counts_and_sum
    out = Latencies()
    out.counts[:len(counts)] = counts
    out.sum_seconds = total
    return out


def test_the_end_to_end_latency_histogram_adds_each_batchs_bucket_counts():
    m = JoinMetrics()
    name = "changejoin_end_to_end_latency_seconds"
    # Served at 0 from the start: a histogram that first appears with counts shows rate() nothing.
    assert value(m, name + "_count") == 0 and value(m, name + "_bucket", le="+Inf") == 0
    m.observe_batch(BatchCounts(0, latency=latencies(0, 3, 5, 0.95)))  # 3 at most 0.1 s, 5 at most 0.25 s
    m.observe_batch(BatchCounts(1, latency=latencies(1, 0, 2, 4, 2.6)))
    m.observe_batch(BatchCounts(2))  # no record read
    late = Latencies()
    late.counts[-1], late.sum_seconds = 2, 8_000.0  # past every bound: counted in +Inf only
    m.observe_batch(BatchCounts(3, latency=late))
    cumulative = {"0.05": 1, "0.1": 4, "0.25": 11, "0.5": 15, "1.0": 15, "3600.0": 15, "+Inf": 17}
    for le, n in cumulative.items():
        assert value(m, name + "_bucket", le=le) == n, le
    assert value(m, name + "_count") == 17
    assert value(m, name + "_sum") == pytest.approx(8_003.55)
    # The text Prometheus scrapes: one histogram, its bounds those of latency.LATENCY_BUCKETS.
    from prometheus_client import generate_latest

    (family,) = [f for f in text_string_to_metric_families(generate_latest(m.registry).decode()) if f.name == name]
    assert family.type == "histogram"
    bounds = [s.labels["le"] for s in family.samples if s.name == name + "_bucket"]
    assert bounds == [*(str(float(b)) for b in LATENCY_BUCKETS), "+Inf"]
    with pytest.raises(ValueError, match="bucket counts"):
        m.end_to_end_latency.add([1, 2], 0.1)


def test_query_active_gauge_asks_at_scrape_time_and_survives_a_dead_jvm():
    state = {"active": False}

    def is_active():
        if state.get("boom"):
            raise RuntimeError("py4j: the JVM is gone")
        return state["active"]

    m = JoinMetrics(is_active=is_active)
    assert value(m, "changejoin_query_active") == 0
    state["active"] = True
    assert value(m, "changejoin_query_active") == 1
    state["boom"] = True
    assert value(m, "changejoin_query_active") == 0


def test_registries_are_per_instance():
    a, b = JoinMetrics(), JoinMetrics()
    a.observe_batch(BatchCounts(0, output={"+I": 1}))
    assert value(a, "changejoin_output_records_total", kind="+I") == 1
    assert value(b, "changejoin_output_records_total", kind="+I") == 0


# --------------------------------------------------------------------------------------------
# Readiness
# --------------------------------------------------------------------------------------------


def test_ready_window_counts_an_interval_as_at_least_one_second():
    assert ready_window_seconds(0, 10) == 10
    assert ready_window_seconds(500, 10) == 10
    assert ready_window_seconds(5000, 3) == 15


def test_ready_only_when_active_and_progress_is_recent():
    clock, active = FakeClock(), {"on": False}
    m = JoinMetrics(ready_window_s=10, is_active=lambda: active["on"], clock=clock)
    assert m.readiness() == (False, "streaming query not active")
    active["on"] = True
    assert m.readiness() == (False, "no progress reported yet")
    m.observe_progress(progress(0, left=1))
    assert m.readiness() == (True, "ready")
    clock.now += 10
    assert m.readiness()[0]
    clock.now += 0.5
    ready, reason = m.readiness()
    assert not ready and reason == "no progress for 10.5s (limit 10s)"
    m.mark_progress()  # an idle event: the query is alive, there is just no new input
    assert m.readiness() == (True, "ready")
    active["on"] = False
    assert m.readiness() == (False, "streaming query not active")


# --------------------------------------------------------------------------------------------
# HTTP
# --------------------------------------------------------------------------------------------


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def scrape(port: int) -> dict[tuple, float]:
    _, text = get(port, "/metrics")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text) for sample in family.samples
    }


def test_http_serves_metrics_healthz_and_readyz_and_stops_cleanly():
    clock, active = FakeClock(), {"on": True}
    m = JoinMetrics(ready_window_s=5, is_active=lambda: active["on"], clock=clock)
    other = JoinMetrics()
    server = MetricsServer(m, 0).start()
    second = MetricsServer(other, 0).start()  # two in one process, each with its own registry
    try:
        assert server._httpd.server_address[0] == "0.0.0.0"
        assert get(server.port, "/healthz") == (200, "ok\n")
        assert get(server.port, "/readyz") == (503, "no progress reported yet\n")
        m.observe_progress(progress(7, left=2, right=1))
        m.observe_batch(BatchCounts(7, output={"+I": 2}, input={"left": 2, "right": 1}))
        assert get(server.port, "/readyz") == (200, "ready\n")
        clock.now += 6
        status, body = get(server.port, "/readyz")
        assert status == 503 and body.startswith("no progress for 6.0s")
        active["on"] = False
        assert get(server.port, "/readyz") == (503, "streaming query not active\n")
        assert get(server.port, "/healthz")[0] == 200  # alive, even when not ready
        samples = scrape(server.port)
        assert samples[("changejoin_input_records_total", (("side", "left"),))] == 2
        assert samples[("changejoin_output_records_total", (("kind", "+I"),))] == 2
        assert samples[("changejoin_last_committed_batch_id", ())] == 7
        assert all(name.startswith("changejoin_") for name, _ in samples)
        assert scrape(second.port)[("changejoin_output_records_total", (("kind", "+I"),))] == 0
        assert get(server.port, "/nope")[0] == 404
    finally:
        server.stop()
        second.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()


# --------------------------------------------------------------------------------------------
# JSON logs
# --------------------------------------------------------------------------------------------


def record(msg, *args, level=logging.INFO, exc_info=None, **extra) -> logging.LogRecord:
    logger = logging.getLogger("service.app")
    return logger.makeRecord(logger.name, level, __file__, 1, msg, args, exc_info, extra=extra)


def test_json_formatter_writes_one_object_per_line_with_extra_fields():
    line = JsonFormatter().format(record(
        "batch %d committed:\nmore", 3, batch_id=3, output={"+I": 2}, dead_letters={}, odd=object()))
    assert "\n" not in line
    obj = json.loads(line)
    assert obj["level"] == "INFO" and obj["logger"] == "service.app"
    assert obj["message"] == "batch 3 committed:\nmore"
    assert obj["batch_id"] == 3 and obj["output"] == {"+I": 2} and obj["dead_letters"] == {}
    assert obj["odd"].startswith("<object object")
    assert obj["time"].endswith("+00:00") and "T" in obj["time"]
    assert not {"args", "msg", "levelno", "pathname", "created"} & set(obj)


def test_json_formatter_includes_the_exception():
    try:
        raise ValueError("bad input")
    except ValueError:
        line = JsonFormatter().format(record("failed", level=logging.ERROR, exc_info=sys.exc_info()))
    obj = json.loads(line)
    assert obj["level"] == "ERROR" and "ValueError: bad input" in obj["exception"]


def test_cli_json_logging_uses_the_formatter(capsys):
    from service.cli import _configure_logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        _configure_logging("INFO", "json")
        logging.getLogger("service.test").info("hello %s", "world", extra={"batch_id": 1})
        line = capsys.readouterr().err.strip().splitlines()[-1]
        obj = json.loads(line)
        assert obj["message"] == "hello world" and obj["batch_id"] == 1 and obj["logger"] == "service.test"
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


# --------------------------------------------------------------------------------------------
# The real service on the test broker
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.mark.integration
def test_service_exposes_metrics_and_readiness_while_joining(kafka_bootstrap, spark, tmp_path, new_topic, caplog):
    from service.app import Service
    from service.config import load_settings
    from tests.support.service_harness import JoinHarness, order, price

    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, JOIN_SQL=(
        "SELECT o.order_id, o.product, p.price FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"))
    # Thousands of records per bucket (256 buckets, a packed row per bucket and reading task): the
    # metrics and the batch log line must count records, not Spark's rows.
    orders = [("+I", order(i, f"p{i % 500}", 1)) for i in range(4, 20_000)]
    started = time.time()  # before any record's Kafka timestamp
    h.send_orders([("+I", order(1, "book", 2)), ("+I", order(2, "pen", 3)), ("+I", order(3, "ink", 1)), *orders])
    h.send_prices([("+I", price("book", 12.5))])
    port = free_port()
    # A 6 s readiness window (TRIGGER_INTERVAL=0 counts as 1 s): Spark's idle events (10 s apart by
    # default) must come often enough to keep an idle query ready.
    env = {**h.env, "METRICS_PORT": str(port), "READY_MAX_TRIGGER_INTERVALS": "6"}
    service = h.service = Service(load_settings(env), spark=spark)
    caplog.set_level(logging.INFO, logger="service.app")
    ready_seen = False
    service.start()
    try:
        assert get(port, "/healthz") == (200, "ok\n")
        service.process_available()
        # Progress events reach the listener asynchronously: wait for them.
        deadline = time.monotonic() + 60
        while True:
            ready_seen = ready_seen or get(port, "/readyz")[0] == 200
            samples = scrape(port)
            if ready_seen and samples.get(("changejoin_input_records_total", (("side", "right"),))) == 1:
                break
            assert time.monotonic() < deadline, f"metrics did not move: {samples}"
            time.sleep(0.2)
        assert samples[("changejoin_input_records_total", (("side", "left"),))] == 3 + len(orders)
        # Every record read has its end-to-end latency (records without output too: the orders of
        # products without a price join nothing yet), each at least 0 and below the time since
        # before the first was sent, filed at most 1/8 above its value.
        elapsed = time.time() - started
        latency = "changejoin_end_to_end_latency_seconds"
        assert samples[(latency + "_count", ())] == 4 + len(orders)
        assert 0 < samples[(latency + "_sum", ())] < elapsed * (4 + len(orders))
        bound = min(b for b in LATENCY_BUCKETS if b >= elapsed * 9 / 8 + 0.001)
        assert samples[(latency + "_bucket", (("le", str(bound)),))] == 4 + len(orders)
        written = sum(sum(b.output.values()) for b in service.batches)
        assert written >= 4 + len(orders)  # the joined book may be padded first, then retracted (-D) and joined
        assert sum(v for (name, _), v in samples.items() if name == "changejoin_output_records_total") == written
        assert samples[("changejoin_batch_duration_seconds_count", ())] >= 1
        assert samples[("changejoin_batch_input_records_sum", ())] == 4 + len(orders)
        assert samples[("changejoin_last_committed_batch_id", ())] >= 0
        assert samples[("changejoin_query_active", ())] == 1
        assert samples[("changejoin_input_lag_records", (("partition", "0"), ("side", "left")))] == 0
        assert any(name == "changejoin_state_rows" and v >= 3 for (name, _), v in samples.items())
        # No new input: the query is idle, and stays ready past the window.
        until = time.monotonic() + 8
        while time.monotonic() < until:
            assert get(port, "/readyz") == (200, "ready\n")
            time.sleep(0.5)
    finally:
        service.stop()
    assert ready_seen
    assert len(h.retract_table()) == 3 + len(orders)
    batch_lines = [r for r in caplog.records if getattr(r, "batch_id", None) is not None]
    assert batch_lines and sum(r.input_left for r in batch_lines) == 3 + len(orders)
    with pytest.raises(OSError):  # the HTTP server stopped with the service
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert service.metrics.readiness() == (False, "streaming query not active")
