"""The chart's Grafana dashboard as the tests and the benchmarks read it: its panels' queries, and
Grafana's variables replaced so that Prometheus itself can run them. The dashboard's one source is
``helm/changejoin/monitoring/dashboard.json`` (the chart ships it in a ConfigMap); nothing here is
a copy of it. (The alerts are a template of the chart, thresholds from its values: the tests render
them with ``helm template``, tests/support/monitoring_chart.py.) The service never uses this module.

    for panel in panels():                       # Panel(title, unit, targets=[Query(ref, expr, legend)])
        for q in panel.targets:
            prometheus.query(grafana_to_promql(q.expr, namespace="streaming", pod=".*"))
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

__all__ = ["CHART", "DASHBOARD", "Panel", "Query", "dashboard", "panels", "grafana_to_promql"]

CHART = Path(__file__).resolve().parents[1] / "helm" / "changejoin"
DASHBOARD = CHART / "monitoring" / "dashboard.json"


@dataclass(frozen=True)
class Query:
    ref: str
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: List[Query]


def dashboard(path: Path = DASHBOARD) -> Dict:
    return json.loads(path.read_text())


def panels(board: Optional[Dict] = None) -> List[Panel]:
    """The dashboard's panels that query (rows excepted), in order, including those inside
    collapsed rows."""
    board = dashboard() if board is None else board
    found = []

    def visit(items):
        for item in items:
            if item.get("type") == "row":
                visit(item.get("panels") or [])
                continue
            unit = ((item.get("fieldConfig") or {}).get("defaults") or {}).get("unit", "")
            found.append(Panel(item["title"], unit, [Query(t["refId"], t["expr"], t.get("legendFormat", ""))
                                                     for t in item.get("targets", [])]))

    visit(board.get("panels", []))
    return found


_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def grafana_to_promql(expr: str, namespace: str = ".*", pod: str = ".*", rate_interval: str = "1m",
                      **values: str) -> str:
    """``expr`` with Grafana's variables replaced as Grafana would: ``$namespace`` and ``$pod``
    (regular expressions: the dashboard matches them with ``=~``), ``$__rate_interval``, and any
    other name given in ``values``. A variable left unknown is an error."""
    known = {"namespace": namespace, "pod": pod, "__rate_interval": rate_interval, **values}

    def replace(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        if name not in known:
            raise KeyError(f"no value for the dashboard variable ${name} in {expr!r}")
        return known[name]

    return _VARIABLE.sub(replace, expr)
