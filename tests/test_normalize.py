"""Upsert input -> full changelog."""
from operators import Context, Output, RowKind
from operators.testing import InMemoryState
from operators.normalize import ChangelogNormalize

I, UB, UA, D = RowKind.INSERT, RowKind.UPDATE_BEFORE, RowKind.UPDATE_AFTER, RowKind.DELETE


def normalize(batches):
    state, out, op = InMemoryState(), Output(), ChangelogNormalize()
    for batch in batches:
        op.process(state.for_key(b"k1"), [(0, UA, row) for row in batch], Context(), out)
    return out.rows


def test_upserts_and_tombstones_become_a_retractable_changelog():
    rows = normalize([[("a", 1), ("a", 2)], [("a", 2), None, None], [("a", 3)]])
    assert rows == [(I, ("a", 1)), (UB, ("a", 1)), (UA, ("a", 2)), (D, ("a", 2)), (I, ("a", 3))]


def test_a_tombstone_for_an_unknown_key_emits_nothing():
    assert normalize([[None]]) == []
