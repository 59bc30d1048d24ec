"""A NaN equals a NaN where rows are identified (Flink compares rows by their binary form):
a row holding NaN can be retracted, folded away and replaced like any other."""
import pickle
from collections import Counter

import pytest

from operators import (
    ChangelogNormalize,
    Context,
    InputSpec,
    JoinSpec,
    JoinType,
    Output,
    RowKind,
    UpsertMaterializer,
    make_join,
)
from operators.testing import InMemoryState

I, UB, UA, D = (int(k) for k in RowKind)
COLUMNS = ("k", "x")


def nan_row(k):
    return (k, float("nan"))  # a new NaN object each time, as after a trip through state


def materialize(rows):
    table = Counter()
    for kind, row in rows:
        table[pickle.dumps(row)] += 1 if kind in (I, UA) else -1
    return +table


@pytest.mark.parametrize("unique_key", [None, (1,)], ids=["multiset", "unique key with NaN"])
@pytest.mark.parametrize("join_type", [JoinType.INNER, JoinType.LEFT, JoinType.FULL])
@pytest.mark.parametrize("mini_batch", [None, 10])
def test_a_row_with_nan_is_retracted_by_its_retraction(join_type, unique_key, mini_batch):
    spec = JoinSpec(join_type, InputSpec(COLUMNS, (0,), unique_key), InputSpec(COLUMNS, (0,), None),
                    mini_batch_size=mini_batch)
    join, state, out = make_join(spec), InMemoryState(), Output()
    for record in [(1, I, (1, 2.0)), (0, I, nan_row(1))]:
        join.process(state.for_key(1), [record], Context(), out)
    assert materialize(out.rows)
    join.process(state.for_key(1), [(0, D, nan_row(1))], Context(), out)
    join.process(state.for_key(1), [(1, D, (1, 2.0))], Context(), out)
    assert materialize(out.rows) == Counter()
    assert state.keys() == []


def test_mini_batch_folds_an_insert_and_a_retraction_of_a_nan_row_away():
    spec = JoinSpec(JoinType.LEFT, InputSpec(COLUMNS, (0,)), InputSpec(COLUMNS, (0,)), mini_batch_size=10)
    out = Output()
    make_join(spec).process(InMemoryState().for_key(1), [(0, I, nan_row(1)), (0, D, nan_row(1))], Context(), out)
    assert out.rows == []


def test_normalize_sees_a_repeated_nan_row_as_no_change():
    out, state = Output(), InMemoryState()
    for row in (nan_row(1), nan_row(1)):
        ChangelogNormalize().process(state.for_key(1), [(0, UA, row)], Context(), out)
    assert [kind for kind, _ in out.rows] == [I]


def test_the_upsert_materializer_retracts_a_nan_row():
    out, state = Output(), InMemoryState()
    UpsertMaterializer().process(state.for_key(1), [(0, I, nan_row(1)), (0, D, nan_row(1))], Context(), out)
    assert [kind for kind, _ in out.rows] == [I, D]
    assert state.keys() == []
