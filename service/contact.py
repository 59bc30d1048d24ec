"""Contacting the servers the configuration names: the Kafka brokers (``KAFKA_BOOTSTRAP_SERVERS``),
the Schema Registry (``SCHEMA_REGISTRY_URL``) and the lookup join's database (``RIGHT_LOOKUP_URL``).

**At start** (``changejoin run``, ``abort-transactions``) each server the configuration names is
waited for, up to ``CONNECT_TIMEOUT``: one still starting (a broker pod scheduled beside this one)
is waited for, one that has not answered by then ends the command with one line naming the
variable, the address and the cause (:class:`ServerError`): connection refused, unknown host, no
answer. Refused credentials and a failed TLS handshake end it at once, as waiting mends neither.
Without this, a wrong address gave a minute of librdkafka's reconnection lines and then
``KafkaError{code=_TRANSPORT,...}``, which names neither. Once the service runs, an outage is ridden
out by the source, the sink and the lookup (docs/operations.md, "Failure modes").

**``check-config --connect``** asks each server what the service will need of it (:func:`kafka_checks`,
:func:`registry_checks`, :func:`database_checks`): one :class:`Check` per line, each naming the
variable it is about. Nothing is written: a topic that would be created is validated by the broker
(``validate_only``), not created.
"""
from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

from .config import Settings
from .errors import ChangejoinError
from .secrets import redact_text

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Whether a server failed by the connection, the credentials (or TLS: what the client must be
#: given to be let in) or the content (it answered, and what the service needs is not there).
CONNECTION, CREDENTIALS, TLS, CONTENT = "connection", "credentials", "tls", "content"


class ServerError(RuntimeError, ChangejoinError):
    """A server the configuration names did not answer, or refused: one line naming the variable
    (``variable``), the address and the cause; ``kind`` is one of CONNECTION, CREDENTIALS, TLS,
    CONTENT."""

    def __init__(self, variable: str, address: str, cause: str, kind: str):
        super().__init__(f"{variable}={address}: {cause}")
        self.variable, self.address, self.cause, self.kind = variable, address, cause, kind


@dataclass(frozen=True)
class Check:
    """One line of ``check-config --connect``: whether it passed, and what it found."""

    ok: bool
    line: str


def scrub(text: str, settings: Settings) -> str:
    """``text`` without the configuration's passwords (the lookup database's, the registry's, the
    Kafka client's secret properties) and without URL user info: what a server's error may quote."""
    from .secrets import is_secret_name, url_passwords

    secrets = [settings.right_lookup_password or "", settings.schema_registry_basic_auth_user_info or ""]
    secrets += [(settings.schema_registry_basic_auth_user_info or "").partition(":")[2]]
    for url in (settings.right_lookup_url, settings.schema_registry_url):
        secrets += url_passwords(url)
    secrets += [value for key, value in settings.kafka_client.items() if is_secret_name(key)]
    return redact_text(text, [secret for secret in secrets if len(secret) >= 3])


def _seconds(timeout_s: float) -> str:
    return f"{timeout_s:g} s (CONNECT_TIMEOUT)"


@dataclass(frozen=True)
class _Unanswered:
    """Why one attempt to reach a server failed: its ``kind`` (CONNECTION: wait and try again; any
    other ends the wait at once, as waiting mends no refused credentials), the ``cause`` (None: the
    client said nothing), and what the line says when the wait is over (``<unanswered> within ...``)."""

    kind: str
    cause: str | None
    unanswered: str = "no answer"


def _wait_for(variable: str, address: str, timeout_s: float, attempt: Callable[[float], "T | _Unanswered"],
              pause: float = 1.0) -> T:
    """What ``attempt(seconds left)`` returns once the server answers; raises :class:`ServerError`
    naming ``variable`` and ``address`` at once when an attempt fails other than by the connection,
    or when none succeeded within ``timeout_s``. The first failure with a cause is logged (the server
    is waited for), and attempts are ``pause`` seconds apart (0: the attempt itself waits)."""
    deadline = time.monotonic() + timeout_s
    warned = False
    while True:
        answer = attempt(deadline - time.monotonic())
        if not isinstance(answer, _Unanswered):
            return answer
        if answer.kind != CONNECTION:
            raise ServerError(variable, address, answer.cause, answer.kind)
        if time.monotonic() >= deadline:
            why = f": {answer.cause}" if answer.cause else ""
            raise ServerError(variable, address, f"{answer.unanswered} within {_seconds(timeout_s)}{why}", CONNECTION)
        if not warned and answer.cause is not None:
            log.warning("%s=%s does not answer (%s); waiting up to %s", variable, address, answer.cause,
                        _seconds(timeout_s))
            warned = True
        if pause:
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))


