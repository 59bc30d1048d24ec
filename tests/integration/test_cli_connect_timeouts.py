"""The commands against servers that do not answer: each waits its CONNECT_TIMEOUT (or the
registry client's retries) in a process of its own, then ends with one line naming the variable.
Moved from tests/service/test_cli.py and test_contact_registry.py: each takes its timeout of real
time, over the unit tiers' 2 s budget (tests/conftest.py)."""
import pytest

from tests.support.service_env import (  # noqa: F401 (an autouse fixture)
    FROM_REGISTRY,
    VALID,
    _checkpoints_elsewhere,
    changejoin,
    closed_port,
    log_lines,
)

pytestmark = pytest.mark.integration


def test_run_against_a_closed_port_ends_within_connect_timeout_with_one_line_naming_the_variable():
    """It printed ~1,170 librdkafka lines a minute and ended on a KafkaError naming neither the
    variable nor the address."""
    address = f"127.0.0.1:{closed_port()}"
    proc = changejoin("run", env={**VALID, "KAFKA_BOOTSTRAP_SERVERS": address, "CONNECT_TIMEOUT": "3s"})
    assert proc.returncode == 1 and proc.stdout == ""
    lines = log_lines(proc.stderr)
    assert lines[-1] == ("CRITICAL", "service.app",
                         f"changejoin stopped: KAFKA_BOOTSTRAP_SERVERS={address}: no broker answered within 3 s "
                         f"(CONNECT_TIMEOUT): connection refused by ipv4#{address}")
    assert ("WARNING", "service.contact", f"KAFKA_BOOTSTRAP_SERVERS={address} does not answer (connection refused by "
            f"ipv4#{address}); waiting up to 3 s (CONNECT_TIMEOUT)") in lines
    # librdkafka's own lines come through the service's logger, each distinct one once per 30 s
    client = [message for level, logger, message in lines if logger == "librdkafka"]
    assert client == [f"FAIL: {address}/bootstrap: Connect to ipv4#{address} failed: Connection refused"]
    assert len(lines) == 3


def test_run_against_an_unknown_host_says_so():
    proc = changejoin("run", env={**VALID, "KAFKA_BOOTSTRAP_SERVERS": "broker.invalid:9092", "CONNECT_TIMEOUT": "2s"})
    assert proc.returncode == 1
    level, _, message = log_lines(proc.stderr)[-1]
    assert level == "CRITICAL" and message.startswith(
        "changejoin stopped: KAFKA_BOOTSTRAP_SERVERS=broker.invalid:9092: no broker answered within 2 s "
        "(CONNECT_TIMEOUT): unknown host broker.invalid (")


def test_abort_transactions_ends_within_connect_timeout_naming_the_variable(tmp_path):
    """It printed 2,160 lines in 90 s and had not ended."""
    address = f"127.0.0.1:{closed_port()}"
    proc = changejoin("abort-transactions", env={**VALID, "KAFKA_BOOTSTRAP_SERVERS": address, "CONNECT_TIMEOUT": "2s",
                                                 "CHECKPOINT_LOCATION": str(tmp_path / "ck")})
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == (f"changejoin: KAFKA_BOOTSTRAP_SERVERS={address}: no broker answered within "
                                            f"2 s (CONNECT_TIMEOUT): connection refused by ipv4#{address}")


def test_check_config_connect_names_the_server_that_did_not_answer(tmp_path):
    address = f"127.0.0.1:{closed_port()}"
    proc = changejoin("check-config", "--connect", env={**VALID, "KAFKA_BOOTSTRAP_SERVERS": address,
                                                        "CONNECT_TIMEOUT": "2s",
                                                        "CHECKPOINT_LOCATION": str(tmp_path / "ck")})
    assert proc.returncode == 1
    assert proc.stdout.splitlines() == [
        "servers (each waited for up to CONNECT_TIMEOUT=2s):",
        f"  FAIL  KAFKA_BOOTSTRAP_SERVERS={address}: no broker answered within 2 s (CONNECT_TIMEOUT): connection "
        f"refused by ipv4#{address}",
        "check-config: 1 of 1 checks failed (FAIL above: KAFKA_BOOTSTRAP_SERVERS)"]


def test_check_config_says_a_registry_it_cannot_connect_to_is_a_connection_failure():
    address = f"http://127.0.0.1:{closed_port()}"
    proc = changejoin("check-config", env={**FROM_REGISTRY, "SCHEMA_REGISTRY_URL": address})
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"changejoin: SCHEMA_REGISTRY_URL: cannot get the latest schema of subject orders-value (cannot connect to the "
        f"Schema Registry at {address}: connection refused (GET /subjects/orders-value/versions/latest))"]


def test_the_fatal_line_is_json_with_log_format_json():
    import json

    address = f"127.0.0.1:{closed_port()}"
    proc = changejoin("run", env={**VALID, "KAFKA_BOOTSTRAP_SERVERS": address, "CONNECT_TIMEOUT": "1s",
                                  "LOG_FORMAT": "json"})
    assert proc.returncode == 1
    last = json.loads(proc.stderr.splitlines()[-1])
    assert last["event"] == "fatal" and last["error_type"] == "ServerError"
    assert last["cause"].startswith(f"KAFKA_BOOTSTRAP_SERVERS={address}: no broker answered within 1 s")
