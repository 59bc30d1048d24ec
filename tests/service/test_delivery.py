"""Exactly-once delivery without a broker: the dependency floor the transactions rely on."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_confluent_kafka_floor_has_producer_close():
    """transactions._close relies on Producer.close() (confluent-kafka 2.13.0) to abort the
    transaction a failed task leaves open; on an older release it does not exist."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (floor,) = [re.search(r">=\s*([\d.]+)", d).group(1) for d in dependencies if d.startswith("confluent-kafka")]
    assert tuple(int(part) for part in floor.split(".")) >= (2, 13), floor
