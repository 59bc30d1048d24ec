"""Real servers that refuse, as a user meets them: a Kafka broker with a TLS listener the client
cannot verify and a SASL listener given a wrong password (devkit/kafka_broker.py, certificates
made by the JDK's keytool), a Schema Registry (the in-process fake) and PostgreSQL. Each test reads
the text the command prints (stdout, stderr, the default log format), and ``check-config --connect``
on servers that hold, or lack, what the service needs."""
from __future__ import annotations

import json
import re
import uuid

import psycopg
import pytest

from devkit.kafka_broker import KafkaBroker
from tests.support.jvm_archives import broker_jvm_options
from tests.support.kafka_fixture import create_topic
from tests.support.schema_registry_fake import FakeSchemaRegistry
from tests.support.service_env import SCHEMAS, VALID, changejoin, closed_port, log_lines

PASSWORD = "alice-secret"


@pytest.fixture(scope="module")
def secured_broker():
    """A broker with an SSL listener (a self-signed certificate) and a SASL_PLAINTEXT one (PLAIN,
    user alice)."""
    broker = KafkaBroker(tls=True, sasl_users={"alice": PASSWORD}, jvm_options=broker_jvm_options())
    broker.start()
    try:
        yield broker
    finally:
        broker.close()


def env(tmp_path, **more) -> dict:
    return {**VALID, "CHECKPOINT_LOCATION": str(tmp_path / "checkpoint"), **more}


def fatal(proc) -> str:
    """The message of the fatal log line a run ended on."""
    assert proc.returncode == 1, proc.stderr
    level, logger, message = log_lines(proc.stderr)[-1]
    assert (level, logger) == ("CRITICAL", "service.app")
    return message


def test_a_tls_listener_the_client_cannot_verify_ends_the_start_at_once_saying_so(secured_broker, tmp_path):
    address = secured_broker.address("SSL")
    proc = changejoin("run", env=env(tmp_path, KAFKA_BOOTSTRAP_SERVERS=address, KAFKA_CLIENT_SECURITY_PROTOCOL="SSL",
                                     CONNECT_TIMEOUT="1h"))  # not waited for: it ends at once
    message = fatal(proc)
    assert message.startswith(f"changejoin stopped: KAFKA_BOOTSTRAP_SERVERS={address}: TLS handshake failed (SSL "
                              f"handshake failed: ")
    assert "certificate verify failed" in message
    assert message.endswith("): check KAFKA_CLIENT_SECURITY_PROTOCOL and KAFKA_CLIENT_SSL_CA_LOCATION")
    trusted = changejoin("check-config", "--connect", env=env(
        tmp_path, KAFKA_BOOTSTRAP_SERVERS=address, KAFKA_CLIENT_SECURITY_PROTOCOL="SSL",
        KAFKA_CLIENT_SSL_CA_LOCATION=str(secured_broker.ca_file)))
    assert re.search(rf"^  ok    KAFKA_BOOTSTRAP_SERVERS={address}: 1 broker \(1 at 127\.0\.0\.1:\d+\), cluster ",
                     trusted.stdout, re.M), trusted.stdout


def test_a_refused_sasl_login_ends_the_start_at_once_naming_the_variables(secured_broker, tmp_path):
    address = secured_broker.address("SASL_PLAINTEXT")
    sasl = {"KAFKA_BOOTSTRAP_SERVERS": address, "KAFKA_CLIENT_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
            "KAFKA_CLIENT_SASL_MECHANISM": "PLAIN", "KAFKA_CLIENT_SASL_USERNAME": "alice",
            "KAFKA_CLIENT_SASL_PASSWORD": "wrong-secret", "CONNECT_TIMEOUT": "1h"}
    proc = changejoin("run", env=env(tmp_path, **sasl))
    assert fatal(proc) == (
        f"changejoin stopped: KAFKA_BOOTSTRAP_SERVERS={address}: SASL authentication failed (SASL authentication "
        f"error: Authentication failed: Invalid username or password): check KAFKA_CLIENT_SASL_MECHANISM, "
        f"KAFKA_CLIENT_SASL_USERNAME and KAFKA_CLIENT_SASL_PASSWORD")
    assert "wrong-secret" not in proc.stderr
    aborting = changejoin("abort-transactions", env=env(tmp_path, **sasl))
    assert aborting.returncode == 1
    assert aborting.stderr.splitlines()[-1].startswith(
        f"changejoin: KAFKA_BOOTSTRAP_SERVERS={address}: SASL authentication failed (")
    accepted = changejoin("check-config", "--connect", env=env(tmp_path, **{**sasl, "KAFKA_CLIENT_SASL_PASSWORD": PASSWORD}))
    assert f"  ok    KAFKA_BOOTSTRAP_SERVERS={address}: 1 broker" in accepted.stdout


