"""Configuration: environment variables only, validated at start, errors naming the variable."""
import subprocess
import sys
from pathlib import Path

import pytest

from service.config import ConfigError, env_var_names, load_settings, parse_duration_ms

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "schemas"
VALID = {
    "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    "LEFT_TOPIC": "orders", "RIGHT_TOPIC": "prices", "OUTPUT_TOPIC": "out",
    "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders.avsc"), "RIGHT_SCHEMA_FILE": str(SCHEMAS / "prices.avsc"),
    "LEFT_PRIMARY_KEY": "order_id", "RIGHT_PRIMARY_KEY": "product",
    "JOIN_SQL": "SELECT o.order_id, p.price FROM orders o LEFT JOIN prices p ON o.product = p.product",
}


def changejoin(*args, env):
    return subprocess.run([sys.executable, "-m", "service", *args], cwd=ROOT, env={"PATH": "/usr/bin:/bin", **env},
                          capture_output=True, text=True, timeout=120)


def test_defaults_and_derived_values():
    s = load_settings({**VALID, "STATE_TTL": "90s", "RIGHT_STATE_TTL": "1m", "KAFKA_CLIENT_SASL_PASSWORD": "hunter2"})
    assert s.dead_letter_topic == "out.dlq"
    assert (s.left_table_name, s.right_table_name) == ("orders", "prices")
    assert (s.left_ttl_ms, s.right_ttl_ms) == (90_000, 60_000)
    assert s.kafka_properties() == {"bootstrap.servers": "127.0.0.1:1", "sasl.password": "hunter2"}
    assert "hunter2" not in repr(s.redacted())
    assert s.spark_master == "local[*]" and s.output_mode == "retract" and s.rowkind_header == "rowkind"


@pytest.mark.parametrize("text, ms", [("250", 250), ("500ms", 500), ("5s", 5000), ("2m", 120_000), ("1h", 3_600_000)])
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


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


def test_every_documented_variable_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    missing = [name for name in env_var_names() if f"`{name}`" not in readme]
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
