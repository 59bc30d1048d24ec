"""A connection to the lookup database, as the catalog and the client open it: autocommit
(transactions are explicit), ``REPEATABLE READ READ ONLY``, ``TimeZone=UTC``, keepalives, and
loaders that turn a date or time Python cannot hold into an ``Unloadable`` instead of failing the
statement (``client``'s docstring says how connections are kept and replaced)."""

from __future__ import annotations

import math

from ..secrets import password_forms, redact_url
from .errors import DatabaseError, _describe_error, _error_text, _scrub

APPLICATION_NAME = "changejoin-lookup"


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
            f"invalid database URL {redact_url(url)}: {_scrub(_describe_error(e), password_forms(url, password))}",
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
