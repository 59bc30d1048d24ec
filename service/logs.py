"""Structured logs: one JSON object per line (``LOG_FORMAT=json``).

Every line has ``time`` (UTC, ISO 8601 with milliseconds), ``level``, ``logger`` and ``message``;
fields passed with ``extra={...}`` (e.g. ``batch_id`` and the counts of the per-batch line) are
added as they are, and an exception's traceback goes to ``exception``. Values JSON cannot encode
are written as their ``str``.
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import os

# The attributes every LogRecord has: anything else on a record came from ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", logging.INFO, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": _dt.datetime.fromtimestamp(record.created, _dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key not in line:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class RedactingFormatter(logging.Formatter):
    """Wraps a formatter; what it produces is scrubbed by ``config.redact_text``: URL user info, and
    every value in ``secrets`` (the service passes ``Settings.secret_values()``), raw or JSON-escaped.
    Applied to the whole formatted line, so messages, ``extra`` fields and tracebacks alike."""

    def __init__(self, inner: logging.Formatter, secrets=()):
        super().__init__()
        self.inner = inner
        self.secrets = tuple(secrets)

    def format(self, record: logging.LogRecord) -> str:
        from .config import redact_text

        return redact_text(self.inner.format(record), self.secrets)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def formatter(fmt: str = "text", secrets=()) -> logging.Formatter:
    """The service's line format (``LOG_FORMAT``: ``text`` or ``json``), redacted."""
    return RedactingFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT), secrets)


def configure_spark_python_process() -> None:
    """In a Python process Spark started (the streaming source's driver-side runner, a task's worker),
    where nothing configured logging: log warnings and errors as the service does, in the format its
    environment says (``LOG_FORMAT``, inherited through the JVM), instead of Python's bare
    last-resort lines. Does nothing where the root logger has handlers (the service's own process)."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(formatter("json" if os.environ.get("LOG_FORMAT", "").strip().lower() == "json" else "text"))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
