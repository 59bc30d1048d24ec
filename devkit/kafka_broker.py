"""A single-node Apache Kafka broker (KRaft, broker and controller in one JVM) for the tests and
the benchmarks, started from the jars :mod:`devkit.jars` fetches from Maven Central. The service
never uses it.

    with KafkaBroker() as bootstrap:      # "127.0.0.1:PORT"; the data directory is removed after
        ...

    broker = KafkaBroker()
    bootstrap = broker.start()            # formats a fresh data directory on the first start
    broker.stop()                         # the data stays on disk
    broker.start()                        # same ports, same data: topics, records, producer ids
    broker.close()                        # stop and remove the data directory (if it made it)

Besides its PLAINTEXT listener it may have, for tests of what clients meet (``tls=True``) an SSL
listener with a self-signed certificate for 127.0.0.1 made by the JDK's keytool (``ca_file`` is that
certificate, for a client's ``ssl.ca.location``), and (``sasl_users={"alice": "secret"}``) a
SASL_PLAINTEXT listener with the PLAIN mechanism letting those users in; ``address("SSL")`` and
``address("SASL_PLAINTEXT")`` are where they listen.

Loopback only, on free ports picked at the first start and kept for restarts. One partition per
topic by default, replication factor 1 everywhere (internal topics included), no automatic topic
creation unless asked for. The JVM is stopped when the Python process exits (atexit; on Linux the
kernel also kills it if the thread that started it dies). Needs ``java`` (17+) on the PATH, or
``JAVA_HOME``.

``python -m devkit.kafka_broker [PORT]`` runs one until interrupted.
"""
from __future__ import annotations

import base64
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from .broker_process import BrokerProcess, free_port, serve

__all__ = ["KafkaBroker", "KafkaBrokerError", "free_port"]

BROKER_JARS = "kafka-broker"  # the jar group (jars/kafka-broker/pom.xml)
NODE_ID = 1
TLS_PASSWORD = "changejoin-test"  # the TLS listener's keystore: a throwaway certificate


class KafkaBrokerError(RuntimeError):
    """The broker cannot be started."""


def java_executable() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "java"), os.X_OK):
        return os.path.join(home, "bin", "java")
    found = shutil.which("java")
    if found is None:
        raise KafkaBrokerError("the Kafka broker needs Java 17 or later: no `java` on the PATH and no JAVA_HOME")
    return found


