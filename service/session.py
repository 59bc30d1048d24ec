"""The Spark session: its JVM, and every Spark property the service sets (:func:`spark_properties`)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from . import classarchive
from .config import LOCAL_MASTER, Settings, local_directory
from .metrics import ready_window_seconds
from .secrets import SPARK_REDACTION_REGEX, URL_USER_INFO

#: Spark fixes it for a checkpoint at its first micro-batch (and records it in every offset log
#: entry); the producing tasks of exactly-once delivery are its partitions (checkpoint.py).
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
LOG4J_CONFIG = Path(__file__).with_name("log4j2.properties")
PROJECT_ROOT = Path(__file__).resolve().parent.parent
#: On the Python workers' path after the project: its ``sitecustomize`` makes them import the installed
#: PySpark rather than compile Spark's ``pyspark.zip`` copy of it (``workersite/sitecustomize.py``).
WORKER_SITE = Path(__file__).resolve().with_name("workersite")
CHECKPOINT_FILE_MANAGER_CONF = "spark.sql.streaming.checkpointFileManagerClass"
LOCAL_CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
ROCKSDB_CHANGELOG_CONF = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
# How often Spark reports an idle query (no new data); readiness needs it well within its window.
IDLE_EVENT_CONF = "spark.sql.streaming.noDataProgressEventInterval"
#: Properties the service sets on the session when its query starts, and restores afterwards
#: (``app.py``), rather than when Spark starts: Spark copies a session's SQL configuration into
#: each query it starts, and a session the service is handed (tests) keeps its own value.
QUERY_START_PROPERTIES = (IDLE_EVENT_CONF,)


#: Attempts of a failed task (a lost executor, a broker hiccup) before its micro-batch fails the query.
TASK_ATTEMPTS = 4


def with_task_retries(master: str) -> str:
    """Spark retries no task in local mode unless the master says so (``local[N, F]``): give
    ``local`` and ``local[N]`` :data:`TASK_ATTEMPTS` attempts; other masters use spark.task.maxFailures."""
    match = LOCAL_MASTER.match(master.strip())
    if not match or match.group(2):
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


_TRACEBACK = b"Traceback (most recent call last):"
_DAEMON_FRAME = re.compile(rb'^  File ".*pyspark/daemon\.py", line \d+, in \w+\s*$')
#: What PySpark's Python daemon prints when a worker's connection to the JVM is gone as it answers
#: (Spark lost an executor, or cancelled a task): a traceback through daemon.py alone ending in a
#: BrokenPipeError (with each frame's source line when the daemon runs from the installed PySpark:
#: ``workersite/sitecustomize.py``; without them from Spark's zip). Nobody can act on it; Spark
#: reports the loss itself. It becomes this one line.
DAEMON_BROKEN_PIPE = (b"WARN PySparkDaemon: a Python worker's connection to the JVM was closed (BrokenPipeError), "
                      b"as when Spark loses an executor or cancels a task\n")


_STOPPING = threading.Event()


def expect_stop(stopping: bool = True) -> None:
    """Whether the service is stopping its query (and Spark): then the Python workers' connections
    closing under PySpark's daemon are expected, and :data:`DAEMON_BROKEN_PIPE` is not relayed."""
    if stopping:
        _STOPPING.set()
    else:
        _STOPPING.clear()


