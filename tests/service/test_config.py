"""Configuration: environment variables only, validated at start, errors naming the variable."""
import pytest

from service.kafka_records import output_framing_bytes
from service.config import ConfigError, env_var_names, load_settings, parse_duration_ms
from tests.support.service_env import ROOT, VALID, changejoin


def test_defaults_and_derived_values():
    s = load_settings({**VALID, "STATE_TTL": "90s", "RIGHT_STATE_TTL": "1m", "KAFKA_CLIENT_SASL_PASSWORD": "hunter2"})
    assert s.dead_letter_topic == "out.dlq"
    assert (s.left_table_name, s.right_table_name) == ("orders", "prices")
    assert (s.left_ttl_ms, s.right_ttl_ms) == (90_000, 60_000)
    assert s.kafka_properties() == {"bootstrap.servers": "127.0.0.1:1", "sasl.password": "hunter2"}
    assert "hunter2" not in repr(s.redacted())
    assert s.spark_master == "local[*]" and s.output_mode == "retract" and s.rowkind_header == "rowkind"


@pytest.mark.parametrize("text, ms", [("0", 0), ("250ms", 250), ("500ms", 500), ("5s", 5000), ("2m", 120_000),
                                      ("1h", 3_600_000), ("2 sec", 2000), ("1min", 60_000), ("1d", 86_400_000)])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["10", "250", "1.5", "007"])
def test_a_duration_without_a_unit_is_refused_unless_it_is_0(text):
    with pytest.raises(ValueError, match="a duration needs a unit"):
        parse_duration_ms(text)


def test_a_duration_without_a_unit_is_refused_naming_the_variable_and_the_units():
    """STATE_TTL=10 was 10 ms, whatever its writer meant: now what the user reads says what to write."""
    proc = changejoin("check-config", env={**VALID, "STATE_TTL": "10"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "changejoin: invalid configuration:",
        "  STATE_TTL: a duration needs a unit: ms, s, m, h or d (sec and min too), as in 10s or 10ms; only 0 goes "
        "without (got '10')"]
    assert changejoin("check-config", env={**VALID, "TRIGGER_INTERVAL": "0"}).returncode == 0


@pytest.mark.parametrize(
    "change, variable",
    [
        ({"LEFT_TOPIC": None}, "LEFT_TOPIC"),
        ({"JOIN_SQL": None}, "JOIN_SQL"),
        ({"OUTPUT_MODE": "sideways"}, "OUTPUT_MODE"),
        ({"STATE_TTL": "soon"}, "STATE_TTL"),
        ({"SHUFFLE_PARTITIONS": "0"}, "SHUFFLE_PARTITIONS"),
        ({"LEFT_SCHEMA_FILE": "/nope.avsc"}, "LEFT_SCHEMA_FILE"),
        ({"LEFT_SCHEMA_FILE": None}, "SCHEMA_REGISTRY_URL"),
        ({"OUTPUT_MODE": "upsert"}, "OUTPUT_KEY"),
        ({"LEFT_CHANGELOG_MODE": "upsert", "LEFT_PRIMARY_KEY": None}, "LEFT_PRIMARY_KEY"),
    ],
)
def test_invalid_configuration_names_the_variable(change, variable):
    env = {k: v for k, v in {**VALID, **change}.items() if v is not None}
    with pytest.raises(ConfigError, match=variable):
        load_settings(env)


@pytest.mark.parametrize("change, line", [
    ({"LEFT_FORMAT": "debezium-avro", "LEFT_SCHEMA_FILE": None},
     "LEFT_FORMAT: debezium-avro reads Confluent's wire format, whose schemas are a registry's: set SCHEMA_REGISTRY_URL"),
    ({"RIGHT_FORMAT": "Debezium-Avro", "SCHEMA_REGISTRY_URL": "http://registry:8081"},
     "RIGHT_SCHEMA_FILE: not used with RIGHT_FORMAT=debezium-avro (each message's schema is the registry's); unset it"),
    ({"LEFT_EVENT_TIME_COLUMN": "source.ts_ms"},
     "LEFT_EVENT_TIME_COLUMN: source.ts_ms is a Debezium envelope's; LEFT_FORMAT=rowkind has none: name a column of "
     "the row"),
])
def test_debezium_formats_refuse_what_they_cannot_read_in_one_line(change, line):
    env = {k: v for k, v in {**VALID, **change}.items() if v is not None}
    with pytest.raises(ConfigError) as err:
        load_settings(env)
    assert str(err.value).splitlines()[-1].strip() == line


@pytest.mark.parametrize("primary_key", ["product", None])
@pytest.mark.parametrize("mode", ["append", "retract", "upsert", None])
def test_a_debezium_inputs_changelog_mode_is_append_retract_or_upsert_as_a_rowkind_inputs(mode, primary_key):
    env = {**VALID, "RIGHT_FORMAT": "debezium-json", "RIGHT_CHANGELOG_MODE": mode, "RIGHT_PRIMARY_KEY": primary_key}
    env = {k: v for k, v in env.items() if v is not None}
    if mode == "upsert" and primary_key is None:  # the one rule of rowkind inputs
        with pytest.raises(ConfigError) as err:
            load_settings(env)
        assert str(err.value).splitlines()[-1].strip() == \
            "RIGHT_PRIMARY_KEY: required when RIGHT_CHANGELOG_MODE=upsert"
        return
    settings = load_settings(env)
    assert settings.right_changelog_mode == (mode or "retract")  # unset: the planner decides (test_plan.py)


def test_source_ts_ms_is_a_debezium_sides_event_time():
    settings = load_settings({**VALID, "LEFT_FORMAT": "debezium-json", "LEFT_EVENT_TIME_COLUMN": "source.ts_ms"})
    assert settings.left_event_time_column == "source.ts_ms"


def test_every_variable_is_in_the_configuration_reference():
    reference = (ROOT / "docs" / "configuration.md").read_text()
    missing = [name for name in env_var_names() if f"`{name}`" not in reference]
    assert missing == []


def test_run_with_a_missing_variable_exits_non_zero_naming_it():
    env = {k: v for k, v in VALID.items() if k != "OUTPUT_TOPIC"}
    proc = changejoin("run", env=env)
    assert proc.returncode == 2
    assert "OUTPUT_TOPIC" in proc.stderr


def test_check_config_rejects_an_unknown_column_in_join_sql():
    proc = changejoin("check-config", env={**VALID, "JOIN_SQL": VALID["JOIN_SQL"].replace("o.product", "o.prodcut")})
    assert proc.returncode == 2
    assert "JOIN_SQL" in proc.stderr and "prodcut" in proc.stderr


def test_check_config_prints_the_plan_and_schema_prints_the_output_schema():
    proc = changejoin("check-config", env=VALID)
    assert proc.returncode == 0, proc.stderr
    assert "state layout InputSideHasUniqueKey" in proc.stdout
    assert "state layout JoinKeyContainsUniqueKey" in proc.stdout
    schema = changejoin("schema", env=VALID)
    assert schema.returncode == 0
    assert '"name": "price"' in schema.stdout and '"null"' in schema.stdout


# --------------------------------------------------------------------------------------------
# secrets: one rule (config.is_secret_name + URL user info), applied wherever configuration shows

from service import config as _config  # noqa: E402
from tests.support.secret_names import PUBLIC_NAMES, SECRET_NAMES  # noqa: E402


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name):
    assert _config.is_secret_name(name)
    assert _config.redact(name, "v4lue") == "*****"


