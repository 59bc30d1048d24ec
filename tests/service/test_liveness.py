"""/healthz: alive until the query has reported neither progress nor idleness for LIVENESS_TIMEOUT."""
import urllib.error
import urllib.request

from service.config import load_settings
from service.metrics import JoinMetrics, MetricsServer
from tests.support.service_env import VALID


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_liveness_follows_progress_and_idle_reports():
    clock = Clock()
    m = JoinMetrics(ready_window_s=5, clock=clock, liveness_timeout_s=60)
    assert m.liveness() == (True, "ok")
    clock.now += 59  # starting: counted from creation until the first report
    assert m.liveness()[0]
    clock.now += 2
    alive, reason = m.liveness()
    assert not alive and reason.startswith("no progress or idle report for 61s")
    m.mark_progress()  # a progress or idle event
    assert m.liveness() == (True, "ok")
    clock.now += 60
    assert m.liveness()[0]
    clock.now += 1
    assert not m.liveness()[0]


def test_liveness_off_without_a_timeout():
    clock = Clock()
    m = JoinMetrics(clock=clock)
    clock.now += 10 ** 9
    assert m.liveness() == (True, "ok")


def test_healthz_answers_503_once_the_query_is_stuck():
    clock = Clock()
    m = JoinMetrics(ready_window_s=5, clock=clock, liveness_timeout_s=30)
    server = MetricsServer(m, 0).start()
    try:
        assert get(server.port, "/healthz") == (200, "ok\n")
        clock.now += 31
        status, body = get(server.port, "/healthz")
        assert status == 503 and "LIVENESS_TIMEOUT 30s" in body
        m.mark_progress()
        assert get(server.port, "/healthz") == (200, "ok\n")
    finally:
        server.stop()


def test_liveness_timeout_setting():
    assert load_settings(VALID).liveness_timeout_ms == 30 * 60_000
    assert load_settings({**VALID, "LIVENESS_TIMEOUT": "5m"}).liveness_timeout_ms == 300_000
    assert load_settings({**VALID, "LIVENESS_TIMEOUT": "0"}).liveness_timeout_ms == 0


def test_the_service_hands_the_timeout_to_its_metrics():
    from service.app import Service

    service = Service(load_settings({**VALID, "LIVENESS_TIMEOUT": "90s"}), spark=object())
    assert service.metrics.liveness_timeout_s == 90
    service = Service(load_settings({**VALID, "LIVENESS_TIMEOUT": "0"}), spark=object())
    assert service.metrics.liveness_timeout_s is None