def _relay_jvm_stderr(stream, out) -> None:
    """Copy the JVM's standard error to ``out`` line by line, except :data:`QUIET_JVM_LINES`, and
    with a traceback of PySpark's daemon's broken pipe as one line (:data:`DAEMON_BROKEN_PIPE`),
    or none while the service stops (:func:`expect_stop`)."""
    dropped = False
    traceback: list[bytes] = []  # a Python traceback being read, until its exception line
    for line in iter(stream.readline, b""):
        if traceback:
            traceback.append(line)
            if line.startswith(b"  ") and len(traceback) < 64:
                continue  # a frame: the exception line comes last
            frames = traceback[1:-1]  # "  File ..." lines, each maybe followed by its source and carets
            files = [f for f in frames if f.startswith(b"  File ")]
            quiet = (files and all(_DAEMON_FRAME.match(f) for f in files) and line.startswith(b"BrokenPipeError")
                     and all(f.startswith(b"    ") for f in frames if not f.startswith(b"  File ")))
            _write(out, ([] if _STOPPING.is_set() else [DAEMON_BROKEN_PIPE]) if quiet else traceback)
            traceback = []
            continue
        if line.rstrip() == _TRACEBACK:
            traceback = [line]
            continue
        if any(pattern.match(line) for pattern in QUIET_JVM_LINES):
            dropped = True
            continue
        if dropped and not line.strip():
            dropped = False
            continue
        dropped = False
        _write(out, [line])
    _write(out, traceback)


def _write(out, lines: list[bytes]) -> None:
    try:
        for line in lines:
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


def finish_class_archive(spark) -> None:
    """After a graceful stop: when this process's Spark JVM writes a class archive at its exit
    (``SPARK_CLASS_ARCHIVE_DIR``, ``classarchive.py``), stop Spark, end the JVM :func:`_launch_jvm`
    started and wait until the archive is written."""
    from pyspark import SparkContext

    if classarchive.pending():
        proc = getattr(SparkContext._gateway, "proc", None)
        spark.stop()
        classarchive.finish(proc)


def spark_properties(settings: Settings) -> dict[str, str]:
    """Every Spark property the service sets: the ones it chooses, below, and every ``SPARK_CONF_``
    property, which wins over the service's choice of the same property (all of them; config.py
    refuses only a ``SPARK_CONF_spark_ui_enabled`` that contradicts ``SPARK_UI_ENABLED``).

    RocksDB state; Python workers that import the project (``spark.executorEnv.PYTHONPATH``), PySpark
    from its installed package rather than from the zip Spark puts first on their path
    (:data:`WORKER_SITE`: every Spark start ~10 s sooner done with its first micro-batch), and log
    through the service's log4j2 configuration; :data:`TASK_ATTEMPTS` attempts of a failed task
    (also in local mode: :func:`with_task_retries`); ``SHUFFLE_PARTITIONS``; a micro-batch at every
    trigger even without new data (timers and the watermark move); no console progress bar; no
    adaptive query execution, which does not apply to stateful streaming (off, Spark says nothing of
    it). The UI is off unless ``SPARK_UI_ENABLED``, and Spark's own redaction of its UI, event log
    and plans is extended to config.py's secret names and to URL user info.

    A local checkpoint directory is written through Hadoop's ``FileSystem`` rather than its
    ``FileContext``: without Hadoop's native library (pip's PySpark has none) every
    ``FileContext`` rename looks up its source and target with the ``readlink`` command, twice
    each, for the file and its checksum alike: 8 processes per file written, 32 per micro-batch
    on two partitions (offsets, commits, each state store's snapshot), ~3 ms each from a large
    JVM. A local rename is atomic either way.

    The JVM talks to its Python workers, and they to its state server (three calls per join
    key and micro-batch), over Unix domain sockets rather than TCP on loopback: small
    micro-batches ~10 % shorter (bench/results/RESULTS.md).

    The RocksDB state store commits a micro-batch by writing its changes to a changelog file
    rather than uploading a new snapshot of the store's files (snapshots are made in the
    background, every few versions): the state commit of a small micro-batch falls from ~80
    ms per partition to a few ms. Spark reads a checkpoint written either way, and switches
    an existing one in both directions.

    Spark reports an idle query every ``noDataProgressEventInterval`` (10 s by default), which can
    be longer than the readiness window (``/readyz``): a third of the window, at least 1 s (set
    when the query starts: :data:`QUERY_START_PROPERTIES`)."""
    java_opts = f"-Dlog4j.configurationFile=file:{LOG4J_CONFIG} -Dlog4j2.configurationFile=file:{LOG4J_CONFIG}"
    ready_window_s = ready_window_seconds(settings.trigger_interval_ms, settings.ready_max_trigger_intervals)
    chosen = {
        "spark.master": with_task_retries(settings.spark_master),
        "spark.task.maxFailures": str(TASK_ATTEMPTS),
        "spark.app.name": "changejoin",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        SHUFFLE_PARTITIONS: str(settings.shuffle_partitions),
        DRIVER_JAVA_OPTIONS: java_opts,
        "spark.executor.extraJavaOptions": java_opts,
        "spark.executorEnv.PYTHONPATH": os.pathsep.join((str(PROJECT_ROOT), str(WORKER_SITE))),
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.streaming.noDataMicroBatches.enabled": "true",
        "spark.sql.adaptive.enabled": "false",
        "spark.ui.enabled": "true" if settings.spark_ui_enabled else "false",
        "spark.redaction.regex": SPARK_REDACTION_REGEX,
        "spark.redaction.string.regex": URL_USER_INFO.pattern,
        "spark.python.unix.domain.socket.enabled": "true",
        ROCKSDB_CHANGELOG_CONF: "true",
    }
    if local_directory(settings.checkpoint_location) is not None:
        chosen[CHECKPOINT_FILE_MANAGER_CONF] = LOCAL_CHECKPOINT_FILE_MANAGER
    chosen[IDLE_EVENT_CONF] = f"{max(1000, int(ready_window_s * 1000 // 3))}ms"
    return {**chosen, **settings.spark_conf}


