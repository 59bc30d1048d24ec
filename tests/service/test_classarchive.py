"""SPARK_CLASS_ARCHIVE_DIR (service/classarchive.py): which option a start gets, and how a graceful
stop names the archive its JVM wrote (here a process standing in for the JVM: it exits when its
standard input closes, as PySpark's gateway does, writing the file it was told to)."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from service import classarchive


@pytest.fixture(autouse=True)
def no_pending(monkeypatch):
    monkeypatch.setattr(classarchive, "_pending", None)


def jvm_standin(option: str, code: int = 0, write: bytes = b"classes") -> subprocess.Popen:
    """A process that, once its standard input closes, writes ``write`` where ``option``
    (-XX:ArchiveClassesAtExit=...) says and exits with ``code``."""
    path = option.split()[0].split("=", 1)[1]
    script = (f"import sys; sys.stdin.read(); open({path!r}, 'wb').write({write!r}) if {bool(write)} else None; "
              f"sys.exit({code})")
    return subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)


def test_without_a_directory_nothing_changes():
    assert classarchive.driver_option(None) == ""
    assert not classarchive.pending()
    assert classarchive.finish(None) is None


def test_the_first_start_writes_at_its_graceful_stop_and_the_next_maps_it(tmp_path):
    directory = tmp_path / "cds"
    directory.mkdir()
    stale = directory / "spark-driver-0123456789abcdef.jsa.99.partial"  # of a JVM killed while it wrote
    stale.write_bytes(b"half")
    option = classarchive.driver_option(str(directory))
    write, quiet = option.split()
    assert write.startswith("-XX:ArchiveClassesAtExit=") and write.endswith(f".{os.getpid()}.partial")
    assert quiet == classarchive.QUIET  # the JVM's notes on what it could not archive: not in the service's output
    assert classarchive.pending() and not stale.exists()
    archive = classarchive.finish(jvm_standin(option))
    assert archive is not None and archive.read_bytes() == b"classes"
    assert archive.parent == directory and archive.name.startswith("spark-driver-") and archive.suffix == ".jsa"
    assert list(directory.glob("*.partial")) == [] and not classarchive.pending()
    assert classarchive.driver_option(str(directory)) == f"-XX:SharedArchiveFile={archive} {classarchive.QUIET}"
    assert not classarchive.pending()  # mapped: nothing to write at the stop


@pytest.mark.parametrize("code, write", [(1, b"classes"), (0, b"")])
def test_a_jvm_that_fails_or_writes_nothing_leaves_no_archive(tmp_path, code, write):
    option = classarchive.driver_option(str(tmp_path))
    assert classarchive.finish(jvm_standin(option, code, write)) is None
    assert list(tmp_path.iterdir()) == []
    assert classarchive.driver_option(str(tmp_path)).startswith("-XX:ArchiveClassesAtExit=")  # tried again


def test_a_directory_is_made_if_missing(tmp_path):
    assert classarchive.driver_option(str(tmp_path / "a" / "b")).startswith("-XX:ArchiveClassesAtExit=")
    assert (tmp_path / "a" / "b").is_dir()


def test_a_directory_that_cannot_be_made_starts_without_and_says_so(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING, logger="service.classarchive"):
        assert classarchive.driver_option(str(blocker / "cds")) == ""
    assert not classarchive.pending()
    assert "SPARK_CLASS_ARCHIVE_DIR=" in caplog.text and "starts without" in caplog.text


def test_the_name_changes_with_the_jars(tmp_path):
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"one")
    first = classarchive.archive_file(tmp_path, "spark-driver", [jar])
    assert classarchive.archive_file(tmp_path, "spark-driver", [jar]) == first
    jar.write_bytes(b"three")  # another size: another Spark
    assert classarchive.archive_file(tmp_path, "spark-driver", [jar]) != first
    assert classarchive.archive_file(tmp_path, "spark-driver", [Path(tmp_path / "b.jar"), jar]) != first
