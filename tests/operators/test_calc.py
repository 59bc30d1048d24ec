"""OutputCalc: a join's output computed from its joined rows, a WHERE after the join, failures
reported and not emitted; the wrapped join and its state untouched."""
from operators import InputSpec, JoinSpec, JoinType, OutputCalc, RowKind, make_join
from operators.testing import LocalRunner

COLUMNS = ("k", "v")
I, D = int(RowKind.INSERT), int(RowKind.DELETE)


def join():
    spec = JoinSpec(JoinType.LEFT, InputSpec(COLUMNS, (0,), (0,)), InputSpec(COLUMNS, (0,), (0,)),
                    projection=((0, 0), (0, 1), (1, 1)))
    return make_join(spec)


def calc(row):
    """v + the right's v where the right's v is not 0 (a WHERE), 100 // the left's v (fails for 0)."""
    k, left, right = row
    if right == 0:
        return None
    return (k, 100 // left, None if right is None else left + right)


def test_the_output_is_computed_filtered_and_its_failures_reported():
    runner = LocalRunner(OutputCalc(join(), calc))
    runner.process([(0, I, (1, 4)), (0, I, (2, 0)), (1, I, (1, 6)), (1, I, (2, 3)), (1, D, (1, 6)),
                    (1, I, (1, 0))])
    assert [(int(k), r) for k, r in runner.output.rows] == [
        (I, (1, 25, None)), (D, (1, 25, None)), (I, (1, 25, 10)), (D, (1, 25, 10)), (I, (1, 25, None)),
        (D, (1, 25, None))]  # the last match (right v 0) filtered out, its padded row's retraction kept
    # left row 2's every output divides by zero: each change reported, none emitted
    assert [(int(k), row) for k, row, _ in runner.output.failed] == [(I, (2, 0, None)), (D, (2, 0, None)),
                                                                       (I, (2, 0, 3))]
    assert all("ZeroDivisionError" in why or "division" in why for _, _, why in runner.output.failed)


def test_it_is_the_join_underneath():
    inner = join()
    wrapped = OutputCalc(inner, calc)
    assert wrapped.spec is inner.spec and wrapped.map_rows(None, None, None) == inner.map_rows(None, None, None)
