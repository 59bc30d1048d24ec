"""The tests' crash points of a service in the test's own process (``faults.in_process``): a task's
point kills only the process that reaches it, the driver's point raises, and nothing happens
before the point's micro-batch or at another point."""
from __future__ import annotations

import os
import signal

import pytest

from service import faults


def reached_in_a_child(spec: faults.CrashPoint, point: str, batch: int) -> int:
    """Run ``faults.crash`` in a forked process, as a Python worker would; returns the signal that
    ended it, or 0 if it went on past the point."""
    pid = os.fork()
    if pid == 0:  # the child: never back into pytest
        try:
            faults.crash(spec, point, batch)
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0


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