def test_check_config_connect_checks_each_topic_the_service_reads_and_writes(kafka_bootstrap, new_topic, tmp_path):
    left, right, output = new_topic(partitions=3), new_topic(create=False), new_topic(create=False)
    config = env(tmp_path, KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, LEFT_TOPIC=left, LEFT_TABLE="orders",
                 RIGHT_TOPIC=right, RIGHT_TABLE="prices", OUTPUT_TOPIC=output, SHUFFLE_PARTITIONS="2")
    proc = changejoin("check-config", "--connect", env=config)
    assert proc.returncode == 1, proc.stderr
    servers = proc.stdout[proc.stdout.index("servers ("):].splitlines()
    assert servers[0] == "servers (each waited for up to CONNECT_TIMEOUT=60s):"
    assert servers[2:] == [
        f"  ok    LEFT_TOPIC={left}: 3 partitions",
        f"  FAIL  RIGHT_TOPIC={right}: no such topic (or the principal may not describe it)",
        f"  ok    OUTPUT_TOPIC={output}: does not exist yet; the service creates it at start (3 partitions; the "
        f"broker accepts it)",
        f"  ok    DLQ_TOPIC={output}.dlq: does not exist yet; the service creates it at start (1 partition; the "
        f"broker accepts it)",
        f"  ok    PROGRESS_TOPIC=changejoin-{output}.progress: does not exist yet; the service creates it at start (2 "
        f"partitions; the broker accepts it)",
        "check-config: 1 of 6 checks failed (FAIL above: RIGHT_TOPIC)"]
    create_topic(kafka_bootstrap, right, 2)
    create_topic(kafka_bootstrap, f"changejoin-{output}.progress", 1)  # the deployment's own: its prefix's
    proc = changejoin("check-config", "--connect", env=config)
    assert proc.returncode == 1
    assert f"  ok    RIGHT_TOPIC={right}: 2 partitions" in proc.stdout
    assert (f"  FAIL  PROGRESS_TOPIC=changejoin-{output}.progress: 1 partitions; DELIVERY=exactly-once needs one per task "
            f"partition (2): add partitions to it, or name a new topic") in proc.stdout
    proc = changejoin("check-config", "--connect", env={**config, "DELIVERY": "at-least-once"})
    assert proc.returncode == 0, proc.stdout
    assert proc.stdout.splitlines()[-1] == (
        "check-config: valid, and every server answered as the service needs (5 checks)")
    from service.sink import topic_partitions

    assert topic_partitions(kafka_bootstrap, {}, output) is None  # the checks created nothing


