"""Runs as process trees: CPU seconds and RSS of every process from /proc, the broker this
process started, a measured child run (JSON lines on its stdout), the time to first output."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

from . import ROOT

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def proc_stat(path: str) -> tuple[int, str, float, int] | None:
    """(parent pid, command, CPU seconds, RSS bytes) from a ``/proc/<pid>[/task/<tid>]/stat`` file;
    None once the process is gone."""
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), comm, (int(fields[11]) + int(fields[12])) / TICK, int(fields[21]) * PAGE


def processes() -> dict[int, tuple[int, str, float, int]]:
    """:func:`proc_stat` of every live process, by pid."""
    stats = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = proc_stat(f"/proc/{name}/stat")
            if stat is not None:
                stats[int(name)] = stat
    return stats


def process_tree(stats: dict, root: int) -> set[int]:
    """``root`` and its descendants among ``stats`` (:func:`processes`)."""
    tree, frontier = set(), {root}
    while frontier:
        tree |= frontier
        frontier = {pid for pid, s in stats.items() if s[0] in frontier and pid not in tree}
    return tree


def directory_bytes(path: str) -> int:
    """Bytes of the files under ``path`` (0 if it is gone)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def broker_pid() -> int | None:
    """The pid of the Kafka broker this process started (its ``java`` child), if any."""
    for pid, (ppid, comm, _, _) in processes().items():
        if ppid == os.getpid() and comm == "java":
            return pid
    return None


class TreeSampler:
    """Samples every process under ``root`` (and ``extra`` pids, e.g. the broker) every 0.2 s, and
    the size of ``state_dir`` (if given) every second."""

    def __init__(self, root: int, extra: dict[str, int], state_dir: str | None = None):
        self.root, self.extra, self.state_dir = root, extra, state_dir
        self.cpu: dict[int, tuple[str, float]] = {}  # last seen per pid
        self.peak_rss = 0
        self.peak_state = 0
        self._ticks = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def sample(self) -> None:
        stats = processes()
        tree = process_tree(stats, self.root)
        with self._lock:
            rss = 0
            for pid in tree:
                if pid in stats:
                    _, comm, cpu, r = stats[pid]
                    kind = "jvm" if comm == "java" else "python" if comm.startswith("python") else "other"
                    self.cpu[pid] = (kind, cpu)
                    rss += r
            for label, pid in self.extra.items():
                if pid in stats:
                    self.cpu[pid] = (label, stats[pid][2])
            self.peak_rss = max(self.peak_rss, rss)

    def snapshot(self) -> dict[int, tuple[str, float]]:
        self.sample()
        with self._lock:
            return dict(self.cpu)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self.sample()
            self._ticks += 1
            if self.state_dir and self._ticks % 5 == 0:
                self.peak_state = max(self.peak_state, directory_bytes(self.state_dir))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def cpu_between(before: dict, after: dict) -> dict[str, float]:
    out: Counter = Counter()
    for pid, (kind, cpu) in after.items():
        out[kind] += cpu - before.get(pid, (kind, 0.0))[1]
    return {k: round(v, 1) for k, v in out.items()}


class FirstOutput:
    """Seconds from ``start()`` until ``topic`` holds its first record (end offsets polled every
    0.1 s): the time to first output of a system writing to Kafka, measured the same way for all."""

    def __init__(self, bootstrap: str, topic: str):
        self.bootstrap, self.topic = bootstrap, topic
        self.first: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"first-{time.time_ns()}"})
        try:
            partitions = None
            while not self._stop.wait(0.1):
                try:  # the topic may be new (made by the service): its leaders may not be known yet
                    if partitions is None:
                        meta = consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
                        if meta is None or meta.error is not None or not meta.partitions:
                            continue
                        partitions = [TopicPartition(self.topic, p) for p in meta.partitions]
                    if any(consumer.get_watermark_offsets(tp, timeout=5)[1] > 0 for tp in partitions):
                        self.first = time.perf_counter() - self._t0
                        return
                except KafkaException:
                    continue
        finally:
            consumer.close()

    def stop(self) -> float | None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        return self.first


def run_measured(cmd: list[str], extra: dict[str, int], env: dict | None = None, log: Path | None = None,
                 state_dir: str | None = None, watch: tuple[str, str] | None = None) -> dict:
    """Run ``cmd``; it prints JSON lines ``{"event": "start"}`` and ``{"event": "end", ...}``.
    ``state_dir``: a directory whose peak size is sampled; ``watch``: (bootstrap, topic) whose
    first record is timed from the start event."""
    stderr = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT,
                            env={**os.environ, **(env or {})})
    sampler = TreeSampler(proc.pid, extra, state_dir)
    first = FirstOutput(*watch) if watch else None
    result, before, after = {}, {}, {}
    try:
        for line in proc.stdout:
            if not line.startswith('{"event"'):
                continue
            event = json.loads(line)
            if event["event"] == "start":
                before = sampler.snapshot()
                if first:
                    first.start()
            elif event["event"] == "end":
                after = sampler.snapshot()
                result = event
        proc.wait()
    finally:
        sampler.stop()
        if first:
            first.stop()
        if log:
            stderr.close()
    if proc.returncode != 0 or not result:
        raise RuntimeError(f"{cmd[2] if cmd[1] == '-m' else cmd[1]} failed (exit {proc.returncode}); see {log}")
    result["cpu"] = cpu_between(before, after)
    result["peak_rss_mb"] = round(sampler.peak_rss / 2**20)
    if first and first.first is not None:
        result["first_output"] = first.first
    if state_dir and "state_bytes" not in result:
        result["state_bytes"] = sampler.peak_state
    return result


def child_result(cmd: list[str]) -> dict:
    """Run a child benchmark process (this checkout on its Python path); the JSON line it prints
    as ``{"event": "end", ...}``."""
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    for line in proc.stdout.splitlines():
        if line.startswith('{"event": "end"'):
            return json.loads(line)
    raise RuntimeError(f"run failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
