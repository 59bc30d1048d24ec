"""The chart's dashboard and alerts against a real Prometheus (Debian's ``prometheus``) scraping the
service running an event-time join on the real broker: every panel's query and every alert's
expression, as the chart ships them (helm/changejoin/monitoring/, the alerts rendered by ``helm
template``), returns series, so no panel stays silently empty for a misspelt metric or label; and
an alert whose threshold the values lower fires in Prometheus itself."""
from __future__ import annotations

import re
import time

import pytest

from devkit.broker_process import free_port
from devkit.monitoring import grafana_to_promql, panels
from devkit.prometheus import PrometheusServerError, Target
from tests.support.monitoring_chart import FULLNAME, NAMESPACE, alerts, prometheus_rule, write_rule_file
from tests.support.service_harness import TEMPORAL, JoinHarness, rate, timed_order

pytestmark = pytest.mark.integration

POD = f"{FULLNAME}-7d9c8f6b5-x2bq4"  # a driver pod's name as the Deployment makes them
# The labels the ServiceMonitor's scrape gives the service's series in a cluster.
LABELS = {"namespace": NAMESPACE, "pod": POD, "job": FULLNAME}

#: Alerts on kube-state-metrics' series, which only exist in a Kubernetes cluster: their
#: expressions cannot return anything here (promtool's unit tests cover them).
KUBE_STATE_METRICS_ALERTS = {
    "ChangejoinRestarting": "kube_pod_container_status_restarts_total: kube-state-metrics, no Kubernetes here",
    "ChangejoinNotReady": "kube_pod_status_ready: kube-state-metrics, no Kubernetes here",
}

_COMPARISON = re.compile(r"(==|!=|>=|<=|>|<)(\s*bool\b)?")


def with_bool_comparisons(expr: str) -> str:
    """``expr`` with each comparison outside label matchers made a ``bool`` one: it returns 0 or 1
    for every series it compares instead of dropping those for which it is false, so that a quiet
    alert's expression still shows whether its series exist."""
    parts = re.split(r'(\{(?:[^}"]|"[^"]*")*\})', expr)
    def make_bool(match: re.Match) -> str:
        return match.group(0) if match.group(2) else f"{match.group(1)} bool"

    return "".join(p if p.startswith("{") else _COMPARISON.sub(make_bool, p) for p in parts)


def answers(prometheus, expr: str, timeout: float = 15.0) -> list:
    """``expr``'s series, asked again for up to ``timeout`` while it returns none: a scrape that
    times out on a busy machine marks the target's series stale until the next one succeeds."""
    try:
        return prometheus.wait_for_samples(expr, timeout=timeout)
    except PrometheusServerError:
        return []


def test_bool_comparisons_leave_label_matchers_alone():
    assert with_bool_comparisons('a{x!="1", y=~"z"} > 1 and b >= bool 2 unless c{q="a>b"} == 0') == \
        'a{x!="1", y=~"z"} > bool 1 and b >= bool 2 unless c{q="a>b"} == bool 0'


