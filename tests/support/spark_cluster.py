"""A Spark standalone cluster on this machine, for tests: one master and two workers started
from the pyspark installation's ``bin/spark-class``, on loopback only.

Executors then run in JVMs of their own (started by the workers), with Python workers of their
own, as on a real cluster: nothing the driver holds in memory reaches them unless it is shipped.
The daemons run in their own process group each, in a scratch directory and without the test's
``PYTHONPATH``, so an executor imports the project only through what the driver configures
(``spark.executorEnv.PYTHONPATH``). Everything is stopped, process group by process group, at
teardown; executors are children of their worker and share its group.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Dict, List

import pytest

from devkit.broker_process import free_port
from tests.support.jvm_archives import service_jvm_options
from tests.support.service_process import group_pids

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
# A cold JVM start on a loaded 2-core machine can take a while; a bound, not an expectation.
REGISTER_TIMEOUT_S = 180.0


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _cmdline(pid: int) -> List[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []


def socket_ports(pid: int) -> set:
    """The local TCP ports of process ``pid``'s sockets (IPv4 and IPv6), from /proc: an executor's
    listening ones (its block manager) and those of the connections it opened. Its RPC endpoint
    is one of the latter: an executor's RPC env runs in client mode, so the driver reaches it
    over the connection the executor opened, and names that connection's port in its errors."""
    sockets = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    sockets.add(target[len("socket:["):-1])
    except OSError:
        return set()
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as f:
            for line in list(f)[1:]:
                fields = line.split()  # sl local_address rem_address st ... inode
                if fields[9] in sockets:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


class Daemon:
    """One master or worker JVM, in its own process group, logging to a file."""

    def __init__(self, name: str, args: List[str], workdir: Path, env: Dict[str, str]):
        self.name = name
        self.log_path = workdir / f"{name}.log"
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args], cwd=workdir, env=env,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def group_pids(self) -> List[int]:
        return group_pids(self.proc.pid)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL to whatever is left after a while."""
        for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 20.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                if self.proc.poll() is not None and not self.group_pids():
                    return
                time.sleep(0.2)
        self.proc.poll()


class SparkCluster:
    """A standalone master and ``workers`` workers of ``cores`` cores and ``memory`` each."""

    def __init__(self, workdir: Path, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.port, self.webui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.workers_wanted = workers
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PYSPARK_")}
        env.update({
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",  # the daemons only schedule; executors get their own heap
            # Spark's classes mapped from the tests' archive, as the tests' services do (jvm_archives.py)
            "SPARK_DAEMON_JAVA_OPTS": service_jvm_options(),
            "SPARK_LOG_DIR": str(workdir),
        })
        self.daemons: List[Daemon] = []
        self.daemons.append(Daemon("master", [
            "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(self.port),
            "--webui-port", str(self.webui_port)], workdir, env))
        self.worker_dirs = []
        for i in range(workers):
            work_dir = workdir / f"worker-{i}"
            work_dir.mkdir(exist_ok=True)
            self.worker_dirs.append(work_dir)
            self.daemons.append(Daemon(f"worker-{i}", [
                "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                "--cores", str(cores), "--memory", memory, "--work-dir", str(work_dir),
                "--webui-port", str(free_port())], workdir, env))

    @property
    def workers(self) -> List[Daemon]:
        return self.daemons[1:]

    def state(self) -> dict:
        """The master's view (its web UI's JSON): workers, applications, ..."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui_port}/json/", timeout=5) as response:
            return json.loads(response.read())

    def alive_workers(self) -> int:
        try:
            return sum(1 for w in self.state().get("workers", []) if w.get("state") == "ALIVE")
        except OSError:
            return 0

    def wait_ready(self, timeout: float = REGISTER_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers_wanted:
            dead = [d.name for d in self.daemons if not d.alive()]
            if dead or time.monotonic() > deadline:
                why = f"{', '.join(dead)} exited" if dead else f"timed out after {timeout:.0f}s"
                raise AssertionError(f"the Spark cluster did not come up ({why}); "
                                     f"{self.alive_workers()} of {self.workers_wanted} workers registered\n"
                                     f"{self.log_tails()}")
            time.sleep(0.5)

    def executors(self) -> Dict[int, str]:
        """{pid: executor id} of the executor JVMs the workers started (and only those)."""
        groups = {w.proc.pid for w in self.workers}
        found = {}
        for pid in (pid for group in groups for pid in group_pids(group)):
            cmd = _cmdline(pid)
            if EXECUTOR_CLASS in cmd and "--executor-id" in cmd:
                found[pid] = cmd[cmd.index("--executor-id") + 1]
        return found

    def executor_logs(self) -> Dict[str, Path]:
        """{"<app>/<executor id>": stderr file} of every executor run so far."""
        return {f"{p.parent.parent.name}/{p.parent.name}": p for d in self.worker_dirs for p in d.glob("*/*/stderr")}

    def log_tails(self, lines: int = 40) -> str:
        parts = [f"--- {d.name} ({self.workdir}) ---\n{d.log_tail(lines)}" for d in self.daemons]
        for name, path in sorted(self.executor_logs().items()):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- executor {name} ---\n" + "\n".join(text))
        return "\n".join(parts)

    def stop(self) -> None:
        for daemon in reversed(self.daemons):  # workers (and their executors) first
            daemon.stop()


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory) -> SparkCluster:
    """A running standalone cluster (master + two 1-core, 1 GB workers) for a test module."""
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"))
    try:
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()
