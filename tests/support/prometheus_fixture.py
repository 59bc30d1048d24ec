"""A Prometheus server for the tests (devkit/prometheus.py): ``prometheus_server(targets, ...)``
starts one scraping ``targets`` every second, with its TSDB in the test's temporary directory,
and stops it after the test. Skipped where Debian's ``prometheus`` package is not installed,
except in CI (.ci/run installs it)."""
from __future__ import annotations

import os
import shutil
from typing import Callable, Iterator, List

import pytest

from devkit.prometheus import PrometheusServer, Target


@pytest.fixture
def prometheus_server(tmp_path) -> Iterator[Callable[..., PrometheusServer]]:
    if shutil.which("prometheus") is None:
        if os.environ.get("CI"):
            pytest.fail("prometheus is required in CI (Debian's `prometheus` package; .ci/run installs it)")
        pytest.skip("prometheus unavailable: apt-get install prometheus")
    started: List[PrometheusServer] = []

    def start(targets: List[Target], **kwargs) -> PrometheusServer:
        server = PrometheusServer(targets, work_dir=str(tmp_path / f"prometheus-{len(started)}"), **kwargs)
        started.append(server)
        server.start()
        return server

    yield start
    for server in started:
        server.close()
