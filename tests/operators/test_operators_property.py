"""Differential property test: the operators' changelog, applied as a retract stream, equals the join
computed from scratch on the materialized inputs, after every record (and after every mini-batch).

Inputs are random *valid* changelogs: inserts, updates as -U/+U pairs (which may move a row to
another join key), deletes, duplicate rows, NULL keys; with a unique key contained in the join key,
a unique key outside it, or no unique key; with and without an extra condition; NULLs compared
with `=` or null-safe.
"""
from collections import Counter

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from operators import JoinType, RowKind
from operators.testing import LocalRunner
from tests.support.operator_changelogs import CONDITIONS, K, build, bundles, changelog, layouts_, ops, settings_


def expected_join(join_type, left, right, null_safe, cond):
    def match(l, r):
        if l[K] is None or r[K] is None:
            if not (null_safe and l[K] is None and r[K] is None):
                return False
        elif l[K] != r[K]:
            return False
        return cond is None or cond(l, r) is True

    result = Counter()
    matched_right = Counter()
    for l, lc in left.items():
        partners = [(r, rc) for r, rc in right.items() if match(l, r)]
        if join_type == JoinType.SEMI:
            if partners:
                result[l] += lc
            continue
        if join_type == JoinType.ANTI:
            if not partners:
                result[l] += lc
            continue
        for r, rc in partners:
            result[l + r] += lc * rc
            matched_right[r] += 1
        if not partners and join_type in (JoinType.LEFT, JoinType.FULL):
            result[l + (None,) * 3] += lc
    if join_type in (JoinType.RIGHT, JoinType.FULL):
        for r, rc in right.items():
            if not matched_right[r]:
                result[(None,) * 3 + r] += rc
    return +result


def apply_retract(table: Counter, rows):
    for kind, row in rows:
        if kind in (RowKind.INSERT, RowKind.UPDATE_AFTER):
            table[row] += 1
        else:
            assert table[row] > 0, f"retraction of a row that was never emitted: {RowKind(kind).short}{row}"
            table[row] -= 1
    return +table


def check(join_type, operations, layouts, cond_sql, null_safe, bundle_sizes=None):
    join, cond = build(join_type, layouts, cond_sql, null_safe, mini_batch=bundle_sizes is not None)
    runner = LocalRunner(join)
    table, inputs = Counter(), (Counter(), Counter())
    for batch in bundles(changelog(operations, layouts), bundle_sizes):
        runner.process(batch)
        for side, kind, row in batch:
            inputs[side][row] += 1 if kind in (RowKind.INSERT, RowKind.UPDATE_AFTER) else -1
        table = apply_retract(table, runner.drain()[0])
        expected = expected_join(join_type, +inputs[0], +inputs[1], null_safe, cond)
        assert table == expected, f"after {batch}"


@pytest.mark.parametrize("join_type", list(JoinType))
@settings_
@given(operations=ops, layouts=layouts_, cond_sql=st.sampled_from(CONDITIONS), null_safe=st.booleans())
def test_changelog_materializes_to_the_join_after_every_record(join_type, operations, layouts, cond_sql, null_safe):
    check(join_type, operations, layouts, cond_sql, null_safe)


@pytest.mark.parametrize("join_type", [JoinType.INNER, JoinType.LEFT, JoinType.RIGHT, JoinType.FULL])
@settings_
@given(
    operations=ops,
    layouts=layouts_,
    cond_sql=st.sampled_from(CONDITIONS),
    null_safe=st.booleans(),
    bundle_sizes=st.lists(st.integers(1, 12), max_size=10),
)
# A -U/+U pair folded in one bundle whose +U no longer satisfies the condition: the preserved row
# it matched must end up null-padded (released Flink's suppression leaves it with no row at all).
@example(
    operations=[(0, "insert", 0, 1, 0, 3), (1, "insert", 0, 1, 0, 0), (1, "update", 0, 1, 0, 5)],
    layouts=("join_key_unique", "join_key_unique"),
    cond_sql="l.v > r.v",
    null_safe=False,
    bundle_sizes=[2, 2],
).via("explicit")
def test_mini_batch_folding_materializes_to_the_join_after_every_bundle(
    join_type, operations, layouts, cond_sql, null_safe, bundle_sizes
):
    check(join_type, operations, layouts, cond_sql, null_safe, bundle_sizes)


def test_the_differential_check_catches_a_wrong_operator():
    """The harness itself must be able to fail: an INNER join fed to a LEFT expectation differs."""
    operations = [(0, "insert", 0, 1, 0, 1)]
    with pytest.raises(AssertionError):
        join, cond = build(JoinType.INNER, ("multiset", "multiset"), None, False)
        records = changelog(operations, ("multiset", "multiset"))
        runner = LocalRunner(join)
        for record in records:
            runner.process([record])
        table = apply_retract(Counter(), runner.output.rows)
        assert table == expected_join(JoinType.LEFT, Counter({records[0][2]: 1}), Counter(), False, None)
