"""The state protocol between a join operator and whatever stores its state.

An operator keeps everything it knows about one join key in one value, read at most once and
written at most once per call (a call processes all of a key's records of a micro-batch). In Spark
every state access crosses a process boundary, so this shape keeps the cost per key per batch at
one read and one write, whatever the number of records.

Timers are per key: a processing-time timer (``PROC``) or an event-time timer (``EVENT``). The
operator asks for them through its :class:`KeyState`; the engine calls the operator back with
``on_timer`` when one is due.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Iterator, Protocol

PROC = "proc"
EVENT = "event"


class KeyState(Protocol):
    """State of one join key, as seen by an operator."""

    def get(self) -> Any | None: ...

    def put(self, value: Any) -> None: ...

    def clear(self) -> None: ...

    def register_timer(self, domain: str, ts: int) -> None: ...

    def delete_timer(self, domain: str, ts: int) -> None: ...


@dataclass
class Context:
    """What an operator may know about time when it is called."""

    now: int = 0  # processing time, epoch milliseconds
    watermark: Any = None  # combined event-time watermark; None = nothing seen yet (minus infinity)


class Output:
    """Collects what an operator emits: changelog rows, and late probe rows it dropped."""

    __slots__ = ("rows", "late")

    def __init__(self):
        self.rows: list[tuple[int, tuple]] = []  # (RowKind value, output row)
        self.late: list[tuple[int, tuple]] = []  # (RowKind value, input row) of dropped late probe rows


@dataclass
class _Slot:
    value: Any = None
    timers: set = field(default_factory=set)


class InMemoryState:
    """State for all keys in a dict: the backend of unit tests, the conformance runner and benchmarks."""

    def __init__(self):
        self._slots: dict[Hashable, _Slot] = {}
        self.reads = 0
        self.writes = 0

    def for_key(self, key: Hashable) -> "_InMemoryKeyState":
        return _InMemoryKeyState(self, key)

    def keys(self) -> list[Hashable]:
        return [k for k, s in self._slots.items() if s.value is not None or s.timers]

    def due_timers(self, domain: str, upto: Any) -> Iterator[tuple[Any, Hashable]]:
        """Registered timers of ``domain`` with time <= ``upto``, in time order (key order on ties)."""
        order = {k: i for i, k in enumerate(self._slots)}
        due = [
            (ts, order[key], key)
            for key, slot in self._slots.items()
            for (d, ts) in slot.timers
            if d == domain and ts <= upto
        ]
        due.sort(key=lambda t: (t[0], t[1]))
        for ts, _, key in due:
            yield ts, key

    def has_timer(self, key: Hashable, domain: str, ts: Any) -> bool:
        slot = self._slots.get(key)
        return slot is not None and (domain, ts) in slot.timers

    def consume_timer(self, key: Hashable, domain: str, ts: Any) -> None:
        self._slots[key].timers.discard((domain, ts))


class _InMemoryKeyState:
    __slots__ = ("_backend", "_key")

    def __init__(self, backend: InMemoryState, key: Hashable):
        self._backend = backend
        self._key = key

    def _slot(self) -> _Slot:
        slot = self._backend._slots.get(self._key)
        if slot is None:
            slot = self._backend._slots[self._key] = _Slot()
        return slot

    def get(self):
        self._backend.reads += 1
        slot = self._backend._slots.get(self._key)
        return None if slot is None else slot.value

    def put(self, value):
        self._backend.writes += 1
        self._slot().value = value

    def clear(self):
        self._backend.writes += 1
        self._slot().value = None

    def register_timer(self, domain, ts):
        self._slot().timers.add((domain, ts))

    def delete_timer(self, domain, ts):
        self._slot().timers.discard((domain, ts))
