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

Deadlock: the server answers while it reads, so answers never wait for requests; requests can
wait for answers only when both directions' socket buffers are full. Reads are therefore sent in
windows of at most :data:`READ_WINDOW_BYTES` of requests, whose answers are read before the next
window goes; a write's answer is a few bytes, and at most :data:`OWED_MAX` of them are left
unread.
"""
from __future__ import annotations

import struct
from typing import Any, Callable

#: A read request: ``("v", name)`` a value state's value, ``("m", name, key)`` a map entry.
Read = tuple
#: A write request: ``("v", name, data | None)`` a value state updated (None: cleared),
#: ``("m", name, key, data | None)`` a map entry put (None: removed), ``("t", ts, register)`` a timer.
Write = tuple

READ_WINDOW_BYTES = 48 * 1024
"""Request bytes sent before their answers are read: well inside a socket's buffer."""

OWED_MAX = 4096
"""Answers to writes (a few bytes each) left unread before they are read."""

_HEADER = struct.Struct("!ii")  # version 0, length
_INT = struct.Struct("!i")


class StateError(RuntimeError):
    """Spark's state server refused a call."""


class StateWire:
    """One task's state calls over PySpark's state socket (see the module docstring).

    ``api`` is the task's ``StatefulProcessorApiClient`` (``handle.stateful_processor_api_client``)."""

    def __init__(self, api):
        from pyspark.sql.streaming.proto import StateMessage_pb2 as messages

        self._api = api
        self._file = api.sockfile
        self._dumps = api.pickleSer.dumps
        self._loads = api.pickleSer.loads
        self._m = messages
        self._owed: list[str] = []  # what each unread answer is for, oldest first
        self._queued: list[bytes] = []  # written requests not yet sent
        self._queued_names: list[str] = []
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
        self._queued.append(_HEADER.pack(0, len(data)) + data)
        self._queued_names.append(what)

    def _send(self) -> None:
        if not self._queued:
            return
        self._file.write(b"".join(self._queued))
        self._file.flush()
        self._owed += self._queued_names
        self._queued, self._queued_names = [], []
        if len(self._owed) > OWED_MAX:
            self.settle()

    def _answer(self) -> Any:
        """The next answer's ``StateResponse``."""
        (length,) = _INT.unpack(self._file.read(4))
        response = self._m.StateResponse()
        response.ParseFromString(self._file.read(length))
        return response

    def settle(self) -> None:
        """Read the answers of everything sent; raise :class:`StateError` for a refused call."""
        if self._queued:
            self._send()
        owed, self._owed = self._owed, []
        for what in owed:
            response = self._answer()
            if response.statusCode != 0:
                raise StateError(f"Spark's state server refused to {what}: {response.errorMessage}")

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
        """The values of ``requests`` (bytes, or None where there is none), queued writes first:
        one round trip per :data:`READ_WINDOW_BYTES` of requests."""
        results: list = []
        window: list[str] = []
        size = 0
        for request in requests:
            message, what = self._request(request)
            self._queue(message, what)
            window.append(what)
            size += len(self._queued[-1])
            if size >= READ_WINDOW_BYTES:
                results += self._read_window(len(window))
                window, size = [], 0
        if window:
            results += self._read_window(len(window))
        return results

    def _read_window(self, count: int) -> list:
        self._send()
        owed, self._owed = self._owed[:-count], self._owed[-count:]
        for what in owed:  # answers of earlier writes come first
            response = self._answer()
            if response.statusCode != 0:
                raise StateError(f"Spark's state server refused to {what}: {response.errorMessage}")
        values = []
        for what in self._owed:
            response = self._answer()
            if response.statusCode != 0:
                raise StateError(f"Spark's state server refused to {what}: {response.errorMessage}")
            values.append(self._loads(response.value)[0] if response.value else None)
        self._owed = []
        return values
