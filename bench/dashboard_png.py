"""The chart's Grafana dashboard drawn without Grafana: every panel's queries
(helm/changejoin/monitoring/dashboard.json, read through devkit.monitoring) run as Prometheus range
queries over a benchmark run and drawn with matplotlib, one small chart per panel, into
docs/images/dashboard.png, so the documentation can show what an operator sees.

    python -m bench.dashboard_png                       # run the benchmark below, then draw
    python -m bench.dashboard_png --prometheus http://HOST:9090 --start T0 --end T1 \\
        --namespace streaming --pod 'orders-changejoin-.*'    # draw an existing run's data

The run: the temporal-left scenario's data (bench/harness/data.py) produced at a paced rate for
``--seconds`` (twice the rate in the middle third, beyond what MAX_RECORDS_PER_TRIGGER lets a
micro-batch read, so that a lag builds up and drains), an undecodable record every 5 s and a few
late orders (dead letters), into the test broker (devkit/kafka_broker.py); the service in this
process (local[2], a 1 s trigger); a Prometheus server (devkit/prometheus.py) scraping it every
second. Panels of features the run does not use (lookups, transactions) are drawn at zero.
"""
from __future__ import annotations

import argparse
import math
import re
import tempfile
import threading
import time
from pathlib import Path

from devkit.monitoring import Panel, grafana_to_promql, panels

from .harness import ROOT

OUT = ROOT / "docs" / "images" / "dashboard.png"
NAMESPACE, POD, JOB = "bench", "changejoin-0", "changejoin"


# --------------------------------------------------------------------------------------------
# the benchmark run
# --------------------------------------------------------------------------------------------


def produce_paced(bootstrap: str, seconds: float, rate: int, stop: threading.Event) -> None:
    """The scenario's orders and prices at ``rate`` rows/s per side (twice that in the middle
    third), a record that is no Avro every 5 s, and an order behind the watermark every 20 s."""
    from .harness.data import T0, TIMED_ORDERS, TIMED_PRICES, body, changelogs, new_producer, produce_retrying
    from .harness.data import price_partition, topics

    orders_topic, prices_topic, _ = topics("temporal-left")
    orders, prices = changelogs(int(rate * seconds * 1.4) + 10, 500, "temporal-left")
    orders, prices = orders[:-1], prices[:-1]  # not the closing rows: the run never ends the watermark
    producer = new_producer(bootstrap)
    start, sent, late_id = time.monotonic(), 0, 10**9
    next_garbage, next_late = 5.0, 20.0
    while not stop.is_set():
        elapsed = time.monotonic() - start
        if elapsed >= seconds or sent >= len(orders):
            break
        extra = min(max(elapsed - seconds / 3, 0.0), seconds / 3)  # the middle third counts twice
        due = int(rate * (elapsed + extra))
        while sent < min(due, len(orders)):
            kind, order = orders[sent]
            produce_retrying(producer, orders_topic, body(TIMED_ORDERS, order), order["order_id"] % 2,
                             [("rowkind", kind.encode())])
            kind, price = prices[sent]
            produce_retrying(producer, prices_topic, body(TIMED_PRICES, price), price_partition(price),
                             [("rowkind", kind.encode())])
            sent += 1
        if elapsed >= next_garbage:
            produce_retrying(producer, orders_topic, b"not avro", 0, [("rowkind", b"+I")])
            next_garbage += 5
        if elapsed >= next_late:
            late_id += 1
            row = {"order_id": late_id, "product": "p1", "quantity": 1, "order_time": T0}
            produce_retrying(producer, orders_topic, body(TIMED_ORDERS, row), late_id % 2, [("rowkind", b"+I")])
            next_late += 20
        producer.poll(0)
        time.sleep(0.05)
    producer.flush(60)


def run_benchmark(seconds: float, rate: int, max_per_trigger: int):
    """Broker, Prometheus, service and paced input; returns (prometheus, start, end), the
    Prometheus server still running (the caller closes it)."""
    from devkit.broker_process import free_port
    from devkit.kafka_broker import KafkaBroker
    from devkit.prometheus import PrometheusServer, Target
    from service.app import Service
    from service.sink import ensure_topics

    from .harness.changejoin import service_settings
    from .harness.data import topics

    broker = KafkaBroker(heap="1g")
    bootstrap = broker.start()
    port = free_port()
    prometheus = PrometheusServer([Target(f"127.0.0.1:{port}", {"namespace": NAMESPACE, "pod": POD, "job": JOB})])
    prometheus.start()
    orders_topic, prices_topic, _ = topics("temporal-left")
    ensure_topics(bootstrap, {}, {orders_topic: 2, prices_topic: 2})
    with tempfile.TemporaryDirectory() as work:
        settings = service_settings(bootstrap, "temporal-left", max_per_trigger, 2, f"{work}/cp",
                                    extra={"METRICS_PORT": str(port), "TRIGGER_INTERVAL": "1s"})
        service = Service(settings)
        service.spark  # noqa: B018 - Spark up before the clock starts
        stop = threading.Event()
        service.start()
        while not service.metrics.registry.get_sample_value("changejoin_last_progress_timestamp_seconds"):
            # the query runs: its first progress or idle report
            time.sleep(0.2)
        start = time.time()
        producer = threading.Thread(target=produce_paced, args=(bootstrap, seconds, rate, stop), daemon=True)
        producer.start()
        try:
            producer.join(seconds + 60)
            time.sleep(20)  # the lag drains
        finally:
            stop.set()
            end = time.time()
            service.stop()
            service.spark.stop()
            broker.close()
    return prometheus, start, end


