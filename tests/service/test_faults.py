"""The tests' crash points of a service in the test's own process (``faults.in_process``): a task's
point kills only the process that reaches it, the driver's point raises, and nothing happens
before the point's micro-batch or at another point."""
from __future__ import annotations

import os
import signal

import pytest

from service import faults


def in_a_child(run) -> int:
    """Call ``run`` in a forked process, as a Python worker would; returns the signal that ended
    it, or 0 if it returned."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            run()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0


def reached_in_a_child(spec: faults.CrashPoint, point: str, batch: int) -> int:
    """Run ``faults.crash`` in a forked process; the signal that ended it, or 0 if it went on."""
    return in_a_child(lambda: faults.crash(spec, point, batch))


def test_a_task_point_kills_only_the_worker_that_reaches_it_from_its_micro_batch_on():
    spec = faults.in_process("mid-produce", batch=3)
    assert reached_in_a_child(spec, "mid-produce", 3) == signal.SIGKILL
    assert reached_in_a_child(spec, "mid-produce", 7) == signal.SIGKILL
    assert reached_in_a_child(spec, "mid-produce", 2) == 0  # an earlier micro-batch
    assert reached_in_a_child(spec, "before-commit", 3) == 0  # another point


def test_the_driver_raises_at_its_point_and_at_a_task_point_it_runs_itself():
    with pytest.raises(RuntimeError, match="before-batch-commit of micro-batch 5"):
        faults.crash(faults.in_process("before-batch-commit", 4), "before-batch-commit", 5)
    # The driver's point raises in any process (a driver is never a worker to kill).
    assert reached_in_a_child(faults.in_process("before-batch-commit"), "before-batch-commit", 0) == 0
    # A task point run by the driver itself (a task evaluated in process) raises: never a kill of the test.
    with pytest.raises(RuntimeError, match="crash point after-commit of micro-batch 0 reached"):
        faults.crash(faults.in_process("after-commit"), "after-commit", 0)
    faults.crash(faults.in_process("after-commit", 1), "after-commit", 0)  # before its micro-batch: nothing


def test_an_unknown_point_is_refused():
    with pytest.raises(ValueError, match="expected one of before-init"):
        faults.in_process("mid-commit")


def test_at_least_once_a_task_crashes_once_the_first_half_of_its_records_is_delivered(tmp_path):
    delivered = tmp_path / "delivered"

    def produce(records):
        with delivered.open("a") as out:
            out.writelines(f"{r}\n" for r in records)

    def sent():
        lines = delivered.read_text().split() if delivered.exists() else []
        delivered.unlink(missing_ok=True)
        return [int(r) for r in lines]

    spec = faults.in_process("mid-produce", batch=2)
    assert in_a_child(lambda: faults.produce_halfway(spec, 2, iter(range(7)), produce)) == signal.SIGKILL
    assert sent() == [0, 1, 2, 3]
    assert in_a_child(lambda: faults.produce_halfway(spec, 2, iter([]), produce)) == 0  # a share without records
    # Before its micro-batch, or another point: every record, no crash (in this process it would raise).
    faults.produce_halfway(spec, 1, iter(range(7)), produce)
    faults.produce_halfway(faults.in_process("before-commit"), 2, iter(range(3)), produce)
    assert sent() == list(range(7)) + list(range(3))