@pytest.mark.parametrize("name", PUBLIC_NAMES)
def test_public_names(name):
    assert not _config.is_secret_name(name)
    assert _config.redact(name, "v4lue") == "v4lue"


@pytest.mark.parametrize("text, shown", [
    ("https://bob:hunter22@registry:8081", "https://*****@registry:8081"),
    ("https://apikey@registry/x", "https://*****@registry/x"),
    ("a http://u:p@h1, b https://u2:p2@h2/p@q", "a http://*****@h1, b https://*****@h2/p@q"),
    ("k8s://https://kubernetes.default.svc", "k8s://https://kubernetes.default.svc"),
    ("user@example.com", "user@example.com"),
])
def test_url_user_info_is_hidden_in_any_value(text, shown):
    assert _config.redact("ANY_VARIABLE", text) == shown


SECRETS = {
    "SCHEMA_REGISTRY_URL": "https://bob:registry-pass-1@127.0.0.1:1",
    "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "alice:registry-pass-2",
    "KAFKA_CLIENT_SASL_OAUTHBEARER_CONFIG": "principal=svc oauth-conf-3",
    "KAFKA_CLIENT_SASL_PASSWORD": "sasl-pass-4",
    "KAFKA_CLIENT_SSL_KEY_PASSWORD": "key-pass-5",
    "KAFKA_CLIENT_SSL_KEYSTORE_PASSWORD": "keystore-pass-6",
    "SPARK_CONF_spark_hadoop_fs_s3a_secret_key": "s3-secret-7",
    "SPARK_CONF_spark_hadoop_fs_s3a_access_key": "s3-access-8",
    "SPARK_CONF_spark_hadoop_fs_azure_account_key_acct_blob_core_windows_net": "azure-key-9",
    "SPARK_CONF_spark_hadoop_fs_s3a_session_token": "session-token-10",
}
SECRET_VALUES = ["registry-pass-1", "registry-pass-2", "oauth-conf-3", "sasl-pass-4", "key-pass-5",
                 "keystore-pass-6", "s3-secret-7", "s3-access-8", "azure-key-9", "session-token-10"]


def test_check_config_prints_no_secret():
    proc = changejoin("check-config", env={**VALID, **SECRETS, "OUTPUT_KEY": "order_id"})
    assert proc.returncode == 0, proc.stderr
    for value in SECRET_VALUES:
        assert value not in proc.stdout + proc.stderr, value
    # Each one is listed, hidden; what is not secret is shown.
    assert "SCHEMA_REGISTRY_URL=https://*****@127.0.0.1:1" in proc.stdout
    for name in ("SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO", "KAFKA_CLIENT_SASL_OAUTHBEARER_CONFIG",
                 "KAFKA_CLIENT_SASL_PASSWORD", "SPARK_CONF_spark_hadoop_fs_s3a_secret_key"):
        assert f"{name}=*****" in proc.stdout
    assert "OUTPUT_KEY=order_id" in proc.stdout and "LEFT_PRIMARY_KEY=order_id" in proc.stdout


def test_settings_repr_and_redacted_view_hide_secrets():
    s = load_settings({**VALID, **SECRETS})
    for text in (repr(s), str(s), repr(s.redacted())):
        for value in SECRET_VALUES:
            assert value not in text
    # ... while the service itself gets the real values.
    assert s.kafka_properties()["sasl.password"] == "sasl-pass-4"
    assert s.spark_conf["spark.hadoop.fs.s3a.secret.key"] == "s3-secret-7"


def test_configuration_errors_hide_url_user_info():
    with pytest.raises(ConfigError) as err:
        load_settings({**VALID, "MAX_RECORDS_PER_TRIGGER": "https://bob:hunter22@x"})
    assert "MAX_RECORDS_PER_TRIGGER" in str(err.value)
    assert "hunter22" not in str(err.value) and "*****" in str(err.value)


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_log_lines_are_scrubbed_of_secret_values(fmt):
    import json
    import logging

    from service.logs import JsonFormatter, RedactingFormatter

    s = load_settings({**VALID, **SECRETS})
    inner = JsonFormatter() if fmt == "json" else logging.Formatter("%(levelname)s %(message)s")
    formatter = RedactingFormatter(inner, s.secret_values())
    try:
        raise RuntimeError('registry https://bob:registry-pass-1@127.0.0.1:1 said "no" to alice:registry-pass-2')
    except RuntimeError:
        import sys

        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "login with %s failed (%s)",
                                   ("sasl-pass-4", "s3-secret-7"), sys.exc_info())
    line = formatter.format(record)
    for value in SECRET_VALUES[:2] + ["sasl-pass-4", "s3-secret-7"]:
        assert value not in line
    assert "login with ***** failed" in line and "https://*****@127.0.0.1:1" in line
    if fmt == "json":
        assert json.loads(line)["level"] == "ERROR"


