"""What ``changejoin rescale`` decides before Spark rewrites anything (service/rescale.py), on
checkpoint directories laid out as Spark lays them out, with a fake of Spark's checkpoint manager:
the refusals, nothing to do, and an interrupted rescale finished. The rewrite itself, end to end:
tests/integration/test_rescale.py."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from service import checkpoint
from service.catalog import plan_for
from service.checkpoint import CheckpointInUse, CheckpointLock
from service.config import load_settings
from service.rescale import RescaleError, rescale
from tests.support.service_env import VALID


class FakeSpark:
    """A session whose checkpoint manager records the repartitions asked of it."""

    def __init__(self):
        self.asked = []
        manager = SimpleNamespace(repartition=lambda location, n, enforce: self.asked.append((n, enforce)))
        self._jsparkSession = SimpleNamespace(streamingCheckpointManager=lambda: manager)


def checkpoint_dir(tmp_path, batches: list[int], committed: int | None, buckets: int = 256):
    """A checkpoint: micro-batch i planned with ``batches[i]`` task partitions, 0..``committed`` committed."""
    where = tmp_path / "cp"
    settings = load_settings({**VALID, "CHECKPOINT_LOCATION": str(where), "DELIVERY": "at-least-once",
                              "STATE_BUCKETS": str(buckets)})
    plan = plan_for(settings)
    checkpoint.reconcile(plan, str(where), buckets_set=True)
    (where / "offsets").mkdir()
    (where / "commits").mkdir()
    for batch, partitions in enumerate(batches):
        meta = {"batchWatermarkMs": 0, "batchTimestampMs": 0, "conf": {"spark.sql.shuffle.partitions": str(partitions)}}
        (where / "offsets" / str(batch)).write_text(f"v1\n{json.dumps(meta)}\n{{}}\n")
        if committed is not None and batch <= committed:
            (where / "commits" / str(batch)).write_text("v1\n{}\n")
    return settings, plan


def test_a_checkpoint_without_a_committed_micro_batch_is_not_rescaled(tmp_path):
    settings, plan = checkpoint_dir(tmp_path, [2], committed=None)
    with pytest.raises(RescaleError, match="holds no committed micro-batch"):
        rescale(settings, plan, 4, spark_session=FakeSpark)


def test_more_tasks_than_buckets_are_refused(tmp_path):
    settings, plan = checkpoint_dir(tmp_path, [2], committed=0, buckets=64)
    with pytest.raises(RescaleError, match=r"in 64 buckets \(STATE_BUCKETS\), at most one task each: at most --partitions 64"):
        rescale(settings, plan, 65, spark_session=FakeSpark)


def test_the_same_count_is_nothing_to_do_and_asks_nothing_of_spark(tmp_path):
    spark = FakeSpark()
    settings, plan = checkpoint_dir(tmp_path, [2, 2], committed=1)
    assert "has 2 task partitions already: nothing to do" in rescale(settings, plan, 2, spark_session=lambda: spark)
    assert spark.asked == []


def test_a_micro_batch_left_uncommitted_by_the_service_is_refused_saying_how_to_finish_it(tmp_path):
    settings, plan = checkpoint_dir(tmp_path, [2, 2, 2], committed=1)
    with pytest.raises(RescaleError, match=r"micro-batch 2 was started and not committed .* SIGTERM"):
        rescale(settings, plan, 4, spark_session=FakeSpark)


def test_an_interrupted_rescale_is_finished_by_the_same_count_and_refused_to_another(tmp_path):
    """Spark's repartition plans a micro-batch of its own with the new count: stopped before its
    commit, the same count finishes it; another one is refused, naming the one to finish."""
    spark = FakeSpark()
    settings, plan = checkpoint_dir(tmp_path, [2, 2, 5], committed=1)
    with pytest.raises(RescaleError, match=r"a rescale to 5 task partitions was interrupted: finish it first with "
                                           r"`changejoin rescale --partitions 5`, then rescale to 3"):
        rescale(settings, plan, 3, spark_session=lambda: spark)
    assert "2 -> 5 task partitions (an interrupted rescale finished)" in rescale(settings, plan, 5,
                                                                                 spark_session=lambda: spark)
    assert spark.asked == [(5, True)]
    stored = json.loads((tmp_path / "cp" / checkpoint.FILE_NAME).read_text())
    assert stored["task_partitions"] == 5


def test_a_checkpoint_in_use_is_not_rescaled(tmp_path):
    settings, plan = checkpoint_dir(tmp_path, [2], committed=0)
    lock = CheckpointLock(settings.checkpoint_location).acquire("changejoin run")
    try:
        with pytest.raises(CheckpointInUse, match=r"is in use by changejoin run \(pid \d+ on "):
            rescale(settings, plan, 4, spark_session=FakeSpark)
    finally:
        lock.release()
    assert "2 -> 4 task partitions" in rescale(settings, plan, 4, spark_session=FakeSpark)
