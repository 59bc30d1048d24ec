"""The chart's alerts and dashboard, offline: promtool (Debian's ``prometheus`` package, which
.ci/run installs) checks the rendered rules and runs their unit tests (tests/deploy/monitoring/
alerts_test.yaml: every alert fires when it should and stays quiet when it should not); every
dashboard query parses as PromQL; thresholds come from the values; every alert has its runbook.
The same rules and dashboard are evaluated against a real Prometheus scraping the running service
in tests/integration/test_dashboard_queries.py."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.helm_tool import helm_or_skip, run_helm
from devkit.monitoring import DASHBOARD, dashboard, grafana_to_promql, panels
from tests.support.monitoring_chart import (CHART, DEFAULT_VALUES, NAMESPACE, RELEASE, alerts, prometheus_rule,
                              write_rule_file)

HERE = Path(__file__).resolve().parent
UNIT_TESTS = HERE / "monitoring" / "alerts_test.yaml"
OPERATIONS = HERE.parents[1] / "docs" / "operations.md"


@pytest.fixture(scope="session")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is required in CI (Debian's `prometheus` package; .ci/run installs it)")
        pytest.skip("promtool unavailable: apt-get install prometheus")
    return found


@pytest.fixture(scope="module")
def rule() -> dict:
    return prometheus_rule()


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(list(args), cwd=cwd, capture_output=True, text=True, timeout=120)


def test_promtool_checks_the_rendered_rules(promtool, rule, tmp_path):
    path = write_rule_file(rule, tmp_path / "rules.yaml")
    proc = run(promtool, "check", "rules", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alerts(rule))} rules found" in proc.stdout


def test_promtool_check_fails_on_a_broken_rule(promtool, rule, tmp_path):
    """The check above can fail: a misspelt function is refused."""
    broken = yaml.safe_load(yaml.safe_dump(rule))
    broken["spec"]["groups"][0]["rules"][0]["expr"] = "rat(changejoin_input_records_total[5m]) > 1"
    proc = run(promtool, "check", "rules", str(write_rule_file(broken, tmp_path / "rules.yaml")), cwd=tmp_path)
    assert proc.returncode != 0 and "rat" in proc.stdout + proc.stderr


def test_promtool_unit_tests_of_every_alert(promtool, rule, tmp_path):
    write_rule_file(rule, tmp_path / "rules.yaml", annotations=False)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    proc = run(promtool, "test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_unit_tests_see_a_changed_threshold(promtool, tmp_path):
    """With the restart threshold at 3, the case written for 2 restarts no longer pages: the unit
    tests run the rendered values, and they fail when an alert does not do what they say."""
    write_rule_file(prometheus_rule("prometheusRule.restarts.count=3"), tmp_path / "rules.yaml", annotations=False)
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    proc = run(promtool, "test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert proc.returncode != 0
    assert "alertname: ChangejoinRestarting" in proc.stdout + proc.stderr


def test_every_alert_has_a_case_that_fires_and_one_that_stays_quiet(rule):
    cases: dict[str, set[bool]] = {}
    for group in yaml.safe_load(UNIT_TESTS.read_text())["tests"]:
        for case in group.get("alert_rule_test", []):
            cases.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    names = [a["alert"] for a in alerts(rule)]
    assert len(names) == len(set(names)) >= 7
    assert {name: cases.get(name, set()) for name in names} == {name: {True, False} for name in names}


def test_alert_thresholds_and_durations_come_from_the_values():
    rule = prometheus_rule("json:prometheusRule.deadLetters.perSecond=0.25", "prometheusRule.deadLetters.for=20m",
                           "prometheusRule.noProgress.triggerIntervals=4", "prometheusRule.inputLagGrowing.window=30m",
                           "prometheusRule.notReady.severity=page", "prometheusRule.alertLabels.team=data")
    by_name = {a["alert"]: a for a in alerts(rule)}
    assert re.search(r"\)\s*>\s*0\.25$", by_name["ChangejoinDeadLetters"]["expr"])
    assert by_name["ChangejoinDeadLetters"]["for"] == "20m"
    assert "clamp_min(4 * max by" in by_name["ChangejoinNoProgress"]["expr"]
    assert "[30m]" in by_name["ChangejoinInputLagGrowing"]["expr"]
    assert by_name["ChangejoinNotReady"]["labels"] == {"severity": "page", "team": "data"}
    assert all(a["labels"]["team"] == "data" for a in by_name.values())


def test_changejoins_series_are_selected_by_the_releases_namespace_and_job(rule):
    """Every selector of changejoin's own metrics names this release's namespace and job (the
    ServiceMonitor's Service), and kube-state-metrics' ones its namespace and driver pods."""
    for alert in alerts(rule):
        selectors = re.findall(r'\b(changejoin_\w+|kube_\w+)\{((?:[^}"]|"[^"]*")*)\}', alert["expr"])
        assert selectors, alert["alert"]
        for metric, matchers in selectors:
            assert f'namespace="{NAMESPACE}"' in matchers, (alert["alert"], metric)
            if metric.startswith("changejoin_"):
                assert 'job="orders-changejoin"' in matchers, (alert["alert"], metric)
            else:
                assert 'pod=~"orders-changejoin-[a-z0-9]{6,10}-[a-z0-9]{5}"' in matchers, (alert["alert"], metric)


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_alert_has_a_runbook_paragraph(rule):
    """docs/operations.md has a heading per alert, its anchor the one the alert's annotation names,
    followed by what it means, what to check and what to do."""
    text = OPERATIONS.read_text()
    for alert in alerts(rule):
        anchor = alert["annotations"]["runbook"].split("#", 1)[1]
        heading = re.search(rf"^#{{3,4}} +{alert['alert']} *$", text, flags=re.M)
        assert heading and anchor == slug(alert["alert"]), alert["alert"]
        section = re.split(r"^#", text[heading.end():], maxsplit=1, flags=re.M)[0]
        for part in ("**Means**", "**Check**", "**Do**"):
            assert part in section, (alert["alert"], part)


# -- the dashboard ----------------------------------------------------------------------------


def test_the_dashboard_has_the_variables_and_every_panel_uses_them():
    board = dashboard()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert {"namespace", "pod"} <= set(variables)
    found = panels(board)
    assert len(found) >= 20 and all(p.targets for p in found)
    for panel in found:
        for query in panel.targets:
            selectors = re.findall(r"\b(changejoin_\w+)(\{[^}]*\})?", query.expr)
            assert selectors, (panel.title, query.expr)
            for metric, matchers in selectors:
                assert matchers == '{namespace=~"$namespace", pod=~"$pod"}', (panel.title, metric)


def test_every_dashboard_query_parses(promtool, tmp_path):
    """Each query, its variables replaced as Grafana does, as a recording rule: promtool parses it."""
    queries = [q.expr for p in panels() for q in p.targets]
    rules = [{"record": f"changejoin:panel_query:{i}", "expr": grafana_to_promql(expr)}
             for i, expr in enumerate(queries)]
    path = tmp_path / "panels.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    proc = run(promtool, "check", "rules", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(queries)} rules found" in proc.stdout


def test_grafana_variables_are_replaced_and_an_unknown_one_is_an_error():
    assert grafana_to_promql('rate(x{namespace=~"$namespace", pod=~"${pod}"}[$__rate_interval])',
                             namespace="ns", pod="p-.*", rate_interval="10s") == \
        'rate(x{namespace=~"ns", pod=~"p-.*"}[10s])'
    with pytest.raises(KeyError, match=r"\$cluster"):
        grafana_to_promql('x{cluster="$cluster"}')
    assert DASHBOARD.is_file()


def test_the_packaged_chart_carries_the_dashboard_and_the_rules(tmp_path):
    """``helm package`` keeps monitoring/ (read by the templates with .Files.Get): the archive
    alone renders both."""
    helm_or_skip()
    run_helm("package", str(CHART), "-d", str(tmp_path), check=True)
    (archive,) = tmp_path.glob("changejoin-*.tgz")
    proc = run_helm("template", RELEASE, str(archive), "--namespace", NAMESPACE, "-f", str(DEFAULT_VALUES),
                              "--set", "prometheusRule.enabled=true", "--set", "grafanaDashboard.enabled=true",
                              check=True)
    docs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(proc.stdout) if d}
    assert json.loads(docs[("ConfigMap", "orders-changejoin-dashboard")]["data"]["changejoin.json"]) == dashboard()
    assert len(alerts(docs[("PrometheusRule", "orders-changejoin")])) == len(alerts(prometheus_rule()))
