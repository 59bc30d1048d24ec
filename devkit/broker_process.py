"""What the two local brokers share: a Kafka-protocol broker as a child process on loopback, its
log file, waiting until it answers, stopping it, and stopping it when Python exits (the exit
registry and the log tail serve devkit/postgres.py too).

The demo's Tansu broker (``embedded_broker.py``) and the tests' and benchmarks' Apache Kafka
(``kafka_broker.py``) are subclasses; neither is used by the service itself.
"""
from __future__ import annotations

import atexit
import signal
import socket
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import IO, Callable, List, Optional


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: have the kernel kill the broker if the thread that started it dies."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


# Every local server still running (a broker, a PostgreSQL: anything with ``close()``), closed
# when Python exits.
_RUNNING: "weakref.WeakSet" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for server in list(_RUNNING):
        try:
            server.close()
        except Exception:
            pass


def close_at_exit(server) -> None:
    """Have ``server.close()`` called when Python exits, unless :func:`forget_at_exit` first."""
    _RUNNING.add(server)


def forget_at_exit(server) -> None:
    _RUNNING.discard(server)


def log_tail(path: Optional[Path], lines: int = 30) -> str:
    """The last ``lines`` lines of a server's log file ("" when there is none)."""
    try:
        text = path.read_text(errors="replace") if path else ""
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class BrokerProcess:
    """A broker process on ``host:port``: subclasses say how to start it (:meth:`start`) and when it
    is ready (the ``ready`` test given to :meth:`_wait_ready`); this class runs, watches and stops it."""

    #: The exception a subclass raises when its broker cannot be started.
    Error: type = RuntimeError
    #: How the broker is named in messages.
    label = "broker"

    def __init__(self, port: Optional[int], host: str, startup_timeout: float):
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self._proc: Optional[subprocess.Popen] = None
        self._log: Optional[IO[bytes]] = None

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise self.Error(f"the {self.label} has not been started yet")
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Optional[Path]:
        raise NotImplementedError

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> str:
        raise NotImplementedError

    def _start_retrying(self, picked: bool, launch: Callable[[int], str]) -> str:
        """``launch(attempt)`` (pick the ports, a fresh one on a retry; spawn; wait until ready; return
        the address), tried up to three times when ``picked`` (the ports were chosen here): only a
        port taken between picking and binding is worth another try."""
        for attempt in range(3 if picked else 1):
            try:
                return launch(attempt)
            except self.Error as exc:
                self._terminate(kill=True)
                if not picked or "Address already in use" not in str(exc) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _spawn(self, command: List[str], env: Optional[dict] = None) -> None:
        """Start ``command`` with its output appended to :attr:`log_path`."""
        assert self.log_path is not None
        self._log = open(self.log_path, "ab")
        self._log.write(f"---- starting {time.strftime('%H:%M:%S')} ----\n".encode())
        self._log.flush()
        self._proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        _RUNNING.add(self)

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    def _wait_ready(self, ready: Callable[[], bool]) -> None:
        """Until ``ready()`` is true (raising counts as not yet); the server exiting, or the start-up
        timeout, is an error."""
        deadline = time.monotonic() + self.startup_timeout
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise self.Error(f"the {self.label} exited with code {self._proc.returncode} while starting on "
                                 f"{self.bootstrap}:\n{self.log_tail()}")
            try:
                if ready():
                    return
            except Exception:
                pass
            if time.monotonic() > deadline:
                raise self.Error(f"the {self.label} did not answer on {self.bootstrap} within "
                                 f"{self.startup_timeout:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)

    def _wait_kafka_ready(self, ready: Callable[[object], bool]) -> None:
        """:meth:`_wait_ready` for a Kafka broker: until ``ready(admin client)`` is true."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        self._wait_ready(lambda: ready(admin))

    def _terminate(self, kill: bool = False, timeout: float = 60) -> None:
        _RUNNING.discard(self)
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            if kill:
                proc.kill()
            else:
                proc.terminate()  # a clean shutdown
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        """Stop the broker for good (subclasses also remove what they created)."""
        self._terminate()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(broker: BrokerProcess) -> int:
    """Run ``broker`` until interrupted, printing its bootstrap string (the modules' ``main``)."""
    print(broker.start(), flush=True)
    try:
        while broker.is_running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        broker.close()
    return 0
