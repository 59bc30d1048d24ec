"""A NaN equals a NaN where rows are identified (Flink compares rows by their binary form):
a row holding NaN can be retracted, folded away and replaced like any other."""
import pickle
from collections import Counter

import pytest

from operators import ChangelogNormalize, InputSpec, JoinSpec, JoinType, RowKind, UpsertMaterializer, make_join
from operators.testing import LocalRunner

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
    runner = LocalRunner(make_join(spec))
    for record in [(1, I, (1, 2.0)), (0, I, nan_row(1))]:
        runner.process([record])
    assert materialize(runner.output.rows)
    runner.process([(0, D, nan_row(1))])
    runner.process([(1, D, (1, 2.0))])
    assert materialize(runner.output.rows) == Counter()
    assert runner.state.keys() == []


def test_mini_batch_folds_an_insert_and_a_retraction_of_a_nan_row_away():
    spec = JoinSpec(JoinType.LEFT, InputSpec(COLUMNS, (0,)), InputSpec(COLUMNS, (0,)), mini_batch_size=10)
    runner = LocalRunner(make_join(spec))
    runner.process([(0, I, nan_row(1)), (0, D, nan_row(1))])  # one bundle
    assert runner.output.rows == []


def test_normalize_sees_a_repeated_nan_row_as_no_change():
    runner = LocalRunner(ChangelogNormalize(), key=lambda record: 1)
    for row in (nan_row(1), nan_row(1)):
        runner.process([(0, UA, row)])
    assert [kind for kind, _ in runner.output.rows] == [I]


def test_the_upsert_materializer_retracts_a_nan_row():
    runner = LocalRunner(UpsertMaterializer(), key=lambda record: 1)
    runner.process([(0, I, nan_row(1)), (0, D, nan_row(1))])
    assert [kind for kind, _ in runner.output.rows] == [I, D]
    assert runner.state.keys() == []
