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


def changelog(n: int, seed: int):
    """A random changelog of both sides on 20 keys: inserts, and retractions of live rows."""
    import random

    rng = random.Random(seed)
    live: list[list] = [[], []]
    records = []
    for _ in range(n):
        side = rng.randrange(2)
        if live[side] and rng.random() < 0.45:
            records.append((side, D, live[side].pop(rng.randrange(len(live[side])))))
        else:
            row = (rng.randrange(20), rng.randrange(5))
            live[side].append(row)
            records.append((side, I, row))
    return records


def test_a_retraction_takes_the_row_computed_for_what_it_retracts_and_the_output_is_the_same(monkeypatch):
    import operators.calc as calc_module

    def counted(row):
        counted.calls += 1
        return calc(row)

    outputs, default = {}, calc_module.RECENT_ROWS
    for kept in (0, default, 8):
        monkeypatch.setattr(calc_module, "RECENT_ROWS", kept)
        counted.calls = 0
        runner = LocalRunner(OutputCalc(join(), counted))
        for record in changelog(3000, seed=5):
            runner.process([record])
        outputs[kept] = (runner.output.rows, [(k, r) for k, r, _ in runner.output.failed], counted.calls)
    none, many, few = outputs[0], outputs[default], outputs[8]
    assert none[:2] == many[:2] == few[:2]  # the same changes emitted and failed, in order
    joined = LocalRunner(join())  # the join's own changes, before the calculation
    for record in changelog(3000, seed=5):
        joined.process([record])
    retractions = sum(1 for kind, _ in joined.output.rows if kind == D)
    assert none[2] == len(joined.output.rows) and retractions > 500  # without kept rows: one per change
    assert many[2] <= none[2] - retractions // 2  # most retractions computed nothing (a failed row is not kept)
    assert many[2] < few[2] <= none[2]  # a bound of 8 keeps fewer


def test_rows_that_cannot_be_kept_are_computed_each_time():
    runner = LocalRunner(OutputCalc(join(), lambda row: (row[0], list(row))))  # a list: unhashable output is fine
    runner.process([(0, I, (1, [4])), (0, D, (1, [4]))])  # an unhashable input row
    assert [(int(k), r) for k, r in runner.output.rows] == [(I, (1, [1, [4], None])), (D, (1, [1, [4], None]))]


def test_a_row_equal_to_another_but_for_the_sign_of_a_zero_is_computed_for_itself(monkeypatch):
    """-0.0 == 0.0, yet CAST(-0.0 AS STRING) is '-0.0': the retraction of (1, -0.0) while (1, 0.0)
    is also in the join's output must take its own computed row, as it does with nothing kept."""
    import operators.calc as calc_module

    def join_multiset():
        spec = JoinSpec(JoinType.LEFT, InputSpec(COLUMNS, (0,), None), InputSpec(COLUMNS, (0,), (0,)),
                        projection=((0, 0), (0, 1), (1, 1)))
        return make_join(spec)

    changes = [(0, I, (1, -0.0)), (0, I, (1, 0.0)), (0, D, (1, -0.0)), (0, D, (1, 0.0)),
               (0, I, (2, 0)), (0, I, (2, 0.0)), (0, D, (2, 0))]
    outputs = {}
    for kept in (0, calc_module.RECENT_ROWS):
        monkeypatch.setattr(calc_module, "RECENT_ROWS", kept)
        runner = LocalRunner(OutputCalc(join_multiset(), lambda row: (row[0], repr(row[1]))))
        for record in changes:
            runner.process([record])
        outputs[kept] = [(int(k), r) for k, r in runner.output.rows]
    assert outputs[calc_module.RECENT_ROWS] == outputs[0]
    assert (D, (1, "-0.0")) in outputs[0] and (D, (2, "0")) in outputs[0]


def test_only_the_named_zero_columns_keep_a_row_from_being_kept(monkeypatch):
    """With the positions where a float's or a decimal's zero may be (the plan knows them from the
    types), a zero elsewhere (an integer column) no longer makes a row be computed again, while a
    float's zero still does."""
    import operators.calc as calc_module

    def counted(row):
        counted.calls += 1
        return (row[0], repr(row[1]), repr(row[2]))

    changes = [(0, I, (0, 0)), (1, I, (0, -0.0)), (1, I, (0, 0.0)), (1, D, (0, -0.0)), (1, D, (0, 0.0)),
               (0, D, (0, 0))]
    runs = {}
    for zeros in (None, (2,), ()):
        monkeypatch.setattr(calc_module, "RECENT_ROWS", 1 << 15)
        counted.calls = 0
        runner = LocalRunner(OutputCalc(join(), counted, zeros))
        for record in changes:
            runner.process([record])
        runs[zeros] = ([(int(k), r) for k, r in runner.output.rows], counted.calls)
    assert runs[None][0] == runs[(2,)][0]  # the same output: -0.0's retraction its own
    assert (D, (0, "0", "-0.0")) in runs[(2,)][0]
    assert runs[(2,)][1] < runs[None][1]  # the integer zeros (k 0, left v 0) kept rows as others do
    assert runs[()][0] != runs[None][0]  # and it is the float column's guard that keeps -0.0 apart
