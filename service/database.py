"""The lookup join's database: a PostgreSQL table read in batches, one snapshot per lookup task.

Flink's JDBC lookup source sends one ``SELECT ... WHERE k = ?`` per left row. Here a Spark task
collects the distinct keys of its rows and asks for them in chunks of ``batch_size``
(``WHERE k = ANY(%s::int4[])``; composite keys ``JOIN unnest(%s::int4[], %s::text[])``): one round
trip per chunk instead of one per row (measured: 1 000 keys in 2.2 ms instead of 42.5 ms on
loopback, and every extra round trip costs a network RTT in production).

* **One snapshot.** All chunks of one ``lookup`` call run in one ``REPEATABLE READ READ ONLY``
  transaction, so a micro-batch's task sees the table as of one instant, as Flink's "FOR
  SYSTEM_TIME AS OF PROCTIME()" promises per row. The explicit array cast keeps psycopg from
  choosing the array type from the Python values.
* **Keys are checked in Python first.** A key the key column cannot hold (``2**40`` for an
  ``integer``, ``'abc'`` for an ``int8``, a NUL in text, a malformed UUID, NaN for a ``numeric``)
  would fail its whole chunk with a ``DataError``; it goes to ``LookupResult.invalid`` with a reason
  naming the column, its type and the value (the service makes it a dead letter) and is never sent.
  The casts name the base type without its modifier (``numeric``, not ``numeric(4,1)``; ``text``,
  not ``varchar(5)``): a cast to the column's own type would round or truncate a key and match the
  wrong rows. What Python cannot know (an enum label, a character the server's encoding lacks) the
  database refuses: the chunk is then **bisected** under savepoints, so the snapshot transaction
  survives, until the offending keys are found; they go to ``invalid`` with the database's message
  and the rest are answered. Data errors are rare, so savepoints are only used after one happened:
  the first data error rolls the call's transaction back and the call is redone with them.
* **Rows go back to keys by a canonical form**, the same for a key and for the key columns of a
  returned row, because the database compares values and Python must too: a Decimal key
  ``1.50`` finds numeric ``1.5`` (``Decimal`` hashes and compares by value), a UUID is its
  lowercase text, a ``timestamp`` without time zone is UTC, a ``char(n)`` ignores trailing
  spaces, a ``real`` is rounded to single precision, a ``citext`` is lowercase, NaN is one value.
  Known limits: a text column with a nondeterministic (case-insensitive ICU) collation matches
  strings that Python does not find equal; such rows are dropped. The ``=`` is resolved through the
  session's search_path, as in any query: an extension type whose operators are not on it (citext
  installed in another schema) is compared with text's case-sensitive ``=``.
* **NULL keys never match** (SQL equality): a key with a None component gets no rows and is not
  sent.
* **Only the columns the join reads** (``columns``): the statement names them, so a column it does
  not read may be dropped, added or retyped at any time. Each result's column types are checked
  against the catalog's (``TableColumn.type_oid``/``typmod``): a read column retyped to a type of
  the same Avro values is taken, another stops the lookup with one line saying what to do.
* **Rows the join cannot take** are their key's, not the key's fault (``LookupResult.bad_rows``,
  naming the table, the column and the value): a date or time psycopg cannot load (``'infinity'``,
  BC, years past 9999, ``24:00``: loaded as ``Unloadable`` instead of failing the statement), a
  value the column's Avro type cannot hold (a ``numeric`` NaN), a NULL in a column that was NOT
  NULL when the join was planned. Such keys are never cached.

Values of returned rows are what the service's Avro encoder takes for each column's Avro type
(``TableColumn.avro_type``), as fastavro decodes them in ``service/avro.py``:

=================================  ==============================================  ====================
PostgreSQL type                    Avro type                                       Python value
=================================  ==============================================  ====================
smallint (int2), integer (int4)    ``"int"``                                       int
bigint (int8)                      ``"long"``                                      int
real (float4)                      ``"float"``                                     float
double precision (float8)          ``"double"``                                    float
boolean                            ``"boolean"``                                   bool
text, varchar, char(n), name,      ``"string"``                                    str (char(n) keeps
citext, user-defined enums                                                         its padding)
numeric(p,s)                       ``{"type": "bytes", "logicalType": "decimal",   Decimal
                                   "precision": p, "scale": s}``
numeric without (p,s)              unsupported: declare numeric(p,s) or cast it
                                   in a view
date                               ``{"type": "int", "logicalType": "date"}``      datetime.date
timestamp, timestamptz             ``{"type": "long",                              aware UTC datetime
                                   "logicalType": "timestamp-micros"}``            (see below)
time                               ``{"type": "long", "logicalType":               datetime.time
                                   "time-micros"}``
uuid                               ``{"type": "string", "logicalType": "uuid"}``   str, lowercase
bytea                              ``"bytes"``                                     bytes
json, jsonb                        ``"string"``                                    the JSON text
anything else (arrays, composite,  unsupported, with the type's name               as psycopg gives it
ranges, geometric, interval,
money, timetz, inet, ...)
=================================  ==============================================  ====================

A domain maps as its base type. A ``timestamp`` without time zone is taken as UTC wall-clock time
(the session runs with ``TimeZone=UTC``), so it comes back as a datetime with ``tzinfo=UTC``; a
naive key datetime is taken as UTC too. Nullability is ``TableColumn.nullable`` (a column's NOT
NULL, or its domain's), never part of ``avro_type``.

**Connections.** One psycopg connection per client (one client per Python worker), opened on
first use with ``connect_timeout``, TCP keepalives, ``statement_timeout`` from ``query_timeout_s``,
``TimeZone=UTC`` (added to any ``options`` the URL has) and application name ``changejoin-lookup``
(unless the URL names one); the password is passed apart from the URL (a password in the URL works
too). psycopg prepares a statement server-side after five executions; behind a pooler in
transaction mode that does not understand protocol-level prepares, set the pooler up for it. Once
a read column changed type, PostgreSQL refuses a prepared statement ("cached plan must not change
result type"): the connection is replaced and the lookup redone, once. Any other error of a query
replaces the connection too.

**Retries.** Lost or refused connections (``OperationalError``: also the server's shutdown and "too
many connections"), statement timeouts (``QueryCanceled``) and replica conflicts
(``TransactionRollback``) close the connection, wait ``retry_backoff_s * 2**attempt`` capped at
10 s, times a jitter in [0.8, 1.2], reconnect and redo the whole snapshot. After ``max_retries`` the
call raises ``DatabaseError`` (Spark then retries the task). With the defaults (8 retries from
0.5 s) the waits are 0.5, 1, 2, 4, 8, 10, 10, 10 s: at least 0.8 x 45.5 = **36.4 s** in all before
the last attempt, so an outage of 30 s is ridden out. Other errors (a dropped table or column, a
missing privilege) are not retried (``kind`` ``table`` for a table or column that is gone).

**Cache** (``CacheSettings``, off unless given): Flink's partial cache, per client. An LRU of at
most ``max_rows`` keys (each with all its rows; an evicted key counts in ``cache_evictions``),
expired ``expire_after_write_s`` after it was fetched and, if set, ``expire_after_access_s`` after it
was last read (an expired key is a miss, not an eviction). Expire-after-access alone can keep a hot
key stale **forever**: a key read more often than its TTL never expires, so set
expire-after-write as well. Keys without rows are cached only with ``cache_missing_key``. Keys
served from the cache are not queried.

``DatabaseError`` messages are one line, name the database by its URL without the password
(``redact``) and never contain the password.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import json
import math
import random
import re
import string
import struct
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable
from urllib.parse import unquote

__all__ = [
    "CacheSettings",
    "DatabaseError",
    "LookupClient",
    "LookupResult",
    "LookupStats",
    "TableColumn",
    "TableInfo",
    "describe_table",
    "redact",
]

APPLICATION_NAME = "changejoin-lookup"
MAX_BACKOFF_S = 10.0
_UTC = _dt.timezone.utc
_SHOW_CHARS = 60  # a value in a reason is its repr, cut to this many characters


# --------------------------------------------------------------------------------------------
# errors and URLs


class DatabaseError(Exception):
    """The database could not be reached or refused a request: one line, naming the database by its
    redacted URL, never containing the password. ``kind``: ``connection``, ``timeout``,
    ``conflict``, ``query``, ``table`` (no such table, or a column the join reads is gone or
    changed type)."""

    def __init__(self, message: str, kind: str = "query"):
        message = " ".join(str(message).split())
        super().__init__(message)
        self.kind = kind


def redact(url: str) -> str:
    """The URL without its password: user, hosts, ports, database and other parameters kept
    (``postgresql://app:pw@db:5432/shop?password=pw`` -> ``postgresql://app@db:5432/shop``).
    A ``key=value`` connection string loses its ``password=...``."""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$", url, re.S)
    if match is None:
        return re.sub(r"(?i)\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S*)", "password=***", url)
    scheme, rest = match.groups()
    rest = rest.partition("#")[0]
    rest, _, query = rest.partition("?")
    if "@" in rest:  # userinfo ends at the last '@' before the query (a password may hold '@' or '/')
        userinfo, _, rest = rest.rpartition("@")
        user = userinfo.split(":", 1)[0]
        rest = f"{user}@{rest}" if user else rest
    params = [p for p in query.split("&") if p and p.split("=", 1)[0].lower() != "password"]
    return f"{scheme}://{rest}" + (f"?{'&'.join(params)}" if params else "")


def _secrets(url: str, password: str | None) -> list[str]:
    """Every form in which a password may show: given apart, in the URL's userinfo or query."""
    found = [password] if password else []
    match = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://([^?#]*)(?:\?([^#]*))?", url, re.S)
    if match:
        authority, query = match.group(1), match.group(2) or ""
        if "@" in authority:
            userinfo = authority.rpartition("@")[0]
            if ":" in userinfo:
                found.append(userinfo.split(":", 1)[1])
        for param in query.split("&"):
            name, _, value = param.partition("=")
            if name.lower() == "password" and value:
                found.append(value)
    else:
        for quoted, bare in re.findall(r"(?i)\bpassword\s*=\s*(?:'((?:[^'\\]|\\.)*)'|(\S+))", url):
            found.append(quoted or bare)
    forms = set()
    for secret in found:
        forms.update({secret, unquote(secret)})
    return sorted((s for s in forms if s), key=len, reverse=True)


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _error_text(exc: BaseException) -> str:
    """An error's message on one line: a server error's primary message (and detail, without the
    CONTEXT lines that may quote values); libpq's multi-line connection errors joined."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if diag is not None else None
    text = primary or str(exc) or repr(exc)
    detail = getattr(diag, "message_detail", None) if diag is not None else None
    if primary and detail:
        text = f"{text} ({detail})"
    return " ".join(text.split())


def _describe_error(exc: BaseException) -> str:
    """One line: the exception's class and its message."""
    return f"{type(exc).__name__}: {_error_text(exc)}"


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOW_CHARS else text[: _SHOW_CHARS - 3] + "..."


# --------------------------------------------------------------------------------------------
# table names


_BARE_PART = re.compile(r'[^\s."]+')
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def _split_name(table: str) -> tuple[str, ...]:
    """``schema.table`` or ``table`` as identifiers, PostgreSQL's way: unquoted parts fold to
    lowercase, ``"Quoted"`` parts keep their case and may hold dots (``""`` is a quote)."""
    parts: list[str] = []
    i, n = 0, len(table)
    while True:
        while i < n and table[i].isspace():
            i += 1
        if i < n and table[i] == '"':
            j, chars = i + 1, []
            while True:
                k = table.find('"', j)
                if k < 0:
                    raise ValueError(f"table name {table!r}: unterminated quoted identifier")
                chars.append(table[j:k])
                if table.startswith('"', k + 1):
                    chars.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            part = "".join(chars)
        else:
            match = _BARE_PART.match(table, i)
            if match is None:
                raise ValueError(f"table name {table!r}: empty part")
            part = match.group(0).translate(_ASCII_LOWER)  # as PostgreSQL folds: ASCII letters only
            i = match.end()
        if not part:
            raise ValueError(f"table name {table!r}: empty part")
        parts.append(part)
        while i < n and table[i].isspace():
            i += 1
        if i == n:
            break
        if table[i] != ".":
            raise ValueError(f"table name {table!r}: unexpected {table[i]!r}")
        i += 1
    if len(parts) > 2:
        raise ValueError(f"table name {table!r}: expected table or schema.table")
    return tuple(parts)


def _table_sql(table: str):
    from psycopg import sql

    return sql.Identifier(*_split_name(table))


def _cast_sql(cast: str):
    """A ``TableColumn.cast`` as SQL: a bare built-in type name, or a quoted ``"schema"."type"``
    (never spliced in as text: ``TableInfo`` travels as plain data)."""
    from psycopg import sql

    if re.fullmatch(r"[a-z_][a-z0-9_]*", cast):
        return sql.SQL(cast)
    return sql.Identifier(*_split_name(cast))


# --------------------------------------------------------------------------------------------
# the table's description


@dataclass(frozen=True)
class TableColumn:
    name: str
    pg_type: str  # format_type(): "numeric(10,2)", "character varying(20)", a domain's name
    cast: str  # the base type for array casts, without modifier: int4, numeric, bpchar, "s"."enum"
    avro_type: object  # the non-null Avro type JSON, or None when unsupported
    nullable: bool
    unsupported: str | None = None  # why, when avro_type is None
    # The type a query's result reports for the column (a domain's base type, with its modifier):
    # what ``LookupClient`` checks each result against, to notice a type changed while it runs.
    type_oid: int | None = None
    typmod: int | None = None


@dataclass(frozen=True)
class TableInfo:
    table: str  # as configured: "customers", "crm.customers", '"Crm"."Customers"'
    columns: tuple[TableColumn, ...]  # attnum order, dropped columns excluded
    primary_key: tuple[str, ...] | None
    unique_keys: tuple[tuple[str, ...], ...]  # non-partial unique indexes on columns; PK included

    def column(self, name: str) -> TableColumn:
        for column in self.columns:
            if column.name == name:
                return column
        raise KeyError(name)

    def to_dict(self) -> dict:
        """Plain JSON data (shipped to the Spark workers)."""
        return {
            "table": self.table,
            "columns": [
                {"name": c.name, "pg_type": c.pg_type, "cast": c.cast, "avro_type": c.avro_type,
                 "nullable": c.nullable, "unsupported": c.unsupported, "type_oid": c.type_oid, "typmod": c.typmod}
                for c in self.columns
            ],
            "primary_key": list(self.primary_key) if self.primary_key is not None else None,
            "unique_keys": [list(k) for k in self.unique_keys],
        }

    @classmethod
    def from_dict(cls, d: dict) -> "TableInfo":
        return cls(
            table=d["table"],
            columns=tuple(
                TableColumn(c["name"], c["pg_type"], c["cast"], c.get("avro_type"), bool(c["nullable"]),
                            c.get("unsupported"), c.get("type_oid"), c.get("typmod"))
                for c in d["columns"]
            ),
            primary_key=tuple(d["primary_key"]) if d.get("primary_key") is not None else None,
            unique_keys=tuple(tuple(k) for k in d.get("unique_keys", ())),
        )


_SIMPLE_AVRO = {
    "int2": "int", "int4": "int", "int8": "long", "float4": "float", "float8": "double",
    "bool": "boolean", "text": "string", "varchar": "string", "bpchar": "string", "name": "string",
    "bytea": "bytes", "json": "string", "jsonb": "string",
    "date": {"type": "int", "logicalType": "date"},
    "timestamp": {"type": "long", "logicalType": "timestamp-micros"},
    "timestamptz": {"type": "long", "logicalType": "timestamp-micros"},
    "time": {"type": "long", "logicalType": "time-micros"},
    "uuid": {"type": "string", "logicalType": "uuid"},
}
_TYPTYPE_NAMES = {"c": "composite type", "r": "range type", "m": "multirange type", "p": "pseudo-type"}


def _numeric_avro(typmod: int) -> tuple[object, str | None]:
    if typmod < 4:
        return None, ("numeric without precision and scale has no Avro type: declare it "
                      "numeric(p,s) or cast it in a view")
    precision = ((typmod - 4) >> 16) & 0xFFFF
    scale = (((typmod - 4) & 0x7FF) ^ 1024) - 1024  # 11-bit signed since PostgreSQL 15
    if scale < 0 or scale > precision:
        return None, (f"numeric({precision},{scale}) has no Avro decimal type (the scale must be "
                      f"0..precision): cast it in a view")
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}, None


