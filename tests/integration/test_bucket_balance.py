"""Balanced tasks, asked of Spark itself: where Spark's hash partitioning (the shuffle in front of
every stateful stage, and the offline repartition of ``changejoin rescale``) puts each bucket's
grouping key (``envelope.bucket_group``), at the task counts a deployment runs."""
from __future__ import annotations

from collections import Counter

import pytest
from pyspark.sql import functions as F

from service.envelope import bucket_group
from service.plan import DEFAULT_STATE_BUCKETS

pytestmark = pytest.mark.integration


def tasks_of(spark, keys: list[bytes], partitions: int) -> Counter:
    """How many of ``keys`` each of ``partitions`` tasks gets, as Spark hashes a grouping column."""
    df = spark.createDataFrame([(key,) for key in keys], "jk binary")
    placed = df.repartition(partitions, "jk").select(F.spark_partition_id().alias("task")).collect()
    return Counter(row.task for row in placed)


@pytest.mark.parametrize("partitions", [2, 8, 32, 128, 256, 5, 3])
def test_the_busiest_task_holds_at_most_1_15x_the_mean_of_the_buckets(spark, partitions):
    per_task = tasks_of(spark, [bucket_group(b) for b in range(DEFAULT_STATE_BUCKETS)], partitions)
    mean = DEFAULT_STATE_BUCKETS / partitions
    assert len(per_task) == partitions, "a task holds no bucket"
    assert max(per_task.values()) <= 1.15 * mean
    if DEFAULT_STATE_BUCKETS % partitions == 0:
        assert set(per_task.values()) == {DEFAULT_STATE_BUCKETS // partitions}  # exactly as many each


def test_the_first_layouts_bucket_keys_were_not_balanced(spark):
    """What checkpoints written before keep: the keys of the first layout fall where Spark's hash
    of them falls (64 buckets on 32 tasks: 4 tasks with none, the busiest with 5 against 2)."""
    per_task = tasks_of(spark, [bucket_group(b, keys=1) for b in range(64)], 32)
    assert len(per_task) < 32 or max(per_task.values()) > 1.15 * 2