def new_cluster_id() -> str:
    """A random cluster id as Kafka writes one (URL-safe base64 of 16 bytes, not starting with '-')."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


LOG4J2 = """\
# Written by devkit/kafka_broker.py: warnings and errors only, on stdout (the broker's log file).
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
"""


class KafkaBroker(BrokerProcess):
    """Start, stop and restart one KRaft broker+controller on loopback.

    ``advertised`` (``host:port``) is the address the broker gives clients in its metadata, when
    they must reach it some other way (through a proxy); by default its own listener.
    ``properties`` add to or override the generated ``server.properties``; ``jvm_options`` go to
    its JVMs (the tests' brokers map a class-data-sharing archive: tests/support/jvm_archives.py)."""

    Error = KafkaBrokerError
    label = "Kafka broker"

    def __init__(
        self,
        port: Optional[int] = None,
        host: str = "127.0.0.1",
        advertised: Optional[str] = None,
        data_dir: Optional[str] = None,
        heap: str = "512m",
        auto_create_topics: bool = False,
        properties: Optional[Dict[str, str]] = None,
        startup_timeout: float = 180.0,
        tls: bool = False,
        sasl_users: Optional[Dict[str, str]] = None,
        jvm_options: Sequence[str] = (),
    ):
        super().__init__(port, host, startup_timeout)
        self.jvm_options = list(jvm_options)
        #: The extra listeners' ports by name (``SSL``, ``SASL_PLAINTEXT``), picked at the first start.
        self.listener_ports: Dict[str, Optional[int]] = {}
        if tls:
            self.listener_ports["SSL"] = None
        if sasl_users:
            self.listener_ports["SASL_PLAINTEXT"] = None
        self.sasl_users = dict(sasl_users or {})
        self._port_given = port is not None
        self.controller_port: Optional[int] = None
        self.advertised = advertised
        self.heap = heap
        self.auto_create_topics = auto_create_topics
        self.extra_properties = dict(properties or {})
        self._own_dir = data_dir is None
        self.data_dir = Path(data_dir) if data_dir else None
        self._classpath: Optional[str] = None

    # ---- addresses and files ----------------------------------------------------------------

    @property
    def log_path(self) -> Optional[Path]:
        return self.data_dir / "broker.log" if self.data_dir else None

    def address(self, listener: str) -> str:
        """``host:port`` of an extra listener (``SSL``, ``SASL_PLAINTEXT``) once started."""
        port = self.listener_ports.get(listener)
        if port is None:
            raise KafkaBrokerError(f"no {listener} listener (started?)")
        return f"{self.host}:{port}"

    @property
    def ca_file(self) -> Path:
        """The TLS listener's certificate (PEM), the CA a client trusts it by (``ssl.ca.location``)."""
        assert self.data_dir is not None
        return self.data_dir / "tls" / "broker.pem"

    def _keystore(self) -> Path:
        """A PKCS12 keystore with a self-signed certificate for this host (made once, by keytool)."""
        assert self.data_dir is not None
        store = self.data_dir / "tls" / "broker.p12"
        if store.is_file():
            return store
        store.parent.mkdir(parents=True, exist_ok=True)
        keytool = os.path.join(os.path.dirname(os.path.realpath(java_executable())), "keytool")
        common = ["-alias", "broker", "-keystore", str(store), "-storetype", "PKCS12", "-storepass", TLS_PASSWORD]
        for args in (["-genkeypair", "-keyalg", "RSA", "-keysize", "2048", "-validity", "30",
                      "-dname", f"CN={self.host}", "-ext", f"SAN=IP:{self.host},DNS:localhost",
                      "-keypass", TLS_PASSWORD, *common],
                     ["-exportcert", "-rfc", "-file", str(self.ca_file), *common]):
            proc = subprocess.run([keytool, *args], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=120)
            if proc.returncode != 0:
                raise KafkaBrokerError(f"keytool {args[0]} failed: {proc.stdout}{proc.stderr}")
        return store

    def _listener_properties(self) -> Dict[str, str]:
        """The extra listeners' own properties (the TLS keystore, the SASL users)."""
        props: Dict[str, str] = {}
        if "SSL" in self.listener_ports:
            store = self._keystore()
            props.update({"listener.name.ssl.ssl.keystore.location": str(store),
                          "listener.name.ssl.ssl.keystore.type": "PKCS12",
                          "listener.name.ssl.ssl.keystore.password": TLS_PASSWORD,
                          "listener.name.ssl.ssl.key.password": TLS_PASSWORD})
        if "SASL_PLAINTEXT" in self.listener_ports:
            users = " ".join(f'user_{name}="{password}"' for name, password in self.sasl_users.items())
            props.update({"sasl.enabled.mechanisms": "PLAIN",
                          "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN",
                          "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                              f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"})
        return props

    def server_properties(self) -> Dict[str, str]:
        assert self.data_dir is not None and self.port is not None and self.controller_port is not None
        advertised = self.advertised or self.bootstrap
        extra = "".join(f",{name}://{self.host}:{port}" for name, port in self.listener_ports.items())
        props = {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@{self.host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}{extra}",
            "advertised.listeners": f"PLAINTEXT://{advertised}{extra}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
                                              + "".join(f",{name}:{name}" for name in self.listener_ports),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": "1",
            "default.replication.factor": "1",
            "min.insync.replicas": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": str(self.auto_create_topics).lower(),
            # Small: a test broker holds little, and two or three may run beside Spark.
            "log.segment.bytes": str(16 * 2**20),
            "log.index.size.max.bytes": str(2**20),
            "log.cleaner.dedupe.buffer.size": str(8 * 2**20),
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
        }
        props.update(self._listener_properties())
        props.update(self.extra_properties)
        return props

    def _write_config(self) -> Path:
        assert self.data_dir is not None
        path = self.data_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.server_properties().items()))
        (self.data_dir / "log4j2.properties").write_text(LOG4J2)
        return path

    def _java(self, main_class: str, *args: str) -> List[str]:
        if self._classpath is None:
            from . import jars

            self._classpath = jars.classpath(BROKER_JARS)
        assert self.data_dir is not None
        return [
            java_executable(), f"-Xmx{self.heap}", "-Xms64m", "-XX:+UseSerialGC", *self.jvm_options,
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-cp", self._classpath, main_class, *args,
        ]

    # ---- lifecycle ----------------------------------------------------------------------------

    def _format(self, config: Path) -> None:
        """Format the storage once (``kafka-storage.sh format``); a restart reuses it."""
        assert self.data_dir is not None
        if (self.data_dir / "logs" / "meta.properties").is_file():
            return
        cmd = self._java("kafka.tools.StorageTool", "format", "--cluster-id", new_cluster_id(),
                         "--config", str(config), "--ignore-formatted")
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=self.startup_timeout)
        if proc.returncode != 0:
            raise KafkaBrokerError(f"formatting {self.data_dir} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")

    def start(self) -> str:
        """Start the broker (same ports and data as before if it ran already), wait until it
        answers with itself in its metadata, and return the bootstrap string."""
        if self.is_running():
            return self.bootstrap
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="changejoin-kafka-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        def launch(attempt: int) -> str:
            if self.port is None or (attempt and not self._port_given):
                self.port = free_port(self.host)
            if self.controller_port is None or attempt:
                self.controller_port = free_port(self.host)
            for name, port in self.listener_ports.items():
                if port is None or attempt:
                    self.listener_ports[name] = free_port(self.host)
            config = self._write_config()
            self._format(config)
            self._spawn(self._java("kafka.Kafka", str(config)))
            self._wait_kafka_ready(lambda admin: NODE_ID in admin.list_topics(timeout=1.0).brokers)
            return self.bootstrap

        return self._start_retrying(self.port is None or self.controller_port is None, launch)

    def stop(self, kill: bool = False) -> None:
        """Stop the broker, keeping its data; ``kill`` skips the clean shutdown (SIGKILL)."""
        self._terminate(kill=kill)

    def close(self) -> None:
        """Stop the broker and remove its data directory if this object created it."""
        self._terminate()
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m devkit.kafka_broker [PORT]``: run a broker until interrupted."""
    args = list(sys.argv[1:] if argv is None else argv)
    return serve(KafkaBroker(port=int(args[0]) if args else None))


if __name__ == "__main__":
    sys.exit(main())