def launch_properties(settings: Settings) -> dict[str, str]:
    """The properties Spark starts with: :func:`spark_properties` but the service's own choice of
    :data:`QUERY_START_PROPERTIES`."""
    return {key: value for key, value in spark_properties(settings).items()
            if key not in QUERY_START_PROPERTIES or key in settings.spark_conf}


def query_start_properties(settings: Settings) -> dict[str, str]:
    """The properties set on the session when the query starts: :data:`QUERY_START_PROPERTIES`
    unless ``SPARK_CONF_`` sets them (Spark then starts with them)."""
    properties = spark_properties(settings)
    return {key: properties[key] for key in QUERY_START_PROPERTIES if key not in settings.spark_conf}


def spark_session(settings: Settings, class_archive: bool = False):
    """The Spark session changejoin needs, started with :func:`launch_properties`; with
    ``class_archive`` (the service as a process), its JVM maps or writes the class archive of
    ``SPARK_CLASS_ARCHIVE_DIR`` (``classarchive.py``)."""
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    if settings.spark_master.strip().startswith("local"):
        # One machine: bind to loopback, rather than warn that the host name resolves to it.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    properties = launch_properties(settings)
    archive = classarchive.driver_option(settings.spark_class_archive_dir) if class_archive else ""
    if archive:  # after the service's and the user's own options (SPARK_CONF_...)
        properties[DRIVER_JAVA_OPTIONS] = f"{properties.get(DRIVER_JAVA_OPTIONS, '')} {archive}".strip()
    conf = SparkConf(loadDefaults=False).setAll(list(properties.items()))
    _launch_jvm(conf)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("WARN" if settings.log_level != "DEBUG" else "INFO")
    check_spark_version(spark.version)
    return spark


#: The Spark releases whose behaviour the service relies on: the state server's protocol, on which
#: state calls are batched (``statewire.py``), and timers firing at ``ts <= watermark``
#: (``TimerStateImpl``), which the bucket layer's own timers follow (``sparkstate.py``).
SPARK_VERSIONS = ("4.3.",)


def check_spark_version(version: str) -> None:
    """Refuse a Spark the service was not made for (a cluster's own distribution, say)."""
    if not version.startswith(SPARK_VERSIONS):
        raise RuntimeError(f"SPARK_MASTER: the cluster runs Spark {version}; changejoin runs on Spark "
                           f"{' or '.join(v + 'x' for v in SPARK_VERSIONS)} (the state protocol and timer semantics "
                           "it relies on): run it on a cluster of that release")
