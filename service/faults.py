"""Named crash points, for the recovery tests: ``CHANGEJOIN_TEST_CRASH_AT=<point>[@<batch>]`` makes
the service kill itself with SIGKILL (its whole process group: the driver, Spark's JVM and its Python
workers, as the tests' own kill does) the first time a micro-batch numbered at least ``<batch>``
(default 0) reaches ``<point>``:

- ``before-init``: a producing task starts, before its transactional producer exists;
- ``mid-produce``: a task has queued its records, its transaction is open;
- ``before-commit``: a task has queued its records and its progress marker, not committed;
- ``after-commit``: a task has committed its transaction, before it returns to Spark;
- ``before-batch-commit``: every task has returned, before Spark records the micro-batch as done.

The task points apply to a task with output only; at ``mid-produce`` and ``before-commit`` the
records queued so far are sent first, so that a ``read_uncommitted`` reader sees the aborted attempt. Never set in production; the service reads it
only to ship it to its tasks (``pipeline.py``).

A service run in the test's own process takes a point made by :func:`in_process` instead: a task
that reaches it SIGKILLs only its own Python worker (the task's transactional producer dies with
an open transaction, as in a killed service, and the task fails the micro-batch), and the driver
raises a RuntimeError at ``before-batch-commit`` (the micro-batch fails before Spark
records it, as when the driver dies there): the query stops with the checkpoint a kill leaves.
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Mapping, Optional

ENV = "CHANGEJOIN_TEST_CRASH_AT"
POINTS = ("before-init", "mid-produce", "before-commit", "after-commit", "before-batch-commit")
#: The point on the driver; the others are in the producing tasks.
DRIVER_POINT = "before-batch-commit"


@dataclass(frozen=True)
class CrashPoint:
    """Where to crash (one of :data:`POINTS`), from which micro-batch on, and the process group
    to kill (the driver's: the service's whole process tree), or None for a service in the test's
    own process (:func:`in_process`), whose driver runs in process ``driver_pid``."""

    point: str
    batch: int
    pgid: Optional[int]
    driver_pid: Optional[int] = None


def in_process(point: str, batch: int = 0) -> CrashPoint:
    """A crash point for a service run in this process: at a task point only the Python worker
    that reaches it is killed, and the driver point raises a RuntimeError."""
    if point not in POINTS:
        raise ValueError(f"unknown crash point {point!r}: expected one of {', '.join(POINTS)}")
    return CrashPoint(point, batch, None, os.getpid())


def from_env(environ: Mapping[str, str] = os.environ) -> Optional[CrashPoint]:
    """The crash point the environment asks for, with the process group to kill, or None."""
    text = environ.get(ENV, "").strip()
    if not text:
        return None
    point, _, batch = text.partition("@")
    if point not in POINTS or (batch and not batch.isdigit()):
        raise ValueError(f"{ENV}: expected one of {', '.join(POINTS)}, optionally @<batch id>; got {text!r}")
    return CrashPoint(point, int(batch or 0), os.getpgrp())


def crash(spec: Optional[CrashPoint], point: str, batch_id: int) -> None:
    """SIGKILL the process group of ``spec`` (and this process) if ``point`` of ``batch_id`` is the one;
    of an in-process ``spec``, this process only, or raise in its driver."""
    if spec is None or spec.point != point or batch_id < spec.batch:
        return
    if spec.pgid is None:
        if point == DRIVER_POINT or os.getpid() == spec.driver_pid:
            # A test's own failure, no ChangejoinError: the query fails as when its driver dies.
            raise RuntimeError(f"crash point {point} of micro-batch {batch_id} reached")
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        os.killpg(spec.pgid, signal.SIGKILL)
    finally:
        os.killpg(os.getpgrp(), signal.SIGKILL)  # a Python worker: PySpark's daemon and its workers
        os.kill(os.getpid(), signal.SIGKILL)
