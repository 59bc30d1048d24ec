"""service/secrets.py, the one owner of secrets: where a URL carries a password (found to be
hidden, read to be sent, removed to be shown), and the configuration and the servers' errors
hiding every form of it. The name rule and the redaction of values: tests/service/test_config.py."""
from __future__ import annotations

import logging
from pathlib import Path

import pytest

from service.config import load_settings
from service.secrets import password_forms, redact_text, redact_url, url_password, url_passwords

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
LOOKUP = {
    "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1", "LEFT_TOPIC": "orders", "OUTPUT_TOPIC": "out",
    "LEFT_SCHEMA_FILE": str(SCHEMAS / "orders.avsc"), "LEFT_PRIMARY_KEY": "order_id", "RIGHT_TABLE": "products",
    "JOIN_SQL": "SELECT o.order_id, p.name FROM orders o LEFT JOIN products FOR SYSTEM_TIME AS OF PROCTIME() AS p "
                "ON o.product = p.product",
}


@pytest.mark.parametrize("text, found", [
    ("postgresql://app:pw-1@db:5432/shop", ["pw-1"]),
    ("postgresql://app@db:5432/shop?sslmode=require&password=pw-2", ["pw-2"]),
    ("postgresql://app:s3cr%40t@db/shop", ["s3cr%40t", "s3cr@t"]),  # as written, and as the client sends it
    ("postgresql://postgres@db/postgres", []),  # a user name is no secret
    ("a http://u:p1x@h1, b https://u2:p2y@h2/p", ["p1x", "p2y"]),  # every URL of a text
    ("k8s://https://kubernetes.default.svc", []),
    ("host=db user=app password='a b' dbname=shop", ["a b"]),  # a key=value connection string
    ("host=db password=pw-3", ["pw-3"]),
    (None, []),
])
def test_every_password_a_text_carries_is_found(text, found):
    assert sorted(url_passwords(text)) == sorted(found)


def test_a_password_holding_an_at_sign_is_hidden_however_a_client_reads_it():
    """libpq ends the user info at the first ``@``, a careful reader at the last before the host:
    both readings are hidden, the longer first."""
    found = url_passwords("postgresql://app:p@ss@db/shop")
    assert found == ["p@ss", "p"]
    assert password_forms("postgresql://app@db/shop", "given%21") == ["given%21", "given!"]


@pytest.mark.parametrize("url, password", [
    ("postgresql://app:s3cr%40t@db/shop", "s3cr@t"),
    ("postgresql://app@db/shop?password=q%21", "q!"),
    ("postgresql://app:first@db/shop?password=second", "first"),
    ("postgresql://app@db/shop", None),
    (None, None),
])
def test_the_password_a_client_is_given(url, password):
    assert url_password(url) == password


@pytest.mark.parametrize("url, shown", [
    ("postgresql://app:pw@db:5432/shop?password=pw&sslmode=require", "postgresql://app@db:5432/shop?sslmode=require"),
    ("postgresql://app:p/w@x@db/shop", "postgresql://app@db/shop"),
    ("postgresql://db/shop", "postgresql://db/shop"),
    ("host=db password='a b' user=app", "host=db password=*** user=app"),
])
def test_a_url_is_shown_without_its_password(url, shown):
    assert redact_url(url) == shown


def test_log_lines_hide_a_lookup_password_given_as_a_query_parameter():
    """RIGHT_LOOKUP_URL may carry its password as ``?password=``, which psycopg sends: the log
    lines hide it as they hide one in the user info. (Failed before secrets.py: the
    configuration's scan read the user info only.)"""
    from service.logs import formatter

    settings = load_settings({**LOOKUP, "RIGHT_LOOKUP_URL": "postgresql://app@db:5432/shop?password=qp-secret-1"})
    assert "qp-secret-1" in settings.secret_values()
    record = logging.LogRecord("t", logging.ERROR, __file__, 1, "authentication failed (tried %s)",
                               ("qp-secret-1",), None)
    assert "qp-secret-1" not in formatter("text", settings.secret_values()).format(record)


def test_a_servers_error_is_scrubbed_of_the_decoded_password():
    """A server's error may quote the password as the client sent it, percent-decoded. (Failed
    before secrets.py: contact.scrub hid only the form the URL holds.)"""
    from service.contact import scrub

    settings = load_settings({**LOOKUP, "RIGHT_LOOKUP_URL": "postgresql://app:s3cr%40t-99@db:5432/shop"})
    said = scrub("password authentication failed (tried s3cr@t-99, or s3cr%40t-99)", settings)
    assert "s3cr@t-99" not in said and "s3cr%40t-99" not in said
    assert said == redact_text("password authentication failed (tried s3cr@t-99, or s3cr%40t-99)",
                               ["s3cr@t-99", "s3cr%40t-99"])
