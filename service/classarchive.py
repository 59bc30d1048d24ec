"""A class-data-sharing archive of the service's Spark JVM (``SPARK_CLASS_ARCHIVE_DIR``): a start,
and above all a restart after a crash, writes its first output sooner.

Much of a Spark JVM's start goes to loading, parsing and verifying the same classes from the same
jars every time. Java 17 writes the classes a run loaded, already parsed and verified, to a dynamic
archive at its exit (``-XX:ArchiveClassesAtExit``); a JVM started with ``-XX:SharedArchiveFile``
maps them instead. Measured with ``bench/kill_restart_bench.py`` (bench/results/RESULTS.md): the
first output after a kill -9 and a restart about 2 s sooner (median 12.1 against 14.4 s, Spark up
in ~3 s instead of ~4.3 s); the run that records the archive starts ~3 s slower, once.

With the variable set, a start that finds no archive for its JDK and jars in the directory runs
with ``-XX:ArchiveClassesAtExit``, and a graceful stop (SIGTERM) waits for the JVM to write it
(:func:`finish`); every later start maps it. The name holds a digest of the JDK and of PySpark's
jars, so an upgrade makes a new archive rather than use a stale one, and a JVM ignores an archive
that does not match it (``-Xshare:auto``, its default): never an error. A stop that is not
graceful (a crash, a kill) leaves no archive, and the next graceful stop writes it. The archive is
written under a temporary name and renamed once the JVM has exited, so a half-written one is never
mapped. One directory per deployment, on a disk that outlives the process: in Kubernetes a
graceful stop ends the pod, so a volume that outlives the pod.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterable, Optional

log = logging.getLogger(__name__)

#: The written part of an archive whose JVM has not exited yet: ``<name>.<pid>.partial``.
PARTIAL = ".partial"
#: The JVM's notes on the classes it could not archive (signed jars, old class files: hundreds of
#: lines at the stop) are none of the service's output.
QUIET = "-Xlog:cds=off,cds+dynamic=off"
#: How long a graceful stop waits for the JVM to write its archive and exit.
WRITE_TIMEOUT_S = 60.0

_pending: Optional[tuple[Path, Path]] = None  # (partial, final) of this process's JVM, once launched


def java_binary() -> Path:
    """The java Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home) / "bin" / "java" if home else Path(shutil.which("java") or "java")
    return found.resolve()


def archive_file(directory: Path, prefix: str, jars: Iterable[Path]) -> Path:
    """``directory/<prefix>-<digest>.jsa``: the digest of the JDK (its binary and libjvm) and of
    ``jars`` (paths, sizes, modification times)."""
    digest = hashlib.sha256()
    java = java_binary()
    for path in [java, *sorted(java.parent.parent.glob("lib/server/*.so")), *jars]:
        try:
            stat = path.stat()
        except OSError:
            continue
        digest.update(f"{path}\0{stat.st_size}\0{int(stat.st_mtime)}\n".encode())
    return directory / f"{prefix}-{digest.hexdigest()[:16]}.jsa"


def spark_jars() -> list[Path]:
    import pyspark

    return sorted((Path(pyspark.__file__).resolve().parent / "jars").glob("*.jar"))


def driver_option(directory: str | None) -> str:
    """The JVM option of a start with ``SPARK_CLASS_ARCHIVE_DIR`` ``directory``: map the archive,
    or write one at the JVM's exit; empty without a directory, or when it cannot be made (said in
    the log: the service starts all the same)."""
    global _pending
    if not directory:
        return ""
    root = Path(directory)
    try:
        root.mkdir(parents=True, exist_ok=True)
        final = archive_file(root, "spark-driver", spark_jars())
        if final.is_file():
            log.info("SPARK_CLASS_ARCHIVE_DIR: Spark's JVM maps the classes of %s", final)
            return f"-XX:SharedArchiveFile={final} {QUIET}"
        for stale in root.glob(f"*{PARTIAL}"):  # of a JVM killed while it wrote
            stale.unlink(missing_ok=True)
        partial = final.with_name(f"{final.name}.{os.getpid()}{PARTIAL}")
        probe = root / f".probe.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        log.warning("SPARK_CLASS_ARCHIVE_DIR=%s: no class archive (%s); Spark's JVM starts without", directory, err)
        return ""
    _pending = (partial, final)
    log.info("SPARK_CLASS_ARCHIVE_DIR: no class archive for this JDK and Spark yet; a graceful stop writes %s", final)
    return f"-XX:ArchiveClassesAtExit={partial} {QUIET}"


def pending() -> bool:
    """Whether this process's JVM writes an archive at its exit."""
    return _pending is not None


def finish(proc: Optional[subprocess.Popen], timeout_s: float = WRITE_TIMEOUT_S) -> Optional[Path]:
    """After a graceful stop, Spark stopped: when this process's JVM (``proc``, PySpark's gateway
    process) writes an archive at its exit, end it (it exits when its standard input closes) and
    wait until it has written it; then give the archive its name. Returns it, if written."""
    global _pending
    if _pending is None or proc is None:
        return None
    partial, final = _pending
    _pending = None
    started = time.monotonic()
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        code = proc.wait(timeout_s)
    except (OSError, subprocess.TimeoutExpired) as err:
        log.warning("SPARK_CLASS_ARCHIVE_DIR: Spark's JVM did not exit within %.0f s (%s): no class archive",
                    timeout_s, err)
        return None
    if code != 0 or not partial.is_file() or partial.stat().st_size == 0:
        log.warning("SPARK_CLASS_ARCHIVE_DIR: Spark's JVM exited with %s and no class archive", code)
        partial.unlink(missing_ok=True)
        return None
    partial.replace(final)
    log.info("SPARK_CLASS_ARCHIVE_DIR: class archive written in %.1f s: %s (%d MiB), mapped by the next start",
             time.monotonic() - started, final, final.stat().st_size >> 20)
    return final
