"""The state each operator stores per key is the checkpoint format (operators/stateformat.py).

Golden bytes under tests/data/state/v<STATE_FORMAT_VERSION>/ hold the state that a first changelog
leaves, as the service pickles it. The current operators must write exactly those bytes, and must
read them back and carry on as if they had never stopped. A change of layout fails here until
STATE_FORMAT_VERSION is raised and a migration is written.

    python -m tests.operators.test_state_format --write    # (re)write the golden files of the current version
"""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

from operators import (
    EVENT,
    PROC,
    STATE_FORMAT_VERSION,
    ChangelogNormalize,
    InputSpec,
    JoinSpec,
    JoinType,
    RowKind,
    IntervalJoinSpec,
    TemporalJoinSpec,
    TemporalKind,
    UpsertMaterializer,
    WindowJoinSpec,
    WindowKind,
    WindowSpec,
    make_interval_join,
    make_join,
    make_temporal_join,
    make_window_join,
)
from operators.stateformat import map_key
from operators.testing import InMemoryState, LocalRunner

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "state" / f"v{STATE_FORMAT_VERSION}"
I, UB, UA, D = (int(k) for k in RowKind)
ORDERS = ("order_id", "product", "quantity")
PRICES = ("product", "price")


def _regular(join_type, left_pk, right_pk, ttl=None, mini_batch=None, split_at=None):
    left = InputSpec(ORDERS, (1,), left_pk, ttl)
    right = InputSpec(PRICES, (0,), right_pk, ttl)

    def make():
        join = make_join(JoinSpec(join_type, left, right, mini_batch_size=mini_batch))
        if split_at is not None:
            join.split_at = split_at
        return join
    return make


def _temporal(kind):
    spec = TemporalJoinSpec(
        kind=kind, join_type=JoinType.LEFT, left=InputSpec(("id", "cur", "at"), (1,)),
        right=InputSpec(("cur", "rate", "at"), (0,)), left_time=2 if kind is TemporalKind.EVENT_TIME else None,
        right_time=2 if kind is TemporalKind.EVENT_TIME else None, retention_ms=(1000, 1500),
        right_is_versioned=kind is TemporalKind.EVENT_TIME,
    )
    return lambda: make_temporal_join(spec)


def _interval():
    spec = IntervalJoinSpec(JoinType.LEFT, InputSpec(("id", "cur", "at"), (1,)), InputSpec(("cur", "rate", "at"), (0,)),
                            lower_ms=-20, upper_ms=30, left_time=2, right_time=2)
    return lambda: make_interval_join(spec)


def _window():
    spec = WindowJoinSpec(JoinType.FULL, InputSpec(("id", "cur", "at"), (1,)), InputSpec(("cur", "rate", "at"), (0,)),
                          WindowSpec(WindowKind.HOP, size_ms=100, slide_ms=50), left_time=2, right_time=2)
    return lambda: make_window_join(spec)


