"""The one owner of a checkpoint (``checkpoint.Checkpoint``): where its pinned lookups go, which
micro-batches Spark's logs hold, whether it can be read without Spark, and its lock. What its state
was made for: tests/service/test_checkpoint_compat.py."""
from __future__ import annotations

import os

import pytest

from service.checkpoint import Checkpoint, CheckpointInUse


def spark_logs(directory, offsets=(), commits=()) -> None:
    for log, batches in (("offsets", offsets), ("commits", commits)):
        os.makedirs(directory / log, exist_ok=True)
        for batch in batches:
            (directory / log / str(batch)).write_text("v1\n{}\n")
    (directory / "offsets" / ".0.crc").write_text("")  # Spark's checksums are no micro-batch


def test_a_local_checkpoint_reads_spark_logs_and_names_its_pins(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    store = Checkpoint("cp")
    assert store.local and store.readable and store.directory == "cp"
    assert store.pins == str(tmp_path / "cp" / "changejoin" / "lookups")  # absolute: the executors' too
    assert Checkpoint(f"file://{tmp_path}/cp").pins == store.pins
    assert (store.newest_planned(), store.newest_committed(), store.pending_batch(), store.has_state()) == \
        (None, None, None, False)
    assert store.committed() == []
    spark_logs(tmp_path / "cp", offsets=(0, 1, 2), commits=(0, 1))
    assert (store.newest_planned(), store.newest_committed(), store.pending_batch(), store.has_state()) == (2, 1, 2, True)
    assert store.batch_offsets(2) == "v1\n{}\n" and store.batch_offsets(3) is None
    spark_logs(tmp_path / "cp", commits=(2,))
    assert store.pending_batch() is None
    spark_logs(tmp_path / "cp", commits=(10,))  # in numeric order, not by name
    assert store.committed() == [0, 1, 2, 10] and store.newest_committed() == 10


def test_a_remote_checkpoint_has_no_pins_and_is_read_only_through_spark():
    store = Checkpoint("s3a://bucket/cp")
    assert not store.local and store.directory is None and store.pins is None
    assert not store.readable
    assert Checkpoint("s3a://bucket/cp", lambda: None).readable


def test_the_checkpoint_is_locked_by_one_process_at_a_time(tmp_path):
    store = Checkpoint(str(tmp_path / "cp"))
    lock = store.lock("changejoin run")
    try:
        with pytest.raises(CheckpointInUse, match="is in use by changejoin run"):
            Checkpoint(str(tmp_path / "cp")).lock("changejoin rescale")
    finally:
        lock.release()
    Checkpoint(str(tmp_path / "cp")).lock("changejoin rescale").release()
