"""The operator contract: what a host (the Spark processor, the conformance runner, tests,
benchmarks) and a keyed operator promise each other.

Every operator in this package is a :class:`KeyedOperator`. The host groups records by the
operator's key (the join key; the message key for the normalize stage, the upsert key for the
materializer) and calls

- ``process(state, records, ctx, out)`` with all of one key's records of a micro-batch, in order
  (:class:`Record`: side, RowKind value, row tuple), and
- ``on_timer(state, domain, ts, ctx, out)`` when a timer the operator registered for that key is
  due (``domain`` is :data:`PROC` or :data:`EVENT`).

The operator reads the key's state (:class:`KeyState`) at most once and writes it at most once
per call: in Spark every state access crosses a process boundary, so the cost per key per batch is
one read and one write, whatever the number of records. A key that holds many rows may keep some
of them in maps of its own (``KeyState.map``, entries read and written one at a time), so that
what a call costs follows what it touches rather than the key's size (``splitside.py``). It appends what it emits to
:class:`Output`: :class:`Change` rows of the output changelog, and probe rows it dropped as late.
The host never looks inside the state, never slices records into bundles (mini-batch folding is
an operator of its own, see ``minibatch.py``) and never calls anything but these two methods.

The value an operator stores per key is plain builtins, and it *is* the checkpoint format: see
``stateformat.py``.

Timers are per key: a processing-time timer (``PROC``) or an event-time timer (``EVENT``). The
operator asks for them through its :class:`KeyState`.
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Iterator, NamedTuple, Protocol

PROC = "proc"
EVENT = "event"


RowMap = Callable[[tuple], tuple]


class Record(NamedTuple):
    """One input record of a keyed operator."""

    side: int  # 0 = left, 1 = right
    kind: int  # RowKind value
    row: tuple  # the input row, columns in schema order


class Change(NamedTuple):
    """One record of an operator's output changelog."""

    kind: int  # RowKind value
    row: tuple  # the output row


class KeyMap(Protocol):
    """A map of one key's state: entries under hashable builtins keys, values plain builtins.

    Keys are compared by value (two equal keys of one column type are the same entry)."""

    def get(self, key: Hashable) -> Any | None: ...

    def put(self, key: Hashable, value: Any) -> None: ...

    def remove(self, key: Hashable) -> None: ...

    def items(self) -> Iterable[tuple[Hashable, Any]]: ...

    def clear(self) -> None: ...


class KeyState(Protocol):
    """State of one join key, as seen by an operator."""

    def get(self) -> Any | None: ...

    def put(self, value: Any) -> None: ...

    def clear(self) -> None:
        """Clear the value (the key's maps are cleared by the operator, see :meth:`map`)."""
        ...

    def map(self, name: str) -> KeyMap | None:
        """The key's map ``name`` (a name the operator declares in ``MAPS``), or None where the
        host keeps no maps: the operator then keeps everything in its one value."""
        ...

    def register_timer(self, domain: str, ts: int) -> None: ...

    def delete_timer(self, domain: str, ts: int) -> None: ...


@dataclass
class Context:
    """What an operator may know about time when it is called."""

    now: int = 0  # processing time, epoch milliseconds
    watermark: Any = None  # combined event-time watermark; None = nothing seen yet (minus infinity)


class Output:
    """Collects what an operator emits: changelog rows, and late probe rows it dropped.

    Both lists hold ``(RowKind value, row)`` pairs, shaped as :class:`Change`; operators append
    plain tuples on their hot paths."""

    __slots__ = ("rows", "late")

    def __init__(self):
        self.rows: list[Change] = []  # the output changelog
        self.late: list[Change] = []  # input rows dropped as late (probe rows behind the watermark)


class KeyedOperator(Protocol):
    """A join state machine for one key at a time (see the module docstring)."""

    def process(self, state: KeyState, records: Iterable[Record], ctx: Context, out: Output) -> None: ...

    def on_timer(self, state: KeyState, domain: str, ts: int, ctx: Context, out: Output) -> None: ...

    def map_rows(self, value: Any, left: RowMap, right: RowMap) -> Any:
        """A stored value (``stateformat.py``) with every left input row passed through ``left``
        and every right one through ``right``: how stored rows follow an evolved input schema."""
        ...


@dataclass
class _Slot:
    value: Any = None
    timers: set = field(default_factory=set)
    maps: dict = field(default_factory=dict)


class InMemoryMap(dict):
    """A :class:`KeyMap` in a dict."""

    def put(self, key, value):
        self[key] = value

    def remove(self, key):
        self.pop(key, None)


class PickledMap(InMemoryMap):
    """A :class:`KeyMap` that keeps its values pickled, as a real store does: an operator that
    changes an entry in place and forgets to ``put`` it loses the change, as it would in Spark."""

    def get(self, key, default=None):
        data = super().get(key)
        return default if data is None else pickle.loads(data)

    def put(self, key, value):
        self[key] = pickle.dumps(value)

    def items(self):
        return [(k, pickle.loads(v)) for k, v in super().items()]


class InMemoryState:
    """State for all keys in a dict: the backend of unit tests, the conformance runner and benchmarks.

    With ``pickled``, values and map entries are kept pickled, as Spark keeps them: what an
    operator reads is a copy, and only what it writes back is kept."""

    def __init__(self, pickled: bool = False):
        self.pickled = pickled
        self._slots: dict[Hashable, _Slot] = {}
        self.reads = 0
        self.writes = 0

    def for_key(self, key: Hashable) -> "_InMemoryKeyState":
        return _InMemoryKeyState(self, key)

    def keys(self) -> list[Hashable]:
        return [k for k, s in self._slots.items() if s.value is not None or s.timers or any(s.maps.values())]

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
        if slot is None or slot.value is None:
            return None
        return pickle.loads(slot.value) if self._backend.pickled else slot.value

    def put(self, value):
        self._backend.writes += 1
        self._slot().value = pickle.dumps(value) if self._backend.pickled else value

    def clear(self):
        self._backend.writes += 1
        self._slot().value = None

    def map(self, name):
        slot = self._slot()
        found = slot.maps.get(name)
        if found is None:
            found = slot.maps[name] = PickledMap() if self._backend.pickled else InMemoryMap()
        return found

    def register_timer(self, domain, ts):
        self._slot().timers.add((domain, ts))

    def delete_timer(self, domain, ts):
        self._slot().timers.discard((domain, ts))
