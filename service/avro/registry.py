"""Confluent's wire format (a magic byte and a 4-byte schema id before the Avro body) and a
minimal Schema Registry client; what an HTTP failure says about the connection."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse

from ..deadletters import Reason
from ..errors import ChangejoinError
from ..secrets import without_user_info
from .schemas import DecodeError

_MAGIC = 0
_HEADER_LEN = 5  # magic byte + 4-byte big-endian schema id


class SchemaRegistryError(ChangejoinError):
    """The Schema Registry could not be reached or refused a request (not a per-record problem).

    ``kind`` says which, for whoever must act on it: ``connection`` (no answer: refused, unknown
    host, TLS, timeout), ``credentials`` (HTTP 401 or 403), ``content`` (the registry answered, and
    what was asked is not there or not acceptable: HTTP 404, 409, 422, a schema that is no Avro) or
    ``server`` (HTTP 5xx, or an answer that is no registry's)."""

    def __init__(self, message: str, status: int | None = None, error_code: int | None = None,
                 kind: str | None = None):
        super().__init__(message, status, error_code)
        self.message = message
        self.status = status
        self.error_code = error_code
        self.kind = kind or _kind_of_status(status)

    def __str__(self) -> str:
        return self.message


def _kind_of_status(status: int | None) -> str:
    if status in (401, 403):
        return "credentials"
    if status is not None and 400 <= status < 500:
        return "content"
    return "server"


def connection_failure(exc: BaseException, timeout_s: float | None = None) -> str:
    """What an HTTP request's failure says about the connection, in the words an operator looks
    for: ``connection refused``, ``unknown host <host>``, ``TLS handshake failed: <why>``, ``no
    answer within <n> s``, ``connection closed by the server``; otherwise the innermost error's
    text (never requests' and urllib3's wrapping of it)."""
    import socket
    import ssl

    chain, todo = [], [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is seen for seen in chain):
            continue
        chain.append(e)
        todo += [getattr(e, "reason", None) if isinstance(getattr(e, "reason", None), BaseException) else None,
                 e.__cause__, e.__context__, *(a for a in e.args if isinstance(a, BaseException))]
    names = {type(e).__name__ for e in chain}
    for e in chain:
        if isinstance(e, ssl.SSLError):
            why = getattr(e, "verify_message", None) or getattr(e, "reason", None) or str(e)
            return f"TLS handshake failed: {why}"
    if "SSLError" in names:
        return "TLS handshake failed"
    for e in chain:
        if isinstance(e, socket.gaierror) or type(e).__name__ == "NameResolutionError":
            host = re.search(r"host='?([^',)]+)", str(exc))
            return f"unknown host{' ' + host.group(1) if host else ''}"
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
    for e in chain:
        if isinstance(e, (TimeoutError, socket.timeout)) or type(e).__name__ in ("ConnectTimeout", "ReadTimeout",
                                                                               "ConnectTimeoutError",
                                                                               "ReadTimeoutError"):
            return f"no answer within {timeout_s:g} s" if timeout_s else "no answer"
        if isinstance(e, ConnectionResetError) or type(e).__name__ == "RemoteDisconnected":
            return "connection closed by the server"
    innermost = chain[-1]
    return " ".join(str(innermost).split()) or type(innermost).__name__


_RETRY_STATUSES = (408, 429, 500, 502, 503, 504)


class SchemaRegistry:
    """A minimal Confluent Schema Registry client over ``requests``.

    * ``schema_by_id`` is cached forever per id (ids are immutable); a missing id is remembered
      for ``missing_ttl`` seconds so a stream of bad records does not hammer the registry.
    * Connection errors and 408/429/5xx answers are retried with exponential backoff by urllib3
      (``Retry``); POST is retried too, registering being idempotent.
    * Picklable: the HTTP session is created on first use and dropped when pickled; the schema
      cache travels along.
    """

    def __init__(
        self,
        url: str,
        basic_auth_user_info: str | None = None,
        *,
        timeout: float = 10.0,
        max_retries: int = 4,
        backoff_factor: float = 0.2,
        missing_ttl: float = 30.0,
    ):
        url = url.strip()
        if not url.lower().startswith(("http://", "https://")):
            raise ValueError(f"schema registry url must be http(s)://..., got {url!r}")
        self.url = url.rstrip("/")
        self.basic_auth_user_info = basic_auth_user_info or None
        if self.basic_auth_user_info is not None and ":" not in self.basic_auth_user_info:
            raise ValueError("basic_auth_user_info must be 'user:password'")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_factor = backoff_factor
        self.missing_ttl = missing_ttl
        self._by_id: dict[int, dict] = {}
        self._registered: dict[tuple[str, str], int] = {}
        self._missing: dict[int, float] = {}
        self._session = None
        self._lock = threading.Lock()

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_session"] = None
        state["_lock"] = None
        state["_missing"] = {}
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SchemaRegistry({self.url!r})"

    # -- HTTP

    def _http(self):
        session = self._session
        if session is None:
            with self._lock:
                if self._session is None:
                    self._session = self._new_session()
                session = self._session
        return session

    def _new_session(self):
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry

        retry = Retry(
            total=self.max_retries,
            status_forcelist=_RETRY_STATUSES,
            allowed_methods=frozenset({"GET", "POST"}),
            backoff_factor=self.backoff_factor,
            respect_retry_after_header=True,
            raise_on_status=False,
        )
        session = requests.Session()
        adapter = HTTPAdapter(max_retries=retry)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers["Accept"] = (
            "application/vnd.schemaregistry.v1+json, application/vnd.schemaregistry+json, "
            "application/json"
        )
        if self.basic_auth_user_info is not None:
            user, _, password = self.basic_auth_user_info.partition(":")
            session.auth = (user, password)
        return session

    def _request(self, method: str, path: str, body: dict | None = None):
        """Returns (status, parsed JSON or None); raises SchemaRegistryError on transport errors."""
        import requests

        try:
            resp = self._http().request(
                method,
                self.url + path,
                data=None if body is None else json.dumps(body),
                headers=None
                if body is None
                else {"Content-Type": "application/vnd.schemaregistry.v1+json"},
                timeout=self.timeout,
            )
        except requests.RequestException as e:
            raise SchemaRegistryError(
                f"cannot connect to the Schema Registry at {without_user_info(self.url)}: "
                f"{connection_failure(e, self.timeout)} ({method} {path})", kind="connection") from e
        try:
            payload = resp.json()
        except ValueError:
            payload = None
        return resp.status_code, payload

    def _fail(self, method: str, path: str, status: int, payload) -> SchemaRegistryError:
        code = payload.get("error_code") if isinstance(payload, dict) else None
        msg = payload.get("message") if isinstance(payload, dict) else None
        kind = _kind_of_status(status)
        if kind == "content" and not isinstance(payload, dict):
            kind = "server"  # an answer that is no registry's (a proxy's page, another service)
        why = {"credentials": "; the registry refused the credentials (SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO)",
               "server": "; the registry failed, or what answered is no Schema Registry"}.get(kind, "")
        return SchemaRegistryError(
            f"schema registry {method} {path}: HTTP {status}" + (f": {msg}" if msg else "") + why,
            status,
            code,
            kind,
        )

    @staticmethod
    def _subject_path(subject: str) -> str:
        return "/subjects/" + urllib.parse.quote(subject, safe="")

    @staticmethod
    def _load(schema_str: str, where: str):
        try:
            return json.loads(schema_str)
        except (TypeError, ValueError) as e:
            raise SchemaRegistryError(
                f"schema registry returned unparsable schema {where}: {e}"
            ) from None

    # -- API

    def schema_by_id(self, schema_id: int) -> dict:
        """The Avro schema registered under ``schema_id`` (cached per id).

        Raises DecodeError(Reason.UNKNOWN_SCHEMA_ID) when the registry does not know the id, and
        DecodeError(Reason.SCHEMA_MISMATCH) when it is not an Avro schema or uses schema references.
        """
        entry = self._by_id.get(schema_id)
        if entry is None:
            entry = self._fetch_by_id(schema_id)
        kind = entry.get("schemaType", "AVRO")
        if kind != "AVRO":
            raise DecodeError(Reason.SCHEMA_MISMATCH, f"schema id {schema_id} is {kind}, not Avro")
        if entry.get("references"):
            raise DecodeError(
                Reason.SCHEMA_MISMATCH, f"schema id {schema_id} uses schema references (unsupported)"
            )
        return entry["parsed"]

    def _fetch_by_id(self, schema_id: int) -> dict:
        missing_until = self._missing.get(schema_id)
        if missing_until is not None and time.monotonic() < missing_until:
            raise DecodeError(Reason.UNKNOWN_SCHEMA_ID, f"schema id {schema_id} not found in registry")
        path = f"/schemas/ids/{int(schema_id)}"
        status, payload = self._request("GET", path)
        if status == 404:
            self._missing[schema_id] = time.monotonic() + self.missing_ttl
            raise DecodeError(Reason.UNKNOWN_SCHEMA_ID, f"schema id {schema_id} not found in registry")
        if status != 200 or not isinstance(payload, dict) or "schema" not in payload:
            raise self._fail("GET", path, status, payload)
        kind = payload.get("schemaType", "AVRO")
        entry = {
            "parsed": self._load(payload["schema"], f"for id {schema_id}")
            if kind == "AVRO"
            else None,
            "schemaType": kind,
            "references": payload.get("references") or [],
        }
        self._by_id[schema_id] = entry
        return entry

    def subjects(self) -> list[str]:
        """The registered subjects (``GET /subjects``): a request any registry answers, which checks
        the connection and the credentials."""
        status, payload = self._request("GET", "/subjects")
        if status != 200 or not isinstance(payload, list):
            raise self._fail("GET", "/subjects", status, payload)
        return [str(s) for s in payload]

    def latest(self, subject: str) -> tuple[int, dict]:
        """(id, schema) of the latest version registered under ``subject`` (not cached)."""
        path = self._subject_path(subject) + "/versions/latest"
        status, payload = self._request("GET", path)
        if status != 200 or not isinstance(payload, dict) or "id" not in payload:
            raise self._fail("GET", path, status, payload)
        if payload.get("schemaType", "AVRO") != "AVRO":
            raise SchemaRegistryError(
                f"subject {subject!r} holds a {payload['schemaType']} schema, not Avro", kind="content"
            )
        schema = self._load(payload["schema"], f"for subject {subject!r}")
        self._by_id.setdefault(
            payload["id"],
            {"parsed": schema, "schemaType": "AVRO", "references": payload.get("references") or []},
        )
        return payload["id"], schema

    def register(self, subject: str, schema: dict) -> int:
        """Registers ``schema`` under ``subject`` (a no-op if it already is); returns its id."""
        schema_str = json.dumps(schema, separators=(",", ":"))
        key = (subject, json.dumps(schema, separators=(",", ":"), sort_keys=True))
        schema_id = self._registered.get(key)
        if schema_id is not None:
            return schema_id
        path = self._subject_path(subject) + "/versions"
        status, payload = self._request("POST", path, {"schema": schema_str})
        if status != 200 or not isinstance(payload, dict) or "id" not in payload:
            raise self._fail("POST", path, status, payload)
        schema_id = int(payload["id"])
        self._registered[key] = schema_id
        self._by_id.setdefault(
            schema_id, {"parsed": json.loads(schema_str), "schemaType": "AVRO", "references": []}
        )
        return schema_id
