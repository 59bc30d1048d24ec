"""Avro values in and out: plain Avro bodies or Confluent wire format with a Schema Registry.

Everything here is picklable, because decoders and encoders are built on the driver and shipped
to Spark's Python workers: HTTP sessions and parsed schemas are rebuilt lazily after unpickling.

Hot paths use ``fastavro.schemaless_reader``/``schemaless_writer`` with schemas parsed once;
a decoded record dict becomes a tuple through ``operator.itemgetter`` (one C call per record).

Timestamps: ``timestamp-millis``/``timestamp-micros`` decode to timezone-aware UTC datetimes
(fastavro's default) and encode from aware datetimes exactly. A naive datetime is taken as local
wall-clock time, as Python's ``datetime.timestamp()``, fastavro and PySpark all do;
``to_epoch_millis`` follows the same rule.
"""

from __future__ import annotations

import copy
import datetime as _dt
import io
import json
import operator
import re
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable

import fastavro
from fastavro.read import SchemaResolutionError

from .deadletters import DeadLetterError, Reason

__all__ = [
    "Column",
    "DecodeError",
    "SchemaError",
    "SchemaRegistry",
    "SchemaRegistryError",
    "ValueDecoder",
    "ValueEncoder",
    "load_schema_file",
    "output_schema",
    "record_columns",
    "to_epoch_millis",
]

_MAGIC = 0
_HEADER_LEN = 5  # magic byte + 4-byte big-endian schema id
_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = frozenset({"record", "error", "enum", "fixed"})


# --------------------------------------------------------------------------------------------
# errors and columns


class DecodeError(DeadLetterError):
    """A value (or message key) that cannot be turned into a row; ``reason`` is one of ``REASONS``."""

    REASONS = frozenset({Reason.UNDECODABLE, Reason.UNKNOWN_SCHEMA_ID, Reason.SCHEMA_MISMATCH, Reason.UNDECODABLE_KEY})

    def __init__(self, reason: Reason, detail: str = ""):
        if reason not in self.REASONS:
            raise ValueError(f"unknown DecodeError reason {reason!r}")
        super().__init__(reason, detail)


class SchemaError(ValueError):
    """An Avro schema that is invalid or not usable where it was given."""


class SchemaRegistryError(Exception):
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


def _without_user_info(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port is not None:
        netloc += f":{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


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


@dataclass(frozen=True)
class Column:
    name: str
    avro_type: object  # the field's Avro type JSON, named types fully qualified and inlined
    nullable: bool


def _is_null(t: object) -> bool:
    return t == "null" or (isinstance(t, dict) and t.get("type") == "null")


def type_family(avro_type: object) -> str:
    """What a column's values are, for type checks: ``integer``, ``float``, ``decimal``, ``string``,
    ``bytes``, ``boolean``, ``timestamp``, ``date``, ``time``, or ``other`` (records, arrays, maps,
    unions of several types). A nullable column has its non-null type's family."""
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if not _is_null(b)]
        return type_family(branches[0]) if len(branches) == 1 else "other"
    logical = None
    if isinstance(avro_type, dict):
        logical = avro_type.get("logicalType")
        avro_type = avro_type.get("type")
        if isinstance(avro_type, (dict, list)):
            return type_family(avro_type)
    if logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"):
        return "timestamp"
    if logical == "decimal":
        return "decimal"
    if logical == "date":
        return "date"
    if logical in ("time-millis", "time-micros"):
        return "time"
    return {"int": "integer", "long": "integer", "float": "float", "double": "float", "string": "string",
            "enum": "string", "bytes": "bytes", "fixed": "bytes", "boolean": "boolean"}.get(avro_type, "other")


def _type_nullable(t: object) -> bool:
    return _is_null(t) or (isinstance(t, list) and any(_is_null(b) for b in t))