# --------------------------------------------------------------------------------------------
# misspelt variables; the platform's own variables

@pytest.mark.parametrize("typo, meant", [
    ("LEFT_PRIMARYKEY", "LEFT_PRIMARY_KEY"), ("STATE_TLL", "STATE_TTL"), ("SPARK_MASTR", "SPARK_MASTER"),
    ("SPARK_UI_ENABLE", "SPARK_UI_ENABLED"), ("KAFKA_BOOTSTRAP_SERVER", "KAFKA_BOOTSTRAP_SERVERS"),
    ("SCHEMA_REGISTRY_URI", "SCHEMA_REGISTRY_URL"), ("OUTPUT_MDOE", "OUTPUT_MODE"),
    ("MAX_OUTPUT_RECORDS_BYTES", "MAX_OUTPUT_RECORD_BYTES"), ("TRIGGER_INTERVALL", "TRIGGER_INTERVAL"),
    ("LOG_LEVLE", "LOG_LEVEL"), ("DLQ_TOPICS", "DLQ_TOPIC"), ("RIGHT_EVENTTIME_COLUMN", "RIGHT_EVENT_TIME_COLUMN"),
    ("CHECKPOINT_DIR", "CHECKPOINT_LOCATION"), ("READY_MAX_TRIGGER_INTERVAL", "READY_MAX_TRIGGER_INTERVALS"),
])
def test_a_misspelt_variable_is_an_error_naming_the_closest_one(typo, meant):
    with pytest.raises(ConfigError) as err:
        load_settings({**VALID, typo: "1"})
    assert f"{typo}: not a changejoin variable; did you mean {meant}?" in str(err.value)


def test_the_configuration_reference_lists_every_prefix_taken_for_changejoins():
    reference = (ROOT / "docs" / "configuration.md").read_text()
    assert [p for p in _config.own_prefixes() if f"`{p}`" not in reference] == []


def test_unknown_variable_without_a_close_match_still_fails():
    with pytest.raises(ConfigError, match="JOIN_WHATEVER: not a changejoin variable"):
        load_settings({**VALID, "JOIN_WHATEVER": "1"})


def test_all_problems_are_reported_at_once():
    with pytest.raises(ConfigError) as err:
        load_settings({**VALID, "STATE_TLL": "1s", "OUTPUT_MODE": "sideways", "DLQ_TOPIC": "out"})
    text = str(err.value)
    assert "STATE_TLL" in text and "OUTPUT_MODE" in text


PLATFORM = {
    "SPARK_HOME": "/opt/spark", "SPARK_CONF_DIR": "/etc/changejoin/spark", "SPARK_LOCAL_DIRS": "/var/lib/x",
    "SPARK_LOCAL_IP": "10.0.0.5", "SPARK_USER": "changejoin", "SPARK_JAVA_OPT_0": "-Dx=y", "SPARK_JAVA_OPT_12": "-Dz",
    "KAFKA_HEAP_OPTS": "-Xmx1g", "KAFKA_OPTS": "-Dk", "JAVA_HOME": "/usr/lib/jvm/java-17",
    "PYSPARK_PYTHON": "/usr/bin/python3", "PYSPARK_DRIVER_PYTHON": "/usr/bin/python3",
    # Kubernetes service links of Services named kafka and schema-registry
    "KAFKA_SERVICE_HOST": "10.96.0.10", "KAFKA_SERVICE_PORT": "9092", "KAFKA_SERVICE_PORT_CLIENT": "9092",
    "KAFKA_PORT": "tcp://10.96.0.10:9092", "KAFKA_PORT_9092_TCP": "tcp://10.96.0.10:9092",
    "KAFKA_PORT_9092_TCP_PROTO": "tcp", "KAFKA_PORT_9092_TCP_PORT": "9092", "KAFKA_PORT_9092_TCP_ADDR": "10.96.0.10",
    "SCHEMA_REGISTRY_SERVICE_HOST": "10.96.0.11", "SCHEMA_REGISTRY_PORT": "tcp://10.96.0.11:8081",
}


def test_the_platforms_variables_are_neither_refused_nor_read():
    s = load_settings({**VALID, **PLATFORM})
    assert not any(k.upper() == k for k in s.spark_conf)  # SPARK_CONF_DIR is Spark's, not a property
    assert "DIR" not in s.spark_conf and s.kafka_properties() == {"bootstrap.servers": "127.0.0.1:1"}


def test_the_environment_of_a_process_that_ran_pyspark_is_accepted(spark):
    """SparkContext puts SPARK_* variables into its process's environment, which processes it
    starts (the service run by a test, a supervisor restarting it) inherit."""
    import os

    assert any(k.startswith("SPARK_") for k in os.environ)  # what this test is about
    load_settings({**os.environ, **VALID})


def test_a_port_variable_that_is_not_a_service_link_is_refused():
    with pytest.raises(ConfigError, match="SCHEMA_REGISTRY_PORT: not a changejoin variable"):
        load_settings({**VALID, "SCHEMA_REGISTRY_PORT": "8081"})


def _dockerfile_env_names() -> set[str]:
    """The variables the runtime image sets (deploy/Dockerfile's ENV instructions)."""
    import re

    text = (ROOT / "deploy" / "Dockerfile").read_text().replace("\\\n", " ")
    names = set()
    for line in text.splitlines():
        if line.startswith("ENV "):
            names |= set(re.findall(r"(?:^|\s)([A-Z_][A-Z0-9_]*)=", line[4:]))
    return names


def test_the_images_own_environment_is_accepted():
    names = _dockerfile_env_names()
    assert {"SPARK_HOME", "SPARK_CONF_DIR", "CHECKPOINT_LOCATION"} <= names
    env = {name: "/x" for name in names}
    s = load_settings({**VALID, **env})
    assert s.checkpoint_location == "/x" and s.spark_conf.get("DIR") is None


