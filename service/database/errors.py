"""What a database error says: one line, naming the database by its URL without the password.

``DatabaseError`` messages are one line, name the database by its URL without the password
(``redact``) and never contain the password.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

_SHOW_CHARS = 60  # a value in a reason is its repr, cut to this many characters


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
