"""State calls of one ``transformWithState`` task, sent to Spark's state server in batches.

PySpark's state API makes every call a synchronous round trip: it writes one request to the
task's state socket, flushes, and waits for the answer (``stateful_processor_api_client.py``).
On two busy cores a round trip costs ~1.2 ms of waiting for ~0.1 ms of work
(bench/results/RESULTS.md, 2026-11-27 02:00), so a micro-batch's join pays for the count of its
calls, not for their work. The state server (``TransformWithStateInPySparkStateServer``, one
thread per task) reads requests from a buffered stream one at a time and answers each in order,
each scoped to the grouping key set before it. So requests can be written together and their
answers read together: :meth:`StateWire.read` asks for any number of values in one round trip,
and writes (:meth:`StateWire.write`) are not waited for at all: their answers are read (and
checked) at the next read, or by PySpark's next call, which first reads the answers it is owed
(:meth:`StateWire.install` hooks PySpark's readers of this socket). PySpark's own setting of
each group's implicit key is sent the same way, so a bucket of keys costs one round trip, its
read, instead of three.

What this relies on, in the PySpark release ``pyproject.toml`` pins: the request and answer
framing (``_send_proto_message``: version 0, length, a ``StateRequest``; an answer: length, a
``StateResponse`` or one of its variants), the pickled ``(value,)`` rows of a single-column state
schema, every request beginning with the client's ``_send_proto_message``, and every reader of the
socket being one of its ``_receive*`` methods or ``_read_arrow_state``. ``tests/service/test_statewire.py`` runs it against a state server of
its own, and the integration tier against Spark's.

Deadlock: the server answers each request with a write of its own, flushed, and stops reading
requests while an answer cannot be written; a Unix socket holds only ~270 small writes unread
(each takes ~770 bytes of the ~208 KiB send buffer), whatever their size. So at most
:data:`MAX_OWED` answers are left unread, and at most :data:`MAX_SENT_BYTES` of requests are
sent before their answers are read: the requests always fit the socket, so the client always
gets to reading whatever the server answers (a large value included).
"""
from __future__ import annotations

import struct
from typing import Any, Callable

from .errors import ChangejoinError

#: A read request: ``("v", name)`` a value state's value, ``("m", name, key)`` a map entry.
Read = tuple
#: A write request: ``("v", name, data | None)`` a value state updated (None: cleared),
#: ``("m", name, key, data | None)`` a map entry put (None: removed), ``("t", ts, register)`` a timer.
Write = tuple

MAX_OWED = 192
"""Answers left unread at most: each is a socket write of its own on the server's side."""

MAX_SENT_BYTES = 64 * 1024
"""Request bytes sent before their answers are read: well inside a socket's buffer."""

_HEADER = struct.Struct("!ii")  # version 0, length
_INT = struct.Struct("!i")


class StateError(RuntimeError, ChangejoinError):
    """Spark's state server refused a call."""


