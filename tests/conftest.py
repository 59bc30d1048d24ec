"""Shared fixtures. Keep this file small: put fixture code in helper modules and import it here."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS_DIR = Path(__file__).resolve().parent

#: The tests' folders, mirroring the code; each folder's tests carry its name as a marker
#: (``pytest -m operators``, ``-m "not integration"``).
FOLDERS = {
    "expressions": "Flink's scalar expressions in expressions/: types, functions, compiled code (no Spark, no Kafka)",
    "operators": "the join state machines in operators/, on the in-memory host (no Spark, no Kafka)",
    "service": "service/ without a broker or a Spark query: config, SQL, plan, formats, state bytes, layout",
    "integration": "a real Kafka broker and a real Spark query (or cluster)",
    "deploy": "the Dockerfile and the Helm chart",
}
SUPPORT = TESTS_DIR / "support"  # what the tests share: brokers, fakes, the service harness

# The repository (for `service`, `operators`), the test helpers and the test folders (tests import
# constants from one another, and Spark's Python workers load test mappers) must be importable here
# and by Spark's Python workers, which inherit PYTHONPATH.
# CHANGEJOIN_TEST_BUILD: a build of the packages with their compiled extensions, imported first
# (tests/support/compiled.py).
_build = [os.environ["CHANGEJOIN_TEST_BUILD"]] if os.environ.get("CHANGEJOIN_TEST_BUILD") else []
_paths = [*_build, str(REPO_ROOT), str(SUPPORT), *(str(TESTS_DIR / folder) for folder in FOLDERS)]
for _p in reversed(_paths):
    if _p not in sys.path:
        sys.path.insert(0, _p)
_pythonpath = list(_paths)
if os.environ.get("PYTHONPATH"):
    _pythonpath.append(os.environ["PYTHONPATH"])
os.environ["PYTHONPATH"] = os.pathsep.join(_pythonpath)

# Kafka: kafka_bootstrap (session), restartable_broker, new_topic; see tests/support/kafka_fixture.py.
from kafka_fixture import kafka_bootstrap, new_topic, restartable_broker  # noqa: E402,F401
# PostgreSQL: postgres_url (session), postgres_server (restartable), pg_schema; see tests/support/postgres_fixture.py.
from postgres_fixture import pg_schema, postgres_server, postgres_url  # noqa: E402,F401
from debezium_fixture import debezium_capture  # noqa: E402,F401  (Debezium capturing PostgreSQL into Kafka, module scope)
# Prometheus scraping the service: prometheus_server; see tests/support/prometheus_fixture.py.
from prometheus_fixture import prometheus_server  # noqa: E402,F401
# A Spark standalone cluster on this machine (module scope): spark_cluster; see tests/support/spark_cluster.py.
from spark_cluster import spark_cluster  # noqa: E402,F401


def pytest_report_header(config) -> str:
    """Which modules this run proves: fails the run if they are not what it claims."""
    from compiled import check_imports

    return "changejoin: " + check_imports()


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        folder = Path(str(item.fspath)).resolve().relative_to(TESTS_DIR).parts[0]
        if folder in FOLDERS:
            item.add_marker(getattr(pytest.mark, folder))


@pytest.fixture(scope="session")
def spark() -> Iterator["pyspark.sql.SparkSession"]:  # noqa: F821
    """One local[2] SparkSession for the whole test session."""
    from pyspark.sql import SparkSession

    from service.session import WORKER_SITE

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("changejoin-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        # As the service's workers (service/session.py): the installed PySpark, not Spark's zip of it.
        .config("spark.executorEnv.PYTHONPATH", os.pathsep.join((os.environ["PYTHONPATH"], str(WORKER_SITE))))
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.rootLogger.level=warn")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