def _map_type(nspname: str, typname: str, typtype: str, typcategory: str, typmod: int,
              shown: str) -> tuple[str, object, str | None]:
    """(cast, avro_type, unsupported) of a base (non-domain) type."""
    if nspname == "pg_catalog":
        cast = typname
    else:
        cast = f"{_quote_ident(nspname)}.{_quote_ident(typname)}"
    if nspname == "pg_catalog" and typname == "numeric":
        avro, why = _numeric_avro(typmod)
        return cast, avro, why
    if nspname == "pg_catalog" and typname in _SIMPLE_AVRO:
        return cast, _SIMPLE_AVRO[typname], None
    if typtype == "e":
        return cast, "string", None
    if typtype == "b" and typname == "citext":
        return cast, "string", None
    if typcategory == "A":
        return cast, None, f"array type {shown} is not supported"
    what = _TYPTYPE_NAMES.get(typtype, "type")
    return cast, None, f"{what} {shown} is not supported"


def _quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_COLUMNS_SQL = """
SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atttypmod,
       t.oid, t.typname, n.nspname, t.typtype, t.typcategory, t.typbasetype, t.typtypmod, t.typnotnull
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""

_TYPE_SQL = """
SELECT t.oid, t.typname, n.nspname, t.typtype, t.typcategory, t.typbasetype, t.typtypmod, t.typnotnull
FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE t.oid = %s
"""

_KEYS_SQL = """
SELECT i.indisprimary,
       ARRAY(SELECT a.attname
             FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
             WHERE k.ord <= i.indnkeyatts
             ORDER BY k.ord)
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
WHERE i.indrelid = %s AND i.indisunique AND i.indisvalid
  AND i.indpred IS NULL AND i.indexprs IS NULL
