"""Named crash points, for the recovery tests. A service started with one (``Service(...,
crash=in_process(point, batch))``, in the test's own process and on its Spark) crashes the first
time a micro-batch numbered at least ``batch`` reaches ``point``:

- ``before-init``: a producing task starts, before its transactional producer exists;
- ``mid-produce``: a task has queued its records, its transaction is open;
- ``before-commit``: a task has queued its records and its progress marker, not committed;
- ``after-commit``: a task has committed its transaction, before it returns to Spark;
- ``before-batch-commit``: every task has returned, before Spark records the micro-batch as done.

At least once (no transactions) only ``mid-produce`` and ``before-batch-commit`` apply: a task
crashes once the first half of its records is delivered (:func:`produce_halfway`).

A task that reaches its point SIGKILLs its own Python worker: the task's transactional producer
dies with an open transaction, as in a killed service, and the task fails the micro-batch. The
driver raises a RuntimeError at ``before-batch-commit``: the micro-batch fails before Spark records
it, as when the driver dies there. Either way the query stops with the checkpoint a kill leaves.
The task points apply to a task with output only; at ``mid-produce`` and ``before-commit`` the
records queued so far are sent first, so that a ``read_uncommitted`` reader sees the aborted
attempt. Never set in production: the driver only ships the point to its tasks (``pipeline.py``).
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

POINTS = ("before-init", "mid-produce", "before-commit", "after-commit", "before-batch-commit")
#: The point on the driver; the others are in the producing tasks.
DRIVER_POINT = "before-batch-commit"


@dataclass(frozen=True)
class CrashPoint:
    """Where to crash (one of :data:`POINTS`), from which micro-batch on, and the process the
    service's driver runs in (never killed: it raises)."""

    point: str
    batch: int
    driver_pid: int


def in_process(point: str, batch: int = 0) -> CrashPoint:
    """A crash point for a service run in this process: at a task point only the Python worker
    that reaches it is killed, and the driver point raises a RuntimeError."""
    if point not in POINTS:
        raise ValueError(f"unknown crash point {point!r}: expected one of {', '.join(POINTS)}")
    return CrashPoint(point, batch, os.getpid())


def crash(spec: Optional[CrashPoint], point: str, batch_id: int) -> None:
    """If ``point`` of ``batch_id`` is the one of ``spec``: SIGKILL this process (a Python worker),
    or raise in the driver."""
    if spec is None or spec.point != point or batch_id < spec.batch:
        return
    if point == DRIVER_POINT or os.getpid() == spec.driver_pid:
        # A test's own failure, no ChangejoinError: the query fails as when its driver dies.
        raise RuntimeError(f"crash point {point} of micro-batch {batch_id} reached")
    os.kill(os.getpid(), signal.SIGKILL)


def produce_halfway(spec: Optional[CrashPoint], batch_id: int, records: Iterable,
                    produce: Callable[[list], object]) -> None:
    """At least once, a task's share with ``mid-produce`` as its crash point: ``produce`` (which
    returns once the broker has acknowledged them) the first half of ``records``, crash, then the
    rest. A consumer has read part of a micro-batch that Spark has not recorded, as when a service
    is killed while it writes."""
    records = list(records)
    half = (len(records) + 1) // 2
    produce(records[:half])
    if records:
        crash(spec, "mid-produce", batch_id)
    produce(records[half:])
