"""State writes that do not wait for the JVM (service/state_calls.py), against a state server that
speaks PySpark's protocol on a Unix socket: PySpark's own client and handle, the service's
``SparkKeyState``."""
from __future__ import annotations

import os
import queue
import socket
import struct
import tempfile
import threading

import pytest
from pyspark.errors import PySparkRuntimeError
from pyspark.sql.streaming.proto import StateMessage_pb2 as pb
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor_api_client import StatefulProcessorApiClient
from pyspark.sql.types import StringType, StructField, StructType

from service.processor import _STATE_SCHEMA, SparkKeyState
from service.state_calls import StateCalls

KEY_SCHEMA = StructType([StructField("jk", StringType())])
WAIT = 10


def describe(request) -> str:
    """A request in a word: ``set_key``, ``value.get``, ``value.valueStateUpdate``, ``map.updateValue``..."""
    method = request.WhichOneof("method")
    if method == "implicitGroupingKeyRequest":
        return "set_key" if request.implicitGroupingKeyRequest.HasField("setImplicitKey") else "remove_key"
    if method == "statefulProcessorCall":
        call = request.statefulProcessorCall
        which = call.WhichOneof("method")
        if which == "timerStateCall":
            return "timer." + call.timerStateCall.WhichOneof("method")
        return which
    if method == "stateVariableRequest":
        variable = request.stateVariableRequest
        which = variable.WhichOneof("method")
        return f"{which.replace('StateCall', '')}.{getattr(variable, which).WhichOneof('method')}"
    return method


class FakeStateServer(threading.Thread):
    """Answers each request in arrival order, as Spark's state server does; ``gate`` holds the
    answers back (requests are still read and recorded, as the socket would buffer them); ``refuse`` names requests answered with
    an error status; every other request is answered with status 0 and no value (a value ``get``:
"no value")."""

    def __init__(self, path: str):
        super().__init__(daemon=True)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(path)
        self.server.listen(1)
        self.requests: list[str] = []
        self.arrived = threading.Condition()
        self.gate = threading.Event()
        self.gate.set()
        self.refuse: set[str] = set()

    def run(self) -> None:
        conn, _ = self.server.accept()
        answers: queue.Queue = queue.Queue()
        with conn, conn.makefile("rb") as reader, conn.makefile("wb") as writer:
            answering = threading.Thread(target=self._answer, args=(answers, writer), daemon=True)
            answering.start()
            while True:
                head = reader.read(8)
                if len(head) < 8:
                    answers.put(None)
                    break
                _version, length = struct.unpack(">ii", head)
                request = pb.StateRequest()
                request.ParseFromString(reader.read(length))
                with self.arrived:
                    self.requests.append(describe(request))
                    self.arrived.notify_all()
                answers.put(self.requests[-1])
            answering.join(WAIT)

    def _answer(self, answers: queue.Queue, writer) -> None:
        while (name := answers.get()) is not None:
            self.gate.wait()
            if name in self.refuse:
                response = pb.StateResponse(statusCode=1, errorMessage=f"{name} refused")
            else:
                response = pb.StateResponse(statusCode=0)
            data = response.SerializeToString()
            writer.write(struct.pack(">i", len(data)) + data)
            writer.flush()

    def wait_for(self, count: int) -> list[str]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.requests) >= count, timeout=WAIT), self.requests
            return list(self.requests)


@pytest.fixture
def server_and_client():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "state.sock")
        server = FakeStateServer(path)
        server.start()
        client = StatefulProcessorApiClient(path, KEY_SCHEMA)
        handle = StatefulProcessorHandle(client)
        state = SparkKeyState(handle.getValueState("join", _STATE_SCHEMA), handle, None)
        yield server, client, state
        client._client_socket.close()


def in_thread(call) -> threading.Thread:
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(WAIT)
    return thread


def test_a_keys_set_and_write_go_out_without_waiting_and_its_read_waits(server_and_client):
    server, client, state = server_and_client
    server.wait_for(1)  # the value state's declaration, answered
    server.gate.clear()  # from here the server reads requests but answers none
    writes = in_thread(lambda: (client.set_implicit_key(("a",)), state.put({"rows": [1]}),
                                client.set_implicit_key(("b",))))
    assert not writes.is_alive(), "a status-only call waited for its answer"
    assert server.wait_for(4)[1:] == ["set_key", "value.valueStateUpdate", "set_key"]
    assert StateCalls.of(StatefulProcessorHandle(client)).owed == 3

    got = []
    read = threading.Thread(target=lambda: got.append(state.get()), daemon=True)
    read.start()
    assert server.wait_for(5)[4] == "value.get"
    read.join(0.3)
    assert read.is_alive(), "a get returned before the server answered"
    server.gate.set()
    read.join(WAIT)
    assert got == [None]
    assert StateCalls.of(StatefulProcessorHandle(client)).owed == 0


def test_a_refused_write_is_raised_at_the_next_read_with_the_servers_message(server_and_client):
    server, client, state = server_and_client
    server.refuse.add("value.valueStateUpdate")
    client.set_implicit_key(("a",))
    state.put({"rows": [1]})  # returns: its answer is read later
    with pytest.raises(PySparkRuntimeError, match="Error updating value state: value.valueStateUpdate refused"):
        state.get()


def test_pysparks_own_calls_read_the_owed_answers_first(server_and_client):
    server, client, state = server_and_client
    client.set_implicit_key(("a",))
    state.clear()
    client.register_timer(5)
    client.delete_timer(5)
    assert StateCalls.of(StatefulProcessorHandle(client)).owed == 4
    client.remove_implicit_key()  # PySpark's own call, waits: reads the four answers, then its own
    assert StateCalls.of(StatefulProcessorHandle(client)).owed == 0
    assert server.wait_for(6)[1:] == ["set_key", "value.clear", "timer.register", "timer.delete", "remove_key"]