ORDER BY NOT i.indisprimary, ic.relname
"""

_RELKINDS = {"r": "table", "p": "partitioned table", "v": "view", "m": "materialized view",
             "f": "foreign table"}


def _describe_column(conn, row) -> TableColumn:
    name, shown, attnotnull, typmod, *typ = row
    notnull = bool(attnotnull)
    for _ in range(64):  # a domain maps as its base type: follow domains over domains
        oid, typname, nspname, typtype, typcategory, typbasetype, typtypmod, typnotnull = typ
        if typtype != "d":
            break
        notnull = notnull or bool(typnotnull)
        if typmod < 0:
            typmod = typtypmod
        typ = conn.execute(_TYPE_SQL, (typbasetype,)).fetchone()
    cast, avro, why = _map_type(nspname, typname, typtype, typcategory, typmod, shown)
    # A result reports a domain as its base type and modifier (PostgreSQL's RowDescription).
    return TableColumn(name, shown, cast, avro, not notnull, why, oid, typmod)


def _connect_kwargs(url: str, password: str | None, connect_timeout_s: float,
                    statement_timeout_s: float | None) -> dict:
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(url)
    options = [given["options"]] if given.get("options") else []
    if statement_timeout_s is not None:
        options.append(f"-c statement_timeout={max(1, int(round(statement_timeout_s * 1000)))}")
    options.append("-c TimeZone=UTC")
    kwargs = {
        "connect_timeout": str(max(2, math.ceil(connect_timeout_s))),  # libpq: whole seconds, >= 2
        "keepalives": "1",
        "keepalives_idle": "30",
        "keepalives_interval": "10",
        "keepalives_count": "3",
        "fallback_application_name": APPLICATION_NAME,
        "options": " ".join(options),
    }
    if password is not None:
        kwargs["password"] = password
    return kwargs


def _open(url: str, password: str | None, connect_timeout_s: float, statement_timeout_s: float | None):
    """A connection in autocommit mode (transactions are explicit) with uuid, json and jsonb loaded
    as their text. Raises DatabaseError when the URL is malformed, psycopg's errors otherwise."""
    import psycopg
    from psycopg.types.string import TextLoader

    try:
        kwargs = _connect_kwargs(url, password, connect_timeout_s, statement_timeout_s)
    except psycopg.ProgrammingError as e:
        raise DatabaseError(
            f"invalid database URL {redact(url)}: {_scrub(_describe_error(e), _secrets(url, password))}",
            "connection") from None
    conn = psycopg.connect(url, autocommit=True, **kwargs)
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ  # for conn.transaction(): one snapshot
    conn.read_only = True
    for name in ("uuid", "json", "jsonb"):
        conn.adapters.register_loader(name, TextLoader)
    for name in _DATETIME_TYPES:
        conn.adapters.register_loader(name, _lenient(conn.adapters.get_loader(
            conn.adapters.types[name].oid, psycopg.pq.Format.TEXT)))
    return conn


