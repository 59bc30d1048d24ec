"""An in-process fake of the Confluent Schema Registry REST API, for tests.

It serves, on 127.0.0.1 and a free port, the subset of the API that clients use:

    POST /subjects/{subject}/versions           register (idempotent per subject) -> {"id"}
    POST /subjects/{subject}                    look a schema up -> {subject,id,version,schema}
    GET  /subjects                              subject names
    GET  /subjects/{subject}/versions           version numbers
    GET  /subjects/{subject}/versions/{v}       v: a number or "latest" -> as above
    GET  /schemas/ids/{id}                      -> {"schema"} (+ "schemaType" when not AVRO)
    GET  /schemas/ids/{id}/versions             -> [{subject, version}]
    GET  /config, GET /config/{subject}         -> {"compatibilityLevel": "NONE"}

Schema ids are global: one schema text registered under two subjects gets one id, as in the
real registry. No compatibility checks are made. Errors use the registry's JSON shape
({"error_code", "message"}).

For tests it records every request (``requests``, ``count``), can fail the next N requests
(``fail_next``), can require basic auth, and can be filled directly (``register``).

Use it as a context manager, or through the pytest fixtures ``fake_schema_registry`` (the
server object) and ``schema_registry_url`` (its URL); import them into a test module or a
conftest.py to make them available.
"""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

_JSON = "application/vnd.schemaregistry.v1+json"


@dataclass
class _Version:
    subject: str
    version: int
    schema_id: int


def _canonical(schema_str: str) -> str:
    return json.dumps(json.loads(schema_str), sort_keys=True, separators=(",", ":"))


class _HttpError(Exception):
    def __init__(self, status: int, error_code: int, message: str):
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message