# -- Kafka ------------------------------------------------------------------------------------------
_AFTER = re.compile(r"\s*\(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)")
_BROKER_PREFIX = re.compile(r"^\S+/(?:bootstrap|\d+): ")


def _kafka_text(err: Any) -> str:
    text = err.str() if hasattr(err, "str") else str(err)
    return _BROKER_PREFIX.sub("", _AFTER.sub("", text)).strip()


def kafka_cause(errors: list) -> tuple[str, str] | None:
    """(kind, cause) of the most telling of the errors a client reported (its ``error_cb``):
    refused credentials, then a failed TLS handshake, an unknown host, a refused connection, any
    other; None when it reported none (no answer at all)."""
    from confluent_kafka import KafkaError

    def first(codes) -> Any:
        return next((e for e in reversed(errors) if e.code() in codes), None)

    found = first({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED})
    if found is not None:
        return CREDENTIALS, (f"SASL authentication failed ({_kafka_text(found)}): check KAFKA_CLIENT_SASL_MECHANISM, "
                             f"KAFKA_CLIENT_SASL_USERNAME and KAFKA_CLIENT_SASL_PASSWORD")
    found = first({KafkaError._SSL})
    if found is not None:
        return TLS, (f"TLS handshake failed ({_kafka_text(found)}): check KAFKA_CLIENT_SECURITY_PROTOCOL and "
                     f"KAFKA_CLIENT_SSL_CA_LOCATION")
    found = first({KafkaError._RESOLVE})
    if found is not None:
        text = _kafka_text(found)
        named = re.search(r"Failed to resolve '(.+?)(?::\d+)?': (.+)$", text)
        return CONNECTION, f"unknown host {named.group(1)} ({named.group(2)})" if named else f"unknown host ({text})"
    others = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
    refused = [e for e in others if "Connection refused" in _kafka_text(e)]
    if refused:
        named = re.search(r"Connect to (\S+) failed", _kafka_text(refused[-1]))
        return CONNECTION, f"connection refused by {named.group(1)}" if named else "connection refused"
    if others:
        return CONNECTION, _kafka_text(others[-1])
    return None


def kafka_admin(settings: Settings, errors: list | None = None):
    """An AdminClient on the settings' brokers, its log lines through the service's logging, the
    errors it reports appended to ``errors``."""
    from confluent_kafka.admin import AdminClient

    from .logs import kafka_logger
    from .sink import admin_props

    conf = {"bootstrap.servers": settings.kafka_bootstrap_servers, **admin_props(settings.kafka_client),
            "logger": kafka_logger(settings.kafka_client)}
    if errors is not None:
        conf["error_cb"] = errors.append
    return AdminClient(conf)


def wait_for_kafka(settings: Settings, timeout_s: float | None = None, admin=None, errors: list | None = None):
    """The cluster's metadata (``ClusterMetadata``: brokers, topics) once a broker answers; raises
    :class:`ServerError` when none does within ``timeout_s`` (default ``CONNECT_TIMEOUT``), or
    when one refuses the client's credentials or TLS handshake."""
    timeout_s = settings.connect_timeout_ms / 1000 if timeout_s is None else timeout_s
    errors = [] if errors is None else errors
    admin = admin or kafka_admin(settings, errors)

    def attempt(remaining: float):
        try:
            return admin.list_topics(timeout=max(0.1, min(2.0, remaining)))
        except Exception:  # noqa: BLE001 - the errors the client reported say why (kafka_cause)
            pass
        finally:
            admin.poll(0)  # serves error_cb and the client's log lines
        kind, cause = kafka_cause(errors) or (CONNECTION, None)
        return _Unanswered(kind, cause, "no broker answered")

    # list_topics waits for an answer itself: no pause between attempts
    return _wait_for("KAFKA_BOOTSTRAP_SERVERS", settings.kafka_bootstrap_servers, timeout_s, attempt, pause=0)


