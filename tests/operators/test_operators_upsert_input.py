"""Upsert inputs joined directly (``InputSpec(upsert=True)``): bare ``+U`` rows and key-only
tombstones give exactly the changelog that normalizing the input first (Flink's ChangelogNormalize,
one stage per unique key) and joining the full changelog gives, per record and per mini-batch."""
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators import (
    ConfigurationError, InputSpec, JoinSpec, JoinType, RowKind, TemporalJoinSpec, TemporalKind, compile_condition,
    make_join,
)
from operators.normalize import ChangelogNormalize
from operators.testing import LocalRunner

COLUMNS = ("k", "id", "v")
K, ID, V = 0, 1, 2
UNIQUE_KEYS = {"pk=jk": (K,), "pk>jk": (K, ID)}  # join key k is (part of) the unique key

ops = st.lists(
    st.tuples(
        st.integers(0, 1),  # side
        st.sampled_from(["upsert", "upsert", "upsert", "tombstone"]),
        st.integers(0, 2),  # k
        st.integers(0, 1),  # id
        st.sampled_from([0, 1, 2, None]),  # v
    ),
    max_size=40,
)


def upsert_records(operations, upsert_sides, unique_keys):
    """(side, kind, row): bare +U rows and key-only -D tombstones on upsert sides; on the other
    sides the same operations as a valid full changelog (what a normalized input would carry)."""
    tables = ({}, {})
    out = []
    for side, op, k, id_, v in operations:
        uk = unique_keys[side]
        key = (k,) if uk == (K,) else (k, id_)
        row = (k, id_, v)
        if side in upsert_sides:
            if op == "upsert":
                out.append((side, RowKind.UPDATE_AFTER, row))
            else:
                out.append((side, RowKind.DELETE, key + (None,) * (3 - len(key))))  # only the key is known
            continue
        last = tables[side].get(key)
        if op == "upsert":
            if last is None:
                out.append((side, RowKind.INSERT, row))
            elif last != row:
                out += [(side, RowKind.UPDATE_BEFORE, last), (side, RowKind.UPDATE_AFTER, row)]
            tables[side][key] = row
        elif last is not None:
            out.append((side, RowKind.DELETE, last))
            del tables[side][key]
    return out


def normalizer(upsert_sides, unique_keys):
    """The reference: each upsert side through ChangelogNormalize, one state per unique key."""
    normalize = LocalRunner(ChangelogNormalize())
    return lambda records: normalized(normalize, records, upsert_sides, unique_keys)


def normalized(normalize, records, upsert_sides, unique_keys):
    result = []
    for side, kind, row in records:
        if side not in upsert_sides:
            result.append((side, kind, row))
            continue
        key = (side,) + tuple(row[i] for i in unique_keys[side])
        value = row if kind in (RowKind.INSERT, RowKind.UPDATE_AFTER) else None
        normalize.process([(side, kind, value)], key=key)
        result += [(side, k, r) for k, r in normalize.drain()[0]]
    return result


def joins(join_type, unique_keys, upsert_sides, cond_sql, mini_batch):
    """(direct, reference) operators; with ``mini_batch`` their bundles are what each call hands them."""
    cond = compile_condition(cond_sql, COLUMNS, COLUMNS) if cond_sql else None
    size = 10**9 if mini_batch else None
    specs = []
    for upsert in (True, False):
        sides = [InputSpec(COLUMNS, (K,), unique_keys[i], upsert=upsert and i in upsert_sides) for i in (0, 1)]
        specs.append(make_join(JoinSpec(join_type, sides[0], sides[1], (True,), cond, mini_batch_size=size)))
    return specs


def run(join, records, bundle_sizes, before=lambda records: records):
    """The join's output for ``records`` fed one by one or in bundles; ``before`` transforms each
    record or bundle on its way in (the normalize stage of the reference)."""
    runner = LocalRunner(join)
    if bundle_sizes is None:
        for record in records:
            for changed in before([record]):
                runner.process([changed])
        return runner.output.rows
    sizes = iter(bundle_sizes)
    while records:
        size = next(sizes, 3)
        batch, records = records[:size], records[size:]
        # keys in a fixed order: the order between keys means nothing
        runner.process(before(batch), sort_keys=True)
    return runner.output.rows


settings_ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("join_type", list(JoinType))
@settings_
@given(
    operations=ops,
    unique_keys=st.tuples(st.sampled_from(list(UNIQUE_KEYS.values())), st.sampled_from(list(UNIQUE_KEYS.values()))),
    upsert_sides=st.sampled_from([(0,), (1,), (0, 1)]),
    cond_sql=st.sampled_from([None, "l.v > r.v"]),
    bundle_sizes=st.one_of(st.none(), st.lists(st.integers(1, 12), max_size=10)),
)
def test_direct_upsert_input_gives_the_changelog_of_normalize_then_join(
    join_type, operations, unique_keys, upsert_sides, cond_sql, bundle_sizes
):
    if bundle_sizes is not None and join_type.is_semi_anti:
        bundle_sizes = None  # mini-batch folding is for regular joins
    records = upsert_records(operations, upsert_sides, unique_keys)
    direct, reference = joins(join_type, unique_keys, upsert_sides, cond_sql, bundle_sizes is not None)
    expected = run(reference, records, bundle_sizes, normalizer(upsert_sides, unique_keys))
    assert run(direct, records, bundle_sizes) == expected


def test_a_left_join_over_an_upsert_input_retracts_what_a_bare_update_replaces():
    spec = InputSpec(COLUMNS, (K,), (K,), upsert=True)
    join = make_join(JoinSpec(JoinType.LEFT, spec, InputSpec(COLUMNS, (K,), (K,))))
    runner = LocalRunner(join)
    for record in [
        (1, RowKind.INSERT, (1, 0, "r")),
        (0, RowKind.UPDATE_AFTER, (1, 7, "a")),
        (0, RowKind.UPDATE_AFTER, (1, 7, "a")),  # the same row again: nothing changes
        (0, RowKind.UPDATE_AFTER, (1, 7, "b")),
        (0, RowKind.DELETE, (1, None, None)),   # a tombstone: only the key is known
        (0, RowKind.DELETE, (1, None, None)),   # a second one finds nothing
    ]:
        runner.process([record])
    assert [(RowKind(k).short, r) for k, r in runner.output.rows] == [
        ("+I", (1, 7, "a", 1, 0, "r")),
        ("-D", (1, 7, "a", 1, 0, "r")),
        ("+I", (1, 7, "b", 1, 0, "r")),
        ("-D", (1, 7, "b", 1, 0, "r")),
    ]
    table = Counter()
    for kind, row in runner.output.rows:
        table[row] += 1 if kind in (RowKind.INSERT, RowKind.UPDATE_AFTER) else -1
    assert +table == Counter()


def test_an_upsert_input_needs_its_join_key_inside_its_unique_key():
    with pytest.raises(ConfigurationError, match="normalize it first"):
        InputSpec(COLUMNS, (K, V), (K,), upsert=True)  # rows of one unique key could change join key
    with pytest.raises(ConfigurationError):
        InputSpec(COLUMNS, (K,), None, upsert=True)
    upsert = InputSpec(COLUMNS, (K,), (K,), upsert=True)
    with pytest.raises(ConfigurationError, match="temporal"):
        TemporalJoinSpec(TemporalKind.PROCESSING_TIME, JoinType.LEFT, InputSpec(COLUMNS, (K,)), upsert,
                         right_is_versioned=False)
