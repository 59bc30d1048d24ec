"""Class-data-sharing archives of the JVMs the tests start over and over: the Spark JVM of
``python -m service run`` (also the tests' own Spark session's, and the standalone cluster's
daemons and executors, which load the same jars) and the Kafka broker's. Made once per JDK and set
of jars, and mapped by every such JVM a test starts.

A test's service or broker lives for seconds to a minute, and much of its JVM's start goes to
loading, parsing and verifying the same classes every time. Java 17's dynamic archive
(``-XX:ArchiveClassesAtExit``) writes the classes a run loaded, verified and laid out, at its exit;
a JVM started with ``-XX:SharedArchiveFile`` maps them instead (``-Xshare:auto``, the default: an
archive that does not match its JDK or class path is ignored, never an error). Measured on two
cores (bench/results/RESULTS.md, "the tests' JVMs: class-data-sharing archives"): a test service's
start to its first committed micro-batch 12.0 -> 8.5 s and 19.3 -> 14.8 CPU-s; a broker's start
and stop 6.5-8.6 -> 3.6-4.0 CPU-s with C1 only.

``./dev test`` makes them (``python -m tests.support.jvm_archives``: one run of a service on a
broker of its own, both dumping at their exit) beside the compiled build's run, before the run
that starts services. They are kept under ``.cache/cds/``, named by a digest of what they depend
on, so a new JDK, PySpark or broker jar makes new ones and a stale one is never used. A run that
finds none starts its JVMs without. Only the tests use them: the service in a user's deployment,
and the benchmarks' brokers, start as they always did.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable, List

from service.classarchive import archive_file, spark_jars

REPO_ROOT = Path(__file__).resolve().parents[2]
ARCHIVE_DIR = REPO_ROOT / ".cache" / "cds"
#: Short-lived JVMs compile with C1 only: C2's compilations of a JVM that lives for seconds to a
#: minute cost more CPU than they save (docs/development.md, "Tests").
QUICK = "-XX:TieredStopAtLevel=1"


def _archive(kind: str, jars: Iterable[Path]) -> Path:
    """``.cache/cds/<kind>-<digest of the JDK and jars>.jsa``, named as the service names its own
    (service/classarchive.py)."""
    return archive_file(ARCHIVE_DIR, kind, jars)


def service_archive() -> Path:
    """Where the archive of the Spark JVM for this JDK and these Spark jars is (or would be)."""
    return _archive("service", spark_jars())


def broker_archive() -> Path:
    """Where the archive of the Kafka broker's JVM (devkit/kafka_broker.py) is (or would be)."""
    from devkit import jars
    from devkit.kafka_broker import BROKER_JARS

    return _archive("broker", [Path(p) for p in jars.classpath(BROKER_JARS).split(os.pathsep)])


def _mapped(path: Path) -> List[str]:
    return [f"-XX:SharedArchiveFile={path}"] if path.is_file() else []


def service_jvm_options() -> str:
    """What a test's service (and the JVMs that load Spark's jars) start with: C1 only, and the
    archive if it has been made."""
    return " ".join([QUICK, *_mapped(service_archive())])


def spark_archive_option() -> str:
    """The archive alone, for the tests' own Spark session, which lives for the whole run."""
    return " ".join(_mapped(service_archive()))


def broker_jvm_options(short_lived: bool = True) -> List[str]:
    """A test broker's JVM options: the archive if made; C1 only unless it lives for the whole run."""
    return [*([QUICK] if short_lived else []), *_mapped(broker_archive())]


def make(timeout_s: float = 240.0) -> List[Path]:
    """Run a service once (a broker of its own, a LEFT join of a few records in two micro-batches,
    exactly-once delivery, some bad records) and stop both, their JVMs writing the classes they
    loaded: returns the archives."""
    from devkit.kafka_broker import KafkaBroker
    from tests.support.kafka_fixture import create_topic
    from tests.support.service_harness import JoinHarness
    from tests.support.service_process import (PARTITIONS, Changelogs, ServiceProcess, committed, drive, send,
                                               service_env)

    targets = service_archive(), broker_archive()
    ARCHIVE_DIR.mkdir(parents=True, exist_ok=True)
    partial = [t.with_name(f"{t.name}.{os.getpid()}.partial") for t in targets]
    broker = KafkaBroker(jvm_options=[f"-XX:ArchiveClassesAtExit={partial[1]}"])
    try:
        bootstrap = broker.start()
        with tempfile.TemporaryDirectory(prefix="changejoin-cds-") as work:
            names = iter(range(3))

            def new_topic(partitions: int = 1, create: bool = True) -> str:
                name = f"archive-{next(names)}"
                if create:
                    create_topic(bootstrap, name, partitions)
                return name

            log = Changelogs(seed=1)
            h = JoinHarness(bootstrap, None, Path(work), new_topic, PARTITIONS, **service_env(
                DELIVERY="exactly-once",
                SPARK_CONF_spark_driver_defaultJavaOptions=f"{QUICK} -XX:ArchiveClassesAtExit={partial[0]}"))
            send(h, log.chunk(order_ops=40, price_ops=10, poison=True))
            svc = ServiceProcess("archive", h.env, Path(work))
            try:
                svc.start()
                drive({svc: committed(1)}, "the archive's service to commit two micro-batches", timeout_s)
                code = svc.stop()
            finally:
                svc.close()
            if code != 0 or not partial[0].is_file():
                raise RuntimeError(f"the archive's service exited {code} without an archive:\n{svc.log_tail()}")
    finally:
        broker.close()
    if not partial[1].is_file():
        raise RuntimeError("the archive's broker stopped without an archive")
    for made, target in zip(partial, targets):
        made.replace(target)
    return list(targets)


def main() -> int:
    if all(path.is_file() for path in (service_archive(), broker_archive())):
        print("JVM archives: made before (.cache/cds)")
        return 0
    started = time.monotonic()
    try:
        made = make()
    except Exception as error:  # the tests run without them, only slower
        print(f"JVM archives: not made ({type(error).__name__}: {error}); the tests' JVMs start without them",
              file=sys.stderr)
        return 0
    sizes = ", ".join(f"{path.relative_to(REPO_ROOT)} ({path.stat().st_size >> 20} MiB)" for path in made)
    print(f"JVM archives made in {time.monotonic() - started:.0f} s: {sizes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