def kafka_checks(settings: Settings, metadata, admin, task_partitions: int | None = None) -> Iterator[Check]:
    """The topics the service reads and writes, against the cluster's ``metadata``: each input
    exists (its partition count), each topic the service writes exists (its partition count) or
    may be created (the broker validates the creation without making it)."""
    brokers = sorted(metadata.brokers.values(), key=lambda b: b.id)
    listed = ", ".join(f"{b.id} at {b.host}:{b.port}" for b in brokers[:5]) + (" ..." if len(brokers) > 5 else "")
    yield Check(True, f"KAFKA_BOOTSTRAP_SERVERS={settings.kafka_bootstrap_servers}: {len(brokers)} "
                      f"broker{'s' if len(brokers) != 1 else ''} ({listed}), cluster {metadata.cluster_id}")
    topics = metadata.topics
    inputs = [("LEFT_TOPIC", settings.left_topic)] + ([] if settings.lookup else [("RIGHT_TOPIC", settings.right_topic)])
    left_partitions = 1
    for var, topic in inputs:
        md = topics.get(topic)
        if md is None:
            yield Check(False, f"{var}={topic}: no such topic (or the principal may not describe it)")
        elif md.error is not None:
            yield Check(False, f"{var}={topic}: {_kafka_text(md.error)}")
        else:
            n = len(md.partitions)
            left_partitions = n if var == "LEFT_TOPIC" else left_partitions
            yield Check(True, f"{var}={topic}: {n} partition{'s' if n != 1 else ''}")
    outputs = [("OUTPUT_TOPIC", settings.output_topic, left_partitions, {}),
               ("DLQ_TOPIC", settings.dead_letter_topic, 1, {})]
    if settings.exactly_once and task_partitions:
        outputs.append(("PROGRESS_TOPIC", settings.progress_topic_name, task_partitions, {"cleanup.policy": "compact"}))
    missing = []
    for var, topic, partitions, configs in outputs:
        md = topics.get(topic)
        if md is None:
            missing.append((var, topic, partitions, configs))
        elif md.error is not None:
            yield Check(False, f"{var}={topic}: {_kafka_text(md.error)}")
        elif var == "PROGRESS_TOPIC" and len(md.partitions) < partitions:
            yield Check(False, f"{var}={topic}: {len(md.partitions)} partitions; DELIVERY=exactly-once needs one per "
                               f"task partition ({partitions}): add partitions to it, or name a new topic")
        else:
            yield Check(True, f"{var}={topic}: exists, {len(md.partitions)} partition"
                              f"{'s' if len(md.partitions) != 1 else ''}")
    if missing:
        yield from _may_create(admin, missing)


def _may_create(admin, missing) -> Iterator[Check]:
    from confluent_kafka.admin import NewTopic

    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=-1, config=configs)
                                   for _, topic, partitions, configs in missing],
                                  validate_only=True, request_timeout=30)
    for var, topic, partitions, _ in missing:
        try:
            futures[topic].result(timeout=60)
        except Exception as err:  # noqa: BLE001 - the broker's reason, in one line
            reason = err.args[0] if getattr(err, "args", None) else err
            yield Check(False, f"{var}={topic}: does not exist, and the service could not create it: "
                               f"{_kafka_text(reason)}")
            continue
        yield Check(True, f"{var}={topic}: does not exist yet; the service creates it at start "
                          f"({partitions} partition{'s' if partitions != 1 else ''}; the broker accepts it)")


# -- the Schema Registry ------------------------------------------------------------------------------
def _registry(settings: Settings, timeout_s: float, retries: int = 0):
    from .avro import SchemaRegistry

    return SchemaRegistry(settings.schema_registry_url, settings.schema_registry_basic_auth_user_info,
                          timeout=max(1.0, timeout_s), max_retries=retries, backoff_factor=0)


def _registry_address(settings: Settings) -> str:
    return redact_text(settings.schema_registry_url)


def _registry_cause(err) -> str:
    """A SchemaRegistryError as the cause after ``SCHEMA_REGISTRY_URL=<url>: ``."""
    if err.kind == "connection":
        text = str(err).split(": ", 1)[1] if str(err).startswith("cannot connect to the Schema Registry at") else str(err)
        return "cannot connect: " + re.sub(r" \((GET|POST) [^)]*\)$", "", text)
    if err.kind == "credentials":
        return (f"the registry refused the credentials (HTTP {err.status}): check "
                f"SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO")
    return str(err)


