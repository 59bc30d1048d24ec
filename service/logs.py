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
import re

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
    """Wraps a formatter; what it produces is scrubbed by ``secrets.redact_text``: URL user info, and
    every value in ``secrets`` (the service passes ``Settings.secret_values()``), raw or JSON-escaped.
    Applied to the whole formatted line, so messages, ``extra`` fields and tracebacks alike."""

    def __init__(self, inner: logging.Formatter, secrets=()):
        super().__init__()
        self.inner = inner
        self.secrets = tuple(secrets)

    def format(self, record: logging.LogRecord) -> str:
        from .secrets import redact_text

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


# -- librdkafka's log lines ---------------------------------------------------------------------
#: The logger every Kafka client of the service logs through (``kafka_logger``).
KAFKA_LOGGER = "librdkafka"
#: A distinct librdkafka line is logged at most once per this many seconds.
REPEAT_WINDOW_S = 30.0

# librdkafka's own parts of a line that change from one repeat to the next: the thread, the time
# spent in a state, its count of identical errors it suppressed itself.
_THREAD = re.compile(r"^\[thrd:[^\]]*\]:\s*")
_AFTER = re.compile(r"\s*\(after \d+ms in state \w+(?:, \d+ identical error\(s\) suppressed)?\)")


class RepeatFilter(logging.Filter):
    """Lets a line through at most once per ``window_s`` seconds per distinct text, and counts the
    ones it holds back: the next line it lets through says how many there were. A broker that
    refuses connections makes every client log the same failure at each reconnection (about 20
    lines a second, from the clients of each process, for as long as it lasts).

    librdkafka's lines (``confluent_kafka`` logs ``"%s [%s] %s"`` with the facility, the client's
    name and the text) are rewritten as ``<facility>: <text>``, without the client's name, the
    thread and the timings that make each repeat differ. Debug lines (``KAFKA_CLIENT_DEBUG``) pass
    untouched: whoever asks for them wants every one."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S, clock=None):
        super().__init__()
        import threading
        import time

        self.window_s = window_s
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        self._seen: dict[tuple, list] = {}  # key -> [when last let through, held back since]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno <= logging.DEBUG:
            return True
        text = _librdkafka_text(record)
        key = (record.levelno, text)
        now = self._clock()
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None and now - entry[0] < self.window_s:
                entry[1] += 1
                return False
            held = entry[1] if entry is not None else 0
            self._seen[key] = [now, 0]
            if len(self._seen) > 1000:  # lines that name ever new things: forget the oldest
                for old in sorted(self._seen, key=lambda k: self._seen[k][0])[:500]:
                    del self._seen[old]
        if held:
            text += f" (and {held} more like it in the last {self.window_s:.0f} s)"
        record.msg, record.args = text, ()
        record.repeated = held
        return True


def _librdkafka_text(record: logging.LogRecord) -> str:
    """A librdkafka line without what differs between repeats (see :class:`RepeatFilter`)."""
    args = record.args
    if record.msg == "%s [%s] %s" and isinstance(args, tuple) and len(args) == 3:
        facility, _client, text = args
        text = _AFTER.sub("", _THREAD.sub("", str(text)))
        return f"{facility}: {text}"
    return record.getMessage()


def kafka_logger(client_props=None) -> logging.Logger:
    """The logger for a Kafka client's ``logger`` property: librdkafka's lines go through the
    service's logging (its format, its redaction), each distinct one at most once per
    :data:`REPEAT_WINDOW_S` (:class:`RepeatFilter`), warnings and errors only unless the client
    properties ask for librdkafka's debug contexts (``debug``). confluent-kafka hands a client's
    lines to the logger when the client is polled (a producer's flush, a consumer's poll, an admin
    client's ``poll``); a line a client never gets polled for is dropped with it.

    In a Python process Spark started, where nothing configured logging, it is configured as the
    service's (:func:`configure_spark_python_process`)."""
    configure_spark_python_process()
    logger = logging.getLogger(KAFKA_LOGGER)
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter())
        logger.setLevel(logging.WARNING)
    if client_props and str(dict(client_props).get("debug", "")).strip():
        logger.setLevel(logging.DEBUG)
    return logger