# PostgreSQL holds dates and times Python's datetime cannot: 'infinity' and '-infinity' dates and
# timestamps, years past 9999, BC dates, time '24:00'. psycopg refuses to load them (DataError while
# fetching), which would fail the whole statement and look like a refused key.
_DATETIME_TYPES = ("date", "time", "timestamp", "timestamptz")


class Unloadable:
    """A value psycopg could not load: its text as the server sent it, and why (``_lenient``). A
    row holding one is never joined: its key's rows are reported in ``LookupResult.bad_rows``."""

    __slots__ = ("text", "why")

    def __init__(self, text: str, why: str):
        self.text, self.why = text, why

    def __repr__(self) -> str:
        return repr(self.text)


def _lenient(base):
    """A loader that loads as ``base`` does, and an ``Unloadable`` where ``base`` refuses the value."""
    import psycopg
    from psycopg.adapt import Loader

    class Lenient(Loader):
        def __init__(self, oid, context=None):
            super().__init__(oid, context)
            self._base = base(oid, context)

        def load(self, data):
            try:
                return self._base.load(data)
            except psycopg.DataError as e:
                return Unloadable(bytes(data).decode("utf-8", "replace"), _error_text(e))

    return Lenient


def describe_table(url: str, password: str | None, table: str, *, connect_timeout_s: float = 10) -> TableInfo:
    """Columns, types (with their Avro types), primary key and unique keys of a table or view, from
    ``pg_catalog``. ``table`` is resolved as PostgreSQL would (``to_regclass``, the search_path for
    an unqualified name; quoted identifiers keep their case). Raises DatabaseError when the database
    cannot be reached or has no such table or view."""
    import psycopg

    where = redact(url)
    secrets = _secrets(url, password)
    try:
        parts = _split_name(table)
    except ValueError as e:
        raise DatabaseError(f"{where}: {e}", "table") from None
    try:
        conn = _open(url, password, connect_timeout_s, 60.0)
    except psycopg.Error as e:
        raise DatabaseError(f"cannot connect to {where}: {_scrub(_describe_error(e), secrets)}",
                            "connection") from None
    try:
        with conn:
            from psycopg import sql

            qualified = sql.Identifier(*parts).as_string(conn)
            found = conn.execute("SELECT c.oid, c.relkind FROM pg_class c WHERE c.oid = to_regclass(%s)",
                                 (qualified,)).fetchone()
            if found is None:
                search_path = conn.execute("SELECT current_setting('search_path')").fetchone()[0]
                raise DatabaseError(f"{where}: no table or view {table!r} (search_path: {search_path})", "table")
            oid, relkind = found
            if relkind not in _RELKINDS:
                raise DatabaseError(f"{where}: {table!r} is not a table or view (relkind {relkind!r})", "table")
            columns = tuple(_describe_column(conn, row) for row in conn.execute(_COLUMNS_SQL, (oid,)).fetchall())
            primary_key = None
            unique: list[tuple[str, ...]] = []
            for is_primary, names in conn.execute(_KEYS_SQL, (oid,)).fetchall():
                names = tuple(names)
                if is_primary and primary_key is None:
                    primary_key = names
                if names and names not in unique:
                    unique.append(names)
            return TableInfo(table, columns, primary_key, tuple(unique))
    except psycopg.OperationalError as e:
        raise DatabaseError(f"cannot describe {table!r} in {where}: {_scrub(_describe_error(e), secrets)}",
                            "connection") from None
    except psycopg.Error as e:
        raise DatabaseError(f"cannot describe {table!r} in {where}: {_scrub(_describe_error(e), secrets)}",
                            "query") from None


# --------------------------------------------------------------------------------------------
# keys: checks in Python and canonical forms


class _Invalid(Exception):
    """A key value the key column cannot hold; the message ends "<value> <message>"."""


_NAN = "NaN"  # the canonical form of a float NaN (PostgreSQL: NaN = NaN), never equal to a float
_F32 = struct.Struct("<f")
_INT_RANGES = {"int2": (-(2**15), 2**15 - 1), "int4": (-(2**31), 2**31 - 1), "int8": (-(2**63), 2**63 - 1)}
_NUMERIC_MAX_ADJUSTED = 131071  # up to 131072 digits before the decimal point
_NUMERIC_MAX_SCALE = 16383  # up to 16383 digits after it


@dataclass(frozen=True)
class _KeyKind:
    check: Callable[[Any], tuple[Any, Any]]  # a key value -> (canonical, value sent) or _Invalid
    row_canonical: Callable[[Any], Any] | None = None  # a returned value -> canonical (None: as is)


