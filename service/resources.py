"""What this process may use of the machine: its CPUs and its memory, bounded by its cgroup's
limits (a container's, under Kubernetes) where it has them. Shared by the settings (the task
count of a new checkpoint in local mode) and the transactions (how much of a share a task holds
in memory); it imports nothing of the service."""
from __future__ import annotations

import math
import os

#: cgroup v2 (the container's own hierarchy under a private cgroup namespace), then v1.
_CPU_MAX = "/sys/fs/cgroup/cpu.max"
_CPU_QUOTA_V1 = ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")
_MEMORY_MAX = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity), at most its cgroup's CPU quota rounded up:
    how a container-aware JVM counts them for Spark's ``local[*]`` (``availableProcessors``)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cpu_quota()
    return max(1, min(cpus, math.ceil(quota)) if quota else cpus)


def cpu_quota() -> float | None:
    """The cgroup's CPU quota in CPUs (``cpu.max``: quota over period), or None without one."""
    text = _read(_CPU_MAX)
    if text is not None:
        quota, _, period = text.partition(" ")
        return int(quota) / int(period or 100_000) if quota.isdigit() else None
    quota, period = (_read(path) for path in _CPU_QUOTA_V1)
    if quota and period and quota.lstrip("-").isdigit() and int(quota) > 0 and period.isdigit():
        return int(quota) / int(period)
    return None


def memory_limit() -> int:
    """The bytes this process may use: its cgroup's memory limit, else the machine's memory."""
    for path in _MEMORY_MAX:
        text = _read(path)
        if text is not None and text.isdigit() and int(text) < 1 << 60:
            return int(text)
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 1 << 30


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None
