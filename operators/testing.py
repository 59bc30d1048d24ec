"""The operators' in-memory host: what the Spark processor does for them, in a dict.

:class:`LocalRunner` drives one :class:`~operators.state.KeyedOperator` as the service drives it
(``state.py`` states the contract): it routes records to the operator's key, keeps a clock and
the watermarks, fires due timers in order, and collects the output changelog and the rows dropped
as late. The conformance runner, the operator tests and the operator benchmarks all replay their
inputs through it::

    runner = LocalRunner(make_join(spec))
    runner.process([(0, RowKind.INSERT, (1, "ink")), (1, RowKind.INSERT, ("ink", 3.5))])
    runner.advance_watermark(0, 100)   # per input; the combined one is the smaller
    runner.advance_clock(2_000)        # processing time
    rows, late = runner.drain()

On every call it checks the state protocol, and fails with a :class:`StateProtocolError` (an
``AssertionError``) that names the operator, the call and the key: the key's value is read at
most once and written (``put`` or ``clear``) at most once; in a map, an entry is read at most
once and not after the whole map was read, the whole map is read at most once, an entry is
written (``put`` or ``remove``) at most once; what is stored is plain builtins (and the values rows hold: Decimal, dates, times); timers are
``PROC`` or ``EVENT``. ``check=False`` leaves the checks out (benchmarks).

The state lives in an :class:`InMemoryState`; ``pickled=True`` keeps values and map entries
pickled, as Spark does. Nothing here is used by the service.
"""
from __future__ import annotations

import datetime as _dt
import pickle
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable, Hashable, Iterable, Iterator

from .state import EVENT, PROC, Context, KeyedOperator, Output, Record

# -- the state -----------------------------------------------------------------------------------


@dataclass
class _Slot:
    value: Any = None
    timers: set = field(default_factory=set)
    maps: dict = field(default_factory=dict)


class InMemoryMap(dict):
    """A :class:`~operators.state.KeyMap` in a dict."""

    def put(self, key, value):
        self[key] = value

    def remove(self, key):
        self.pop(key, None)


class PickledMap(InMemoryMap):
    """A :class:`~operators.state.KeyMap` that keeps its values pickled, as a real store does: an
    operator that changes an entry in place and forgets to ``put`` it loses the change, as it would
    in Spark."""

    def get(self, key, default=None):
        data = super().get(key)
        return default if data is None else pickle.loads(data)

    def put(self, key, value):
        self[key] = pickle.dumps(value)

    def items(self):
        return [(k, pickle.loads(v)) for k, v in super().items()]


class InMemoryState:
    """State for all keys in a dict: values, maps and timers.

    With ``pickled``, values and map entries are kept pickled, as Spark keeps them: what an
    operator reads is a copy, and only what it writes back is kept."""

    def __init__(self, pickled: bool = False):
        self.pickled = pickled
        self._slots: dict[Hashable, _Slot] = {}

    def for_key(self, key: Hashable) -> "_InMemoryKeyState":
        """The :class:`~operators.state.KeyState` of ``key``, unchecked."""
        return _InMemoryKeyState(self, key)

    def keys(self, ever: bool = False) -> list[Hashable]:
        """The keys that hold anything: a value, a timer or a map entry (with ``ever``, every key
        that ever did), in the order they first held state."""
        if ever:
            return list(self._slots)
        return [k for k, s in self._slots.items() if s.value is not None or s.timers or any(s.maps.values())]

    def maps(self, key: Hashable) -> dict[str, InMemoryMap]:
        """The maps ``key`` has (name -> map), empty ones included."""
        slot = self._slots.get(key)
        return {} if slot is None else dict(slot.maps)

    def timers(self, key: Hashable) -> set[tuple[str, Any]]:
        """The timers registered for ``key``: ``(domain, time)`` pairs."""
        slot = self._slots.get(key)
        return set() if slot is None else set(slot.timers)

    def due_timers(self, domain: str, upto: Any) -> Iterator[tuple[Any, Hashable]]:
        """Registered timers of ``domain`` with time <= ``upto``, in time order; on ties, in the
        order the keys first held state."""
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
        slot = self._backend._slots.get(self._key)
        if slot is None or slot.value is None:
            return None
        return pickle.loads(slot.value) if self._backend.pickled else slot.value

    def put(self, value):
        self._slot().value = pickle.dumps(value) if self._backend.pickled else value

    def clear(self):
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


# -- the protocol check --------------------------------------------------------------------------


class StateProtocolError(AssertionError):
    """An operator broke the state protocol of ``operators/state.py``."""


# Besides builtins, the values rows hold as Avro decodes them (DECIMAL, DATE, TIME, TIMESTAMP).
_VALUES = (Decimal, _dt.date, _dt.datetime, _dt.time)
_BUILTINS = (tuple, list, dict, int, float, str, bytes, bool, type(None), *_VALUES)
_HASHABLE = (tuple, int, float, str, bytes, bool, type(None), *_VALUES)


