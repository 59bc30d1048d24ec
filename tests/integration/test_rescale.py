"""``changejoin rescale --partitions N`` (service/rescale.py) end to end on the real broker: a LEFT
join with exactly-once output rescaled 2 -> 5 -> 3 while its input keeps changing keys from
before each rescale, and crashed mid-micro-batch (a task's Python worker SIGKILLed with its
transaction open) after the last one. A ``read_committed`` consumer sees
a changelog that applies as a multiset never below zero, and ends with what an unrescaled run of
the same input ends with. The refusals a user meets on the way are part of it: a running service,
an uncommitted micro-batch, more tasks than buckets, another SHUFFLE_PARTITIONS than the
checkpoint's."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.kafka_fixture import create_topic
from service import checkpoint
from service.catalog import plan_for
from service.checkpoint import CheckpointInUse, CheckpointMismatch
from service.config import load_settings
from service.rescale import RescaleError, rescale
from tests.support.service_harness import REPO_ROOT, SERVICE_PROCESS_ENV, JoinHarness, drop_replays, retract_table
from tests.support.service_process import PARTITIONS, Changelogs, send, service_env

pytestmark = pytest.mark.integration


def task_partitions(h: JoinHarness) -> int:
    return checkpoint.Checkpoint(h.env["CHECKPOINT_LOCATION"]).shuffle_partitions()


def rescale_in_process(h: JoinHarness, spark, partitions: int) -> str:
    settings = load_settings(h.env)
    return rescale(settings, plan_for(settings), partitions, spark_session=lambda: spark)


def test_a_left_join_rescaled_2_to_5_to_3_and_crashed_reads_like_an_unrescaled_run(
        kafka_bootstrap, spark, tmp_path, new_topic):
    log = Changelogs(seed=20261128)
    chunks = [log.chunk(order_ops=40, price_ops=10) for _ in range(4)]
    env = service_env(DELIVERY="exactly-once", MAX_RECORDS_PER_TRIGGER="40")

    reference = JoinHarness(kafka_bootstrap, spark, tmp_path / "unrescaled", new_topic, PARTITIONS, **env)
    for chunk in chunks:
        send(reference, chunk)
    reference.run()

    h = JoinHarness(kafka_bootstrap, spark, tmp_path / "rescaled", new_topic, PARTITIONS, **env)
    create_topic(kafka_bootstrap, h.output, PARTITIONS)
    send(h, chunks[0])
    h.run()
    assert task_partitions(h) == 2

    # Not while the service runs on the checkpoint; nor beyond the buckets.
    service = h.start()
    try:
        with pytest.raises(CheckpointInUse, match="is in use by changejoin run"):
            rescale_in_process(h, spark, 5)
    finally:
        service.stop()
    with pytest.raises(RescaleError, match="in 256 buckets .* at most --partitions 256"):
        rescale_in_process(h, spark, 300)

    assert "2 -> 5 task partitions" in rescale_in_process(h, spark, 5)
    assert task_partitions(h) == 5
    del h.env["SHUFFLE_PARTITIONS"]  # unset: the checkpoint's
    with pytest.raises(CheckpointMismatch, match=r"SHUFFLE_PARTITIONS=4: .* runs 5 task partitions; .* "
                                                  r"`changejoin rescale --partitions 4`"):
        h.start(SHUFFLE_PARTITIONS="4")
    send(h, chunks[1])  # updates of orders and prices joined before the rescale
    h.run()
    h.run(SHUFFLE_PARTITIONS="5")  # the same count as the checkpoint's: accepted

    # 5 -> 3 as a user does it: the command, with the service's environment.
    done = subprocess.run([sys.executable, "-m", "service", "rescale", "--partitions", "3"], cwd=REPO_ROOT,
                          env={**os.environ, **SERVICE_PROCESS_ENV, **h.env}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "5 -> 3 task partitions" in done.stdout
    assert json.loads((Path(h.env["CHECKPOINT_LOCATION"]) / checkpoint.FILE_NAME).read_text())["task_partitions"] == 3

    # A crash in the middle of a micro-batch after the rescale (a task's Python worker killed with
    # its transaction open: faults.in_process): it stays to be replayed, so no rescale now; the
    # next run replays it.
    send(h, chunks[2])
    batch = h.crash("mid-produce", MAX_RECORDS_PER_TRIGGER="10")
    with pytest.raises(RescaleError, match=rf"micro-batch {batch} was started and not committed .* SIGTERM"):
        rescale_in_process(h, spark, 2)
    send(h, chunks[3])
    h.run(MAX_RECORDS_PER_TRIGGER="10")
    assert task_partitions(h) == 3

    changes, replays = drop_replays(h.changelog())
    assert replays == [], "a read_committed consumer saw a record twice"
    assert retract_table(changes) == reference.retract_table() == log.retract_table()