class FakeSchemaRegistry:
    def __init__(self, basic_auth_user_info: str | None = None):
        self._lock = threading.Lock()
        self._schemas: dict[int, tuple[str, str]] = {}  # id -> (schema text, schemaType)
        self._ids: dict[tuple[str, str], int] = {}  # (schemaType, canonical text) -> id
        self._subjects: dict[str, list[_Version]] = {}
        self._fail: list[int] = []  # statuses for the next requests
        self._auth = (
            None
            if basic_auth_user_info is None
            else "Basic " + base64.b64encode(basic_auth_user_info.encode()).decode()
        )
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request served
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle

    def start(self) -> FakeSchemaRegistry:
        handler = type("Handler", (_Handler,), {"registry": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-schema-registry",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = self._thread = None

    def __enter__(self) -> FakeSchemaRegistry:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the fake schema registry is not running")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # -- test helpers

    def count(self, method: str | None = None, path_prefix: str = "") -> int:
        """How many requests matched (method, path prefix) so far."""
        with self._lock:
            return sum(
                1
                for m, p in self.requests
                if (method is None or m == method) and p.startswith(path_prefix)
            )

    def fail_next(self, n: int, status: int = 503) -> None:
        """Answer the next ``n`` requests with ``status`` (for retry tests)."""
        with self._lock:
            self._fail.extend([status] * n)

    def register(self, subject: str, schema: dict | str, schema_type: str = "AVRO") -> int:
        """Registers directly (no HTTP, not recorded in ``requests``); returns the id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        with self._lock:
            return self._register(subject, text, schema_type)[0].schema_id

    def subjects(self) -> list[str]:
        with self._lock:
            return sorted(self._subjects)

    # -- registry state (call with the lock held)

    def _register(self, subject: str, text: str, schema_type: str) -> tuple[_Version, bool]:
        if schema_type == "AVRO":
            try:
                import fastavro

                fastavro.parse_schema(json.loads(text))
            except Exception as e:
                raise _HttpError(422, 42201, f"Invalid schema: {e}") from None
            key = (schema_type, _canonical(text))
        else:
            key = (schema_type, text)
        schema_id = self._ids.get(key)
        if schema_id is None:
            schema_id = len(self._schemas) + 1
            self._ids[key] = schema_id
            self._schemas[schema_id] = (text, schema_type)
        versions = self._subjects.setdefault(subject, [])
        for v in versions:
            if v.schema_id == schema_id:
                return v, False
        v = _Version(subject, (versions[-1].version + 1) if versions else 1, schema_id)
        versions.append(v)
        return v, True

    def _version_json(self, v: _Version) -> dict:
        text, schema_type = self._schemas[v.schema_id]
        out = {"subject": v.subject, "version": v.version, "id": v.schema_id, "schema": text}
        if schema_type != "AVRO":
            out["schemaType"] = schema_type
        return out

    def _subject_versions(self, subject: str) -> list[_Version]:
        versions = self._subjects.get(subject)
        if not versions:
            raise _HttpError(404, 40401, f"Subject '{subject}' not found.")
        return versions

    def _handle(self, method: str, path: str, body: dict | None):
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")] if path != "/" else []
        with self._lock:
            if self._fail:
                status = self._fail.pop(0)
                raise _HttpError(status, status * 100, "injected failure")
            if parts[:2] == ["schemas", "ids"] and len(parts) in (3, 4) and method == "GET":
                try:
                    schema_id = int(parts[2])
                except ValueError:
                    raise _HttpError(404, 40403, "Schema not found") from None
                if schema_id not in self._schemas:
                    raise _HttpError(404, 40403, "Schema not found")
                if len(parts) == 4:
                    if parts[3] != "versions":
                        raise _HttpError(404, 404, "Not found")
                    return [
                        {"subject": v.subject, "version": v.version}
                        for vs in self._subjects.values()
                        for v in vs
                        if v.schema_id == schema_id
                    ]
                text, schema_type = self._schemas[schema_id]
                out = {"schema": text}
                if schema_type != "AVRO":
                    out["schemaType"] = schema_type
                return out
            if parts == ["subjects"] and method == "GET":
                return sorted(self._subjects)
            if parts and parts[0] == "config" and len(parts) <= 2 and method == "GET":
                return {"compatibilityLevel": "NONE"}
            if len(parts) >= 2 and parts[0] == "subjects":
                subject = parts[1]
                if len(parts) == 2 and method == "POST":  # lookup
                    text, schema_type = _schema_of(body)
                    key = (schema_type, _canonical(text) if schema_type == "AVRO" else text)
                    schema_id = self._ids.get(key)
                    for v in self._subject_versions(subject):
                        if v.schema_id == schema_id:
                            return self._version_json(v)
                    raise _HttpError(404, 40403, "Schema not found")
                if len(parts) == 3 and parts[2] == "versions":
                    if method == "POST":
                        text, schema_type = _schema_of(body)
                        v, _ = self._register(subject, text, schema_type)
                        return {"id": v.schema_id}
                    if method == "GET":
                        return [v.version for v in self._subject_versions(subject)]
                if len(parts) == 4 and parts[2] == "versions" and method == "GET":
                    versions = self._subject_versions(subject)
                    if parts[3] in ("latest", "-1"):
                        return self._version_json(versions[-1])
                    for v in versions:
                        if str(v.version) == parts[3]:
                            return self._version_json(v)
                    raise _HttpError(404, 40402, f"Version {parts[3]} not found.")
        raise _HttpError(404, 404, f"HTTP 404 Not Found: {method} {path}")


def _schema_of(body) -> tuple[str, str]:
    if not isinstance(body, dict) or not isinstance(body.get("schema"), str):
        raise _HttpError(422, 42201, "Invalid schema: request body needs a 'schema' string")
    if body.get("references"):
        raise _HttpError(422, 42201, "schema references are not supported by the fake registry")
    return body["schema"], body.get("schemaType", "AVRO")


class _Handler(BaseHTTPRequestHandler):
    registry: FakeSchemaRegistry  # set on a per-server subclass
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # keep test output quiet
        pass

    def _serve(self, method: str) -> None:
        reg = self.registry
        path = urllib.parse.urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        with reg._lock:
            reg.requests.append((method, path))
        try:
            if reg._auth is not None and self.headers.get("Authorization") != reg._auth:
                raise _HttpError(401, 40101, "Unauthorized")
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                raise _HttpError(400, 400, "Unrecognized request body") from None
            status, payload = 200, reg._handle(method, path, body)
        except _HttpError as e:
            status, payload = e.status, {"error_code": e.error_code, "message": e.message}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", _JSON)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_PUT(self):
        self._serve("PUT")

    def do_DELETE(self):
        self._serve("DELETE")


@pytest.fixture
def fake_schema_registry():
    """A running FakeSchemaRegistry, fresh for each test."""
    with FakeSchemaRegistry() as registry:
        yield registry


@pytest.fixture
def schema_registry_url(fake_schema_registry) -> str:
    """The base URL of a fresh fake Schema Registry."""
    return fake_schema_registry.url
