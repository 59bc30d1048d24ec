"""SIGTERM (a rolling update, a scale-down) with the service in its own process (``python -m service
run``): it finishes the micro-batch in flight, then stops, even with input waiting and
``TRIGGER_INTERVAL=0`` (a trigger always active): nothing is left to run again at the next start,
and the input it did not read stays for it. With ``SPARK_CLASS_ARCHIVE_DIR``, the stop also waits for
Spark's JVM to write its class archive, which the next start maps."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.jvm_archives import QUICK
from tests.support.service_harness import JoinHarness
from tests.support.service_process import (
    PARTITIONS,
    START_TIMEOUT_S,
    Changelogs,
    ServiceProcess,
    caught_up,
    committed,
    drive,
    group_pids,
    send,
    service_env,
)

pytestmark = pytest.mark.integration


def test_sigterm_with_input_waiting_finishes_the_micro_batch_in_flight_then_stops(kafka_bootstrap, tmp_path, new_topic):
    log = Changelogs(seed=20261128)
    # Five records per micro-batch and several hundred waiting: a hundred micro-batches of work.
    archives = tmp_path / "class-archive"
    # Spark's JVM without the tests' own archive (tests/support/jvm_archives.py), to write its own.
    env = service_env(TRIGGER_INTERVAL="0", MAX_RECORDS_PER_TRIGGER="5", SPARK_CLASS_ARCHIVE_DIR=str(archives),
                      SPARK_CONF_spark_driver_defaultJavaOptions=QUICK)
    h = JoinHarness(kafka_bootstrap, None, tmp_path, new_topic, PARTITIONS, **env)
    send(h, log.chunk(order_ops=250, price_ops=60))
    svc = ServiceProcess("service", h.env, tmp_path)
    try:
        svc.start()
        drive({svc: committed(1)}, "the second micro-batch to commit", START_TIMEOUT_S)
        before = svc.commits()[-1]
        assert svc.stop() == 0, svc.log_tail()
    finally:
        svc.close()
    text = svc.log_path.read_text(errors="replace")
    assert "stopping after the current micro-batch" in text
    after = svc.commits()[-1]
    # The micro-batch in flight when the signal came, and one that may have committed between the
    # look at commits/ above and the signal: no more (without the stop, ~20 more ran meanwhile).
    assert after <= before + 2, f"{after - before} micro-batches committed after SIGTERM:\n{svc.log_tail()}"
    # Nothing left to run again: every micro-batch Spark planned is committed.
    planned = svc.store.newest_planned()
    assert planned == after, f"micro-batch {planned} was planned and not committed"
    # The input not read yet is still waiting: the scenario held.
    assert caught_up(log.sent)(svc, []) is None

    # The stop waited for Spark's JVM to write its class archive; the next start maps it.
    written = list(archives.iterdir())
    assert len(written) == 1 and written[0].name.startswith("spark-driver-") and written[0].suffix == ".jsa", written
    assert written[0].stat().st_size > 10 << 20 and "class archive written in" in text
    assert "[cds]" not in text  # the JVM's notes on what it could not archive: not in the service's output
    again = ServiceProcess("again", h.env, tmp_path)
    try:
        again.start()
        drive({again: lambda s, _: any(str(written[0]) in read_maps(pid) for pid in group_pids(s.proc.pid)) or None},
              "a process of the next start to map the archive", START_TIMEOUT_S)
        again.kill()  # the mapping is all this start is for
    finally:
        again.close()
    assert list(archives.iterdir()) == written  # mapped, not written again


def read_maps(pid: int) -> str:
    """The memory map of process ``pid`` (empty once it is gone)."""
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""
