"""The lookup join's state machine: joins what the lookup found, retracts exactly what it emitted."""
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from operators import RowKind
from operators.condition import compile_condition
from operators.lookup import Identity, LookupJoin, LookupJoinSpec
from operators.spec import ConfigurationError, JoinType
from operators.testing import LocalRunner

I, UB, UA, D = (int(k) for k in (RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE))
# orders (id, customer, amount) JOIN customers (id, name, tier): output (order id, customer, name)
PROJECTION = ((0, 0), (0, 1), (1, 1))


def runner(join_type=JoinType.LEFT, identity=Identity.KEY, upsert=False, condition=None, ttl=None):
    spec = LookupJoinSpec(join_type, 3, 3, identity, upsert=upsert, projection=PROJECTION, state_ttl_ms=ttl,
                          condition=condition and compile_condition(condition, ("id", "customer", "amount"),
                                                                    ("id", "name", "tier")))
    key = {Identity.KEY: lambda r: r[2][0][0] if r[2][0] is not None else r[2],
           Identity.ROW: lambda r: r[2][0], Identity.NONE: lambda r: None}[identity]
    return LocalRunner(LookupJoin(spec), key=key)


def feed(run, *records, key=None):
    """Records (kind, row, matches); returns the changes they emitted."""
    if key is None:
        run.process([(0, kind, (row, matches)) for kind, row, matches in records])
    else:
        run.process([(0, kind, (row, matches)) for kind, row, matches in records], key=key)
    return run.drain()[0]


ALICE1, ALICE2, BOB = (7, "alice", "gold"), (7, "alice-renamed", "platinum"), (8, "bob", "silver")


def test_inner_joins_every_match_and_drops_a_miss():
    run = runner(JoinType.INNER, Identity.NONE)
    out = feed(run, (I, (1, 7, 10), (ALICE1, (7, "alice-2", "gold"))), (I, (2, 9, 5), ()))
    assert out == [(I, (1, 7, "alice")), (I, (1, 7, "alice-2"))]


def test_left_pads_a_miss_and_an_append_only_input_keeps_no_state():
    run = runner(JoinType.LEFT, Identity.NONE)
    assert feed(run, (I, (2, 9, 5), ())) == [(I, (2, 9, None))]
    assert (run.last_call.reads, run.last_call.writes) == (0, 0)


def test_a_retraction_retracts_what_was_emitted_not_what_the_table_holds_now():
    run = runner()
    assert feed(run, (I, (1, 7, 10), (ALICE1,))) == [(I, (1, 7, "alice"))]
    # the customer was renamed in the table; the order's update looks up afresh
    out = feed(run, (UB, (1, 7, 10), None), (UA, (1, 7, 12), (ALICE2,)))
    assert out == [(UB, (1, 7, "alice")), (UA, (1, 7, "alice-renamed"))]
    assert feed(run, (D, (1, 7, 12), None)) == [(D, (1, 7, "alice-renamed"))]


def test_the_condition_filters_matches_and_the_retraction_follows_what_passed():
    run = runner(condition="r.tier <> 'gold'")
    assert feed(run, (I, (1, 7, 10), (ALICE1, ALICE2))) == [(I, (1, 7, "alice-renamed"))]
    assert feed(run, (D, (1, 7, 10), None)) == [(D, (1, 7, "alice-renamed"))]
    assert feed(run, (I, (2, 7, 10), (ALICE1,))) == [(I, (2, 7, None))]  # LEFT: nothing passed, padded
    assert feed(run, (D, (2, 7, 10), None)) == [(D, (2, 7, None))]


def test_inner_miss_is_remembered_so_its_retraction_is_silent():
    run = runner(JoinType.INNER)
    assert feed(run, (I, (1, 9, 10), ())) == []
    assert feed(run, (D, (1, 9, 10), None)) == []
    assert run.output.unmatched == []


def test_a_retraction_of_an_unknown_row_is_reported_not_padded():
    run = runner()
    assert feed(run, (UB, (1, 7, 10), None)) == []
    assert run.output.unmatched == [(UB, (1, 7, 10))]


def test_a_second_insert_of_a_key_retracts_the_first_output():
    run = runner()
    feed(run, (I, (1, 7, 10), (ALICE1,)))
    assert feed(run, (I, (1, 8, 10), (BOB,))) == [(UB, (1, 7, "alice")), (UA, (1, 8, "bob"))]


