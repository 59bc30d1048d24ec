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

# The repository's root must be importable here and by Spark's Python workers, which inherit
# PYTHONPATH: it holds the packages (``service``, ``operators``, ...) and the tests, one package:
# a test module is ``tests.<folder>.test_x`` and imports what the tests share, mappers for Spark's
# workers among it, as ``tests.support.<module>`` (tests/service/test_structure.py).
# CHANGEJOIN_TEST_BUILD: a build of the packages with their compiled extensions, first on both
# paths (tests/support/compiled.py; pytest's import mode, pyproject.toml, keeps it first).
_build = [os.environ["CHANGEJOIN_TEST_BUILD"]] if os.environ.get("CHANGEJOIN_TEST_BUILD") else []
_paths = [*_build, str(REPO_ROOT)]
for _p in reversed(_paths):
    while _p in sys.path:
        sys.path.remove(_p)
    sys.path.insert(0, _p)
_inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in _paths]
os.environ["PYTHONPATH"] = os.pathsep.join([*_paths, *_inherited])

# Kafka: kafka_bootstrap (session), restartable_broker, new_topic; see tests/support/kafka_fixture.py.
from tests.support.kafka_fixture import kafka_bootstrap, new_topic, restartable_broker  # noqa: E402,F401
# PostgreSQL: postgres_url (session), postgres_server (restartable), pg_schema; see tests/support/postgres_fixture.py.
from tests.support.postgres_fixture import pg_schema, postgres_server, postgres_url  # noqa: E402,F401
# Debezium capturing PostgreSQL into Kafka (session scope): debezium_capture; see tests/support/debezium_fixture.py.
from tests.support.debezium_fixture import debezium_capture  # noqa: E402,F401
# Prometheus scraping the service: prometheus_server; see tests/support/prometheus_fixture.py.
from tests.support.prometheus_fixture import prometheus_server  # noqa: E402,F401
# A Spark standalone cluster on this machine (module scope): spark_cluster; see tests/support/spark_cluster.py.
from tests.support.spark_cluster import spark_cluster  # noqa: E402,F401


def pytest_report_header(config) -> str:
    """Which modules this run proves: fails the run if they are not what it claims."""
    from tests.support.compiled import check_imports

    return "changejoin: " + check_imports()


def pytest_collection_finish(session) -> None:
    """Importing the test modules changed nothing the header said: the build (if any) is still
    first on the path and every compiled module still the one it named."""
    from tests.support.compiled import check_imports

    check_imports()


#: The tiers without a broker or a Spark query, and the time a test's call may take there: one that
#: takes longer fails, so the tiers stay quick enough to run at every change (docs/development.md,
#: "Tests"). Time is CPU time (this process's and that of the processes the test ran and waited
#: for), which a machine shared with other work does not stretch as it stretches the clock; a call
#: that waits on real time is held to WAIT_FACTOR times the budget of wall-clock time (times the
#: machine's load per core, when above 1), and belongs in tests/integration.
#: ``CHANGEJOIN_TEST_BUDGET_S`` sets the budget (0: none).
BUDGET_TIERS = ("operators", "service", "expressions")
BUDGET_S = float(os.environ.get("CHANGEJOIN_TEST_BUDGET_S", "2"))
WAIT_FACTOR = 5
_CPU = pytest.StashKey[float]()  # a call's CPU seconds


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    start = _cpu_seconds()
    yield
    item.stash[_CPU] = _cpu_seconds() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (report.when == "call" and report.passed and BUDGET_S
            and any(item.get_closest_marker(tier) for tier in BUDGET_TIERS)):
        return
    cpu = item.stash.get(_CPU, 0.0)
    wait = WAIT_FACTOR * BUDGET_S * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
    if cpu > BUDGET_S or report.duration > wait:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} took {cpu:.2f} s of CPU in {report.duration:.2f} s: a test of the "
                           f"{'/'.join(BUDGET_TIERS)} tiers may take {BUDGET_S:g} s of CPU and {wait:.0f} s now "
                           "(tests/conftest.py BUDGET_S): make it quicker, split it, or move it to tests/integration "
                           "if it waits on real time")


def pytest_addoption(parser) -> None:
    parser.addoption("--after-compiled", action="store_true",
                     help="leave out the tests the compiled build's run runs (tests/support/compiled.py TESTS): "
                          "./dev test's second run, so that each test runs once")


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        folder = Path(str(item.fspath)).resolve().relative_to(TESTS_DIR).parts[0]
        if folder in FOLDERS:
            item.add_marker(getattr(pytest.mark, folder))
    if config.getoption("after_compiled"):
        from tests.support.compiled import selects

        ran = [item for item in items if selects(item.nodeid)]
        if ran:
            config.hook.pytest_deselected(items=ran)
            items[:] = [item for item in items if not selects(item.nodeid)]


@pytest.fixture(scope="session")
def spark() -> Iterator["pyspark.sql.SparkSession"]:  # noqa: F821
    """One local[2] SparkSession for the whole test session."""
    from pyspark.sql import SparkSession

    from service.session import WORKER_SITE
    from tests.support.jvm_archives import spark_archive_option

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
        # Spark's classes mapped from the tests' services' archive when ./dev test has made it
        # (tests/support/jvm_archives.py): the session's JVM starts sooner too.
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.rootLogger.level=warn {spark_archive_option()}".strip())
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