def _builtins_only(value: Any, allowed: tuple = _BUILTINS) -> bool:
    if type(value) not in allowed:
        return False
    if type(value) is dict:
        return all(_builtins_only(k, _HASHABLE) and _builtins_only(v) for k, v in value.items())
    if type(value) in (tuple, list):
        return all(_builtins_only(v, allowed) for v in value)
    return True


class _CheckedKeyState:
    """One key's state as one call sees it: what the call does is counted and checked."""

    __slots__ = ("_state", "_where", "reads", "writes", "maps")

    def __init__(self, state, where: str):
        self._state = state
        self._where = where
        self.reads = self.writes = 0
        self.maps: dict[str, _CheckedMap] = {}

    def _fail(self, problem: str):
        raise StateProtocolError(f"{self._where}: {problem} (the contract: operators/state.py)")

    def get(self):
        self.reads += 1
        if self.reads > 1:
            self._fail("read the key's value a second time in one call; an operator reads it at most once per call")
        return self._state.get()

    def _write(self, what: str) -> None:
        self.writes += 1
        if self.writes > 1:
            self._fail(f"wrote the key's value a second time in one call ({what}); an operator writes it at most "
                       "once per call")

    def put(self, value) -> None:
        self._write("put")
        if not _builtins_only(value):
            self._fail(f"stored a value that is not plain builtins: {value!r}")
        self._state.put(value)

    def clear(self) -> None:
        self._write("clear")
        self._state.clear()

    def map(self, name: str):
        checked = self.maps.get(name)
        if checked is None:
            store = self._state.map(name)
            if store is None:
                return None
            checked = self.maps[name] = _CheckedMap(store, self, name)
        return checked

    def register_timer(self, domain: str, ts) -> None:
        if domain not in (PROC, EVENT):
            self._fail(f"registered a timer in domain {domain!r}; a timer is PROC or EVENT")
        self._state.register_timer(domain, ts)

    def delete_timer(self, domain: str, ts) -> None:
        if domain not in (PROC, EVENT):
            self._fail(f"deleted a timer in domain {domain!r}; a timer is PROC or EVENT")
        self._state.delete_timer(domain, ts)


class _CheckedMap:
    """One of the key's maps as one call sees it. ``gets``, ``puts``, ``removes``, ``scans`` and
    ``clears`` count what the call asked of it."""

    __slots__ = ("_store", "_key_state", "_name", "gets", "puts", "removes", "scans", "clears", "_read", "_written")

    def __init__(self, store, key_state: _CheckedKeyState, name: str):
        self._store, self._key_state, self._name = store, key_state, name
        self.gets = self.puts = self.removes = self.scans = self.clears = 0
        self._read: set = set()
        self._written: set = set()

    def _fail(self, problem: str):
        self._key_state._fail(f"map {self._name!r}: {problem}")

    def get(self, key):
        if self.scans:
            self._fail(f"read entry {key!r} after reading the whole map in the same call")
        if key in self._read:
            self._fail(f"read entry {key!r} a second time in one call")
        self._read.add(key)
        self.gets += 1
        return self._store.get(key)

    def _write(self, key) -> None:
        if not _builtins_only(key, _HASHABLE):
            self._fail(f"an entry key that is not a hashable builtin: {key!r}")
        if key in self._written:
            self._fail(f"wrote entry {key!r} a second time in one call")
        self._written.add(key)

    def put(self, key, value) -> None:
        self._write(key)
        if not _builtins_only(value):
            self._fail(f"stored an entry that is not plain builtins: {value!r}")
        self.puts += 1
        self._store.put(key, value)

    def remove(self, key) -> None:
        self._write(key)
        self.removes += 1
        self._store.remove(key)

    def items(self):
        if self.scans:
            self._fail("read the whole map a second time in one call")
        self.scans += 1
        return self._store.items()

    def clear(self) -> None:
        self.clears += 1
        self._store.clear()


# -- the host ------------------------------------------------------------------------------------

_ROUTED = object()


def join_key_of(operator) -> Callable[[Record], Hashable]:
    """The key of a join's record: the tuple of its side's join-key columns (``spec.left`` and
    ``spec.right``), as the service groups records."""
    keys = (operator.spec.left.join_key, operator.spec.right.join_key)
    return lambda record: tuple([record[2][i] for i in keys[record[0]]])


