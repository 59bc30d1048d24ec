"""A Kafka Connect worker in standalone mode, with Debezium's PostgreSQL connector on its classpath,
for the tests and the benchmarks: a real Debezium capture of a PostgreSQL table
(:mod:`devkit.postgres`, ``wal_level=logical``) into a Kafka broker (:mod:`devkit.kafka_broker`),
no Docker. Started from the jars :mod:`devkit.jars` fetches (group ``debezium``, fetched on first
use). The service never uses it.

    connect = KafkaConnect("127.0.0.1:9092")         # the broker the connectors write to
    url = connect.start()                             # "http://127.0.0.1:PORT", its REST API
    connect.add_connector("cdc", {...})               # PUT /connectors/cdc/config, waits RUNNING
    connect.status("cdc")                             # GET /connectors/cdc/status
    connect.remove_connector("cdc")
    connect.stop()                                    # the offsets file stays
    connect.start()                                   # same port, same connectors, same offsets
    connect.close()                                   # stop and remove the directory (if it made it)

    debezium_postgres_config(url, topic_prefix="shop", tables=["public.customers"], slot="shop")

One JVM (``org.apache.kafka.connect.cli.ConnectStandalone``) on loopback: its REST API on a free
port picked at the first start and kept for restarts; source offsets in a file in its directory
(``offsets``), flushed every second; its log in ``connect.log`` there (warnings and Debezium's own
information). Connectors added with :meth:`KafkaConnect.add_connector` are remembered and given to
the worker again as properties files when it restarts (a standalone worker keeps no connector
configuration of its own). Converters: Connect's JSON converter for keys and values, with the
schema in each record (``{"schema": ..., "payload": ...}``) or without (``schemas=False``); a
connector may override them (``value.converter.schemas.enable`` in its config). Topics are made by
the worker (``topic.creation.default.*`` in :func:`debezium_postgres_config`), so the broker need not
create topics on its own.

Plugins are found with ``plugin.discovery=service_load`` on the plain classpath (no plugin path):
Connect's and Debezium's jars declare theirs, and it saves the seconds a classpath scan costs.
Needs ``java`` (17+) on the PATH, or ``JAVA_HOME``.

``python -m devkit.kafka_connect BOOTSTRAP [PORT]`` runs a worker until interrupted.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional

from .broker_process import BrokerProcess, free_port, serve
from .kafka_broker import java_executable

__all__ = ["KafkaConnect", "KafkaConnectError", "debezium_postgres_config"]

CONNECT_JARS = "debezium"  # the jar group (jars/debezium/pom.xml)
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"
JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
POSTGRES_CONNECTOR = "io.debezium.connector.postgresql.PostgresConnector"


class KafkaConnectError(RuntimeError):
    """The worker cannot be started, or a connector does not run."""


LOG4J2 = """\
# Written by devkit/kafka_connect.py: warnings and errors, and Debezium's information, on stdout
# (the worker's log file).
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.out.ref = out
logger.debezium.name = io.debezium
logger.debezium.level = info
logger.started.name = org.apache.kafka.connect.cli.AbstractConnectCli
logger.started.level = info
# Warns about every configuration key a connector's producer does not know.
logger.config.name = org.apache.kafka.clients.producer.ProducerConfig
logger.config.level = error
"""


def _properties(values: Dict[str, Any]) -> str:
    """A Java properties file (values escaped where Java's reader would change them)."""
    def esc(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", "\\n")

    return "".join(f"{esc(str(k))}={esc(str(v))}\n" for k, v in values.items())


class KafkaConnect(BrokerProcess):
    """Start, stop and restart one standalone Kafka Connect worker writing to ``bootstrap``.

    ``schemas``: whether the JSON converters (keys and values) write each record's schema.
    ``properties`` add to or override the generated worker properties; ``jar_group`` is the
    :mod:`devkit.jars` group whose jars make the classpath. ``quick_start`` compiles with the JIT's
    first tier only: the worker answers in half the time (about 5 s instead of 10 on two busy
    cores) but runs slower; turn it off for a benchmark that captures much."""

    Error = KafkaConnectError
    label = "Kafka Connect worker"

    def __init__(
        self,
        bootstrap: str,
        port: Optional[int] = None,
        host: str = "127.0.0.1",
        work_dir: Optional[str] = None,
        schemas: bool = True,
        heap: str = "384m",
        properties: Optional[Dict[str, str]] = None,
        jar_group: str = CONNECT_JARS,
        quick_start: bool = True,
        startup_timeout: float = 180.0,
    ):
        super().__init__(port, host, startup_timeout)
        self.kafka_bootstrap = bootstrap
        self._port_given = port is not None
        self.schemas = schemas
        self.heap = heap
        self.extra_properties = dict(properties or {})
        self.jar_group = jar_group
        self.quick_start = quick_start
        self._own_dir = work_dir is None
        self.work_dir = Path(work_dir) if work_dir else None
        self.connectors: Dict[str, Dict[str, str]] = {}
        self._classpath: Optional[str] = None

    # ---- addresses and files ----------------------------------------------------------------

    @property
    def url(self) -> str:
        """The REST API's base URL, ``http://HOST:PORT``."""
        return f"http://{self.bootstrap}"

    @property
    def log_path(self) -> Optional[Path]:
        return self.work_dir / "connect.log" if self.work_dir else None

    @property
    def offsets_path(self) -> Optional[Path]:
        return self.work_dir / "offsets" if self.work_dir else None

    def worker_properties(self) -> Dict[str, str]:
        assert self.work_dir is not None and self.port is not None
        schemas = str(self.schemas).lower()
        props = {
            "bootstrap.servers": self.kafka_bootstrap,
            "listeners": f"http://{self.host}:{self.port}",
            "rest.advertised.host.name": self.host,
            "key.converter": JSON_CONVERTER,
            "value.converter": JSON_CONVERTER,
            "key.converter.schemas.enable": schemas,
            "value.converter.schemas.enable": schemas,
            "offset.storage.file.filename": str(self.offsets_path),
            "offset.flush.interval.ms": "1000",
            "plugin.discovery": "service_load",
            "task.shutdown.graceful.timeout.ms": "5000",
        }
        props.update(self.extra_properties)
        return props

    def _write_config(self) -> List[Path]:
        """The worker's properties file, then one per remembered connector (the command's arguments)."""
        assert self.work_dir is not None
        worker = self.work_dir / "worker.properties"
        worker.write_text(_properties(self.worker_properties()))
        (self.work_dir / "log4j2.properties").write_text(LOG4J2)
        paths = [worker]
        for old in self.work_dir.glob("connector-*.properties"):
            old.unlink()
        for i, (name, config) in enumerate(self.connectors.items()):
            path = self.work_dir / f"connector-{i}.properties"
            path.write_text(_properties({**config, "name": name}))
            paths.append(path)
        return paths

    def _java(self, *args: str) -> List[str]:
        if self._classpath is None:
            from . import jars

            self._classpath = jars.classpath(self.jar_group)
        assert self.work_dir is not None
        quick = ["-XX:TieredStopAtLevel=1"] if self.quick_start else []
        return [
            java_executable(), f"-Xmx{self.heap}", "-Xms64m", "-XX:+UseSerialGC", *quick,
            "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}",
            "-cp", self._classpath, MAIN_CLASS, *args,
        ]

    # ---- the REST API -------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
        """Call the REST API; the decoded JSON answer (None when empty). An HTTP error raises
        :class:`KafkaConnectError` with Connect's message."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise KafkaConnectError(f"{method} {path}: HTTP {exc.code}: {detail}") from None
        return json.loads(text) if text.strip() else None

    def status(self, name: str) -> Dict[str, Any]:
        """``GET /connectors/NAME/status``: the connector's and its tasks' states."""
        return self.request("GET", f"/connectors/{name}/status")

    def _check_alive(self, doing: str) -> None:
        if self._proc is None or self._proc.poll() is not None:
            code = None if self._proc is None else self._proc.returncode
            raise KafkaConnectError(f"the {self.label} exited (code {code}) {doing}:\n{self.log_tail()}")

    def wait_running(self, name: str, timeout: float = 120.0) -> Dict[str, Any]:
        """Wait until connector ``name`` and every task of it are RUNNING; return the status. A
        FAILED connector or task raises at once, with Connect's trace."""
        deadline = time.monotonic() + timeout
        status: Any = None
        while True:
            self._check_alive(f"while waiting for connector {name}")
            try:
                status = self.status(name)
            except (KafkaConnectError, OSError):
                status = None
            if status:
                states = [status["connector"]] + list(status.get("tasks", []))
                failed = [s for s in states if s.get("state") == "FAILED"]
                if failed:
                    raise KafkaConnectError(f"connector {name} failed:\n{failed[0].get('trace', failed[0])}\n"
                                            f"worker log:\n{self.log_tail()}")
                if status.get("tasks") and all(s.get("state") == "RUNNING" for s in states):
                    return status
            if time.monotonic() > deadline:
                raise KafkaConnectError(f"connector {name} not running within {timeout:.0f} s: {status}\n"
                                        f"worker log:\n{self.log_tail()}")
            time.sleep(0.1)

    def add_connector(self, name: str, config: Dict[str, Any], wait: bool = True,
                      timeout: float = 120.0) -> Dict[str, Any]:
        """Create (or reconfigure) connector ``name`` and, by default, wait until it and its tasks
        run. Remembered for restarts. Returns its status (or Connect's answer when not waiting)."""
        config = {k: str(v) for k, v in config.items()}
        self.connectors[name] = config
        answer = self.request("PUT", f"/connectors/{name}/config", config)
        return self.wait_running(name, timeout) if wait else answer

    def remove_connector(self, name: str) -> None:
        """Stop and delete connector ``name`` (its offsets stay in the offsets file)."""
        self.connectors.pop(name, None)
        if self.is_running():
            self.request("DELETE", f"/connectors/{name}")

    # ---- lifecycle ----------------------------------------------------------------------------

    def spawn(self) -> None:
        """Start the worker's JVM without waiting for it (:meth:`wait_ready` waits): to start
        other things meanwhile."""
        if self.is_running():
            return
        if self.work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="changejoin-connect-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if self.port is None:
            self.port = free_port(self.host)
        self._spawn(self._java(*(str(p) for p in self._write_config())))

    def wait_ready(self) -> str:
        """Wait until the REST API answers and every remembered connector runs; return :attr:`url`."""
        deadline = time.monotonic() + self.startup_timeout
        self._wait_ready(lambda: self.request("GET", "/connectors", timeout=2.0) is not None)
        for name in self.connectors:
            self.wait_running(name, max(1.0, deadline - time.monotonic()))
        return self.url

    def start(self) -> str:
        """Start the worker (same port, connectors and offsets as before if it ran already), wait
        until its REST API answers and its connectors run, and return :attr:`url`."""
        if self.is_running():
            return self.url
        def launch(attempt: int) -> str:
            if attempt and not self._port_given:
                self.port = free_port(self.host)
            self.spawn()
            return self.wait_ready()

        return self._start_retrying(self.port is None, launch)

    def stop(self, kill: bool = False) -> None:
        """Stop the worker (its connectors flush their offsets first unless ``kill``)."""
        self._terminate(kill=kill)

    def close(self) -> None:
        """Stop the worker and remove its directory if this object created it."""
        self._terminate()
        if self._own_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    def __repr__(self) -> str:
        where = self.url if self.port else "not started"
        return f"KafkaConnect({where} -> {self.kafka_bootstrap}, {self.work_dir})"


def debezium_postgres_config(
    database_url: str,
    topic_prefix: str,
    tables: Iterable[str],
    slot: str,
    publication: Optional[str] = None,
    snapshot_mode: str = "initial",
    schemas: Optional[bool] = None,
    drop_slot_on_stop: bool = False,
    extra: Optional[Dict[str, Any]] = None,
) -> Dict[str, str]:
    """A Debezium PostgreSQL connector's config: ``pgoutput`` (PostgreSQL's own logical decoding,
    no server plugin), ``tables`` (``schema.table``) only, into topics ``TOPIC_PREFIX.SCHEMA.TABLE``
    (one partition, made by the worker), replication slot ``slot`` and publication
    ``publication`` (default: the slot's name; created for these tables only). The slot stays
    when the connector stops, so that a restarted worker goes on where it was, unless
    ``drop_slot_on_stop`` (then the changes made while it is stopped are lost). ``snapshot_mode`` ``initial``: the rows already there first (op ``r``), then the
    changes. ``schemas`` overrides the worker's JSON converters (None: the worker's). ``extra``
    adds or overrides settings (``{"decimal.handling.mode": "string"}``)."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(database_url)
    config: Dict[str, str] = {
        "connector.class": POSTGRES_CONNECTOR,
        "tasks.max": "1",
        "database.hostname": parts.hostname or "127.0.0.1",
        "database.port": str(parts.port or 5432),
        "database.user": unquote(parts.username or "postgres"),
        "database.password": unquote(parts.password or ""),
        "database.dbname": parts.path.lstrip("/") or "postgres",
        "topic.prefix": topic_prefix,
        "plugin.name": "pgoutput",
        "slot.name": slot,
        "slot.drop.on.stop": str(drop_slot_on_stop).lower(),
        "publication.name": publication or slot,
        "publication.autocreate.mode": "filtered",
        "table.include.list": ",".join(tables),
        "snapshot.mode": snapshot_mode,
        "topic.creation.default.partitions": "1",
        "topic.creation.default.replication.factor": "1",
        # Hand changes to Connect sooner than the default half second (tests wait on them).
        "poll.interval.ms": "50",
    }
    if schemas is not None:
        for side in ("key", "value"):
            config[f"{side}.converter"] = JSON_CONVERTER
            config[f"{side}.converter.schemas.enable"] = str(schemas).lower()
    config.update({k: str(v) for k, v in (extra or {}).items()})
    return config


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m devkit.kafka_connect BOOTSTRAP [PORT]``: run a worker until interrupted."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m devkit.kafka_connect BOOTSTRAP [PORT]", file=sys.stderr)
        return 2
    return serve(KafkaConnect(args[0], port=int(args[1]) if len(args) > 1 else None))


if __name__ == "__main__":
    sys.exit(main())
