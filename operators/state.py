"""The operator contract: what a host (the Spark processor in ``service/``; in memory, the
``LocalRunner`` of ``testing.py``) and a keyed operator promise each other.

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

from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, NamedTuple, Protocol

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
    """Collects what an operator emits: changelog rows, late probe rows it dropped, and
    retractions it could not match.

    The lists hold ``(RowKind value, row)`` pairs, shaped as :class:`Change`; operators append
    plain tuples on their hot paths."""

    __slots__ = ("rows", "late", "unmatched", "failed")

    def __init__(self):
        self.rows: list[Change] = []  # the output changelog
        self.late: list[Change] = []  # input rows dropped as late (probe rows behind the watermark)
        # retractions of input rows the operator holds no record of (a lookup join's state expired
        # or never saw the row): dropped, and reported
        self.unmatched: list[Change] = []
        # output changes whose computed output failed (operators/calc.py): (kind, joined row, why)
        self.failed: list = []


class KeyedOperator(Protocol):
    """A join state machine for one key at a time (see the module docstring).

    ``cleanup_grain`` (optional; None when absent): the operator's timers only clean state
    (state TTL): whatever a timer drops is invisible from its time on, whether dropped or not,
    so a timer that fires up to this many milliseconds late, or one the operator has deleted
    since (it finds nothing to clean), changes no output. A host may then keep timers coarsely."""

    cleanup_grain: int | None

    def process(self, state: KeyState, records: Iterable[Record], ctx: Context, out: Output) -> None: ...

    def on_timer(self, state: KeyState, domain: str, ts: int, ctx: Context, out: Output) -> None: ...

    def map_rows(self, value: Any, left: RowMap, right: RowMap) -> Any:
        """A stored value (``stateformat.py``) with every left input row passed through ``left``
        and every right one through ``right``: how stored rows follow an evolved input schema."""
        ...