# --------------------------------------------------------------------------------------------
# drawing
# --------------------------------------------------------------------------------------------


def legend(template: str, labels: dict) -> str:
    """Grafana's legendFormat: ``{{label}}`` replaced by the series' label."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template) or "value"


SCALES = {"bytes": (2**20, "MiB"), "s": (1, "s"), "rowsps": (1, "rows/s"), "short": (1, "")}


def draw(query_range, start: float, end: float, path: Path, namespace: str, pod: str, step: float = 2.0) -> None:
    """One chart per panel of the dashboard, its series from ``query_range(expr, start, end, step)``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    found: list[Panel] = panels()
    cols = 4
    rows = math.ceil(len(found) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 4.0, rows * 2.35), squeeze=False)
    for ax in axes.flat[len(found):]:
        ax.axis("off")
    for ax, panel in zip(axes.flat, found):
        scale, unit = SCALES.get(panel.unit, (1, panel.unit))
        lines = []
        for query in panel.targets:
            expr = grafana_to_promql(query.expr, namespace=namespace, pod=pod, rate_interval="10s")
            for series in query_range(expr, start, end, step):
                points = [(float(t) - start, float(v) / scale) for t, v in series["values"] if v not in ("NaN", "+Inf")]
                if points:
                    lines.append((legend(query.legend, series["metric"])[:28], points))
        # Series at zero throughout (the dead-letter reasons that did not occur) only when nothing else moved.
        moving = [line for line in lines if any(v for _, v in line[1])]
        lines = (moving or lines)[:8]
        for label, points in lines:
            ax.plot(*zip(*points), linewidth=1.1, label=label)
        drawn = len(lines)
        ax.set_title(panel.title, fontsize=8.5, loc="left")
        ax.tick_params(labelsize=6.5)
        ax.grid(alpha=0.3)
        ax.set_xlim(0, end - start)
        if unit:
            ax.set_ylabel(unit, fontsize=7)
        if drawn:
            ax.legend(fontsize=6, loc="upper left", frameon=False, ncol=2 if drawn > 3 else 1)
        else:
            ax.text(0.5, 0.5, "no data in this run", ha="center", va="center", fontsize=7, color="grey",
                    transform=ax.transAxes)
    fig.suptitle("changejoin dashboard (helm/changejoin/monitoring/dashboard.json) over a benchmark run; "
                 "x: seconds since the start", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=64)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seconds", type=float, default=120, help="how long input is produced")
    parser.add_argument("--rate", type=int, default=100, help="rows/s per side (twice that in the middle third)")
    parser.add_argument("--max-per-trigger", type=int, default=600, help="MAX_RECORDS_PER_TRIGGER")
    parser.add_argument("--prometheus", help="draw from this Prometheus instead of running the benchmark")
    parser.add_argument("--start", type=float, help="with --prometheus: Unix time of the run's start")
    parser.add_argument("--end", type=float, help="with --prometheus: Unix time of its end")
    parser.add_argument("--namespace", default=NAMESPACE, help="with --prometheus: the namespace label (a regex)")
    parser.add_argument("--pod", default=POD, help="with --prometheus: the pod label (a regex)")
    args = parser.parse_args()
    if args.prometheus:
        import json
        import urllib.parse
        import urllib.request

        def query_range(expr, start, end, step):
            query = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
            with urllib.request.urlopen(f"{args.prometheus}/api/v1/query_range?{query}", timeout=60) as response:
                return json.loads(response.read())["data"]["result"]

        end = args.end or time.time()
        draw(query_range, args.start or end - 3600, end, args.out, args.namespace, args.pod)
    else:
        prometheus, start, end = run_benchmark(args.seconds, args.rate, args.max_per_trigger)
        try:
            draw(prometheus.query_range, start, end, args.out, NAMESPACE, POD)
        finally:
            prometheus.close()
    print(f"{args.out} ({args.out.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
