"""The Spark session: its JVM, and the Spark properties the service sets."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from .config import Settings

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")


#: Attempts of a failed task (a lost executor, a broker hiccup) before its micro-batch fails the query.
TASK_ATTEMPTS = 4
_LOCAL = re.compile(r"^local\[\s*(\*|[0-9]+)\s*\]$|^local$")


def with_task_retries(master: str) -> str:
    """Spark retries no task in local mode unless the master says so (``local[N, F]``): give
    ``local`` and ``local[N]`` :data:`TASK_ATTEMPTS` attempts; other masters use spark.task.maxFailures."""
    match = _LOCAL.match(master.strip())
    if not match:
        return master
    return f"local[{match.group(1) or 1},{TASK_ATTEMPTS}]"


#: Lines of the Spark JVM's standard error that no configuration can silence and nobody can act on:
#: the JDK's notice of the incubator module Spark's launcher always adds (``--add-modules=
#: jdk.incubator.vector``, printed at JVM start, before any logging), and the ``print()``s of
#: PySpark's transformWithState driver-side worker at every query start, which Spark copies to the
#: JVM's standard error as they are. Each may be followed by an empty line, dropped with it.
QUIET_JVM_LINES = (
    re.compile(rb"^WARNING: Using incubator modules: jdk\.incubator\.vector\s*$"),
    re.compile(rb"^(Starting )?Streaming TransformWithStateInPandas Python worker\b"),
)


def _relay_jvm_stderr(stream, out) -> None:
    """Copy the JVM's standard error to ``out`` line by line, except :data:`QUIET_JVM_LINES`."""
    dropped = False
    for line in iter(stream.readline, b""):
        if any(pattern.match(line) for pattern in QUIET_JVM_LINES):
            dropped = True
            continue
        if dropped and not line.strip():
            dropped = False
            continue
        dropped = False
        try:
            out.write(line)
            out.flush()
        except (OSError, ValueError):  # our own stderr is gone: keep draining the JVM's
            pass


def _launch_jvm(conf) -> None:
    """Start Spark's JVM as PySpark would, but with its standard error relayed through
    :func:`_relay_jvm_stderr`. Nothing is done when this process already has a JVM."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
        threading.Thread(target=_relay_jvm_stderr, args=(gateway.proc.stderr, sys.stderr.buffer),
                         name="spark-jvm-stderr", daemon=True).start()
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm


def spark_session(settings: Settings):
    """The Spark session changejoin needs: RocksDB state, Python workers that import the project."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    if settings.spark_master.strip().startswith("local"):
        # One machine: bind to loopback, rather than warn that the host name resolves to it.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    project_root = str(Path(__file__).resolve().parent.parent)
    java_opts = f"-Dlog4j.configurationFile=file:{LOG4J_CONFIG} -Dlog4j2.configurationFile=file:{LOG4J_CONFIG}"
    options = {
        "spark.master": with_task_retries(settings.spark_master),
        "spark.task.maxFailures": str(TASK_ATTEMPTS),
        "spark.app.name": "changejoin",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.shuffle.partitions": str(settings.shuffle_partitions),
        "spark.driver.extraJavaOptions": java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.executorEnv.PYTHONPATH": project_root,
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        # Adaptive query execution does not apply to stateful streaming; off, Spark says nothing of it.
        "spark.sql.adaptive.enabled": "false",
        **settings.spark_conf,
    }
    conf = SparkConf(loadDefaults=False).setAll(list(options.items()))
    _launch_jvm(conf)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("WARN" if settings.log_level != "DEBUG" else "INFO")
    return spark