def test_spark_properties_must_start_with_spark():
    with pytest.raises(ConfigError) as err:
        load_settings({**VALID, "SPARK_CONF_SPARK_EXECUTOR_INSTANCES": "3"})
    assert "SPARK_CONF_SPARK_EXECUTOR_INSTANCES" in str(err.value)
    assert "did you mean SPARK_CONF_spark_executor_instances?" in str(err.value)


# --------------------------------------------------------------------------------------------
# refused at configuration time

@pytest.mark.parametrize("change, message", [
    ({"DLQ_TOPIC": "out"}, "DLQ_TOPIC: 'out' is also OUTPUT_TOPIC"),
    ({"DLQ_TOPIC": "orders"}, "DLQ_TOPIC: 'orders' is also LEFT_TOPIC"),
    ({"DLQ_TOPIC": "prices"}, "DLQ_TOPIC: 'prices' is also RIGHT_TOPIC"),
    ({"OUTPUT_TOPIC": "prices"}, "OUTPUT_TOPIC: 'prices' is also RIGHT_TOPIC"),
    ({"LEFT_TOPIC": "out.dlq", "JOIN_SQL": VALID["JOIN_SQL"], "LEFT_TABLE": "orders"},
     "DLQ_TOPIC (default 'out.dlq'): 'out.dlq' is also LEFT_TOPIC"),
    ({"KAFKA_CLIENT_ACKS": "1"}, "KAFKA_CLIENT_ACKS: the sink needs acks=all"),
    ({"KAFKA_CLIENT_ACKS": "0"}, "KAFKA_CLIENT_ACKS: the sink needs acks=all"),
    ({"KAFKA_CLIENT_REQUEST_REQUIRED_ACKS": "1"}, "KAFKA_CLIENT_REQUEST_REQUIRED_ACKS: the sink needs acks=all"),
    ({"KAFKA_CLIENT_ENABLE_IDEMPOTENCE": "false"}, "KAFKA_CLIENT_ENABLE_IDEMPOTENCE: the sink needs an idempotent"),
    ({"KAFKA_CLIENT_FOO_BAR": "1"}, 'KAFKA_CLIENT_FOO_BAR: No such configuration property: "foo.bar"'),
    ({"KAFKA_CLIENT_SASL_MECHANISMS_TYPO": "PLAIN"}, "KAFKA_CLIENT_SASL_MECHANISMS_TYPO: No such configuration property"),
    ({"KAFKA_CLIENT_LINGER_MS": "soon"}, "KAFKA_CLIENT_LINGER_MS: Invalid value"),
    ({"KAFKA_CLIENT_MESSAGE_MAX_BYTES": "5"}, "KAFKA_CLIENT_MESSAGE_MAX_BYTES: "),
    ({"KAFKA_CLIENT_SECURITY_PROTOCOL": "TLS"}, "KAFKA_CLIENT_SECURITY_PROTOCOL: one of PLAINTEXT"),
    ({"KAFKA_CLIENT_BOOTSTRAP_SERVERS": "b:9092"}, "KAFKA_CLIENT_BOOTSTRAP_SERVERS: set KAFKA_BOOTSTRAP_SERVERS"),
    ({"OUTPUT_TOPIC": "out put"}, "OUTPUT_TOPIC: invalid Kafka topic name"),
    ({"LEFT_TOPIC": "..", "LEFT_TABLE": "orders"}, "LEFT_TOPIC: invalid Kafka topic name"),
    ({"RIGHT_TOPIC": ".", "RIGHT_TABLE": "prices"}, "RIGHT_TOPIC: invalid Kafka topic name"),
    ({"DLQ_TOPIC": "d" * 250}, "DLQ_TOPIC: invalid Kafka topic name"),
    ({"OUTPUT_TOPIC": "o" * 248}, "DLQ_TOPIC (default"),  # the default <OUTPUT_TOPIC>.dlq is too long
    ({"RIGHT_TOPIC": "preise€", "RIGHT_TABLE": "prices"}, "RIGHT_TOPIC: invalid Kafka topic name"),
    ({"MAX_OUTPUT_RECORD_BYTES": "1000000"}, "MAX_OUTPUT_RECORD_BYTES: 1000000 leaves no room"),
    ({"MAX_OUTPUT_RECORD_BYTES": "999786"}, "at most 999785"),
    ({"KAFKA_CLIENT_MESSAGE_MAX_BYTES": "500000", "MAX_OUTPUT_RECORD_BYTES": "499800"},
     "within KAFKA_CLIENT_MESSAGE_MAX_BYTES=500000: at most 499785"),
    ({"SPARK_UI_ENABLED": "false", "SPARK_CONF_spark_ui_enabled": "true"}, "SPARK_CONF_spark_ui_enabled: contradicts"),
])
def test_refused_at_configuration_time(change, message):
    with pytest.raises(ConfigError) as err:
        load_settings({**VALID, **change})
    assert message in str(err.value)


@pytest.mark.parametrize("change", [
    {"KAFKA_CLIENT_ACKS": "all"}, {"KAFKA_CLIENT_ACKS": "-1"}, {"KAFKA_CLIENT_ENABLE_IDEMPOTENCE": "true"},
    {"KAFKA_CLIENT_LINGER_MS": "20", "KAFKA_CLIENT_COMPRESSION_TYPE": "zstd", "KAFKA_CLIENT_CLIENT_ID": "cj"},
    {"KAFKA_CLIENT_GROUP_ID": "g", "KAFKA_CLIENT_FETCH_MAX_BYTES": "1048576"},  # consumer properties
    # TLS and SASL settings are checked for their names and values only: the files need not exist here.
    {"KAFKA_CLIENT_SECURITY_PROTOCOL": "SASL_SSL", "KAFKA_CLIENT_SASL_MECHANISM": "SCRAM-SHA-512",
     "KAFKA_CLIENT_SSL_CA_LOCATION": "/no/such/ca.crt", "KAFKA_CLIENT_SASL_USERNAME": "u"},
    {"MAX_OUTPUT_RECORD_BYTES": "999785"},
    {"KAFKA_CLIENT_MESSAGE_MAX_BYTES": "2000000", "MAX_OUTPUT_RECORD_BYTES": "1999785"},
])
def test_accepted_producer_settings(change):
    load_settings({**VALID, **change})


