"""State writes that do not wait for the JVM's answer.

Every call on a ``transformWithState`` state variable is a request to the JVM's state server,
over one connection per task, and PySpark waits for each answer before it goes on. The server
handles a connection's requests one at a time, in the order they arrive. A call whose answer is
only a status (setting the grouping key, updating or clearing a value, putting or removing a map
entry, registering or deleting a timer) therefore need not be waited for: its request goes out at
once and its answer is read just before the next read from the connection, which the next call
that returns something (a value ``get``) makes anyway. A key with records then waits for the JVM
once (its ``get``) instead of three times (set key, ``get``, ``update``), and the JVM works on a
key's writes while Python goes on with the next key.

A write that the JVM refuses is raised at that next read, still within the same task, with the
JVM's message: the task fails as it did when the write itself raised. Every answer owed is read
before the task's last calls to the server (PySpark's end-of-partition handle-state calls), so
the task never ends with a write unanswered.

Only PySpark's own calls are made: the requests are built by PySpark; this module only defers the
reading of their answers (:meth:`StateCalls.unanswered`).
"""
from __future__ import annotations

from pyspark.errors import PySparkRuntimeError
from pyspark.serializers import read_int

_ATTRIBUTE = "_changejoin_state_calls"


class _Connection:
    """The client's socket file; reading from it first reads the answers still owed."""

    __slots__ = ("_file", "owed")

    def __init__(self, file):
        self._file = file
        self.owed: list[str] = []  # what each unanswered request did, oldest first

    def settle(self) -> None:
        from pyspark.sql.streaming.proto.StateMessage_pb2 import StateResponse

        owed, self.owed = self.owed, []
        for what in owed:
            response = StateResponse()
            response.ParseFromString(self._file.read(read_int(self._file)))
            if response.statusCode != 0:
                raise PySparkRuntimeError(f"Error {what}: {response.errorMessage}")

    def write(self, data):
        return self._file.write(data)

    def flush(self) -> None:
        self._file.flush()

    def read(self, *args):
        if self.owed:
            self.settle()
        return self._file.read(*args)

    def readinto(self, buffer):
        if self.owed:
            self.settle()
        return self._file.readinto(buffer)

    def read1(self, *args):
        if self.owed:
            self.settle()
        return self._file.read1(*args)

    def readline(self, *args):
        if self.owed:
            self.settle()
        return self._file.readline(*args)

    def __getattr__(self, name):
        return getattr(self._file, name)


class _Unanswered:
    """Context: the client's status-only calls made inside it do not wait for their answers."""

    __slots__ = ("_client", "_connection", "_what")

    def __init__(self, client, connection: _Connection):
        self._client, self._connection, self._what = client, connection, ""

    def __call__(self, what: str) -> "_Unanswered":
        self._what = what
        return self

    def _owe(self):
        self._connection.owed.append(self._what)
        return 0, "", b""

    def __enter__(self) -> None:
        self._client._receive_proto_message = self._owe

    def __exit__(self, *exc) -> None:
        self._client.__dict__.pop("_receive_proto_message", None)  # back to the class's own


class StateCalls:
    """The deferred writes of one task's state client (one per client: :meth:`of`)."""

    __slots__ = ("_client", "_connection", "unanswered")

    def __init__(self, client):
        self._client = client
        self._connection = _Connection(client.sockfile)
        client.sockfile = self._connection
        self.unanswered = _Unanswered(client, self._connection)
        # The client's own status-only calls, whoever makes them: PySpark's runner sets the key
        # before each key's rows and each expired timer, and deletes each timer it has fired.
        for name, what in (("set_implicit_key", "setting implicit key"), ("register_timer", "registering timer"),
                           ("delete_timer", "deleting timer")):
            setattr(client, name, self._deferred(getattr(client, name), what))

    def _deferred(self, call, what: str):
        unanswered = self.unanswered

        def deferred(*args) -> None:
            with unanswered(what):
                call(*args)

        return deferred

    @classmethod
    def of(cls, handle) -> "StateCalls":
        """The task's ``StateCalls``, made on first use; ``handle`` is the processor's handle."""
        client = handle._statefulProcessorApiClient
        calls = client.__dict__.get(_ATTRIBUTE)
        if calls is None:
            calls = cls(client)
            setattr(client, _ATTRIBUTE, calls)
        return calls

    @property
    def owed(self) -> int:
        """How many answers are still to be read."""
        return len(self._connection.owed)

    def settle(self) -> None:
        """Read every answer still owed now (raises the first refusal)."""
        self._connection.settle()
