"""The task count of a new checkpoint when SHUFFLE_PARTITIONS is unset (``config.default_task_partitions``):
in local mode the cores the master runs tasks on, counted as a container-aware JVM counts them
(``resources.usable_cpus``), up to the buckets; with a cluster master 8. What the count costs
is measured by the latency runs (bench/results/RESULTS.md, 2026-11-29), never asserted here."""
from __future__ import annotations

import pytest

from service import config, resources
from service.config import CLUSTER_TASK_PARTITIONS, default_task_partitions, load_settings
from tests.support.service_env import VALID


@pytest.mark.parametrize("master, expected", [
    ("local[3]", 3), ("local[3, 4]", 3), ("local[ 5 ]", 5), ("local", 1), ("local[1]", 1),
    ("spark://127.0.0.1:7077", CLUSTER_TASK_PARTITIONS),
    ("k8s://https://kubernetes.default.svc", CLUSTER_TASK_PARTITIONS),
])
def test_a_local_master_runs_as_many_tasks_as_its_cores_and_a_cluster_eight(master, expected):
    assert default_task_partitions(master) == expected


def test_local_star_counts_the_cpus_this_process_may_use(monkeypatch):
    monkeypatch.setattr(config, "usable_cpus", lambda: 6)
    assert default_task_partitions("local[*]") == 6
    assert default_task_partitions("local[*, 4]") == 6


def test_the_settings_resolve_the_default_and_keep_an_explicit_count(monkeypatch):
    monkeypatch.setattr(config, "usable_cpus", lambda: 3)
    unset = load_settings(VALID)  # SPARK_MASTER local[*]
    assert unset.shuffle_partitions == 3 and not unset.shuffle_partitions_set
    assert load_settings({**VALID, "SPARK_MASTER": "local[2]"}).shuffle_partitions == 2
    assert load_settings({**VALID, "SPARK_MASTER": "spark://h:7077"}).shuffle_partitions == 8
    explicit = load_settings({**VALID, "SHUFFLE_PARTITIONS": "8"})
    assert explicit.shuffle_partitions == 8 and explicit.shuffle_partitions_set
    assert load_settings({**VALID, "SPARK_CONF_spark_sql_shuffle_partitions": "5"}).shuffle_partitions == 5


class Files:
    """resources._read over a dict of paths (absent: no such file)."""

    def __init__(self, files: dict):
        self.files = files

    def __call__(self, path):
        return self.files.get(path)


@pytest.mark.parametrize("files, quota", [
    ({"/sys/fs/cgroup/cpu.max": "200000 100000"}, 2.0),
    ({"/sys/fs/cgroup/cpu.max": "150000 100000"}, 1.5),
    ({"/sys/fs/cgroup/cpu.max": "max 100000"}, None),
    ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "50000", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}, 0.5),
    ({"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"}, None),
    ({}, None),
])
def test_the_cgroups_cpu_quota_in_v2_and_v1(monkeypatch, files, quota):
    monkeypatch.setattr(resources, "_read", Files(files))
    assert resources.cpu_quota() == quota


def test_the_usable_cpus_are_the_affinity_bounded_by_the_quota_rounded_up(monkeypatch):
    monkeypatch.setattr(resources.os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(resources, "cpu_quota", lambda: 1.5)
    assert resources.usable_cpus() == 2
    monkeypatch.setattr(resources, "cpu_quota", lambda: None)
    assert resources.usable_cpus() == 8
    monkeypatch.setattr(resources, "cpu_quota", lambda: 0.2)
    assert resources.usable_cpus() == 1


def test_the_default_takes_at_most_one_task_per_bucket(monkeypatch):
    monkeypatch.setattr(config, "usable_cpus", lambda: 300)
    assert load_settings(VALID).shuffle_partitions == 256  # a new checkpoint's default buckets
    assert load_settings({**VALID, "STATE_BUCKETS": "16"}).shuffle_partitions == 16
    assert load_settings({**VALID, "STATE_BUCKETS": "0"}).shuffle_partitions == 300  # a key per grouping key
    assert load_settings({**VALID, "SHUFFLE_PARTITIONS": "300"}).shuffle_partitions == 300  # refused at the start
