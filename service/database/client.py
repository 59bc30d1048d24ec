"""``LookupClient``: keys looked up in one table, batched, one snapshot per call, retried, cached.

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
"""

from __future__ import annotations

import json
import random
import threading
import time
from typing import Callable, Iterable

from ..secrets import password_forms, redact_url
from .cache import CacheSettings, LookupResult, LookupStats, _Cache
from .catalog import _TYPE_SQL, TableInfo, _map_type
from .connection import Unloadable, _open
from .errors import DatabaseError, _describe_error, _error_text, _scrub, _show
from .keys import _Invalid, _key_kind, _KeyKind, _row_converter, _value_check
from .names import _cast_sql, _table_sql

MAX_BACKOFF_S = 10.0


class _DataErrorSeen(Exception):
    """A chunk failed with a data error outside savepoints: redo the call with them."""


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
        return f"LookupClient({redact_url(self.url)}, {self.table.table}, key={self.key_columns})"

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
                f"lookup in {redact_url(self.url)} ({self.table.table}): column {was.name} changed type from "
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
                    raise DatabaseError(f"lookup in {redact_url(self.url)} ({self.table.table}) failed: "
                                        f"{_scrub(_describe_error(e), password_forms(self.url, self.password))}",
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
                        f"lookup in {redact_url(self.url)} ({self.table.table}): gave up after {attempt + 1} "
                        f"attempt{'s' if attempt else ''}; last error ({kind}): "
                        f"{_scrub(_describe_error(e), password_forms(self.url, self.password))}", kind) from None
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
                    f"lookup in {redact_url(self.url)} ({self.table.table}) failed: "
                    f"{_scrub(what, password_forms(self.url, self.password))}", kind) from None

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
