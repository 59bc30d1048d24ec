"""Waiting for the Schema Registry at start, and telling a connection failure from refused
credentials and from missing content, on the text the commands print. The registry is the
in-process fake (tests/support/schema_registry_fake.py); Kafka and PostgreSQL that refuse are in
tests/integration/test_contact.py."""
import json

import pytest

from tests.support.schema_registry_fake import FakeSchemaRegistry
from service.config import load_settings
from service.contact import CONNECTION, CONTENT, CREDENTIALS, ServerError, wait_for_registry
from tests.support.service_env import FROM_REGISTRY, SCHEMAS, changejoin, closed_port

ORDERS = json.loads((SCHEMAS / "orders.avsc").read_text())


def settings(url: str, **more):
    return load_settings({**FROM_REGISTRY, "SCHEMA_REGISTRY_URL": url, **more})


def test_a_registry_that_answers_is_not_waited_for():
    with FakeSchemaRegistry() as fake:
        fake.register("orders-value", ORDERS)
        assert wait_for_registry(settings(fake.url), timeout_s=5) == ["orders-value"]


def test_a_closed_port_is_a_connection_failure_once_the_bound_is_over():
    address = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(ServerError) as refused:
        wait_for_registry(settings(address), timeout_s=1)
    assert refused.value.kind == CONNECTION
    assert str(refused.value) == (f"SCHEMA_REGISTRY_URL={address}: no answer within 1 s (CONNECT_TIMEOUT): cannot "
                                  f"connect: connection refused")


def test_refused_credentials_end_the_wait_at_once_naming_the_variable_to_fix():
    with FakeSchemaRegistry(basic_auth_user_info="svc:s3cret") as fake:
        url = fake.url
        with pytest.raises(ServerError) as refused:
            wait_for_registry(settings(url, SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO="svc:wrong"), timeout_s=3600)
    assert refused.value.kind == CREDENTIALS
    assert str(refused.value) == (f"SCHEMA_REGISTRY_URL={url}: the registry refused the credentials (HTTP 401): "
                                  f"check SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO")


def test_a_server_that_is_no_registry_is_said_as_such():
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    import threading

    class NotFound(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error_code": 404, "message": "HTTP 404 Not Found"}')

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(ServerError) as wrong:
            wait_for_registry(settings(url), timeout_s=3600)
    finally:
        server.shutdown()
    assert wrong.value.kind == CONTENT
    assert str(wrong.value) == (f"SCHEMA_REGISTRY_URL={url}: schema registry GET /subjects: HTTP 404: HTTP 404 Not "
                                f"Found: is it a Schema Registry?")


# What check-config prints of a registry that the plan reads the input schemas from.
def test_check_config_says_refused_credentials_and_a_missing_subject_apart():
    with FakeSchemaRegistry(basic_auth_user_info="svc:s3cret") as fake:
        wrong = changejoin("check-config", env={**FROM_REGISTRY, "SCHEMA_REGISTRY_URL": fake.url,
                                                "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "svc:wrong"})
        missing = changejoin("check-config", env={**FROM_REGISTRY, "SCHEMA_REGISTRY_URL": fake.url,
                                                  "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "svc:s3cret"})
    assert wrong.returncode == 2 and "svc:wrong" not in wrong.stderr
    assert wrong.stderr.splitlines()[-1].endswith(
        "HTTP 401: Unauthorized; the registry refused the credentials (SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO))")
    assert missing.returncode == 2
    assert missing.stderr.splitlines()[-1].endswith(
        "HTTP 404: Subject 'orders-value' not found.); register it or set LEFT_SCHEMA_FILE")