def test_max_output_record_bytes_default_leaves_room_for_headers_and_framing():
    assert load_settings(VALID).max_output_record_bytes == 1_000_000 - 215
    assert output_framing_bytes("rowkind") == 215
    s = load_settings({**VALID, "KAFKA_CLIENT_MESSAGE_MAX_BYTES": "4000000", "ROWKIND_HEADER": "op"})
    assert s.max_output_record_bytes == 4_000_000 - 210


def test_the_reserved_room_covers_the_largest_headers_librdkafka_counts():
    """librdkafka's own accounting (36 bytes of record framing + key + value + serialized
    headers) of a record of exactly MAX_OUTPUT_RECORD_BYTES with the longest header values,
    plus the 61-byte batch header, stays within message.max.bytes."""
    s = load_settings({**VALID, "ROWKIND_HEADER": "a-long-rowkind-header-name"})

    def varint_len(n: int) -> int:
        n = (n << 1) ^ (n >> 63)  # zigzag, as Kafka's record format
        return max(1, (n.bit_length() + 6) // 7)

    headers = [(s.rowkind_header, b"-U"), ("changejoin.batch", str(2**63 - 1).encode()),
               ("changejoin.seq", f"{2**31 - 1}:{2**63 - 1}".encode())]
    serialized = sum(varint_len(len(k)) + len(k) + varint_len(len(v)) + len(v) for k, v in headers)
    assert 36 + s.max_output_record_bytes + serialized + 61 <= s.producer_message_max_bytes


def test_check_config_exits_2_naming_a_refused_variable():
    proc = changejoin("check-config", env={**VALID, "KAFKA_CLIENT_ACKS": "1", "STATE_TLL": "1h"})
    assert proc.returncode == 2
    assert "KAFKA_CLIENT_ACKS" in proc.stderr and "did you mean STATE_TTL?" in proc.stderr


def test_trigger_interval_defaults_to_500ms_and_takes_durations():
    assert load_settings(VALID).trigger_interval_ms == 500  # docs/configuration.md (bench/results/RESULTS.md, latency)
    assert load_settings({**VALID, "TRIGGER_INTERVAL": "2s"}).trigger_interval_ms == 2000
    assert load_settings({**VALID, "TRIGGER_INTERVAL": "0"}).trigger_interval_ms == 0


# --------------------------------------------------------------------------------------------
# warnings for what the plan does not use

DATA = ROOT / "tests" / "data"
EVENT_TIME = {
    "LEFT_SCHEMA_FILE": str(DATA / "orders_timed.avsc"), "RIGHT_SCHEMA_FILE": str(DATA / "rates.avsc"),
    "RIGHT_TABLE": "rates", "RIGHT_PRIMARY_KEY": "currency", "RIGHT_EVENT_TIME_COLUMN": "rate_time",
    "JOIN_SQL": "SELECT o.order_id, r.rate FROM orders o LEFT JOIN rates FOR SYSTEM_TIME AS OF o.order_time AS r "
                "ON o.currency = r.currency",
}
PROCESSING_TIME = {
    **EVENT_TIME, "RIGHT_EVENT_TIME_COLUMN": None,
    "JOIN_SQL": "SELECT o.order_id, r.rate FROM orders o JOIN rates FOR SYSTEM_TIME AS OF PROCTIME() AS r "
                "ON o.currency = r.currency",
}


def _warnings(env):
    from service.catalog import plan_for

    s = load_settings({k: v for k, v in {**VALID, **env}.items() if v is not None})
    return _config.unused_settings(s, plan_for(s))


@pytest.mark.parametrize("env, flagged", [
    ({"RIGHT_EVENT_TIME_COLUMN": "price"}, ["RIGHT_EVENT_TIME_COLUMN"]),
    ({"LEFT_WATERMARK_DELAY": "5s", "RIGHT_WATERMARK_DELAY": "0", "IDLE_TIMEOUT": "1m"},
     ["LEFT_WATERMARK_DELAY", "RIGHT_WATERMARK_DELAY", "IDLE_TIMEOUT"]),
    ({"LEFT_KEY_FORMAT": "raw"}, ["LEFT_KEY_FORMAT"]),  # not an upsert input
    ({"LEFT_CHANGELOG_MODE": "upsert", "LEFT_KEY_FORMAT": "avro",  # joined directly: keys are read
      "JOIN_SQL": "SELECT o.order_id, p.price FROM orders o LEFT JOIN prices p ON o.order_id = p.price"}, []),
    ({"STATE_TTL": "1h", "LEFT_STATE_TTL": "1m", "MINI_BATCH_SIZE": "10"}, []),
    ({**EVENT_TIME, "LEFT_WATERMARK_DELAY": "5s", "IDLE_TIMEOUT": "1m", "STATE_TTL": "1d"}, []),
    ({**EVENT_TIME, "LEFT_STATE_TTL": "1d"}, ["LEFT_STATE_TTL"]),
    ({**PROCESSING_TIME, "RIGHT_WATERMARK_DELAY": "5s", "IDLE_TIMEOUT": "1m"}, ["RIGHT_WATERMARK_DELAY", "IDLE_TIMEOUT"]),
])
def test_warnings_for_variables_the_plan_does_not_use(env, flagged):
    warnings = _warnings(env)
    assert [w.split(" ", 1)[0] for w in warnings] == flagged


def test_check_config_prints_the_warnings_and_still_succeeds():
    proc = changejoin("check-config", env={**VALID, "IDLE_TIMEOUT": "1m"})
    assert proc.returncode == 0, proc.stderr
    assert "warnings:\n  IDLE_TIMEOUT is set but not used: JOIN_SQL is a regular join" in proc.stdout
    assert "changejoin: warning: IDLE_TIMEOUT" in proc.stderr


def test_mini_batch_size_on_a_temporal_join_stays_an_error():
    proc = changejoin("check-config", env={**VALID, **EVENT_TIME, "MINI_BATCH_SIZE": "10"})
    assert proc.returncode == 2 and "MINI_BATCH_SIZE" in proc.stderr


def test_the_source_gets_no_producer_property():
    """librdkafka logs a CONFWARN line from every consumer given a producer's property."""
    s = load_settings({**VALID, "KAFKA_CLIENT_LINGER_MS": "5", "KAFKA_CLIENT_BATCH_NUM_MESSAGES": "100",
                       "KAFKA_CLIENT_FETCH_MAX_BYTES": "1000000", "KAFKA_CLIENT_CLIENT_ID": "cj",
                       "KAFKA_CLIENT_SASL_MECHANISM": "PLAIN"})
    assert s.consumer_properties() == {"fetch.max.bytes": "1000000", "client.id": "cj", "sasl.mechanism": "PLAIN"}
    assert set(s.kafka_properties()) >= {"linger.ms", "batch.num.messages"}  # the sink's producer keeps them


# -- delivery -----------------------------------------------------------------------------------

EXACTLY_ONCE = {**VALID, "DELIVERY": "exactly-once"}


def test_exactly_once_defaults_derive_from_the_output_topic():
    s = load_settings({**VALID, "DELIVERY": " Exactly-Once "})
    assert s.exactly_once and s.delivery == "exactly-once"
    assert (s.transactional_id_prefix, s.progress_topic_name, s.kafka_transaction_timeout_ms) == \
        ("changejoin-out", "changejoin-out.progress", 120_000)  # the deployment's own progress topic
    s = load_settings({**EXACTLY_ONCE, "KAFKA_TRANSACTIONAL_ID_PREFIX": "team.a-join", "PROGRESS_TOPIC": "p",
                       "KAFKA_TRANSACTION_TIMEOUT_MS": "60000"})
    assert (s.transactional_id_prefix, s.progress_topic_name, s.kafka_transaction_timeout_ms) == ("team.a-join", "p", 60_000)
    assert load_settings(VALID).exactly_once  # the default
    assert not load_settings({**VALID, "DELIVERY": "at-least-once"}).exactly_once


@pytest.mark.parametrize("change, message", [
    ({"DELIVERY": "twice"}, "DELIVERY"),
    ({"MAX_RECORDS_PER_TRIGGER": "0"}, "MAX_RECORDS_PER_TRIGGER"),
    ({"KAFKA_TRANSACTION_TIMEOUT_MS": "15000"}, "KAFKA_TRANSACTION_TIMEOUT_MS: at least 20000"),
    ({"KAFKA_TRANSACTION_TIMEOUT_MS": "soon"}, "KAFKA_TRANSACTION_TIMEOUT_MS"),
    ({"KAFKA_TRANSACTIONAL_ID_PREFIX": "team a"}, "KAFKA_TRANSACTIONAL_ID_PREFIX: use the characters"),
    ({"KAFKA_CLIENT_TRANSACTIONAL_ID": "mine"}, "KAFKA_CLIENT_TRANSACTIONAL_ID: the service sets it per task"),
    ({"KAFKA_CLIENT_TRANSACTION_TIMEOUT_MS": "1000"}, "KAFKA_CLIENT_TRANSACTION_TIMEOUT_MS"),
    ({"PROGRESS_TOPIC": "out"}, "PROGRESS_TOPIC: 'out' is also OUTPUT_TOPIC"),
    ({"PROGRESS_TOPIC": "bad name"}, "PROGRESS_TOPIC: invalid Kafka topic name"),
    ({"DLQ_TOPIC": "changejoin-out.progress"},
     r"PROGRESS_TOPIC \(default 'changejoin-out.progress'\): 'changejoin-out.progress' is also DLQ_TOPIC"),
    ({"SPARK_CONF_spark_speculation": "true"}, "SPARK_CONF_spark_speculation: must stay false"),
])
def test_exactly_once_refuses_what_it_cannot_keep_naming_the_variable(change, message):
    with pytest.raises(ConfigError, match=message):
        load_settings({**EXACTLY_ONCE, **change})


def test_a_transactional_id_set_by_hand_is_refused_in_either_mode():
    with pytest.raises(ConfigError, match="KAFKA_CLIENT_TRANSACTIONAL_ID"):
        load_settings({**VALID, "KAFKA_CLIENT_TRANSACTIONAL_ID": "mine"})


def test_check_config_explains_the_delivery_and_warns_of_exactly_once_settings_left_unused():
    proc = changejoin("check-config", env={**EXACTLY_ONCE, "SHUFFLE_PARTITIONS": "4", "CHECKPOINT_LOCATION": "/nonexistent/ck"})
    assert proc.returncode == 0, proc.stderr
    delivery = proc.stdout.split("delivery:\n", 1)[1]
    assert "exactly-once for read_committed consumers of out and out.dlq" in delivery
    assert "transactional ids changejoin-out-0 .. changejoin-out-3 (KAFKA_TRANSACTION_TIMEOUT_MS=120000)" in delivery
    assert "progress markers in changejoin-out.progress" in delivery
    proc = changejoin("check-config", env={**VALID, "DELIVERY": "at-least-once", "PROGRESS_TOPIC": "p",
                                           "CHECKPOINT_LOCATION": "/nonexistent/ck"})
    assert proc.returncode == 0, proc.stderr
    assert "at-least-once" in proc.stdout.split("delivery:\n", 1)[1]
    assert "warning: PROGRESS_TOPIC is set but not used: it applies to DELIVERY=exactly-once only" in proc.stderr


def test_a_transactional_producer_times_its_records_out_before_its_transaction():
    from service.sink import DEFAULT_DELIVERY_TIMEOUT_MS, MESSAGE_TIMEOUT_MARGIN_MS, producer_config

    conf = producer_config("b:9092", {}, transactional_id="p-3", transaction_timeout_ms=120_000)
    assert conf["transactional.id"] == "p-3" and conf["transaction.timeout.ms"] == 120_000
    assert conf["message.timeout.ms"] == 120_000 - MESSAGE_TIMEOUT_MARGIN_MS < DEFAULT_DELIVERY_TIMEOUT_MS
    assert producer_config("b", {"delivery.timeout.ms": 5000}, transactional_id="p", transaction_timeout_ms=60_000)[
        "message.timeout.ms"] == 5000
    assert "transactional.id" not in producer_config("b", {})
    from confluent_kafka import Producer

    Producer(conf)  # librdkafka accepts it (it refuses message.timeout.ms above transaction.timeout.ms)
    with pytest.raises(Exception, match="message.timeout.ms"):
        Producer({**conf, "message.timeout.ms": 300_000})


# -- every bad configuration is one line (issue: the probe of 93 environments) --------------------

PROBE_DIR = ROOT / "tests" / "data"


@pytest.fixture
def schema_files(tmp_path):
    import json

    enum = tmp_path / "enum.avsc"
    enum.write_text(json.dumps({"type": "enum", "name": "E", "symbols": ["A"]}))
    nullable_key = tmp_path / "prices_nullable_key.avsc"
    nullable_key.write_text(json.dumps({"type": "record", "name": "prices", "fields": [
        {"name": "product", "type": ["null", "string"]}, {"name": "price", "type": "double"}]}))
    return {"enum": str(enum), "nullable_key": str(nullable_key)}


@pytest.mark.parametrize("name, change, message", [
    ("enum", {"LEFT_SCHEMA_FILE": "enum"}, "LEFT_SCHEMA_FILE: expected an Avro record schema, got 'enum'"),
    ("ftp", {"SCHEMA_REGISTRY_URL": "ftp://registry"}, "SCHEMA_REGISTRY_URL: expected http://host:port or https://"),
    ("no host", {"SCHEMA_REGISTRY_URL": "http://"}, "SCHEMA_REGISTRY_URL"),
    ("user info", {"SCHEMA_REGISTRY_URL": "http://r:8081", "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "nocolon"},
     "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO: expected '<user>:<password>'"),
    ("5,000 digits", {"JOIN_SQL": VALID["JOIN_SQL"] + " AND o.quantity > " + "9" * 5000},
     "JOIN_SQL: the numeric literal 9999.* has 5000 digits; at most 38"),
    ("3,000 parentheses", {"JOIN_SQL": VALID["JOIN_SQL"].replace(
        "o.product = p.product", "(" * 3000 + "o.product = p.product" + ")" * 3000)}, "JOIN_SQL: its parentheses nest 3000 deep"),
    ("3,000 conjuncts", {"JOIN_SQL": VALID["JOIN_SQL"] + " AND " + " AND ".join(["o.quantity > 1"] * 3000)},
     "JOIN_SQL: too long or too deeply nested"),
    ("huge TTL", {"STATE_TTL": "8639999999999998865759266668544ms"}, "STATE_TTL: longer than the longest duration taken, 36500d"),
    ("fractional TTL", {"STATE_TTL": "1.9ms"}, "STATE_TTL: not a whole number of milliseconds"),
    ("shuffle", {"SHUFFLE_PARTITIONS": "100000000"}, "SHUFFLE_PARTITIONS: .*10000"),
    ("duplicated key", {"LEFT_PRIMARY_KEY": "order_id,order_id"}, "LEFT_PRIMARY_KEY: order_id listed more than once"),
    ("duplicated output key", {"OUTPUT_MODE": "upsert", "OUTPUT_KEY": "order_id, ORDER_ID"}, "OUTPUT_KEY: .*more than once"),
    ("padded upsert key", {"OUTPUT_MODE": "upsert", "OUTPUT_KEY": "price"},
     "OUTPUT_KEY: price comes from the right input, which this LEFT join pads with NULLs"),
    ("two shuffle settings", {"SPARK_CONF_spark_sql_shuffle_partitions": "3", "SHUFFLE_PARTITIONS": "8"},
     "SPARK_CONF_spark_sql_shuffle_partitions: contradicts SHUFFLE_PARTITIONS=8"),
    ("shuffle by Spark's name", {"SPARK_CONF_spark_sql_shuffle_partitions": "lots"}, "SPARK_CONF_spark_sql_shuffle_partitions"),
    ("HDFS state store", {"SPARK_CONF_spark_sql_streaming_stateStore_providerClass":
                          "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"},
     "SPARK_CONF_spark_sql_streaming_stateStore_providerClass: the join's state API"),
])
def test_a_bad_configuration_ends_with_one_line_naming_the_variable(name, change, message, schema_files):
    import re

    env = {**VALID, **{k: schema_files.get(v, v) for k, v in change.items()}, "CHECKPOINT_LOCATION": "/nonexistent/ck"}
    proc = changejoin("check-config", env=env)
    assert proc.returncode == 2, (name, proc.stdout[-500:], proc.stderr)
    assert "Traceback" not in proc.stderr
    assert re.search(message, proc.stderr), proc.stderr


def test_legal_but_surprising_values_get_a_warning(schema_files):
    env = {**VALID, "RIGHT_SCHEMA_FILE": schema_files["nullable_key"], "RIGHT_CHANGELOG_MODE": "upsert",
           "CHECKPOINT_LOCATION": "/nonexistent/ck"}
    proc = changejoin("check-config", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "warning: RIGHT_PRIMARY_KEY: product may be NULL in the right input's schema" in proc.stderr
    # A key that cannot be NULL gets none.
    assert "PRIMARY_KEY" not in changejoin("check-config", env={**env, "RIGHT_SCHEMA_FILE": VALID["RIGHT_SCHEMA_FILE"]}).stderr


def test_spark_confs_shuffle_partitions_alone_is_the_services():
    s = load_settings({**VALID, "SPARK_CONF_spark_sql_shuffle_partitions": "3"})
    assert s.shuffle_partitions == 3
    assert load_settings({**VALID, "SPARK_CONF_spark_sql_shuffle_partitions": "3", "SHUFFLE_PARTITIONS": "3"}).shuffle_partitions == 3


def test_durations_take_fractions_that_are_whole_milliseconds():
    assert parse_duration_ms("1.5s") == 1500 and parse_duration_ms("0.25m") == 15_000
    assert parse_duration_ms("36500d") == 36_500 * 86_400_000
    for text in ("1.9ms", "0.0001s", "36501d"):
        with pytest.raises(ValueError):
            parse_duration_ms(text)


# A fuzz test: whatever the variables that parse structured values hold, configuration ends in
# settings and a plan, or in a ConfigError/PlanError (one line naming the variable): never in any
# other exception (the CLI would print a traceback).

def _outcome(env: dict) -> str:
    from service.plan import PlanError
    from service.catalog import plan_for

    try:
        plan_for(load_settings(env))
    except (ConfigError, PlanError) as err:
        first = str(err).strip().splitlines()[0]
        assert first and "Traceback" not in str(err)
        return "refused"
    return "ok"


from hypothesis import HealthCheck, given, settings as hsettings, strategies as st  # noqa: E402

_FUZZ = hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_DURATION_TEXT = st.one_of(
    st.text(max_size=40),
    st.builds(lambda n, u: f"{n}{u}", st.one_of(st.integers(-10, 10**40), st.floats(allow_nan=True), st.decimals()),
              st.sampled_from(["", "ms", "s", "m", "h", "d", "min", "sec", " ms", "x"])),
)


@_FUZZ
@given(var=st.sampled_from(["STATE_TTL", "LEFT_STATE_TTL", "LEFT_WATERMARK_DELAY", "IDLE_TIMEOUT", "TRIGGER_INTERVAL",
                            "LIVENESS_TIMEOUT"]), value=_DURATION_TEXT)
def test_fuzz_durations(var, value):
    _outcome({**VALID, var: value})


@_FUZZ
@given(var=st.sampled_from(["LEFT_PRIMARY_KEY", "RIGHT_PRIMARY_KEY", "OUTPUT_KEY"]),
       value=st.one_of(st.text(max_size=40), st.lists(st.sampled_from(["order_id", "product", "price", "ORDER_ID", " ",
                                                                          "", "x", "quantity"]), max_size=5).map(",".join)),
       upsert=st.booleans())
def test_fuzz_column_lists(var, value, upsert):
    _outcome({**VALID, var: value, **({"OUTPUT_MODE": "upsert", "OUTPUT_KEY": "order_id"} if upsert and var != "OUTPUT_KEY" else {})})


@_FUZZ
@given(url=st.one_of(st.text(max_size=40), st.builds(lambda s, h: f"{s}://{h}", st.sampled_from(["http", "https", "ftp", "", "HTTP"]),
                                                     st.text(max_size=20))),
       user_info=st.one_of(st.none(), st.text(max_size=20)))
def test_fuzz_registry_urls(url, user_info):
    _outcome({**VALID, "SCHEMA_REGISTRY_URL": url,
              **({"SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": user_info} if user_info is not None else {})})


# The examples in eight runs of an eighth each (four per kind of literal), each within the unit
# tiers' 2 s (tests/conftest.py): a quarter took 2.9 s of CPU on a quiet 2-core machine.
@pytest.mark.parametrize("part", [1, 2, 3, 4])
@pytest.mark.parametrize("fraction", [False, True], ids=["integer", "fraction"])
@hsettings(_FUZZ, max_examples=-(-_FUZZ.max_examples // 8))
@given(depth=st.integers(0, 400), digits=st.integers(1, 6000), conjuncts=st.integers(0, 2000))
def test_fuzz_join_sql_depth_and_literals(fraction, part, depth, digits, conjuncts):
    literal = "7" * digits + (".5" if fraction else "")
    condition = "(" * depth + f"o.quantity > {literal}" + ")" * depth
    extra = "".join(" AND o.quantity > 1" for _ in range(conjuncts))
    _outcome({**VALID, "JOIN_SQL": VALID["JOIN_SQL"] + f" AND {condition}{extra}"})


@pytest.mark.parametrize("url, password", [
    ("postgresql://postgres@db.internal:5432/postgres", None),
    ("postgresql://postgres:s3cr%40t-99@db.internal:5432/postgres", "s3cr@t-99"),
])
def test_a_lookup_url_keeps_everything_but_its_password_in_the_log(url, password):
    """The log line of the plan (check-config's and the start's) and of a database error, through
    the service's own formatter: a user name is no secret, so ``postgres`` in ``postgresql``, in
    the database's name and in a message stays; a password goes, wherever it shows as a value of
    its own."""
    import logging
    import sys
    from pathlib import Path

    from service.database import TableInfo, redact
    from service.logs import formatter
    from service.explain import explain
    from service.catalog import plan_for

    schemas = Path(__file__).resolve().parents[2] / "schemas"
    s = load_settings({"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "LEFT_TOPIC": "orders", "OUTPUT_TOPIC": "out",
                       "LEFT_SCHEMA_FILE": str(schemas / "orders.avsc"), "LEFT_PRIMARY_KEY": "order_id",
                       "RIGHT_LOOKUP_URL": url, "RIGHT_TABLE": "products",
                       "JOIN_SQL": "SELECT o.order_id, p.name FROM orders o JOIN products FOR SYSTEM_TIME AS OF "
                                   "PROCTIME() AS p ON o.product = p.product"})
    table = TableInfo.from_dict({"table": "products", "primary_key": ["product"], "unique_keys": [["product"]],
                                 "columns": [{"name": n, "pg_type": "text", "cast": "text", "avro_type": "string",
                                              "nullable": False} for n in ("product", "name")]})
    plan = plan_for(s, table=table)
    line = formatter("text", s.secret_values())
    record = logging.LogRecord("service.app", logging.INFO, __file__, 1, "plan:\n%s", (explain(plan),), None)
    text = line.format(record)
    # (within a URL its user info is hidden as in any value: a bare one may be a token)
    assert "right: table products in postgresql://*****@db.internal:5432/postgres as products" in text
    failure = (f"lookup in {redact(url)} (products) failed: password authentication failed for user \"postgres\" "
               f"(tried {password})")
    record = logging.LogRecord("service.lookup", logging.ERROR, __file__, 1, "%s", (failure,), None)
    text = line.format(record)
    assert text.endswith("lookup in postgresql://*****@db.internal:5432/postgres (products) failed: password "
                         f"authentication failed for user \"postgres\" (tried {'*****' if password else None})")
    if password:
        assert password not in text and "s3cr%40t-99" not in line.format(logging.LogRecord(
            "x", logging.INFO, __file__, 1, "%s", (url,), sys.exc_info()))
