"""Table and type names as PostgreSQL reads them, and as SQL identifiers (never spliced in as text)."""

from __future__ import annotations

import re
import string

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
