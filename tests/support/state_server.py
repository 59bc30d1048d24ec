"""Spark's transformWithState state server, faked in Python on a Unix socket, for tests that
drive PySpark's own state client (``StatefulProcessorApiClient``) and the service's batched calls
on it (``service/statewire.py``) without a JVM.

Like ``TransformWithStateInPySparkStateServer`` it reads one framed ``StateRequest`` at a time from
a buffered stream, runs it against the state of the implicit grouping key set before it, and
answers each in order; values and keys travel as pickled rows. It keeps what a test asks about:
the state of every grouping key, the timers, and how many requests it answered. :class:`Turns`
counts a client's round trips: the times it waits for an answer after sending.
"""
from __future__ import annotations

import os
import pickle
import socket
import struct
import tempfile
import threading

from pyspark.sql.streaming.proto import StateMessage_pb2 as m
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

_HEADER = struct.Struct("!i")


class StateServer:
    """Serves one client connection on a thread of its own (one task, as Spark does)."""

    def __init__(self, now: int = 5_000, watermark: int = -1):
        self.values: dict[tuple, bytes] = {}  # (state name, grouping key) -> pickled row
        self.maps: dict[tuple, dict] = {}  # (state name, grouping key) -> {pickled key row: pickled value row}
        self.timers: set[tuple[int, bytes]] = set()  # (ts, grouping key)
        self.now, self.watermark = now, watermark
        self.requests = 0
        self.key: bytes | None = None
        self._dir = tempfile.mkdtemp(prefix="state-server-")
        self.path = os.path.join(self._dir, "socket")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(1)
        self._conn: socket.socket | None = None
        self._thread = threading.Thread(target=self._serve, name="fake-state-server", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._listener.close()
        if self._conn is not None:
            self._conn.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=5)

    # -- the loop -------------------------------------------------------------------------------
    def _serve(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        self._conn = conn
        reader, writer = conn.makefile("rb", 8192), conn.makefile("wb", 65536)
        with conn:
            while True:
                head = reader.read(4)
                if len(head) < 4:
                    return
                (version,) = _HEADER.unpack(head)
                if version == -1:
                    continue
                (length,) = _HEADER.unpack(reader.read(4))
                request = m.StateRequest()
                request.ParseFromString(reader.read(length))
                self.requests += 1
                data = self._handle(request).SerializeToString()
                writer.write(_HEADER.pack(len(data)) + data)
                writer.flush()

    # -- requests -------------------------------------------------------------------------------
    def _handle(self, request: m.StateRequest):
        method = request.WhichOneof("method")
        if method == "implicitGroupingKeyRequest":
            call = request.implicitGroupingKeyRequest
            if call.WhichOneof("method") == "setImplicitKey":
                self.key = pickle.loads(call.setImplicitKey.key)[0]
            else:
                self.key = None
            return m.StateResponse(statusCode=0)
        if method == "statefulProcessorCall":
            call = request.statefulProcessorCall
            if call.WhichOneof("method") == "timerStateCall":
                timer = call.timerStateCall
                if timer.WhichOneof("method") == "register":
                    self.timers.add((timer.register.expiryTimestampMs, self.key))
                elif timer.WhichOneof("method") == "delete":
                    self.timers.discard((timer.delete.expiryTimestampMs, self.key))
            return m.StateResponse(statusCode=0)  # variables, handle states: nothing to keep
        if method == "timerRequest":
            which = request.timerRequest.timerValueRequest.WhichOneof("method")
            return m.StateResponseWithLongTypeVal(statusCode=0,
                                                  value=self.now if which == "getProcessingTimer" else self.watermark)
        if method == "stateVariableRequest":
            variable = request.stateVariableRequest
            if variable.WhichOneof("method") == "valueStateCall":
                return self._value(variable.valueStateCall)
            if variable.WhichOneof("method") == "mapStateCall":
                return self._map(variable.mapStateCall)
        return m.StateResponse(statusCode=1, errorMessage=f"not faked: {method}")

    def _value(self, call):
        if self.key is None:
            return m.StateResponse(statusCode=1, errorMessage="no implicit key")
        where = (call.stateName, self.key)
        what = call.WhichOneof("method")
        if what == "get":
            return m.StateResponse(statusCode=0, value=self.values.get(where, b""))
        if what == "valueStateUpdate":
            self.values[where] = call.valueStateUpdate.value
        elif what == "clear":
            self.values.pop(where, None)
        elif what == "exists":
            return m.StateResponse(statusCode=0 if where in self.values else 2)
        return m.StateResponse(statusCode=0)

    def _map(self, call):
        if self.key is None:
            return m.StateResponse(statusCode=1, errorMessage="no implicit key")
        where = (call.stateName, self.key)
        entries = self.maps.get(where, {})
        what = call.WhichOneof("method")
        if what == "getValue":
            return m.StateResponse(statusCode=0, value=entries.get(_key(call.getValue.userKey), b""))
        if what == "updateValue":
            self.maps.setdefault(where, {})[_key(call.updateValue.userKey)] = call.updateValue.value
        elif what == "removeKey":
            entries.pop(_key(call.removeKey.userKey), None)
            if not entries:
                self.maps.pop(where, None)
        elif what == "clear":
            self.maps.pop(where, None)
        elif what == "iterator":  # the whole map in one answer, keys in order as RocksDB iterates
            pairs = [m.KeyAndValuePair(key=pickle.dumps((k,)), value=v) for k, v in sorted(entries.items())]
            return m.StateResponseWithMapIterator(statusCode=0 if pairs else 2, kvPair=pairs, requireNextFetch=False)
        else:
            return m.StateResponse(statusCode=1, errorMessage=f"not faked: map {what}")
        return m.StateResponse(statusCode=0)

    # -- what tests read ------------------------------------------------------------------------
    def value(self, name: str, key: bytes):
        data = self.values.get((name, key))
        return None if data is None else pickle.loads(data)[0]

    def rows(self) -> int:
        return len(self.values) + sum(len(entries) for entries in self.maps.values())


def _key(data: bytes) -> bytes:
    """A map entry's key as the server keys it: the user key's single binary column."""
    return pickle.loads(data)[0]


class Turns:
    """A state client's socket file that counts round trips: reads that follow a write."""

    def __init__(self, file):
        self._file, self.count, self._sent = file, 0, False

    def write(self, data):
        self._sent = True
        return self._file.write(data)

    def read(self, *args):
        if self._sent:
            self.count += 1
            self._sent = False
        return self._file.read(*args)

    def __getattr__(self, name):
        return getattr(self._file, name)


def client(server: StateServer, key_schema=None):
    """PySpark's state client of one task, connected to ``server``, its socket file counting
    round trips (``client.sockfile.count``)."""
    from pyspark.sql.streaming.stateful_processor_api_client import StatefulProcessorApiClient
    from pyspark.sql.types import BinaryType, StructField, StructType

    schema = key_schema or StructType([StructField("jk", BinaryType(), True)])
    api = StatefulProcessorApiClient(server.path, schema)
    api.sockfile = Turns(api.sockfile)
    return api


class WireHandle(StatefulProcessorHandle):
    """A task of a ``transformWithState`` over the fake server, driven as PySpark's worker drives
    it: PySpark's own handle and state client, so the service's processors make their state calls
    the way they make them in Spark (``statewire.py`` included). Reads like
    ``spark_fakes.KeyedHandle`` for the tests that compare the layouts."""

    def __init__(self):
        self.server = StateServer()
        self.api = client(self.server)
        super().__init__(self.api)

    @property
    def calls(self) -> int:
        return self.server.requests

    @property
    def trips(self) -> int:
        return self.api.sockfile.count

    @property
    def timers(self) -> set:
        return self.server.timers

    @property
    def maps(self) -> dict:
        return self.server.maps

    def rows(self) -> int:
        return self.server.rows()

    def run(self, processor, rows, group, now: int = 5_000, watermark: int = -1, until: int | None = None) -> list:
        from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

        self.server.now, self.server.watermark = now, watermark
        groups: dict = {}
        for row in rows:
            groups.setdefault(group(row), []).append(row)
        out = []
        for key in sorted(groups):
            self.api.set_implicit_key((key,))
            out += list(processor.handleInputRows((key,), iter(groups[key]), TimerValues(now, watermark)))
        if until is not None:
            # PySpark lists the expired timers with a request of its own, answered after every
            # request sent before it: a call on the socket stands for that here.
            self.api.remove_implicit_key()
            for ts, key in sorted(t for t in self.server.timers if t[0] <= until):
                self.api.set_implicit_key((key,))
                out += list(processor.handleExpiredTimer(key=(key,), timerValues=TimerValues(now, watermark),
                                                         expiredTimerInfo=ExpiredTimerInfo(ts)))
                self.api.delete_timer(ts)
        self.api.remove_implicit_key()  # as PySpark ends a task: every answer owed is read first
        return out
