"""The chart's alerting rules as the tests read them: rendered by ``helm template`` from
helm/changejoin/monitoring/alerts.yaml (the one source, through templates/prometheusrule.yaml), for
release "orders" in namespace "streaming" as the other chart tests render it. The dashboard is read
by :mod:`devkit.monitoring`."""
from __future__ import annotations

from pathlib import Path

import yaml

from tests.support.helm_tool import REPO_ROOT, helm_or_skip, run_helm

RELEASE, NAMESPACE = "orders", "streaming"
FULLNAME = f"{RELEASE}-changejoin"
CHART = REPO_ROOT / "helm" / "changejoin"
# Values the chart needs to render at all (tests/deploy/values/default.yaml).
DEFAULT_VALUES = Path(__file__).resolve().parents[1] / "deploy" / "values" / "default.yaml"


def prometheus_rule(*sets: str) -> dict:
    """The rendered PrometheusRule (``prometheusRule.enabled=true`` plus ``sets``: ``--set`` each, or
    ``--set-json`` for one starting with ``json:``, as numbers need)."""
    helm_or_skip()
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(DEFAULT_VALUES),
            "--set", "prometheusRule.enabled=true", "--show-only", "templates/prometheusrule.yaml"]
    for s in sets:
        args += ["--set-json", s[len("json:"):]] if s.startswith("json:") else ["--set", s]
    proc = run_helm(*args, check=True)
    (rule,) = [d for d in yaml.safe_load_all(proc.stdout) if d]
    return rule


def alerts(rule: dict) -> list[dict]:
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


def write_rule_file(rule: dict, path: Path, annotations: bool = True) -> Path:
    """The PrometheusRule's groups as a Prometheus rule file (what the operator hands Prometheus)."""
    groups = rule["spec"]["groups"]
    if not annotations:
        groups = [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
                  for g in groups]
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path