def wait_for_registry(settings: Settings, timeout_s: float | None = None) -> list[str]:
    """The registry's subjects once it answers; raises :class:`ServerError` when it does not within
    ``timeout_s`` (default ``CONNECT_TIMEOUT``), or at once when it refuses the credentials or the
    TLS handshake, or answers as no registry does."""
    from .avro import SchemaRegistryError

    timeout_s = settings.connect_timeout_ms / 1000 if timeout_s is None else timeout_s

    def attempt(remaining: float):
        try:
            return _registry(settings, min(10.0, max(1.0, remaining))).subjects()
        except SchemaRegistryError as err:
            cause = _registry_cause(err)
            if err.kind == "credentials":
                return _Unanswered(CREDENTIALS, cause)
            if err.kind == "connection" and "TLS handshake failed" in cause:
                return _Unanswered(TLS, cause)
            if err.kind == "content":
                return _Unanswered(CONTENT, f"{cause}: is it a Schema Registry?")
            return _Unanswered(CONNECTION, cause,
                               "no answer" if err.kind == "connection" else "no answer a registry gives")

    return _wait_for("SCHEMA_REGISTRY_URL", _registry_address(settings), timeout_s, attempt)


def registry_subjects(settings: Settings) -> list[tuple[str, str]]:
    """(variable, subject) of each input whose schema the service reads from the registry (its
    format's ``SchemaSource.REGISTRY``: a ``rowkind`` input without a schema file, a
    ``debezium-avro`` input)."""
    from .formats import SchemaSource, format_of

    sides = [("LEFT", settings.left_topic, settings.left_format, settings.left_schema_file)]
    if not settings.lookup:
        sides.append(("RIGHT", settings.right_topic, settings.right_format, settings.right_schema_file))
    return [(f"{side}_TOPIC", f"{topic}-value") for side, topic, fmt, schema_file in sides
            if format_of(fmt).schema_source(schema_file) is SchemaSource.REGISTRY]


def registry_checks(settings: Settings, subjects: list[str], timeout_s: float) -> Iterator[Check]:
    from .avro import SchemaRegistryError

    address = _registry_address(settings)
    yield Check(True, f"SCHEMA_REGISTRY_URL={address}: answered, {len(subjects)} subject"
                      f"{'s' if len(subjects) != 1 else ''}")
    registry = _registry(settings, min(10.0, timeout_s), retries=2)
    wanted = registry_subjects(settings) + [("OUTPUT_TOPIC", f"{settings.output_topic}-value")]
    for var, subject in wanted:
        try:
            schema_id, _ = registry.latest(subject)
        except SchemaRegistryError as err:
            if var == "OUTPUT_TOPIC" and err.status == 404:
                yield Check(True, f"SCHEMA_REGISTRY_URL: subject {subject} not registered yet; the service "
                                  f"registers the output schema under it at start")
                continue
            what = ("no such subject: register the topic's value schema under it, or set "
                    f"{var.replace('TOPIC', 'SCHEMA_FILE')}" if err.status == 404 else _registry_cause(err))
            yield Check(False, f"SCHEMA_REGISTRY_URL: subject {subject} ({var}): {what}")
            continue
        role = "the output schema's" if var == "OUTPUT_TOPIC" else f"{var}'s schema"
        yield Check(True, f"SCHEMA_REGISTRY_URL: subject {subject} ({role}): latest schema id {schema_id}")


# -- the lookup database ------------------------------------------------------------------------------
# SQLSTATEs of a refused login (invalid_password, invalid_authorization_specification) and of a
# database that does not exist (invalid_catalog_name).
_CREDENTIALS_STATES = ("28P01", "28000")
_NO_DATABASE = "3D000"


def _database_address(settings: Settings) -> str:
    from .database import redact

    return redact(settings.right_lookup_url)


