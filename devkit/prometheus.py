"""A throwaway Prometheus server for the tests and the benchmarks: it scrapes the service's
``/metrics`` so that the chart's dashboard queries and alert expressions can be evaluated against
what a real Prometheus stores. Started from the machine's ``prometheus`` binary (Debian's
``prometheus`` package, which also brings ``promtool``; .ci/run installs it): no Docker. The service
never uses it.

    server = PrometheusServer([Target("127.0.0.1:9108", {"namespace": "streaming", "pod": "p-0"})])
    url = server.start()                  # "http://127.0.0.1:PORT", once it answers /-/ready
    server.wait_for_samples("up")         # until a scrape stored something
    server.query("rate(x[10s])")          # /api/v1/query: the result list
    server.query_range("x", start, end, step)
    server.close()                        # stop and remove the directory (if it made it)

One process on loopback, on a free port picked at the first start; its configuration, its TSDB and
its log (``prometheus.log``) in one directory. Every target is scraped each ``scrape_interval``
(1 s by default) under job ``job`` (a target's labels may set their own ``job``); rule files given
to it are evaluated as often. The process is stopped when Python exits (devkit/broker_process.py's
exit registry), and killed by the kernel if the thread that started it dies.

``python -m devkit.prometheus HOST:PORT [...]`` scrapes those targets until interrupted.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from .broker_process import BrokerProcess, free_port, serve

__all__ = ["PrometheusServer", "PrometheusServerError", "Target", "find_prometheus"]

INSTALL_HINT = "install Debian's `prometheus` package (apt-get install prometheus)"


class PrometheusServerError(RuntimeError):
    """The server cannot be found or started, or a query failed."""


@dataclass(frozen=True)
class Target:
    """A ``host:port`` to scrape, with the labels its samples get (``namespace``, ``pod``, ...)."""

    address: str
    labels: Dict[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"


def find_prometheus() -> str:
    found = shutil.which("prometheus")
    if found is None:
        raise PrometheusServerError(f"no `prometheus` on the PATH; {INSTALL_HINT}")
    return found


class PrometheusServer(BrokerProcess):
    """One Prometheus server scraping ``targets``, in its own directory (by default a fresh
    temporary one, removed by :meth:`close`)."""

    Error = PrometheusServerError
    label = "Prometheus server"

    def __init__(self, targets: Iterable[Target], port: Optional[int] = None, host: str = "127.0.0.1",
                 work_dir: Optional[str] = None, scrape_interval: str = "1s", job: str = "changejoin",
                 rule_files: Iterable[str] = (), startup_timeout: float = 60.0):
        super().__init__(port, host, startup_timeout)
        self.targets = list(targets)
        self.scrape_interval = scrape_interval
        self.job = job
        self.rule_files = [str(Path(f).resolve()) for f in rule_files]
        self._own_dir = work_dir is None
        self.work_dir: Optional[Path] = Path(work_dir) if work_dir else None

    @property
    def url(self) -> str:
        return f"http://{self.bootstrap}"

    @property
    def log_path(self) -> Optional[Path]:
        return self.work_dir / "prometheus.log" if self.work_dir else None

    def config(self) -> Dict[str, Any]:
        """prometheus.yml: one static scrape config per target (each keeps its own labels)."""
        scrapes = []
        for i, target in enumerate(self.targets):
            labels = dict(target.labels)
            job = labels.pop("job", self.job)
            scrapes.append({
                "job_name": f"target-{i}",  # unique per scrape config; the job label is set below
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "metrics_path": target.metrics_path,
                "static_configs": [{"targets": [target.address], "labels": labels}],
                "relabel_configs": [{"target_label": "job", "replacement": job}],
            })
        return {"global": {"scrape_interval": self.scrape_interval, "evaluation_interval": self.scrape_interval},
                "rule_files": self.rule_files, "scrape_configs": scrapes}

    def _command(self) -> List[str]:
        assert self.work_dir is not None
        config = self.work_dir / "prometheus.yml"
        config.write_text(json.dumps(self.config(), indent=1))  # YAML is a superset of JSON
        return [find_prometheus(), f"--config.file={config}", f"--storage.tsdb.path={self.work_dir / 'data'}",
                f"--web.listen-address={self.host}:{self.port}", "--storage.tsdb.retention.time=1d",
                "--log.level=warn"]

    def start(self) -> str:
        """Start the server, wait until it is ready, and return :attr:`url`."""
        if self.is_running():
            return self.url
        find_prometheus()  # before making a directory: no binary, nothing to clean up
        if self.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="changejoin-prometheus-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        picked = self.port is None

        def launch(attempt: int) -> str:
            if self.port is None or attempt:
                self.port = free_port(self.host)
            self._spawn(self._command())
            self._wait_ready(self._answers_ready)
            return self.url

        return self._start_retrying(picked, launch)

    def _answers_ready(self) -> bool:
        with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as response:
            return response.status == 200

    # ---- the HTTP API -------------------------------------------------------------------------

    def api(self, path: str, **params: Any) -> Any:
        """GET ``/api/v1/<path>``; the answer's ``data``. An error (a PromQL syntax error, an
        unknown function) raises :class:`PrometheusServerError` with Prometheus's message."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=30) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            answer = json.loads(exc.read() or b"{}")
        if answer.get("status") != "success":
            raise PrometheusServerError(f"{path} {params}: {answer.get('errorType')}: {answer.get('error')}")
        return answer["data"]

    def query(self, expr: str, at: Optional[float] = None) -> List[Dict[str, Any]]:
        """An instant query: the result's series (``metric`` labels, ``value``)."""
        data = self.api("query", query=expr, time=at)
        return data["result"] if isinstance(data["result"], list) else [{"metric": {}, "value": data["result"]}]

    def query_range(self, expr: str, start: float, end: float, step: float) -> List[Dict[str, Any]]:
        """A range query: the result's series (``metric`` labels, ``values``)."""
        return self.api("query_range", query=expr, start=start, end=end, step=step)["result"]

    def targets_health(self) -> List[str]:
        """The ``health`` of each active target (``up``, ``down``, ``unknown``)."""
        return [t["health"] for t in self.api("targets")["activeTargets"]]

    def wait_for_samples(self, expr: str, timeout: float = 60.0) -> List[Dict[str, Any]]:
        """Until ``expr`` returns at least one series; its result."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(expr)
            if result:
                return result
            if time.monotonic() > deadline:
                raise PrometheusServerError(f"{expr!r} returned nothing within {timeout:.0f} s; targets: "
                                            f"{self.targets_health()}\n{self.log_tail()}")
            time.sleep(0.25)

    # ---- lifecycle ----------------------------------------------------------------------------

    def stop(self) -> None:
        self._terminate()

    def close(self) -> None:
        """Stop the server and remove its directory if this object created it."""
        self._terminate()
        if self._own_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    def __repr__(self) -> str:
        where = self.url if self.port else "not started"
        return f"PrometheusServer({where}, {len(self.targets)} target(s), {self.work_dir})"


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m devkit.prometheus HOST:PORT [...]``: scrape those targets until interrupted,
    printing the server's address."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m devkit.prometheus HOST:PORT [HOST:PORT ...]", file=sys.stderr)
        return 2
    return serve(PrometheusServer([Target(a) for a in args]))


if __name__ == "__main__":
    sys.exit(main())