def _parse(schema: object, what: str = "schema") -> dict:
    try:
        return fastavro.parse_schema(schema)
    except Exception as e:  # fastavro raises SchemaParseException, ValueError, TypeError, ...
        raise SchemaError(f"invalid Avro {what}: {e}") from e


def load_schema_file(path: str) -> dict:
    """Reads and validates an ``.avsc`` file; errors name the file."""
    try:
        with open(path, encoding="utf-8") as f:
            schema = json.load(f)
    except OSError as e:
        raise SchemaError(f"{path}: cannot read schema file: {e.strerror or e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SchemaError(f"{path}: not valid JSON: {e}") from e
    try:
        fastavro.parse_schema(schema)
    except Exception as e:
        raise SchemaError(f"{path}: invalid Avro schema: {e}") from e
    return schema


def record_columns(schema: object) -> list[Column]:
    """The top-level record's fields, in order.

    Each column's type is self-contained: named types are fully qualified and defined inline
    where they are used (as fastavro's expanded form), so a column can be copied into another
    schema (see ``output_schema``) without the definitions elsewhere in its source schema.
    """
    try:
        expanded = fastavro.parse_schema(schema, expand=True)
    except Exception as e:
        raise SchemaError(f"invalid Avro schema: {e}") from e
    if not isinstance(expanded, dict) or expanded.get("type") not in ("record", "error"):
        kind = expanded.get("type") if isinstance(expanded, dict) else expanded
        raise SchemaError(f"expected an Avro record schema, got {kind!r}")
    return [
        Column(f["name"], copy.deepcopy(f["type"]), _type_nullable(f["type"]))
        for f in expanded["fields"]
    ]


def field_defaults(schema: dict, names) -> dict:
    """The decoded default value of each named field of a record schema, as a reader gets it for
    data written without the field (logical types applied: a ``timestamp-millis`` default is a
    datetime, a ``bytes`` default bytes). A union's default is of its first branch."""
    wanted = set(names)
    fields = [f for f in schema["fields"] if f["name"] in wanted]
    missing = wanted - {f["name"] for f in fields if "default" in f}
    if missing:
        raise SchemaError(f"no default for {', '.join(sorted(missing))}")
    # Expanded, so that a named type defined in a field left out here is inlined where it is used.
    record = {"type": "record", "name": schema["name"], "namespace": schema.get("namespace"), "fields": fields}
    expanded = fastavro.parse_schema(record, expand=True)["fields"]
    reader = {"type": "record", "name": "defaults", "fields": [
        {"name": f["name"], "type": f["type"][0] if isinstance(f["type"], list) else f["type"]} for f in expanded]}
    document = json.dumps({f["name"]: f["default"] for f in fields})
    return next(fastavro.json_reader(io.StringIO(document), reader))


def _tuple_getter(names: tuple[str, ...]):
    if len(names) == 0:
        return lambda d: ()
    if len(names) == 1:
        name = names[0]
        return lambda d: (d[name],)
    return operator.itemgetter(*names)


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_ONE_MS = _dt.timedelta(milliseconds=1)


def to_epoch_millis(value: _dt.datetime | int | None) -> int | None:
    """Epoch milliseconds of an event-time value: an aware datetime (exact, floored to the
    millisecond), a naive datetime (local time, as ``datetime.timestamp()``), an int (already
    epoch millis) or None."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError("a bool is not an event time")
    if isinstance(value, int):
        return value
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.astimezone()  # naive: local wall-clock time
        return (value - _EPOCH) // _ONE_MS
    raise TypeError(f"cannot convert {type(value).__name__} to epoch millis")


# --------------------------------------------------------------------------------------------
# Schema Registry client


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
                f"cannot connect to the Schema Registry at {_without_user_info(self.url)}: "
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


# --------------------------------------------------------------------------------------------
# decoding


_SIMPLE_DEFAULT_TYPES = frozenset({"null", "boolean", "int", "long", "float", "double", "string"})


def _self_contained(t: Any) -> bool:
    """True if an expanded type refers to no named type by name (no recursive references)."""
    if isinstance(t, str):
        return t in _PRIMITIVES
    if isinstance(t, list):
        return all(_self_contained(b) for b in t)
    if isinstance(t, dict):
        kind = t.get("type")
        if kind in ("record", "error"):
            return all(_self_contained(f["type"]) for f in t["fields"])
        if kind == "array":
            return _self_contained(t["items"])
        if kind == "map":
            return _self_contained(t["values"])
        return not isinstance(kind, (list, dict)) or _self_contained(kind)
    return False


def _projection(writer: dict, reader: dict, names: tuple[str, ...]):
    """A dict -> tuple function giving what fastavro's schema resolution would give, or None.

    Schema resolution costs fastavro about as much again as the decoding itself. For the common
    evolution (fields added with a default, fields dropped, fields reordered; every shared field
    of exactly the same type) the record decoded with the writer schema alone can be projected
    onto the reader's fields instead. ``writer``/``reader`` are expanded parsed schemas.
    Anything else (promotions, changed nested types, aliases, non-primitive defaults) returns
    None and is left to fastavro.
    """
    if writer.get("name") != reader.get("name"):
        return None
    writer_types = {f["name"]: f["type"] for f in writer["fields"]}
    defaults = {}
    for f in reader["fields"]:
        if f.get("aliases"):
            return None
        t = f["type"]
        if f["name"] in writer_types:
            if writer_types[f["name"]] != t or not _self_contained(t):
                return None
        else:
            first = t[0] if isinstance(t, list) and t else t
            if (
                "default" not in f
                or not isinstance(first, str)
                or first not in _SIMPLE_DEFAULT_TYPES
            ):
                return None
            defaults[f["name"]] = f["default"]  # fastavro hands defaults over as they are
    getter = _tuple_getter(names)
    if not defaults:
        return getter

    def project(record: dict) -> tuple:
        record.update(defaults)
        return getter(record)

    return project


def _not_wire_format(value: bytes) -> DecodeError:
    return DecodeError(Reason.UNDECODABLE, "not Confluent wire format (no magic byte)" if value and value[0] != _MAGIC
                       else f"too short for Confluent wire format ({len(value)} bytes)")


def schema_id_of(value: bytes) -> int:
    """The writer schema id of a Confluent wire-format value (its body starts at byte 5); a
    DecodeError for a value in no wire format. (``ValueDecoder.decode`` does the same inline.)"""
    if len(value) < _HEADER_LEN or value[0] != _MAGIC:
        raise _not_wire_format(value)
    return int.from_bytes(value[1:_HEADER_LEN], "big")


class ValueDecoder:
    """Decodes Kafka values into tuples in the reader schema's field order.

    With a registry, values must be in Confluent wire format; each writer schema is fetched once
    per id and resolved to ``reader_schema``. Without a reader schema, the first writer schema
    seen becomes the reader schema (so a decoder's tuple layout never changes); prefer passing
    one (e.g. ``ValueDecoder.for_subject``) so every Spark worker agrees on the layout.
    """

    def __init__(self, reader_schema: dict | None, registry: SchemaRegistry | None):
        if reader_schema is None and registry is None:
            raise ValueError("a ValueDecoder needs a reader schema, a registry, or both")
        self._reader_schema = reader_schema
        self._registry = registry
        self._setup()

    @classmethod
    def for_subject(cls, registry: SchemaRegistry, subject: str) -> ValueDecoder:
        """A wire-format decoder whose reader schema is the subject's latest version."""
        return cls(registry.latest(subject)[1], registry)

    def _setup(self) -> None:
        # per writer schema id: (parsed writer schema, parsed reader schema when fastavro must
        # resolve, else None; the record dict -> tuple function)
        self._plans: dict[int, tuple[dict, dict | None, Any]] = {}
        self._reader = None
        self._reader_expanded = None
        self._columns: list[Column] | None = None
        self._getter = None
        if self._reader_schema is not None:
            self._set_reader(self._reader_schema)

    def _set_reader(self, schema) -> None:
        columns = record_columns(schema)
        self._reader = _parse(schema, "reader schema")
        self._reader_expanded = fastavro.parse_schema(schema, expand=True)
        self._columns = columns
        self._names = tuple(c.name for c in columns)
        self._getter = _tuple_getter(self._names)

    def __getstate__(self):
        return {"reader_schema": self._reader_schema, "registry": self._registry}

    def __setstate__(self, state):
        self._reader_schema = state["reader_schema"]
        self._registry = state["registry"]
        self._setup()

    @property
    def columns(self) -> list[Column]:
        if self._columns is None:
            raise RuntimeError(
                "this decoder has no reader schema and has decoded nothing yet: columns unknown"
            )
        return self._columns

    @property
    def reader_schema(self) -> dict | None:
        return self._reader_schema

    def _plan(self, schema_id: int) -> tuple[dict, dict | None, Any]:
        schema = self._registry.schema_by_id(schema_id)
        try:
            writer = fastavro.parse_schema(schema)
            writer_expanded = fastavro.parse_schema(schema, expand=True)
        except Exception as e:
            raise DecodeError(
                Reason.SCHEMA_MISMATCH, f"writer schema id {schema_id} is not valid Avro: {e}"
            ) from None
        if self._reader is None:
            try:
                self._set_reader(schema)
            except SchemaError as e:
                raise DecodeError(Reason.SCHEMA_MISMATCH, f"writer schema id {schema_id}: {e}") from None
            self._reader_schema = schema
        if writer == self._reader:
            plan = (writer, None, self._getter)
        else:
            project = None
            if isinstance(writer_expanded, dict) and writer_expanded.get("type") == "record":
                project = _projection(writer_expanded, self._reader_expanded, self._names)
            plan = (writer, None, project) if project else (writer, self._reader, self._getter)
        self._plans[schema_id] = plan
        return plan

    def decode(self, value: bytes) -> tuple:
        if value is None:
            raise DecodeError(Reason.UNDECODABLE, "value is null")
        size = len(value)
        bio = io.BytesIO(value)
        if self._registry is None:
            try:
                record = fastavro.schemaless_reader(bio, self._reader, None)
            except Exception as e:
                raise DecodeError(Reason.UNDECODABLE, f"{type(e).__name__}: {e}") from None
            getter = self._getter
        else:
            if size < _HEADER_LEN or value[0] != _MAGIC:
                raise _not_wire_format(value)
            schema_id = int.from_bytes(value[1:_HEADER_LEN], "big")
            plan = self._plans.get(schema_id)
            if plan is None:
                plan = self._plan(schema_id)
            writer, reader, getter = plan
            bio.seek(_HEADER_LEN)
            try:
                record = fastavro.schemaless_reader(bio, writer, reader)
            except SchemaResolutionError as e:
                raise DecodeError(
                    Reason.SCHEMA_MISMATCH, f"writer schema id {schema_id} vs reader schema: {e}"
                ) from None
            except Exception as e:
                raise DecodeError(
                    Reason.UNDECODABLE, f"schema id {schema_id}: {type(e).__name__}: {e}"
                ) from None
        if bio.tell() != size:
            raise DecodeError(Reason.UNDECODABLE, f"{size - bio.tell()} bytes left after the record")
        try:
            return getter(record)
        except (KeyError, TypeError, AttributeError) as e:
            raise DecodeError(
                Reason.SCHEMA_MISMATCH, f"record does not fit the declared columns: {e!r}"
            ) from None


# --------------------------------------------------------------------------------------------
# encoding


# -- a record writer compiled for one schema ---------------------------------------------------
# fastavro's writer takes a dict per record and walks the schema for every value; for the output
# schemas changejoin writes (flat records of primitives, enums and nullable primitives) a writer
# generated once per schema is several times faster. Anything else is left to fastavro.

_DOUBLE, _FLOAT = struct.Struct("<d").pack, struct.Struct("<f").pack
_SMALL_LONGS = tuple(bytes([(n << 1) ^ (n >> 63)]) for n in range(-64, 64))


def _long(n: int) -> bytes:
    """Avro's zig-zag varint of ``n``."""
    if -64 <= n < 64:
        return _SMALL_LONGS[n + 64]
    n = (n << 1) ^ (n >> 63)
    if n < 0x4000:  # two and three bytes without the loop: ids, counts and lengths mostly are
        return bytes((n & 0x7F | 0x80, n >> 7))
    if n < 0x200000:
        return bytes((n & 0x7F | 0x80, n >> 7 & 0x7F | 0x80, n >> 14))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _primitive_writer(avro_type, value: str, constants: dict) -> str | None:
    """A Python expression writing ``value`` as ``avro_type``, or None for a type left to fastavro."""
    if isinstance(avro_type, dict):
        if avro_type.get("logicalType") is not None:
            return None
        if avro_type.get("type") == "enum":
            name = f"_enum{len(constants)}"
            constants[name] = {symbol: _long(i) for i, symbol in enumerate(avro_type["symbols"])}
            return f"{name}[{value}]"
        avro_type = avro_type.get("type")
    return {
        "null": "b''",
        "boolean": f"(b'\\x01' if {value} else b'\\x00')",
        "int": f"_long({value})",
        "long": f"_long({value})",
        "double": f"_DOUBLE({value})",
        "float": f"_FLOAT({value})",
        "string": f"_bytes({value}.encode())",
        "bytes": f"_bytes({value})",
    }.get(avro_type) if isinstance(avro_type, str) else None


def _bytes(data: bytes) -> bytes:
    return _long(len(data)) + data


def compile_record_writer(schema: dict):
    """``row tuple -> Avro body bytes`` for a record whose fields are primitives, enums or unions
    of ``null`` and one of those; None for any other schema (fastavro then writes it)."""
    constants: dict = {}
    parts = []
    for i, field in enumerate(schema.get("fields", ())):
        avro_type, value = field["type"], f"row[{i}]"
        if isinstance(avro_type, list):
            if len(avro_type) != 2 or "null" not in avro_type or avro_type[0] == avro_type[1]:
                return None
            null_index = avro_type.index("null")
            inner = _primitive_writer(avro_type[1 - null_index], value, constants)
            if inner is None:
                return None
            null_tag, tag = repr(_long(null_index)), repr(_long(1 - null_index))
            parts.append(f"({null_tag} if {value} is None else {tag} + {inner})")
        else:
            writer = _primitive_writer(avro_type, value, constants)
            if writer is None:
                return None
            if avro_type != "null":
                parts.append(writer)
    namespace = {"_long": _long, "_bytes": _bytes, "_DOUBLE": _DOUBLE, "_FLOAT": _FLOAT, **constants}
    body = "b''.join((" + "".join(f"{p}, " for p in parts) + "))"
    return eval(f"lambda row: {body}", namespace)  # noqa: S307 - generated from the schema's field types only


class ValueEncoder:
    """Encodes tuples (values in schema field order) as Avro: a plain body, or Confluent wire
    format when a registry is given (the schema is registered under ``subject`` on first use)."""

    def __init__(
        self, schema: dict, registry: SchemaRegistry | None = None, subject: str | None = None
    ):
        if registry is not None and not subject:
            raise ValueError("a ValueEncoder with a registry needs a subject")
        self._schema = schema
        self._registry = registry
        self._subject = subject
        self._schema_id: int | None = None
        self._setup()

    def _setup(self) -> None:
        self.columns = record_columns(self._schema)
        self._parsed = _parse(self._schema)
        self._names = tuple(c.name for c in self.columns)
        self._compiled = compile_record_writer(fastavro.parse_schema(self._schema, expand=True))
        self._header = (
            None
            if self._schema_id is None
            else bytes([_MAGIC]) + self._schema_id.to_bytes(4, "big")
        )

    def __getstate__(self):
        return {
            "schema": self._schema,
            "registry": self._registry,
            "subject": self._subject,
            "schema_id": self._schema_id,
        }

    def __setstate__(self, state):
        self._schema = state["schema"]
        self._registry = state["registry"]
        self._subject = state["subject"]
        self._schema_id = state["schema_id"]
        self._setup()

    @property
    def schema(self) -> dict:
        return self._schema

    @property
    def schema_id(self) -> int | None:
        """The registered id (registering now if needed); None without a registry."""
        if self._registry is None:
            return None
        if self._schema_id is None:
            self._schema_id = self._registry.register(self._subject, self._schema)
            self._header = bytes([_MAGIC]) + self._schema_id.to_bytes(4, "big")
        return self._schema_id

    def writer(self) -> Callable[[tuple], bytes]:
        """:meth:`encode` as one function for a hot loop: the compiled writer with the checks that
        hold for every row (registry, header) done once, here. A row the compiled writer cannot
        write goes through :meth:`encode`, which says what is wrong with it."""
        if self._compiled is None:
            return self.encode
        self.schema_id  # noqa: B018 - with a registry: registers now, sets the header
        compiled, header, width, encode = self._compiled, self._header, len(self._names), self.encode

        def write(row: tuple) -> bytes:
            if len(row) == width:
                try:
                    return header + compiled(row) if header else compiled(row)
                except Exception:  # noqa: BLE001 - a value of the wrong type: encode() reports it
                    pass
            return encode(row)

        return write

    def encode(self, row: tuple) -> bytes:
        if len(row) != len(self._names):
            raise ValueError(f"row has {len(row)} values, schema has {len(self._names)} fields")
        if self._registry is not None and self._header is None:
            self.schema_id  # noqa: B018 - registers and sets the header
        header = self._header or b""
        if self._compiled is not None:
            try:
                return header + self._compiled(row)
            except Exception:  # noqa: BLE001 - a value of the wrong type: fastavro says what is wrong
                pass
        bio = io.BytesIO()
        bio.write(header)
        try:
            fastavro.schemaless_writer(bio, self._parsed, dict(zip(self._names, row)))
        except Exception as e:
            raise ValueError(f"cannot encode row as {self._parsed.get('name')}: {e}") from e
        return bio.getvalue()


# --------------------------------------------------------------------------------------------
# output schema


_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")


def _sanitize(name: str) -> str:
    out = _INVALID_NAME_CHARS.sub("_", name)
    if not out or out[0].isdigit():
        out = "_" + out
    return out


def _fullname(name: str, namespace: str | None, enclosing: str | None) -> tuple[str, str | None]:
    """(full name, namespace for types nested inside it) per the Avro spec's name rules."""
    if "." in name:
        ns, _, short = name.rpartition(".")
        return name, ns or None
    ns = namespace if namespace is not None else enclosing
    return (f"{ns}.{name}" if ns else name), (ns or None)


def _expand(t: Any, enclosing: str | None, table: dict[str, dict], open_: set[str]) -> Any:
    """A copy of type ``t`` that is self-contained: named types fully qualified ("namespace" and
    "doc" keys dropped) and references to names defined earlier (in ``table``) replaced by
    their definitions; a name redefined differently is an error. References to a type from
    inside its own definition (recursive types) stay references."""
    if isinstance(t, list):
        return [_expand(b, enclosing, table, open_) for b in t]
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return t
        full, _ = _fullname(t, None, enclosing)
        return full if full in open_ else table.get(full, full)
    if not isinstance(t, dict):
        raise SchemaError(f"not an Avro type: {t!r}")
    kind = t.get("type")
    if kind in _NAMED:
        full, ns = _fullname(t["name"], t.get("namespace"), enclosing)
        out = {k: v for k, v in t.items() if k not in ("namespace", "doc", "aliases")}
        out["name"] = full
        if kind in ("record", "error"):
            open_.add(full)
            out["fields"] = [
                {
                    **{k: v for k, v in f.items() if k not in ("doc", "aliases")},
                    "type": _expand(f["type"], ns, table, open_),
                }
                for f in t["fields"]
            ]
            open_.discard(full)
        known = table.setdefault(full, out)
        if known != out:
            raise SchemaError(f"conflicting definitions of the named Avro type {full!r}")
        return known
    if kind == "array":
        return {**t, "items": _expand(t["items"], enclosing, table, open_)}
    if kind == "map":
        return {**t, "values": _expand(t["values"], enclosing, table, open_)}
    if isinstance(kind, (list, dict)):  # {"type": {...}} / {"type": [...]} wrappers
        return _expand(kind, enclosing, table, open_)
    return dict(t)


def _define_once(t: Any, emitted: set[str]) -> Any:
    """``t`` with every named type defined at its first use and referenced by name after."""
    if isinstance(t, list):
        return [_define_once(b, emitted) for b in t]
    if not isinstance(t, dict):
        return t
    kind = t.get("type")
    if kind in _NAMED:
        if t["name"] in emitted:
            return t["name"]
        emitted.add(t["name"])
        if kind in ("record", "error"):
            return {
                **t,
                "fields": [{**f, "type": _define_once(f["type"], emitted)} for f in t["fields"]],
            }
        return dict(t)
    if kind == "array":
        return {**t, "items": _define_once(t["items"], emitted)}
    if kind == "map":
        return {**t, "values": _define_once(t["values"], emitted)}
    return dict(t)


def _nullable(t: Any) -> Any:
    if _is_null(t):
        return "null"
    if isinstance(t, list):
        return ["null", *[b for b in t if not _is_null(b)]]
    return ["null", t]


def output_schema(
    name: str, fields: list[tuple[str, object, bool]], namespace: str = "changejoin"
) -> dict:
    """A record schema for the join output.

    Each field is (name, Avro type, nullable). Nullable fields become ``["null", T]`` unions with
    default null (a union T is extended, never nested; null always comes first). Field names are
    made valid Avro names ("order-id" -> "order_id", "1st" -> "_1st"); two fields that end up
    with one name are an error. Named types used by several fields (say both join sides carry
    the same enum) are defined once; two different definitions of one name are an error.
    """
    record_name = _sanitize(name)
    ns = ".".join(_sanitize(p) for p in namespace.split(".")) if namespace else None
    full_record, _ = _fullname(record_name, ns, None)
    origin: dict[str, str] = {}
    table: dict[str, dict] = {}
    expanded = []
    for field_name, avro_type, nullable in fields:
        safe = _sanitize(field_name)
        if safe in origin:
            raise SchemaError(
                f"output fields {origin[safe]!r} and {field_name!r} both become {safe!r}"
            )
        origin[safe] = field_name
        t = _expand(avro_type, ns, table, set())
        expanded.append((safe, _nullable(t) if nullable else t, nullable))
    if full_record in table:
        raise SchemaError(f"output record name {full_record!r} clashes with a field's named type")
    emitted: set[str] = set()
    out_fields = []
    for safe, t, nullable in expanded:
        field = {"name": safe, "type": _define_once(t, emitted)}
        if nullable:
            field["default"] = None
        out_fields.append(field)
    schema: dict = {"type": "record", "name": record_name}
    if ns:
        schema["namespace"] = ns
    schema["fields"] = out_fields
    try:
        fastavro.parse_schema(schema)
    except Exception as e:
        raise SchemaError(f"output schema {full_record!r} is not valid Avro: {e}") from e
    return schema