def _int_kind(cast: str) -> _KeyKind:
    lo, hi = _INT_RANGES[cast]

    def check(v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Invalid("is not an integer")
        if not lo <= v <= hi:
            raise _Invalid("is out of range")
        return v, v

    return _KeyKind(check)


def _float_canonical(single: bool) -> Callable[[Any], Any]:
    def canonical(v):
        f = float(v)
        if single:
            f = _F32.unpack(_F32.pack(f))[0]
        return _NAN if f != f else f

    return canonical


def _float_kind(single: bool) -> _KeyKind:
    canonical = _float_canonical(single)

    def check(v):
        if isinstance(v, bool) or not isinstance(v, (int, float, decimal.Decimal)):
            raise _Invalid("is not a number")
        try:
            c = canonical(v)
        except (OverflowError, ValueError):
            raise _Invalid("is out of range") from None
        return c, float("nan") if c is _NAN else c

    return _KeyKind(check, canonical)


def _numeric_check(v):
    if isinstance(v, bool) or not isinstance(v, (int, decimal.Decimal)):
        raise _Invalid("is not a decimal number")
    if isinstance(v, int):
        if v.bit_length() > 435_500:  # beyond 10**131072: out of range, and slow to convert
            raise _Invalid("is out of range")
        v = decimal.Decimal(v)
    if not v.is_finite():
        raise _Invalid("is not a finite number")
    if v and v.adjusted() > _NUMERIC_MAX_ADJUSTED:
        raise _Invalid("is out of range")
    exponent = v.as_tuple().exponent
    if exponent < -_NUMERIC_MAX_SCALE:  # trailing zeros do not count
        digits = len(v.as_tuple().digits)
        v = v.normalize(decimal.Context(prec=max(1, digits)))
        if v.as_tuple().exponent < -_NUMERIC_MAX_SCALE:
            raise _Invalid("has too many digits after the decimal point")
    return v, v  # Decimal hashes and compares by value: 1.50 and 1.5 are one key


def _text_kind(strip: bool = False, lower: bool = False) -> _KeyKind:
    def canonical(v):
        if strip:
            v = v.rstrip(" ")
        return v.lower() if lower else v

    def check(v):
        if not isinstance(v, str):
            raise _Invalid("is not a string")
        if "\x00" in v:
            raise _Invalid("contains a NUL character")
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            raise _Invalid("is not valid Unicode text") from None
        c = canonical(v)
        return c, (v.rstrip(" ") if strip else v)

    return _KeyKind(check, canonical if (strip or lower) else None)


def _uuid_check(v):
    if isinstance(v, uuid.UUID):
        text = str(v)
    elif isinstance(v, str):
        try:
            text = str(uuid.UUID(v))
        except ValueError:
            raise _Invalid("is not a UUID") from None
    else:
        raise _Invalid("is not a UUID")
    return text, text


def _date_check(v):
    if not isinstance(v, _dt.date) or isinstance(v, _dt.datetime):
        raise _Invalid("is not a date")
    return v, v


def _timestamp_kind(with_zone: bool) -> _KeyKind:
    def check(v):
        if not isinstance(v, _dt.datetime):
            raise _Invalid("is not a datetime")
        try:
            c = v.replace(tzinfo=_UTC) if v.tzinfo is None else v.astimezone(_UTC)
        except (OverflowError, ValueError):
            raise _Invalid("is out of range") from None
        return c, (c if with_zone else c.replace(tzinfo=None))

    return _KeyKind(check)


def _time_check(v):
    if not isinstance(v, _dt.time):
        raise _Invalid("is not a time")
    if v.tzinfo is not None:
        raise _Invalid("has a time zone (the column has none)")
    return v, v


def _bool_check(v):
    if not isinstance(v, bool):
        raise _Invalid("is not a boolean")
    return v, v


def _bytes_check(v):
    if not isinstance(v, bytes):
        raise _Invalid("is not bytes")
    return v, v


def _key_kind(column: TableColumn) -> _KeyKind | None:
    """How to check and compare keys of this column, or None if it cannot be a lookup key."""
    cast = column.cast
    if cast in _INT_RANGES:
        return _int_kind(cast)
    simple = {
        "float4": lambda: _float_kind(True), "float8": lambda: _float_kind(False),
        "numeric": lambda: _KeyKind(_numeric_check),
        "text": _text_kind, "varchar": _text_kind, "name": _text_kind,
        "bpchar": lambda: _text_kind(strip=True),
        "uuid": lambda: _KeyKind(_uuid_check), "date": lambda: _KeyKind(_date_check),
        "timestamp": lambda: _timestamp_kind(False), "timestamptz": lambda: _timestamp_kind(True),
        "time": lambda: _KeyKind(_time_check), "bool": lambda: _KeyKind(_bool_check),
        "bytea": lambda: _KeyKind(_bytes_check),
    }
    if cast in simple:
        return simple[cast]()
    if "." in cast and column.avro_type == "string":  # an enum or citext (labels: the database checks)
        return _text_kind(lower=cast.endswith('."citext"'))
    return None


def _row_converter(cast: str) -> Callable[[Any], Any] | None:
    """Turns a value psycopg loaded into what the Avro encoder takes (None: as it is). uuid, json
    and jsonb come as text already (loaders registered in ``_open``)."""
    if cast == "timestamptz":
        return lambda v: v if v.tzinfo is _UTC else v.astimezone(_UTC)
    if cast == "timestamp":
        return lambda v: v.replace(tzinfo=_UTC)
    return None


def _value_check(column: TableColumn) -> Callable[[Any], str | None] | None:
    """What a value of this column must be for the join to take it, as ``value -> problem or
    None``: loaded (not ``Unloadable``), not NULL where the column was NOT NULL when the join was
    planned (the output's type then has no null), and for a ``numeric(p,s)`` a finite number of
    at most p digits, s after the point: PostgreSQL allows NaN there, which the output's Avro
    decimal cannot hold. Other values are what their type maps to (the type map above)."""
    avro = column.avro_type
    decimal_type = isinstance(avro, dict) and avro.get("logicalType") == "decimal"
    if decimal_type:
        precision, scale = avro["precision"], avro.get("scale", 0)
    elif column.nullable and column.cast not in _DATETIME_TYPES:
        return None  # any value psycopg loads is one of the type's

    def check(v):
        if v is None:
            return None if column.nullable else "NULL, but the column was NOT NULL when the join was planned " \
                "(restart the service to take it as nullable)"
        if isinstance(v, Unloadable):
            return f"{_show(v.text)} cannot be read as a Python value ({v.why})"
        if decimal_type and isinstance(v, decimal.Decimal):
            if not v.is_finite():
                return f"{_show(v)} is not a number the output's Avro decimal({precision},{scale}) can hold"
            exponent = v.as_tuple().exponent
            if -exponent > scale or (v and v.adjusted() >= precision - scale):
                return f"{_show(v)} has more digits than the output's Avro decimal({precision},{scale})"
        return None

    return check


# --------------------------------------------------------------------------------------------
# cache, stats, results


@dataclass
class CacheSettings:
    max_rows: int = 100_000  # keys held (each with all its rows), as Flink's max-rows
    expire_after_write_s: float | None = None
    expire_after_access_s: float | None = None  # alone, a hot key can stay stale forever
    cache_missing_key: bool = True


@dataclass
class LookupStats:
    """Counters since the last ``take_stats()``. ``queries`` and ``query_seconds`` count every
    statement executed, also in attempts that were retried and while bisecting, and ``keys`` the
    keys those statements sent; ``cache_*`` count distinct keys (only with a cache)."""

    queries: int = 0
    keys: int = 0
    rows: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_evictions: int = 0
    retries: int = 0
    errors: dict[str, int] = field(default_factory=dict)  # connection, timeout, conflict, data, query
    query_seconds: list[float] = field(default_factory=list)


@dataclass
class LookupResult:
    rows: dict[tuple, tuple[tuple, ...]]  # each valid key -> its rows (the columns read; () = none)
    invalid: dict[tuple, str]  # keys the key columns cannot hold -> why
    # Keys whose rows hold a value the join cannot take (``LookupClient._row_problem``) -> why,
    # naming the column and the value: the key is fine, its rows are not.
    bad_rows: dict[tuple, str] = field(default_factory=dict)


class _Cache:
    """LRU by canonical key with expire-after-write and expire-after-access."""

    def __init__(self, settings: CacheSettings):
        self.settings = settings
        self._entries: OrderedDict[tuple, list] = OrderedDict()  # key -> [rows, written, accessed]

    def get(self, key: tuple, now: float):
        entry = self._entries.get(key)
        if entry is None:
            return None
        s = self.settings
        if (s.expire_after_write_s is not None and now - entry[1] >= s.expire_after_write_s) or (
            s.expire_after_access_s is not None and now - entry[2] >= s.expire_after_access_s
        ):
            del self._entries[key]
            return None
        entry[2] = now
        self._entries.move_to_end(key)
        return entry[0]

    def put(self, key: tuple, rows: tuple, now: float) -> int:
        """Stores a key's rows; returns how many keys were evicted for room."""
        if self.settings.max_rows <= 0 or (not rows and not self.settings.cache_missing_key):
            return 0
        self._entries[key] = [rows, now, now]
        self._entries.move_to_end(key)
        evicted = 0
        while len(self._entries) > self.settings.max_rows:
            self._entries.popitem(last=False)
            evicted += 1
        return evicted

    def __len__(self) -> int:
        return len(self._entries)


class _DataErrorSeen(Exception):
    """A chunk failed with a data error outside savepoints: redo the call with them."""


# --------------------------------------------------------------------------------------------
# the client


class LookupClient:
    """Looks keys up in one table: batched, one snapshot per call, retried, optionally cached.

    Not shared between threads at once (a lock serialises calls); picklable (the connection and
    the cache stay behind)."""

    def __init__(
        self,
        url: str,
        password: str | None,
        table: TableInfo,
        key_columns: tuple[str, ...],
        *,
        batch_size: int = 1000,
        query_timeout_s: float = 30.0,
        max_retries: int = 8,
        retry_backoff_s: float = 0.5,
        cache: CacheSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        connect_timeout_s: float = 10.0,
        columns: tuple[str, ...] | None = None,
    ):
        """``columns``: the columns to read, in the order rows have them (the key columns among
        them); None: every column of the table."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be at least 0, got {max_retries}")
        key_columns = tuple(key_columns)
        if not key_columns:
            raise ValueError("a lookup needs at least one key column")
        if len(set(key_columns)) != len(key_columns):
            raise ValueError(f"key columns repeat: {key_columns}")
        self._kinds_of(table, key_columns)  # raises ValueError for columns that cannot be keys
        columns = tuple(c.name for c in table.columns) if columns is None else tuple(columns)
        for name in columns + key_columns:
            if name not in {c.name for c in table.columns}:
                raise ValueError(f"table {table.table} has no column {name!r}")
        if not set(key_columns) <= set(columns):
            raise ValueError(f"the columns read ({', '.join(columns)}) must hold the key columns ({', '.join(key_columns)})")
        self.columns = columns
        self.url = url
        self.password = password
        self.table = table
        self.key_columns = key_columns
        self.batch_size = batch_size
        self.query_timeout_s = query_timeout_s
        self.max_retries = max_retries
        self.retry_backoff_s = retry_backoff_s
        self.cache_settings = cache
        self.clock = clock
        self.sleep = sleep
        self.connect_timeout_s = connect_timeout_s
        self._init_runtime()

    @staticmethod
    def _kinds_of(table: TableInfo, key_columns: tuple[str, ...]) -> tuple[_KeyKind, ...]:
        names = [c.name for c in table.columns]
        kinds = []
        for name in key_columns:
            if name not in names:
                raise ValueError(f"table {table.table} has no column {name!r} (columns: {', '.join(names)})")
            column = table.column(name)
            kind = _key_kind(column)
            if kind is None:
                raise ValueError(f"column {name} ({column.pg_type}) of {table.table} cannot be a lookup key")
            kinds.append(kind)
        return tuple(kinds)

    def _init_runtime(self) -> None:
        """What is rebuilt after unpickling: key checks, converters, connection, cache, stats."""
        self._read = tuple(self.table.column(n) for n in self.columns)
        self._kinds = self._kinds_of(self.table, self.key_columns)
        self._key_positions = tuple(self.columns.index(n) for n in self.key_columns)
        self._converters = tuple((i, conv) for i, c in enumerate(self._read)
                                 if (conv := _row_converter(c.cast)) is not None)
        self._checks = tuple((i, check) for i, c in enumerate(self._read) if (check := _value_check(c)) is not None)
        # What each column's results must report (its type and modifier), where the catalog said.
        self._types = [(c.type_oid, c.typmod) for c in self._read]
        self._random = random.Random()
        self._conn = None
        self._query = None
        self._lock = threading.RLock()
        self._cache = _Cache(self.cache_settings) if self.cache_settings is not None else None
        self._stats = LookupStats()

    def __getstate__(self):
        state = self.__dict__.copy()
        for name in ("_read", "_kinds", "_key_positions", "_converters", "_checks", "_types", "_random", "_conn",
                     "_query", "_lock", "_cache", "_stats"):
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._init_runtime()

    def __repr__(self) -> str:
        return f"LookupClient({redact(self.url)}, {self.table.table}, key={self.key_columns})"

    def __enter__(self) -> "LookupClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- public

    def lookup(self, keys: Iterable[tuple]) -> LookupResult:
        """The rows of each distinct key (see the module's docstring). Raises DatabaseError when the
        database stays unreachable through the retries, or refuses the query for another reason
        than a key."""
        with self._lock:
            rows: dict[tuple, tuple[tuple, ...]] = {}
            invalid: dict[tuple, str] = {}
            wanted: dict[tuple, list[tuple]] = {}  # canonical key -> the requested keys
            sent: dict[tuple, tuple] = {}  # canonical key -> the values sent
            width = len(self.key_columns)
            for key in dict.fromkeys(keys):
                if not isinstance(key, tuple) or len(key) != width:
                    raise ValueError(f"a lookup key is a tuple of {width} value(s) "
                                     f"({', '.join(self.key_columns)}), got {_show(key)}")
                if any(v is None for v in key):
                    rows[key] = ()
                    continue
                checked = self._check(key)
                if isinstance(checked, str):
                    invalid[key] = checked
                    continue
                canonical, wire = checked
                wanted.setdefault(canonical, []).append(key)
                sent.setdefault(canonical, wire)
            found: dict[tuple, tuple[tuple, ...]] = {}
            if self._cache is not None and wanted:
                now = self.clock()
                for canonical in wanted:
                    cached = self._cache.get(canonical, now)
                    if cached is None:
                        self._stats.cache_misses += 1
                    else:
                        self._stats.cache_hits += 1
                        found[canonical] = cached
            todo = [c for c in wanted if c not in found]
            bad: dict[tuple, str] = {}
            if todo:
                fetched, refused = self._fetch(todo, sent)
                for canonical, reason in refused.items():
                    for key in wanted.pop(canonical):
                        invalid[key] = reason
                now = self.clock() if self._cache is not None else 0.0
                for canonical in todo:
                    if canonical in refused:
                        continue
                    result = tuple(fetched.get(canonical, ()))
                    problem = self._row_problem(result)
                    if problem is not None:  # never cached: a fixed row is read again next time
                        for key in wanted.pop(canonical):
                            bad[key] = problem
                        continue
                    found[canonical] = result
                    if self._cache is not None:
                        self._stats.cache_evictions += self._cache.put(canonical, result, now)
            for canonical, originals in wanted.items():
                for key in originals:
                    rows[key] = found[canonical]
            return LookupResult(rows, invalid, bad)

    def take_stats(self) -> LookupStats:
        with self._lock:
            stats, self._stats = self._stats, LookupStats()
            return stats

    def close(self) -> None:
        with self._lock:
            self._discard()

    # -- keys

    def _check(self, key: tuple):
        """(canonical, values to send) of a key, or the reason it is invalid."""
        canonical, wire = [], []
        for name, kind, value in zip(self.key_columns, self._kinds, key):
            try:
                c, w = kind.check(value)
            except _Invalid as e:
                column = self.table.column(name)
                return f"column {name} ({column.pg_type}): {_show(value)} {e}"
            canonical.append(c)
            wire.append(w)
        return tuple(canonical), tuple(wire)

    def _row_problem(self, rows: tuple) -> str | None:
        """Why a key's rows cannot be joined, naming the column and the value, or None: a value
        psycopg could not load, or one the column's Avro type (the output's) cannot hold."""
        for row in rows:
            for i, check in self._checks:
                problem = check(row[i])
                if problem is not None:
                    column = self._read[i]
                    return f"table {self.table.table}, column {column.name} ({column.pg_type}): {problem}"
        return None

    def _row_key(self, row: tuple) -> tuple:
        out = []
        for position, kind in zip(self._key_positions, self._kinds):
            v = row[position]
            out.append(v if kind.row_canonical is None or v is None else kind.row_canonical(v))
        return tuple(out)

    # -- queries

    def _statement(self):
        if self._query is None:
            from psycopg import sql

            table = _table_sql(self.table.table)
            casts = [_cast_sql(self.table.column(n).cast) for n in self.key_columns]
            if len(self.key_columns) == 1:
                self._query = sql.SQL("SELECT {cols} FROM {table} WHERE {key} = ANY({p}::{cast}[])").format(
                    cols=sql.SQL(", ").join(sql.Identifier(name) for name in self.columns),
                    table=table, key=sql.Identifier(self.key_columns[0]), p=sql.Placeholder(), cast=casts[0])
            else:
                aliases = [f"k{i + 1}" for i in range(len(self.key_columns))]
                self._query = sql.SQL(
                    "SELECT {cols} FROM {table} AS t JOIN unnest({arrays}) AS k({aliases}) ON {on}"
                ).format(
                    cols=sql.SQL(", ").join(sql.Identifier("t", name) for name in self.columns),
                    table=table,
                    arrays=sql.SQL(", ").join(sql.SQL("{}::{}[]").format(sql.Placeholder(), cast)
                                              for cast in casts),
                    aliases=sql.SQL(", ").join(sql.Identifier(a) for a in aliases),
                    on=sql.SQL(" AND ").join(
                        sql.SQL("{} = {}").format(sql.Identifier("t", name), sql.Identifier("k", alias))
                        for name, alias in zip(self.key_columns, aliases)),
                )
        return self._query

    def _execute(self, conn, chunk: list[tuple], sent: dict[tuple, tuple]) -> list[tuple]:
        """One statement for a chunk of canonical keys; returns the converted rows."""
        params = [list(column) for column in zip(*(sent[c] for c in chunk))]
        self._stats.queries += 1
        self._stats.keys += len(chunk)
        started = time.perf_counter()
        try:
            cursor = conn.execute(self._statement(), params)
            self._check_result_types(conn, cursor)
            fetched = cursor.fetchall()
        finally:
            self._stats.query_seconds.append(time.perf_counter() - started)
        self._stats.rows += len(fetched)
        if self._converters:
            converted = []
            for row in fetched:
                row = list(row)
                for i, conv in self._converters:
                    if row[i] is not None and not isinstance(row[i], Unloadable):
                        row[i] = conv(row[i])
                converted.append(tuple(row))
            return converted
        return fetched

    def _check_result_types(self, conn, cursor) -> None:
        """A column whose type changed while the service runs (``ALTER TABLE ... ALTER COLUMN ...
        TYPE``): taken when its values are those of the same Avro type (``varchar(20)`` to
        ``varchar(50)``, ``integer`` to ``smallint``), else a DatabaseError saying what changed and
        what to do. Columns the join does not read are not read, so their changes never matter."""
        for i, column in enumerate(cursor.description or ()):
            expected = self._types[i]
            got = (column.type_code, cursor.pgresult.fmod(i))
            if expected[0] is None or got == expected:
                continue
            was = self._read[i]
            oid, typname, nspname, typtype, typcategory, *_ = conn.execute(_TYPE_SQL, (got[0],)).fetchone()
            shown = conn.execute("SELECT format_type(%s, %s)", (got[0], got[1])).fetchone()[0]
            _, avro, _ = _map_type(nspname, typname, typtype, typcategory, got[1], shown)
            if avro is not None and avro == was.avro_type:
                self._types[i] = got  # the same values: nothing to do
                continue
            avro_shown = json.dumps(was.avro_type) if isinstance(was.avro_type, dict) else was.avro_type
            raise DatabaseError(
                f"lookup in {redact(self.url)} ({self.table.table}): column {was.name} changed type from "
                f"{was.pg_type} to {shown} while the service ran; the join reads it as Avro {avro_shown}, which "
                f"{shown} values are not: restart the service to plan the join with the new type (a checkpoint "
                "whose stored rows cannot take it is refused, naming the column), or restore the column's type",
                "table")

    def _collect(self, rows: list[tuple], chunk: list[tuple], out: dict[tuple, list[tuple]]) -> None:
        asked = set(chunk)
        for row in rows:
            key = self._row_key(row)
            if key in asked:
                out.setdefault(key, []).append(row)

    def _query_careful(self, conn, chunk, sent, out, refused) -> None:
        """A chunk under a savepoint; on a data error, its halves, down to single keys."""
        import psycopg

        try:
            with conn.transaction():
                rows = self._execute(conn, chunk, sent)
        except psycopg.DataError as e:
            self._count_error("data")
            if len(chunk) == 1:
                refused[chunk[0]] = self._refusal(sent[chunk[0]], e)
                return
            middle = len(chunk) // 2
            self._query_careful(conn, chunk[:middle], sent, out, refused)
            self._query_careful(conn, chunk[middle:], sent, out, refused)
            return
        self._collect(rows, chunk, out)

    def _refusal(self, values: tuple, exc: BaseException) -> str:
        """The reason of a key the database refused: the columns, the value sent, its message."""
        if len(values) == 1:
            column = self.table.column(self.key_columns[0])
            return (f"column {column.name} ({column.pg_type}): the database refused {_show(values[0])}: "
                    f"{_error_text(exc)}")
        return f"columns {', '.join(self.key_columns)}: the database refused {_show(values)}: {_error_text(exc)}"

    def _snapshot(self, conn, todo: list[tuple], sent, careful: bool):
        import psycopg

        out: dict[tuple, list[tuple]] = {}
        refused: dict[tuple, str] = {}
        chunks = [todo[i:i + self.batch_size] for i in range(0, len(todo), self.batch_size)]
        try:
            with conn.transaction():
                for chunk in chunks:
                    if careful:
                        self._query_careful(conn, chunk, sent, out, refused)
                    else:
                        self._collect(self._execute(conn, chunk, sent), chunk, out)
        except psycopg.DataError:
            if careful:
                raise
            self._count_error("data")
            raise _DataErrorSeen() from None
        return out, refused

    def _fetch(self, todo: list[tuple], sent):
        """Runs the snapshot with retries; returns (canonical key -> rows, canonical key -> reason)."""
        import psycopg

        retryable = (psycopg.OperationalError, psycopg.errors.TransactionRollback)
        careful = replanned = False
        attempt = 0
        while True:
            try:
                if self._conn is None:
                    self._conn = _open(self.url, self.password, self.connect_timeout_s, self.query_timeout_s)
                return self._snapshot(self._conn, todo, sent, careful)
            except _DataErrorSeen:
                careful = True
            except psycopg.errors.FeatureNotSupported as e:
                # "cached plan must not change result type": psycopg prepares the statement on the
                # server after five runs, and a column the join reads changed type since. The
                # connection's prepared statement is what is stale: a new connection plans anew
                # (and _check_result_types then decides whether the new type will do).
                self._discard()
                self._count_error("query")
                if replanned:
                    raise DatabaseError(f"lookup in {redact(self.url)} ({self.table.table}) failed: "
                                        f"{_scrub(_describe_error(e), _secrets(self.url, self.password))}",
                                        "query") from None
                replanned = True
                self._stats.retries += 1
            except retryable as e:
                self._discard()
                kind = ("timeout" if isinstance(e, psycopg.errors.QueryCanceled)
                        else "conflict" if isinstance(e, psycopg.errors.TransactionRollback)
                        else "connection")
                self._count_error(kind)
                if attempt >= self.max_retries:
                    raise DatabaseError(
                        f"lookup in {redact(self.url)} ({self.table.table}): gave up after {attempt + 1} "
                        f"attempt{'s' if attempt else ''}; last error ({kind}): "
                        f"{_scrub(_describe_error(e), _secrets(self.url, self.password))}", kind) from None
                self._stats.retries += 1
                self.sleep(self._backoff(attempt))
                attempt += 1
            except psycopg.Error as e:
                self._count_error("query")
                self._discard()  # whatever it holds (a prepared statement, a session state) is suspect
                what = _describe_error(e)
                kind = "query"
                if isinstance(e, (psycopg.errors.UndefinedColumn, psycopg.errors.UndefinedTable)):
                    kind = "table"
                    what += (f" (the join reads columns {', '.join(self.columns)}: one was dropped or renamed "
                             "while the service ran, or the table was; restore it, or change JOIN_SQL / "
                             "RIGHT_LOOKUP_TABLE and restart)")
                raise DatabaseError(
                    f"lookup in {redact(self.url)} ({self.table.table}) failed: "
                    f"{_scrub(what, _secrets(self.url, self.password))}", kind) from None

    def _backoff(self, attempt: int) -> float:
        return min(self.retry_backoff_s * 2 ** attempt, MAX_BACKOFF_S) * self._random.uniform(0.8, 1.2)

    def _count_error(self, kind: str) -> None:
        self._stats.errors[kind] = self._stats.errors.get(kind, 0) + 1

    def _discard(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