class LocalRunner:
    """Drives ``operator`` on in-memory state as the service does (see the module docstring).

    ``key(record)`` routes a record (side, kind, row) to its key; by default the join key
    (:func:`join_key_of`), so other operators (normalize, the upsert materializer) pass theirs.
    ``now`` (processing time) and ``watermark`` (the combined watermark, None = nothing seen) are
    what the next calls see: set them directly to move time without firing timers (then
    :meth:`fire`), or use :meth:`advance_clock` and :meth:`advance_watermark`, which fire at once.
    ``output`` collects what the calls emit until :meth:`drain`; ``late_by_side`` counts the rows
    dropped as late per input side. With ``check`` (the default), ``last_call`` is the checked
    state of the latest call: ``reads``, ``writes`` and per map (``maps[name]``) ``gets``,
    ``puts``, ``removes``, ``scans``, ``clears``."""

    def __init__(self, operator: KeyedOperator, key: Callable[[Record], Hashable] | None = None, *,
                 state: InMemoryState | None = None, pickled: bool = False, check: bool = True):
        self.operator = operator
        self.key = key
        self.state = InMemoryState(pickled) if state is None else state
        self.check = check
        self.now = 0
        self.watermark: Any = None
        self.input_watermarks: list[Any] = [None, None]
        self.output = Output()
        self.late_by_side = [0, 0]
        self.last_call: _CheckedKeyState | None = None
        self._context = Context()
        self._name = type(operator).__name__

    # -- records ---------------------------------------------------------------------------------
    def process(self, records: Iterable[Record], *, key: Any = _ROUTED, sort_keys: bool = False) -> None:
        """One micro-batch: ``records`` (side, kind, row) grouped by key, one ``process`` call per
        key with its records in order; keys in the order of their first record (``sort_keys``:
        sorted). With ``key``, all records go to that key in one call. A kind is handed over as a
        plain int (a ``RowKind`` becomes its value), as the service hands it."""
        records = [r if type(r[1]) is int else (r[0], int(r[1]), r[2]) for r in records]
        if key is not _ROUTED:
            self._process(key, records)
            return
        key_of = self.key
        if key_of is None:
            key_of = self.key = join_key_of(self.operator)
        groups: dict = {}
        for record in records:
            k = key_of(record)
            group = groups.get(k)
            if group is None:
                groups[k] = [record]
            else:
                group.append(record)
        for k in sorted(groups) if sort_keys else groups:
            self._process(k, groups[k])

    def _process(self, key, records: list) -> None:
        out = self.output
        before = len(out.late)
        if self.check:
            self._checked_call(key, "process", lambda checked, ctx: self.operator.process(checked, records, ctx, out))
        else:
            self.operator.process(self.state.for_key(key), records, self._ctx(), out)
        if len(out.late) > before:  # a late row is its input row, the same object (the service relies on it)
            sides = {id(record[2]): record[0] for record in records}
            for _, row in out.late[before:]:
                side = sides.get(id(row))
                if side is not None:
                    self.late_by_side[side] += 1

    # -- time ------------------------------------------------------------------------------------
    def advance_clock(self, now: int) -> None:
        """Processing time moves to ``now`` (never back); due processing-time timers fire."""
        self.now = max(self.now, now)
        self.fire(PROC)

    def advance_watermark(self, side: int, value: Any) -> bool:
        """Input ``side``'s watermark becomes ``value``. Once both inputs have one, the combined
        watermark is the smaller; when that advances, due event-time timers fire. Returns whether
        the combined watermark advanced."""
        self.input_watermarks[side] = value
        if None in self.input_watermarks:
            return False
        new = min(self.input_watermarks)
        if self.watermark is not None and new <= self.watermark:
            return False
        self.watermark = new
        self.fire(EVENT)
        return True

    def fire(self, domain: str, upto: Any = None) -> None:
        """Fire the timers of ``domain`` due at ``upto`` (default: ``now`` for PROC, ``watermark``
        for EVENT), one ``on_timer`` call each, in time order (on ties, in the order the keys first
        held state). A timer deleted by an earlier one of the round does not fire; one registered
        during the round waits for the next."""
        if upto is None:
            upto = self.now if domain == PROC else self.watermark
            if upto is None:
                return
        state = self.state
        for ts, key in list(state.due_timers(domain, upto)):
            if state.has_timer(key, domain, ts):
                state.consume_timer(key, domain, ts)
                if self.check:
                    self._checked_call(
                        key, "on_timer", lambda checked, ctx: self.operator.on_timer(checked, domain, ts, ctx, self.output))
                else:
                    self.operator.on_timer(state.for_key(key), domain, ts, self._ctx(), self.output)

    # -- output ----------------------------------------------------------------------------------
    def drain(self) -> tuple[list, list]:
        """What was emitted since the last drain: (changelog rows, late rows), each a list of
        ``(RowKind value, row)``."""
        rows, late = self.output.rows, self.output.late
        self.output.rows, self.output.late = [], []
        return rows, late

    # -- one call --------------------------------------------------------------------------------
    def _ctx(self) -> Context:
        """The context of a call: the same object while the time does not change."""
        ctx = self._context
        if ctx.now != self.now or ctx.watermark != self.watermark:
            ctx = self._context = Context(self.now, self.watermark)
        return ctx

    def _checked_call(self, key, name: str, call) -> None:
        checked = _CheckedKeyState(self.state.for_key(key), f"{self._name}.{name} for key {key!r}")
        call(checked, self._ctx())
        self.last_call = checked
        self.after_call(key)

    def after_call(self, key) -> None:
        """Called after every checked call, with its key: a place for an operator's own promises."""