# name -> (operator factory, key of a record, changelog before the stop, changelog after it).
# Records are (side, kind, row); each list is one call per record, at processing time 10 and
# watermark 100 before the stop, 20 and 150 after.
SCENARIOS = {
    "inner_join_key_contains_unique_key": (
        _regular(JoinType.INNER, (0,), (0,)), lambda r: r[2][1 - r[0]] if r[0] == 0 else r[2][0],
        [(0, I, (1, "ink", 2)), (1, I, ("ink", 3.5)), (0, I, (2, "ink", 1))],
        [(1, UB, ("ink", 3.5)), (1, UA, ("ink", 4.0)), (0, D, (1, "ink", 2))],
    ),
    "full_join_unique_key_and_multiset_with_ttl": (
        _regular(JoinType.FULL, (0,), None, ttl=10_000), lambda r: r[2][1] if r[0] == 0 else r[2][0],
        [(0, I, (1, "ink", 2)), (1, I, ("ink", 3.5)), (1, I, ("ink", 3.5)), (0, I, (2, "pen", 1))],
        [(1, D, ("ink", 3.5)), (1, D, ("ink", 3.5)), (1, I, ("pen", 9.0))],
    ),
    "left_join_split_sides": (  # sides of more than one entry in maps of their own (splitside.py)
        _regular(JoinType.LEFT, (0,), None, split_at=1), lambda r: r[2][1] if r[0] == 0 else r[2][0],
        [(0, I, (1, "ink", 2)), (0, I, (2, "ink", 1)), (1, I, ("ink", 3.5)), (1, I, ("ink", 3.5)),
         (1, I, ("ink", 4.0)), (0, I, (3, "pen", 1))],
        [(0, UB, (2, "ink", 1)), (0, UA, (2, "ink", 5)), (1, D, ("ink", 3.5)), (1, D, ("ink", 4.0)),
         (0, D, (1, "ink", 2)), (0, D, (2, "ink", 5))],
    ),
    "left_semi_join_mini_batch": (
        _regular(JoinType.SEMI, (0,), (0,), mini_batch=2), lambda r: r[2][1] if r[0] == 0 else r[2][0],
        [(0, I, (1, "ink", 2)), (1, I, ("ink", 3.5)), (0, I, (2, "pen", 1))],
        [(1, D, ("ink", 3.5)), (1, I, ("pen", 1.0))],
    ),
    "event_time_temporal_join": (
        _temporal(TemporalKind.EVENT_TIME), lambda r: r[2][1] if r[0] == 0 else r[2][0],
        [(1, I, ("EUR", 1.1, 50)), (0, I, (1, "EUR", 120)), (1, UA, ("EUR", 1.2, 110))],
        [(0, I, (2, "EUR", 160)), (1, UA, ("EUR", 1.3, 140))],
    ),
    "processing_time_temporal_join": (
        _temporal(TemporalKind.PROCESSING_TIME), lambda r: r[2][1] if r[0] == 0 else r[2][0],
        [(1, I, ("EUR", 1.1, 0)), (0, I, (1, "EUR", 0))],
        [(0, I, (2, "EUR", 0)), (1, D, ("EUR", 1.1, 0)), (0, I, (3, "EUR", 0))],
    ),
    "interval_join": (
        _interval(), lambda r: r[2][1] if r[0] == 0 else r[2][0],
        [(0, I, (1, "EUR", 120)), (1, I, ("EUR", 1.1, 130)), (0, I, (2, "EUR", 125))],
        [(1, I, ("EUR", 1.2, 140)), (0, I, (3, "EUR", 200))],
    ),
    "window_join": (
        _window(), lambda r: r[2][1] if r[0] == 0 else r[2][0],
        [(0, I, (1, "EUR", 120)), (1, I, ("EUR", 1.1, 130)), (0, I, (2, "USD", 160))],
        [(1, I, ("EUR", 1.2, 170)), (1, I, ("USD", 1.5, 190))],
    ),
    "changelog_normalize": (
        ChangelogNormalize, lambda r: r[2][0] if r[2] is not None else "o2",
        [(0, UA, ("o1", "ink", 1)), (0, UA, ("o2", "pen", 1)), (0, UA, ("o1", "ink", 2))],
        [(0, UA, ("o1", "pen", 2)), (0, D, None)],
    ),
    "upsert_materializer": (
        UpsertMaterializer, lambda r: r[2][0],
        [(0, I, ("o1", "ink")), (0, I, ("o1", "pen"))],
        [(0, D, ("o1", "pen")), (0, D, ("o1", "ink"))],
    ),
}


def _run(name, state, changelog, now, watermark):
    """One micro-batch as Spark runs it: the records at (now, watermark), then the due timers."""
    make, key_of, _, _ = SCENARIOS[name]
    runner = LocalRunner(make(), key_of, state=state)
    runner.now, runner.watermark = now, watermark
    for record in changelog:
        runner.process([record])
    runner.fire(EVENT)
    runner.fire(PROC)
    return runner.output.rows


def _stored(state: InMemoryState) -> dict:
    """Each key's value; for a key with maps, ``{"value": value, "maps": {name: {map key bytes: entry}}}``
    (map keys as the service stores them)."""
    stored = {}
    for key in state.keys():
        value = state.for_key(key).get()
        maps = {name: {map_key(k): v for k, v in m.items()} for name, m in state.maps(key).items() if m}
        stored[key] = {"value": value, "maps": maps} if maps else value
    return stored


def _restore(state: InMemoryState, stored: dict) -> None:
    for key, value in stored.items():
        if isinstance(value, dict) and "maps" in value:
            for name, entries in value["maps"].items():
                for k, entry in entries.items():
                    state.for_key(key).map(name).put(pickle.loads(k), entry)
            value = value["value"]
        state.for_key(key).put(value)