class StateWire:
    """One task's state calls over PySpark's state socket (see the module docstring).

    ``api`` is the task's ``StatefulProcessorApiClient`` (``handle._statefulProcessorApiClient``)."""

    def __init__(self, api):
        from pyspark.sql.streaming.proto import StateMessage_pb2 as messages

        self._api = api
        self._file = api.sockfile
        self._dumps = api.pickleSer.dumps
        self._loads = api.pickleSer.loads
        self._m = messages
        self._owed: list[str] = []  # what each unread answer is for, oldest first
        self._owed_bytes = 0  # bytes of the requests whose answers are unread
        self._queued: list[tuple[bytes, str]] = []  # written requests not yet sent, and what each does
        self._installed = False

    # -- PySpark's own calls ---------------------------------------------------------------------
    def install(self) -> None:
        """Make PySpark's client of this socket read what it is owed first, and send its setting of
        the implicit key without waiting for the answer."""
        if self._installed:
            return
        api = self._api
        for name in [n for n in dir(api) if n.startswith("_receive") or n == "_read_arrow_state"]:
            setattr(api, name, self._after_owed(getattr(api, name)))
        api._send_proto_message = self._after_queued(api._send_proto_message)
        api.set_implicit_key = self._set_implicit_key
        self._installed = True

    def _after_owed(self, receive: Callable) -> Callable:
        """A reader of the socket that first reads the answers owed to this wire's calls."""
        def receive_after_owed(*args, **kwargs):
            self.settle()
            return receive(*args, **kwargs)

        return receive_after_owed

    def _after_queued(self, send: Callable) -> Callable:
        """PySpark's sender of a request, which first sends this wire's queued writes: requests
        reach the server in the order they were made."""
        def send_after_queued(*args, **kwargs):
            self._send()
            return send(*args, **kwargs)

        return send_after_queued

    def _set_implicit_key(self, key: tuple) -> None:
        m = self._m
        request = m.StateRequest(implicitGroupingKeyRequest=m.ImplicitGroupingKeyRequest(
            setImplicitKey=m.SetImplicitKey(key=self._api._serialize_to_bytes(self._api.key_schema, key))))
        self._queue(request, "set the implicit key")
        self._send()

    # -- requests -------------------------------------------------------------------------------
    def _queue(self, request, what: str) -> None:
        data = request.SerializeToString()
        self._queued.append((_HEADER.pack(0, len(data)) + data, what))

    def _send(self) -> None:
        """Send the queued requests (writes), reading owed answers first where the limits need."""
        queued, self._queued = self._queued, []
        while queued:
            room, size, i = MAX_OWED - len(self._owed), self._owed_bytes, 0
            while i < len(queued) and i < room and (size + len(queued[i][0]) <= MAX_SENT_BYTES or i == 0 == size):
                size += len(queued[i][0])
                i += 1
            if i == 0:
                self.settle()
                continue
            self._write(queued[:i])
            queued = queued[i:]

    def _write(self, requests: list[tuple[bytes, str]]) -> None:
        self._file.write(b"".join(data for data, _ in requests))
        self._file.flush()
        self._owed += [what for _, what in requests]
        self._owed_bytes += sum(len(data) for data, _ in requests)

    def _answer(self, what: str) -> Any:
        """The next answer's ``StateResponse``, checked."""
        (length,) = _INT.unpack(self._file.read(4))
        response = self._m.StateResponse()
        response.ParseFromString(self._file.read(length))
        if response.statusCode != 0:
            raise StateError(f"Spark's state server refused to {what}: {response.errorMessage}")
        return response

    def settle(self) -> None:
        """Read the answers owed; raise :class:`StateError` for a refused call."""
        owed, self._owed, self._owed_bytes = self._owed, [], 0
        for what in owed:
            self._answer(what)

    def _request(self, request: tuple):
        """The ``StateRequest`` of a read or write tuple, and what it does (for errors)."""
        m = self._m
        kind = request[0]
        if kind == "m":
            name, key = request[1], self._dumps((request[2],))
            if len(request) == 3:
                call, what = m.MapStateCall(stateName=name, getValue=m.GetValue(userKey=key)), f"read {name}"
            elif request[3] is None:
                call, what = m.MapStateCall(stateName=name, removeKey=m.RemoveKey(userKey=key)), f"remove from {name}"
            else:
                call = m.MapStateCall(stateName=name, updateValue=m.UpdateValue(userKey=key,
                                                                                 value=self._dumps((request[3],))))
                what = f"write {name}"
            return m.StateRequest(stateVariableRequest=m.StateVariableRequest(mapStateCall=call)), what
        if kind == "v":
            name = request[1]
            if len(request) == 2:
                call, what = m.ValueStateCall(stateName=name, get=m.Get()), f"read {name}"
            elif request[2] is None:
                call, what = m.ValueStateCall(stateName=name, clear=m.Clear()), f"clear {name}"
            else:
                call = m.ValueStateCall(stateName=name, valueStateUpdate=m.ValueStateUpdate(
                    value=self._dumps((request[2],))))
                what = f"write {name}"
            return m.StateRequest(stateVariableRequest=m.StateVariableRequest(valueStateCall=call)), what
        if kind == "t":
            ts, register = int(request[1]), request[2]
            if register:
                command = m.TimerStateCallCommand(register=m.RegisterTimer(expiryTimestampMs=ts))
            else:
                command = m.TimerStateCallCommand(delete=m.DeleteTimer(expiryTimestampMs=ts))
            what = f"{'register' if register else 'delete'} the timer {ts}"
            return m.StateRequest(statefulProcessorCall=m.StatefulProcessorCall(timerStateCall=command)), what
        raise ValueError(f"not a state request: {request!r}")

    def write(self, request: Write) -> None:
        """Queue a write; it goes with the next read or :meth:`flush`, its answer is read later."""
        self._queue(*self._request(request))

    def flush(self) -> None:
        """Send the queued writes without waiting for their answers."""
        self._send()

    def read(self, requests: list[Read]) -> list:
        """The values of ``requests`` (bytes, or None where there is none), after the queued
        writes: one round trip for up to :data:`MAX_OWED` requests."""
        self._send()
        values: list = []
        window: list[tuple[bytes, str]] = []
        size = 0
        for request in requests:
            message, what = self._request(request)
            data = message.SerializeToString()
            window.append((_HEADER.pack(0, len(data)) + data, what))
            size += len(window[-1][0])
            if len(window) >= MAX_OWED or size >= MAX_SENT_BYTES:
                values += self._read_window(window)
                window, size = [], 0
        if window:
            values += self._read_window(window)
        return values

    def _read_window(self, window: list[tuple[bytes, str]]) -> list:
        size = sum(len(data) for data, _ in window)
        if len(self._owed) + len(window) > MAX_OWED or self._owed_bytes + size > MAX_SENT_BYTES:
            self.settle()
        self._write(window)
        owed, self._owed, self._owed_bytes = self._owed, [], 0
        for what in owed[:-len(window)]:  # the answers of earlier writes come first
            self._answer(what)
        loads = self._loads
        values = []
        for what in owed[-len(window):]:
            value = self._answer(what).value
            values.append(loads(value)[0] if value else None)
        return values
