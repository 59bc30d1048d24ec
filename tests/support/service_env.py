"""The environment the service's tests start from, shared by the unit and integration tiers: a
valid configuration over the repository's schemas (:data:`VALID`), the ``changejoin`` command run
as a user runs it, and what its output looks like."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
DATA = ROOT / "tests" / "data"
#: A configuration the service accepts: a left join of orders and prices, each by its schema file.
VALID = {
    "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    "LEFT_TOPIC": "orders", "RIGHT_TOPIC": "prices", "OUTPUT_TOPIC": "out",
    "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders.avsc"), "RIGHT_SCHEMA_FILE": str(SCHEMAS / "prices.avsc"),
    "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product",
    "JOIN_SQL": "SELECT o.order_id, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product",
}
#: :data:`VALID` with the left input's schema from the registry (a rowkind input without a schema file).
FROM_REGISTRY = {**VALID, "LEFT_SCHEMA_FILE": ""}
#: Timed orders and shipments (tests/data), for interval, window and event-time joins.
TIMED = dict(
    LEFT_SCHEMA_FILE=str(DATA / "orders_timed.avsc"), RIGHT_SCHEMA_FILE=str(DATA / "shipments.avsc"),
    RIGHT_TABLE="shipments", LEFT_PRIMARY_KEY="order_id", RIGHT_PRIMARY_KEY="ship_id",
    LEFT_CHANGELOG_MODE="append", RIGHT_CHANGELOG_MODE="append",
    LEFT_EVENT_TIME_COLUMN="order_time", RIGHT_EVENT_TIME_COLUMN="ship_time",
)


def changejoin(*args, env, cwd=ROOT):
    """``changejoin <args>`` in a process of its own, with ``env`` only (and a PATH)."""
    return subprocess.run([sys.executable, "-m", "service", *args], cwd=cwd, env={"PATH": "/usr/bin:/bin", **env},
                          capture_output=True, text=True, timeout=180)


@pytest.fixture(autouse=True)
def _checkpoints_elsewhere(tmp_path, monkeypatch):
    """No command may leave a checkpoint in the checkout (a run that gets further would): a test
    module that runs commands on :data:`VALID` imports this autouse fixture."""
    monkeypatch.setitem(VALID, "CHECKPOINT_LOCATION", str(tmp_path / "checkpoint"))


def closed_port() -> int:
    from devkit.broker_process import free_port

    return free_port()  # bound and released: nothing listens there


LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z]+) (?P<logger>[\w.]+): (?P<message>.*)$")


def log_lines(stderr: str) -> list[tuple[str, str, str]]:
    """(level, logger, message) of each line, every line being one of the service's log lines."""
    found = []
    for line in stderr.splitlines():
        match = LOG_LINE.match(line)
        assert match, f"not a log line of the service: {line!r}"
        found.append((match["level"], match["logger"], match["message"]))
    return found