def _first_half(name):
    state = InMemoryState()
    _run(name, state, SCENARIOS[name][2], 10, 100)
    return state


def _dump(name) -> bytes:
    return pickle.dumps(_stored(_first_half(name)), protocol=5)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_operators_write_the_golden_state_of_this_format_version(name):
    assert _dump(name) == (GOLDEN / f"{name}.pickle").read_bytes(), (
        f"the state layout of {name} changed: raise STATE_FORMAT_VERSION, write a migration from "
        f"v{STATE_FORMAT_VERSION}, and regenerate the golden files (python -m tests.operators.test_state_format --write)"
    )


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_state_read_back_from_golden_bytes_carries_on_like_an_uninterrupted_run(name):
    uninterrupted = _first_half(name)
    restored = InMemoryState()
    _restore(restored, pickle.loads((GOLDEN / f"{name}.pickle").read_bytes()))
    for key in uninterrupted.keys():  # timers live in Spark's own timer state, not in the value
        for domain, ts in uninterrupted.timers(key):
            restored.for_key(key).register_timer(domain, ts)

    expected = _run(name, uninterrupted, SCENARIOS[name][3], 20, 150)
    assert _run(name, restored, SCENARIOS[name][3], 20, 150) == expected
    assert expected, "the scenario's second half must emit something to compare"


def test_stored_values_are_builtins_only():
    allowed = (tuple, list, dict, int, float, str, bytes, bool, type(None))

    def check(value, where):
        assert isinstance(value, allowed), f"{where}: {type(value).__name__} in stored state"
        if isinstance(value, (tuple, list)):
            for item in value:
                check(item, where)
        elif isinstance(value, dict):
            for k, v in value.items():
                check(k, where)
                check(v, where)

    for name in SCENARIOS:
        for value in _stored(_first_half(name)).values():
            check(value, name)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for scenario in SCENARIOS:
        (GOLDEN / f"{scenario}.pickle").write_bytes(_dump(scenario))
        print(f"wrote {GOLDEN / scenario}.pickle")


def _tuples_in(value):
    found = []

    def walk(v):
        if isinstance(v, tuple) and not any(isinstance(x, (list, dict)) for x in v):
            found.append(v)
        if isinstance(v, (tuple, list)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for k, x in v.items():
                walk(k)
                walk(x)

    walk(value)
    return found


@pytest.mark.parametrize("name", sorted(set(SCENARIOS) - {"upsert_materializer", "left_join_split_sides"}))
def test_map_rows_reaches_every_stored_input_row(name):
    operator = SCENARIOS[name][0]()
    rows = {record[2] for record in SCENARIOS[name][2] if record[2] is not None}
    for value in pickle.loads((GOLDEN / f"{name}.pickle").read_bytes()).values():
        mapped = operator.map_rows(value, lambda r: r + ("L",), lambda r: r + ("R",))
        stored, after = _tuples_in(value), _tuples_in(mapped)
        assert rows & set(stored), "the scenario stores rows"
        assert not rows & set(after), "a stored row was not mapped"
        assert {t[:-1] for t in after if t[-1:] in (("L",), ("R",))} == rows & set(stored)


def test_an_evolved_row_retracts_the_stored_row_it_came_from():
    """A multiset side stores rows under their identity: mapping rows re-keys them, so the
    retraction of the row in the new schema (with the added column's default) finds it."""
    old = JoinSpec(JoinType.LEFT, InputSpec(ORDERS, (1,)), InputSpec(PRICES, (0,)))
    new = JoinSpec(JoinType.LEFT, InputSpec(ORDERS + ("note",), (1,)), InputSpec(PRICES, (0,)))
    before = LocalRunner(make_join(old))
    before.process([(0, I, (1, "ink", 2))])
    after = LocalRunner(make_join(new), state=before.state)  # the same state, read by the evolved join
    stored = after.state.for_key(("ink",))
    stored.put(after.operator.map_rows(stored.get(), lambda r: r + (None,), lambda r: r))
    after.process([(0, D, (1, "ink", 2, None))])
    assert [kind for kind, _ in before.output.rows + after.output.rows] == [I, D] and after.state.keys() == []
