"""What a database error says: one line, naming the database by its URL without the password.

``DatabaseError`` messages are one line, name the database by its URL without the password
(``secrets.redact_url``) and never contain the password (``secrets.password_forms``).
"""

from __future__ import annotations

from ..errors import ChangejoinError

_SHOW_CHARS = 60  # a value in a reason is its repr, cut to this many characters


class DatabaseError(ChangejoinError):
    """The database could not be reached or refused a request: one line, naming the database by its
    redacted URL, never containing the password. ``kind``: ``connection``, ``timeout``,
    ``conflict``, ``query``, ``table`` (no such table, or a column the join reads is gone or
    changed type)."""

    def __init__(self, message: str, kind: str = "query"):
        message = " ".join(str(message).split())
        super().__init__(message)
        self.kind = kind


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