def test_upsert_input_replaces_ignores_identical_rows_and_tombstones():
    run = runner(upsert=True)
    assert feed(run, (UA, (1, 7, 10), (ALICE1,))) == [(I, (1, 7, "alice"))]
    assert feed(run, (UA, (1, 7, 10), (ALICE2,))) == []  # identical row: changelog normalization drops it
    assert feed(run, (UA, (1, 8, 10), (BOB,))) == [(UB, (1, 7, "alice")), (UA, (1, 8, "bob"))]
    assert feed(run, (D, None, None), key=1) == [(D, (1, 8, "bob"))]
    assert feed(run, (D, None, None), key=1) == []  # a tombstone of an unknown key changes nothing
    assert run.output.unmatched == []


def test_rows_without_a_key_are_a_multiset_each_copy_keeps_its_own_lookup():
    run = runner(identity=Identity.ROW)
    row = (1, 7, 10)
    feed(run, (I, row, (ALICE1,)))
    feed(run, (I, row, (ALICE2,)))
    assert feed(run, (D, row, None)) == [(D, (1, 7, "alice"))]  # oldest copy first
    assert feed(run, (D, row, None)) == [(D, (1, 7, "alice-renamed"))]
    assert feed(run, (D, row, None)) == []
    assert run.output.unmatched == [(D, row)]


def test_state_ttl_forgets_a_row_and_its_later_retraction_is_unmatched():
    run = runner(ttl=1000)
    feed(run, (I, (1, 7, 10), (ALICE1,)))
    run.advance_clock(500)
    feed(run, (I, (2, 8, 10), (BOB,)))
    run.advance_clock(1000)  # key 1 expires; key 2 was written at 500
    assert feed(run, (D, (1, 7, 10), None)) == []
    assert run.output.unmatched == [(D, (1, 7, 10))]
    assert feed(run, (D, (2, 8, 10), None)) == [(D, (2, 8, "bob"))]


def test_only_inner_and_left():
    for join_type in (JoinType.RIGHT, JoinType.FULL, JoinType.SEMI):
        try:
            LookupJoinSpec(join_type, 3, 3, Identity.KEY)
        except ConfigurationError as err:
            assert "INNER or LEFT" in str(err)
        else:
            raise AssertionError(join_type)


# -- property: over any changelog and any table history, the output is exact ----------------------
_ops = st.lists(st.tuples(st.sampled_from(["ins", "del", "upd", "table"]), st.integers(0, 3), st.integers(0, 2)),
                max_size=40)


@settings(max_examples=150, deadline=None)
@given(_ops, st.sampled_from([Identity.KEY, Identity.ROW]), st.sampled_from([JoinType.INNER, JoinType.LEFT]),
       st.integers(1, 5))
def test_output_applied_as_a_multiset_never_goes_negative_and_ends_as_the_joins_of_the_live_rows(
        ops, identity, join_type, per_batch):
    """A retract changelog of orders (key or not) over a customers table that changes between
    records: the output, applied as a multiset, never retracts a row it does not hold, and ends
    holding each live order joined with the table as it was when that order was last added."""
    run = runner(join_type, identity)
    table = {c: ((c, f"name{c}", "t"),) if c % 3 else () for c in range(3)}  # customer 0: missing
    live: dict = {}  # order id -> [(row, output rows at its insertion)] (a list of copies without a key)
    batch: list = []
    applied: Counter = Counter()

    def flush():
        run.process(batch)
        batch.clear()
        for kind, row in run.drain()[0]:
            applied[row] += 1 if kind in (I, UA) else -1
            assert applied[row] >= 0, f"retracted {row} it never held"

    def expected_rows(row):
        found = table[row[1]]
        return [(row[0], row[1], m[1]) for m in found] or ([(row[0], row[1], None)] if join_type is JoinType.LEFT else [])

    for step, (op, order, customer) in enumerate(ops):
        if op == "table":
            table[customer] = ((customer, f"name{customer}-v{step}", "t"),)
            continue
        copies = live.setdefault(order, [])
        if op == "ins" and (identity is Identity.ROW or not copies):
            row = (order, customer, 1 if identity is Identity.KEY else 0)
            if identity is Identity.ROW:
                row = (order, order % 3, 0)  # a row is its own key: one row per order
            batch.append((0, I, (row, table[row[1]])))
            copies.append((row, expected_rows(row)))
        elif op in ("del", "upd") and copies:
            row, _ = copies.pop(0)
            batch.append((0, D if op == "del" else UB, (row, None)))
            if op == "upd":
                new = (order, customer, 2) if identity is Identity.KEY else row
                batch.append((0, UA, (new, table[new[1]])))
                copies.insert(0, (new, expected_rows(new))) if identity is Identity.KEY else copies.append(
                    (new, expected_rows(new)))
        if len(batch) >= per_batch:
            flush()
    flush()
    want = Counter(r for copies in live.values() for _, rows in copies for r in rows)
    assert +applied == want
    assert run.output.unmatched == []