def test_check_config_connect_checks_the_registrys_subjects(kafka_bootstrap, new_topic, tmp_path):
    left, right, output = new_topic(), new_topic(), new_topic(create=False)
    with FakeSchemaRegistry(basic_auth_user_info="svc:s3cret") as fake:
        url = fake.url
        config = env(tmp_path, KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, LEFT_TOPIC=left, LEFT_TABLE="orders",
                     RIGHT_TOPIC=right, RIGHT_TABLE="prices", OUTPUT_TOPIC=output, DELIVERY="at-least-once",
                     LEFT_SCHEMA_FILE="", SCHEMA_REGISTRY_URL=url, SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO="svc:s3cret")
        missing = changejoin("check-config", "--connect", env=config)
        fake.register(f"{left}-value", json.loads((SCHEMAS / "orders.avsc").read_text()))
        registered = changejoin("check-config", "--connect", env=config)
        refused = changejoin("run", env={**config, "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "svc:wrong"})
    assert missing.returncode == 2  # the plan cannot be made: the refusal names the variable, the check says why
    assert (f"  FAIL  SCHEMA_REGISTRY_URL: subject {left}-value (LEFT_TOPIC): no such subject: register the topic's "
            f"value schema under it, or set LEFT_SCHEMA_FILE") in missing.stdout
    assert missing.stderr.splitlines()[-1].endswith(f"; register it or set LEFT_SCHEMA_FILE")
    assert registered.returncode == 0, registered.stdout + registered.stderr
    assert f"  ok    SCHEMA_REGISTRY_URL={url}: answered, 1 subject" in registered.stdout
    assert re.search(rf"^  ok    SCHEMA_REGISTRY_URL: subject {left}-value \(LEFT_TOPIC's schema\): latest schema id "
                     rf"\d+$", registered.stdout, re.M)
    assert (f"  ok    SCHEMA_REGISTRY_URL: subject {output}-value not registered yet; the service registers the output "
            f"schema under it at start") in registered.stdout
    assert fatal(refused) == (f"changejoin stopped: SCHEMA_REGISTRY_URL={url}: the registry refused the "
                              f"credentials (HTTP 401): check SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO")


# -- the lookup database ----------------------------------------------------------------------------------
@pytest.fixture
def lookup_table(postgres_url, pg_schema):
    """A prices table in a schema of its own, and a role that may log in but not read it."""
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {pg_schema}.prices (product text PRIMARY KEY, price numeric(8,2), currency text)")
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {pg_schema} TO {role}")
    yield f"{pg_schema}.prices", role
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP OWNED BY {role}")
        conn.execute(f"DROP ROLE {role}")


def lookup_env(tmp_path, kafka_bootstrap, left, url, table, **more) -> dict:
    config = env(tmp_path, KAFKA_BOOTSTRAP_SERVERS=kafka_bootstrap, LEFT_TOPIC=left, LEFT_TABLE="orders",
                 RIGHT_LOOKUP_URL=url, RIGHT_TABLE="prices", RIGHT_LOOKUP_TABLE=table, DELIVERY="at-least-once",
                 JOIN_SQL="SELECT o.order_id, p.price FROM orders o LEFT JOIN prices FOR SYSTEM_TIME AS OF PROCTIME() "
                          "AS p ON o.product = p.product", **more)
    for var in ("RIGHT_TOPIC", "RIGHT_SCHEMA_FILE", "RIGHT_PRIMARY_KEY"):
        config.pop(var)
    return config


def as_user(url: str, user: str, database: str | None = None) -> str:
    url = re.sub(r"^(postgresql://)[^@/]*@", rf"\g<1>{user}@", url)
    return re.sub(r"/[^/?]*(\?|$)", rf"/{database}\1", url, count=1) if database else url


def test_check_config_connect_checks_the_lookup_table_and_the_privilege_to_read_it(
        kafka_bootstrap, new_topic, postgres_url, lookup_table, tmp_path):
    table, role = lookup_table
    left = new_topic()
    config = lookup_env(tmp_path, kafka_bootstrap, left, as_user(postgres_url, role), table)
    denied = changejoin("check-config", "--connect", env=config)
    assert denied.returncode == 1, denied.stdout + denied.stderr
    assert (f"  FAIL  RIGHT_LOOKUP_TABLE={table}: the user may not read it (permission denied for table prices): "
            f"GRANT SELECT ON {table} TO the user of RIGHT_LOOKUP_URL") in denied.stdout
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"GRANT SELECT ON {table} TO {role}")
    allowed = changejoin("check-config", "--connect", env=config)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    # the columns the query reads (the lookup reads no other)
    assert f"  ok    RIGHT_LOOKUP_TABLE={table}: SELECT product, price allowed" in allowed.stdout
    # the URL's user info is hidden, as everywhere the service shows a URL (docs/configuration.md, "Secrets")
    assert re.search(r"^  ok    RIGHT_LOOKUP_URL=postgresql://\*{5}@127\.0\.0\.1:\d+/\w+: answered \(PostgreSQL "
                     r"\d.*\), login accepted$", allowed.stdout, re.M), allowed.stdout


def test_a_refused_login_a_missing_database_and_a_closed_port_are_told_apart(
        kafka_bootstrap, new_topic, postgres_url, lookup_table, tmp_path):

    table, _ = lookup_table
    left = new_topic()
    cases = {"nobody_here": as_user(postgres_url, "nobody_here"),
             "no database": as_user(postgres_url, "postgres", "no_such_db"),
             "closed": f"postgresql://postgres@127.0.0.1:{closed_port()}/postgres"}
    said = {}
    for name, url in cases.items():
        proc = changejoin("check-config", "--connect",
                          env=lookup_env(tmp_path, kafka_bootstrap, left, url, table, CONNECT_TIMEOUT="2s"))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        said[name] = [line for line in proc.stdout.splitlines() if line.startswith("  FAIL  RIGHT_LOOKUP_URL=")]
    assert said["nobody_here"] == [
        f"  FAIL  RIGHT_LOOKUP_URL={as_user(postgres_url, '*****')}: the database refused the login (role "
        f"\"nobody_here\" does not exist): check the user in the URL and RIGHT_LOOKUP_PASSWORD"]
    assert said["no database"] == [
        f"  FAIL  RIGHT_LOOKUP_URL={as_user(cases['no database'], '*****')}: database \"no_such_db\" does not exist: "
        f"name an existing database in the URL"]
    assert said["closed"] == [
        f"  FAIL  RIGHT_LOOKUP_URL={as_user(cases['closed'], '*****')}: no answer within 2 s "
        f"(CONNECT_TIMEOUT): cannot connect: connection refused"]
    run = changejoin("run", env=lookup_env(tmp_path, kafka_bootstrap, left, cases["no database"], table))
    assert fatal(run).startswith("changejoin stopped: RIGHT_LOOKUP_URL=") and fatal(run).endswith(
        "does not exist: name an existing database in the URL")


# -- an outage once the service runs ---------------------------------------------------------------------
def readyz(port: int) -> int | None:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as answer:
        return answer.code
    except OSError:
        return None


def wait_for(condition, what: str, timeout_s: float = 240.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"waited {timeout_s:.0f} s for {what}"
        time.sleep(1)


#: The source's warning while the brokers do not answer (service/source.py, _OffsetsClient).
WARNING = r" WARNING service\.source: topic \w+: .* failed, retrying \(for \d+ s so far"
#: A librdkafka line of a client's failing connection, through the service's logging.
CLIENT = r" ERROR librdkafka: (FAIL: .*?)(?: \(and \d+ more like it in the last 30 s\))?$"


def test_an_outage_once_running_is_ridden_out_not_ready_and_said_once_a_minute(restartable_broker, tmp_path):
    """The start-up bound is not the running service's: a broker that goes away under it is waited
    for (/readyz fails meanwhile), with one warning a minute from the source and each distinct
    librdkafka line at most once per 30 s per process, in the service's format (it was twenty raw
    librdkafka lines a second).

    The outage lasts until the source has warned and the clients have said why, and at least 15 s
    (librdkafka reconnects with a backoff doubling from 0.1 s: several times by then, all but once
    held back), not over a minute: that the source's warning then comes once a minute, on and on, is
    proven on a clock of the test's (tests/service/test_source_retry_warning.py); here, that it is
    said, in the service's log, and not again within the outage. KAFKA_CLIENT_SOCKET_TIMEOUT_MS
    bounds each of the source's attempts at 5 s instead of 30 s, so the first warning comes within
    the 15 s."""
    import os
    import signal
    import time

    from devkit.broker_process import free_port
    from tests.support.service_harness import start_service_process

    bootstrap = restartable_broker.bootstrap
    create_topic(bootstrap, "orders", 2)
    create_topic(bootstrap, "prices", 2)
    port = free_port()
    log_path = tmp_path / "service.log"
    with open(log_path, "w") as log:
        service = start_service_process(env(tmp_path, KAFKA_BOOTSTRAP_SERVERS=bootstrap, METRICS_PORT=str(port),
                                            SPARK_MASTER="local[2]", SHUFFLE_PARTITIONS="2",
                                            KAFKA_CLIENT_SOCKET_TIMEOUT_MS="5000"), log)
    try:
        wait_for(lambda: readyz(port) == 200, "the service to be ready")
        mark = log_path.stat().st_size
        restartable_broker.stop()
        started = time.monotonic()
        wait_for(lambda: readyz(port) == 503, "/readyz to fail while the broker is away")
        wait_for(lambda: re.search(WARNING, log_path.read_text()[mark:]), "the source to warn of the outage")
        wait_for(lambda: re.search(CLIENT, log_path.read_text()[mark:], re.M), "a client to say why")
        time.sleep(max(0.0, 15 - (time.monotonic() - started)))  # a few reconnections of each client
        assert service.poll() is None, "the service stopped during the outage"
        outage_s = time.monotonic() - started
        restartable_broker.start()
        wait_for(lambda: readyz(port) == 200, "the service to be ready again")
        assert service.poll() is None
        during = log_path.read_text()[mark:]
    finally:
        os.killpg(service.pid, signal.SIGTERM)
        service.wait(120)
    assert "|FAIL|" not in during  # librdkafka's own stderr lines: none
    client = re.findall(CLIENT, during, re.M)
    assert client, during
    # each process has its filter: the source's runner, the Spark workers, the driver
    assert max(client.count(line) for line in set(client)) <= 3 * (outage_s / 30 + 1), during
    warnings = re.findall(WARNING, during)
    assert 1 <= len(warnings) <= outage_s / 60 + 1, during
