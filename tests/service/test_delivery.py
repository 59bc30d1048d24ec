"""Exactly-once delivery without a broker: the dependency floor the transactions rely on, and the counts
the driver gathers."""
from __future__ import annotations

import re
import tomllib
from pathlib import Path

from service.pipeline import _Counts, lookup_totals

ROOT = Path(__file__).resolve().parents[2]


def test_the_confluent_kafka_floor_has_producer_close():
    """transactions._close relies on Producer.close() (confluent-kafka 2.13.0) to abort the
    transaction a failed task leaves open; on an older release it does not exist."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (floor,) = [re.search(r">=\s*([\d.]+)", d).group(1) for d in dependencies if d.startswith("confluent-kafka")]
    assert tuple(int(part) for part in floor.split(".")) >= (2, 13), floor


def test_lookup_counts_reported_again_by_a_stage_run_again_count_once():
    param = _Counts()
    total = param.zero({})
    for update in ({0: {"queries": 2, "query_seconds": [0.1]}}, {1: {"queries": 1, "query_seconds": [0.2]}},
                   {0: {"queries": 2, "query_seconds": [0.1]}}):  # partition 0's task ran again
        total = param.addInPlace(total, update)
    assert lookup_totals(total) == {"queries": 3, "query_seconds": [0.1, 0.2]}
