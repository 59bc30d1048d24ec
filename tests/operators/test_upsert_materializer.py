"""The upsert materializer gives the same upserts whatever the interleaving of tasks."""
import itertools

from operators import RowKind
from operators.testing import LocalRunner
from operators.upsert import UpsertMaterializer

I, U, UB, D = RowKind.INSERT, RowKind.UPDATE_AFTER, RowKind.UPDATE_BEFORE, RowKind.DELETE


def upserts(changes):
    """The final upsert of one key and the changelog, the changes handed over one per call."""
    runner = LocalRunner(UpsertMaterializer(), key=lambda record: "k")
    for change in changes:
        runner.process([(0, *change)])
    table = None
    for kind, row in runner.output.rows:
        table = None if kind == D else row
    return table, runner.output.rows


def test_a_row_moving_between_join_keys_ends_as_its_new_version_in_any_interleaving():
    task_a = [(D, ("o1", "book"))]  # the old join key retracts the order
    task_b = [(I, ("o1", "ink"))]  # the new join key inserts it
    for a_first in (True, False):
        changes = task_a + task_b if a_first else task_b + task_a
        prelude = [(I, ("o1", "book"))]
        table, _ = upserts(prelude + changes)
        assert table == ("o1", "ink")


def test_every_interleaving_of_two_ordered_task_streams_gives_the_same_final_upsert():
    a = [(I, ("o1", 1)), (UB, ("o1", 1)), (U, ("o1", 2)), (D, ("o1", 2))]
    b = [(I, ("o1", 10)), (UB, ("o1", 10)), (U, ("o1", 11))]
    finals = set()
    for slots in itertools.combinations(range(len(a) + len(b)), len(a)):
        ia, ib, merged = iter(a), iter(b), []
        for i in range(len(a) + len(b)):
            merged.append(next(ia) if i in slots else next(ib))
        finals.add(upserts(merged)[0])
    assert finals == {("o1", 11)}


def test_deleting_the_last_row_emits_a_delete_and_an_unknown_retraction_nothing():
    table, rows = upserts([(I, ("o1", 1)), (D, ("o1", 9)), (D, ("o1", 1))])
    assert table is None
    assert rows == [(I, ("o1", 1)), (D, ("o1", 1))]
