"""The systems changejoin is compared with: Flink 2.3 (PyFlink in its own virtualenv,
``.cache/flink-venv``, with its Kafka SQL connector and Avro format from Maven Central;
bench/flink_job.py) and Spark's native stream-stream join (bench/spark_native_job.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from . import ROOT
from .data import DEBEZIUM, data_of

FLINK_VERSION = "2.3.0"
FLINK_VENV = ROOT / ".cache" / "flink-venv"
ALL_SYSTEMS = "changejoin,changejoin-rowkind,flink-p1,flink-p2,flink-p1-bh,flink-p2-bh,spark-native"
#: ``changejoin-retract`` (not in the default systems): changejoin on the debezium scenario's
#: debezium-json topics in retract mode, its before images retracting, joined directly without the
#: normalize stage; the service variables it adds.
RETRACT_ENV = {"LEFT_CHANGELOG_MODE": "retract", "RIGHT_CHANGELOG_MODE": "retract"}


def flink_python() -> str:
    """Flink's own virtualenv's Python, made (pip install apache-flink) on first use."""
    python = FLINK_VENV / "bin" / "python"
    probe = [str(python), "-c", f"import importlib.metadata as m; assert m.version('apache-flink') == '{FLINK_VERSION}'"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return str(python)
    print(f"making {FLINK_VENV} with apache-flink=={FLINK_VERSION} (once, ~850 MB)", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(FLINK_VENV)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", f"apache-flink=={FLINK_VERSION}"], check=True)
    return str(python)


def flink_jars() -> list[str]:
    from devkit.jars import jars

    return [str(j) for j in jars("flink-peer")]


def systems_of(scenario: str, systems: list[str]) -> list[str]:
    """Spark's native join runs the insert-only scenario only (no retractions, no mini-batch);
    ``changejoin-rowkind`` (changejoin on the Avro/RowKind topics of the same changes, the
    reference of the format's cost) and ``changejoin-retract`` (the same debezium-json topics in
    retract mode: ``RETRACT_ENV``) only the debezium scenario, where ``changejoin`` reads
    debezium-json."""
    return [s for s in systems if (s != "spark-native" or scenario == "inner-nopk")
            and (s not in ("changejoin-rowkind", "changejoin-retract") or scenario == DEBEZIUM)]


def peer_scenario(scenario: str) -> str:
    """The scenario a peer runs (bench/flink_job.py's ``--scenario``): in the debezium scenario,
    left-pk's job, which reads the same debezium-json topics as changejoin."""
    return data_of(scenario) if scenario == DEBEZIUM else scenario


def flink_command(fpython: str, fjars: list[str], bootstrap: str, scenario: str, system: str, orders: str,
                  prices: str, fmt: str, sink: str, out: str, *more: str) -> list[str]:
    """bench/flink_job.py in Flink's virtualenv (run from the checkout: ``-m bench.flink_job``)
    for ``system`` (``flink-p<parallelism>[-bh]``), then ``more`` of its options."""
    parallelism = system.split("-")[1][1:]
    return [fpython, "-m", "bench.flink_job", "--bootstrap", bootstrap, "--scenario", scenario,
            "--parallelism", parallelism, "--orders", orders, "--prices", prices, "--format", fmt, "--sink", sink,
            "--out", out, "--jars", ",".join(fjars), *more]


def spark_native_command(orders_dir: Path, prices_dir: Path, shuffle_partitions: int) -> list[str]:
    """bench/spark_native_job.py on the Parquet files of the two sides."""
    return [sys.executable, "-m", "bench.spark_native_job", "--orders", str(orders_dir), "--prices", str(prices_dir),
            "--shuffle-partitions", str(shuffle_partitions)]