def test_every_panel_query_and_alert_expression_returns_series(kafka_bootstrap, spark, tmp_path, new_topic,
                                                               prometheus_server):
    port = free_port()
    # The rules as the chart renders them, with the dead-letter alert's threshold lowered so that
    # it fires here: Prometheus evaluates them every second. The window outlasts the test (on a
    # loaded machine the panel queries below take over a minute: a 1m rate was back to 0 by then).
    firing_rule = prometheus_rule("json:prometheusRule.deadLetters.perSecond=0", "prometheusRule.deadLetters.for=0s",
                                  "prometheusRule.deadLetters.window=10m")
    prometheus = prometheus_server([Target(f"127.0.0.1:{port}", LABELS)],
                                   rule_files=[write_rule_file(firing_rule, tmp_path / "rules.yaml")])
    # At-least-once: no transactional producers to initialize (the transaction panels' series are
    # served at 0 all the same); an event-time join, for the watermark and late-row panels.
    h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, **TEMPORAL, METRICS_PORT=str(port),
                    LEFT_WATERMARK_DELAY="1s", RIGHT_WATERMARK_DELAY="1s", DELIVERY="at-least-once")
    now = int(time.time() * 1000) - 60_000
    h.send_rates([("+I", rate("USD", 1.1, now)), ("+I", rate("EUR", 0.9, now)), ("+I", rate("ANY", 1.0, now + 50_000))])
    h.send_orders([("+I", timed_order(1, "USD", 10, now + 1_000)), ("+I", timed_order(2, "EUR", 20, now + 2_000)),
                   ("+I", timed_order(9, "ANY", 1, now + 50_000)), (None, b"not avro")])
    service = h.start()
    try:
        service.process_available()
        # Prometheus has the late rows' counter at 0 before the late row comes: a counter's first
        # sample shows no increase, so the alert on its rate would not fire had it met it at 1.
        prometheus.wait_for_samples(
            f'changejoin_dead_letter_records_total{{job="{FULLNAME}",reason="late"}} == 0', timeout=30)
        # Behind the watermark now (about now + 49 s): a late probe row, a dead letter.
        h.send_orders([("+I", timed_order(4, "USD", 40, now + 500))])
        service.process_available()
        late = sum(b.dead_letters.get("late", 0) for b in service.batches)
        assert late == 1, [b.dead_letters for b in service.batches]
        # Prometheus has scraped what the batches counted, twice at least (rate() needs two samples).
        prometheus.wait_for_samples(f'changejoin_late_probe_rows_total{{job="{FULLNAME}"}} == 1', timeout=30)
        prometheus.wait_for_samples(f'count_over_time(changejoin_late_probe_rows_total{{job="{FULLNAME}"}}[1m]) >= 3')

        empty = []
        for panel in panels():
            for query in panel.targets:
                expr = grafana_to_promql(query.expr, namespace=NAMESPACE, pod=POD, rate_interval="1m")
                if not answers(prometheus, expr):
                    empty.append(f"{panel.title} [{query.ref}]: {expr}")
        assert empty == [], "dashboard queries that return nothing:\n" + "\n".join(empty)

        rule = prometheus_rule()
        on_kube_state_metrics = {a["alert"] for a in alerts(rule) if "kube_" in a["expr"]}
        assert on_kube_state_metrics == set(KUBE_STATE_METRICS_ALERTS)
        checked = []
        for alert in alerts(rule):
            if alert["alert"] in KUBE_STATE_METRICS_ALERTS:
                continue
            expr = with_bool_comparisons(alert["expr"])
            assert answers(prometheus, expr), f"{alert['alert']}: no series for {expr}"
            checked.append(alert["alert"])
        assert len(checked) >= 5

        # Real values behind a few panels: both sides read, the late row counted, the JVM's heap.
        # Rows read come from the query progress, which Spark's listener delivers after the batch
        # (the late row is counted in the batch itself): wait for the second batch's progress.
        prometheus.wait_for_samples(f'sum(changejoin_input_records_total{{job="{FULLNAME}"}}) >= 8', timeout=30)
        read = {s["metric"]["side"]: float(s["value"][1]) for s in answers(prometheus,
            f'changejoin_input_records_total{{job="{FULLNAME}"}}')}
        assert read == {"left": 5, "right": 3}
        heap = {s["metric"]["area"]: float(s["value"][1]) for s in answers(prometheus,
            f'changejoin_jvm_memory_bytes{{job="{FULLNAME}"}}')}
        assert 0 < heap["used"] <= heap["committed"] <= heap["max"]
        watermark = float(answers(prometheus, f'changejoin_watermark_timestamp_seconds{{job="{FULLNAME}"}}')[0]["value"][1])
        assert now / 1000 + 40 < watermark < now / 1000 + 50

        # The lowered dead-letter alert fires in Prometheus, labelled by reason.
        deadline = time.monotonic() + 30
        while True:
            firing = {a["labels"].get("reason") for a in prometheus.api("alerts")["alerts"]
                      if a["labels"]["alertname"] == "ChangejoinDeadLetters" and a["state"] == "firing"}
            if {"late"} <= firing:
                break
            assert time.monotonic() < deadline, prometheus.api("alerts")
            time.sleep(0.5)
        assert all(a["labels"]["alertname"] != "ChangejoinNoProgress" for a in prometheus.api("alerts")["alerts"])
    finally:
        service.stop()
