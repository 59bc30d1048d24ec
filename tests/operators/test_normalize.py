"""Upsert input -> full changelog."""
from operators import RowKind
from operators.normalize import ChangelogNormalize
from operators.testing import LocalRunner

I, UB, UA, D = RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE


def normalize(batches):
    """The changelog of one message key's upserts (None: a tombstone), a batch per call."""
    runner = LocalRunner(ChangelogNormalize(), key=lambda record: b"k1")
    for batch in batches:
        runner.process([(0, UA, row) for row in batch])
    return runner.output.rows


def test_upserts_and_tombstones_become_a_retractable_changelog():
    rows = normalize([[("a", 1), ("a", 2)], [("a", 2), None, None], [("a", 3)]])
    assert rows == [(I, ("a", 1)), (UB, ("a", 1)), (UA, ("a", 2)), (D, ("a", 2)), (I, ("a", 3))]


def test_a_tombstone_for_an_unknown_key_emits_nothing():
    assert normalize([[None]]) == []
