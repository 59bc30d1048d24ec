"""A start's steps that wait on the disk and the brokers run while Spark's JVM boots
(``Service._launch_spark``): with SHUFFLE_PARTITIONS unset too, nothing before the query asks the
session that is still starting, so that a restart's first output is not later by the time the
topics and the transactional ids take (``bench.kill_restart_bench`` dates those steps)."""
from __future__ import annotations

import threading

import pytest

from service import app
from service.app import Service
from service.config import load_settings
from tests.support.service_env import VALID


class StillBooting(Exception):
    """What the stand-in for Spark's start raises once the test has seen what ran before it."""


@pytest.mark.parametrize("partitions", [None, "4"])
def test_the_topics_and_the_transactional_ids_do_not_wait_for_spark(monkeypatch, tmp_path, partitions):
    released = threading.Event()
    seen = []

    def booting(settings, class_archive=False):
        released.wait(10)  # set by the transactional ids' step, unless the start waits on this first
        raise StillBooting

    def topics(self, task_partitions=None, progress_topic=None):
        seen.append(("topics", released.is_set(), task_partitions))
        return 2

    def delivery(self, store, task_partitions, progress_topic):
        seen.append(("transactional ids", released.is_set(), task_partitions))
        released.set()

    monkeypatch.setattr(app, "spark_session", booting)
    monkeypatch.setattr(Service, "ensure_topics", topics)
    monkeypatch.setattr(Service, "_delivery", delivery)
    env = {**VALID, "CHECKPOINT_LOCATION": str(tmp_path / "checkpoint"), "METRICS_PORT": "0"}
    if partitions:
        env["SHUFFLE_PARTITIONS"] = partitions
    service = Service(load_settings(env))
    with pytest.raises(StillBooting):
        service.start()
    count = int(partitions) if partitions else service.settings.shuffle_partitions  # else the default: the cores
    assert seen == [("topics", False, count), ("transactional ids", False, count)]


def test_a_given_sessions_own_count_plans_a_new_checkpoint(monkeypatch, tmp_path):
    class Conf:
        def get(self, key, default=None):
            return "3" if key == "spark.sql.shuffle.partitions" else default

    class Session:
        conf = Conf()

        @property
        def streams(self):
            raise StillBooting

    seen = []
    monkeypatch.setattr(Service, "ensure_topics", lambda self, task_partitions=None, progress_topic=None: 2)
    monkeypatch.setattr(Service, "_delivery", lambda self, store, task_partitions, topic: seen.append(task_partitions))
    service = Service(load_settings({**VALID, "CHECKPOINT_LOCATION": str(tmp_path / "cp"), "METRICS_PORT": "0"}),
                      spark=Session())
    with pytest.raises(StillBooting):
        service.start()
    assert seen == [3]