def _database_failure(err, settings: Settings) -> tuple[str, str]:
    """(kind, cause) of a psycopg error on connecting, without the password."""
    text = scrub(" ".join(str(err).split()), settings)
    state = getattr(err, "sqlstate", None)
    # A refused connection carries no SQLSTATE in psycopg: the server's FATAL line says why.
    server = re.search(r"FATAL: (.*)$", text)
    said = server.group(1).strip() if server else text
    if state in _CREDENTIALS_STATES or (server and re.search(
            r"password authentication failed|role .* does not exist|no pg_hba\.conf entry|authentication failed", said)):
        return CREDENTIALS, f"the database refused the login ({said}): check the user in the URL and RIGHT_LOOKUP_PASSWORD"
    if state == _NO_DATABASE or (server and re.search(r"database .* does not exist", said)):
        return CONTENT, f"{said}: name an existing database in the URL"
    lowered = text.lower()
    if "connection refused" in lowered:
        return CONNECTION, "cannot connect: connection refused"
    if "could not translate host name" in lowered or "name or service not known" in lowered:
        return CONNECTION, f"cannot connect: unknown host ({text})"
    if "timeout expired" in lowered:
        return CONNECTION, "cannot connect: no answer"
    if "ssl" in lowered or "certificate" in lowered:
        return TLS, f"TLS failed: {text}: check sslmode and sslrootcert in the URL"
    return CONNECTION, f"cannot connect: {text}"


def _connect(settings: Settings, timeout_s: float):
    import psycopg

    kwargs = {"connect_timeout": str(max(2, int(timeout_s))), "fallback_application_name": "changejoin-check"}
    if settings.right_lookup_password is not None:
        kwargs["password"] = settings.right_lookup_password
    return psycopg.connect(settings.right_lookup_url, autocommit=True, **kwargs)


def wait_for_database(settings: Settings, timeout_s: float | None = None) -> str:
    """The database server's version once it lets the service's user in; raises
    :class:`ServerError` when it does not answer within ``timeout_s`` (default ``CONNECT_TIMEOUT``),
    or at once when it refuses the login, the TLS handshake or has no such database."""
    import psycopg

    timeout_s = settings.connect_timeout_ms / 1000 if timeout_s is None else timeout_s

    def attempt(remaining: float):
        try:
            with _connect(settings, min(10.0, max(2.0, remaining))) as conn:
                return conn.execute("SELECT current_setting('server_version')").fetchone()[0]
        except psycopg.Error as err:
            return _Unanswered(*_database_failure(err, settings))

    return _wait_for("RIGHT_LOOKUP_URL", _database_address(settings), timeout_s, attempt)


def database_checks(settings: Settings, version: str, columns, timeout_s: float) -> Iterator[Check]:
    """The lookup table: the columns the join reads (``columns``; None: not known, the table is
    only looked for), and the privilege to SELECT them, by selecting them from the table (no row:
    ``WHERE false``)."""
    import psycopg
    from psycopg import sql

    address = _database_address(settings)
    yield Check(True, f"RIGHT_LOOKUP_URL={address}: answered (PostgreSQL {version}), login accepted")
    table = settings.lookup_table_name
    var = "RIGHT_LOOKUP_TABLE" if settings.right_lookup_table else "RIGHT_TABLE"
    try:
        with _connect(settings, timeout_s) as conn:
            found = conn.execute("SELECT to_regclass(%s)::text", (table,)).fetchone()[0]
            if found is None:
                yield Check(False, f"{var}={table}: no such table or view in the database (search_path: "
                                   f"{conn.execute('SHOW search_path').fetchone()[0]})")
                return
            if not columns:
                yield Check(True, f"{var}={table}: {found} exists")
                return
            query = sql.SQL("SELECT {} FROM {} WHERE false").format(
                sql.SQL(", ").join(sql.Identifier(c) for c in columns), sql.SQL(found))
            try:
                conn.execute(query)
            except psycopg.errors.InsufficientPrivilege as err:
                yield Check(False, f"{var}={table}: the user may not read it ({' '.join(str(err).split())}): "
                                   f"GRANT SELECT ON {found} TO the user of RIGHT_LOOKUP_URL")
                return
            except psycopg.errors.UndefinedColumn as err:
                yield Check(False, f"{var}={table}: {' '.join(str(err).split())}")
                return
            yield Check(True, f"{var}={table}: SELECT {', '.join(columns)} allowed")
    except psycopg.Error as err:
        kind, cause = _database_failure(err, settings)
        yield Check(False, f"RIGHT_LOOKUP_URL={address}: {cause}")
