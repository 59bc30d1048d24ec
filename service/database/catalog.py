"""The lookup table's description from ``pg_catalog``: its columns, their Avro types, its keys.

Values of returned rows are what the service's Avro encoder takes for each column's Avro type
(``TableColumn.avro_type``), as fastavro decodes them in ``service/avro/``:

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
"""

from __future__ import annotations

from dataclasses import dataclass

from ..secrets import password_forms, redact_url
from .connection import _open
from .errors import DatabaseError, _describe_error, _scrub
from .names import _split_name


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


def describe_table(url: str, password: str | None, table: str, *, connect_timeout_s: float = 10) -> TableInfo:
    """Columns, types (with their Avro types), primary key and unique keys of a table or view, from
    ``pg_catalog``. ``table`` is resolved as PostgreSQL would (``to_regclass``, the search_path for
    an unqualified name; quoted identifiers keep their case). Raises DatabaseError when the database
    cannot be reached or has no such table or view."""
    import psycopg

    where = redact_url(url)
    secrets = password_forms(url, password)
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
