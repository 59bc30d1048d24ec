"""Random valid changelogs of two inputs for the join operators' property tests: inserts, updates as
-U/+U pairs (which may move a row to another join key), deletes, duplicate rows, NULL keys; with a
unique key contained in the join key, a unique key outside it, or no unique key; the operator under
test and the bundles a host hands it. Shared by tests/operators/test_operators_property.py and
tests/service/test_split_side.py."""
from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from operators import InputSpec, JoinSpec, RowKind, compile_condition, make_join

COLUMNS = ("k", "id", "v")  # join key, candidate unique key, payload
K, ID, V = 0, 1, 2
LAYOUTS = {"join_key_unique": (K,), "row_unique": (ID,), "multiset": None}
CONDITIONS = [None, "l.v > r.v", "l.v + r.v <> 3 OR r.v IS NULL"]
EXAMPLES = 300

ops = st.lists(
    st.tuples(
        st.integers(0, 1),  # side
        st.sampled_from(["insert", "insert", "update", "update", "delete"]),
        st.integers(0, 1000),  # which existing row
        st.sampled_from([0, 1, 2, None]),  # key value
        st.integers(0, 50),  # id seed
        st.sampled_from([0, 1, 2, 3, None]),  # payload
    ),
    max_size=40,
)


def changelog(operations, layouts):
    """Turn random operations into a valid changelog per side: (side, kind, row) records."""
    tables = ([], [])
    out = []
    next_id = [0, 0]
    for side, op, pick, key, _, value in operations:
        table, layout = tables[side], layouts[side]
        if op == "insert" or not table:
            if layout == "join_key_unique" and any(r[K] == key for r in table):
                continue  # one row per join key: an insert of a present key would not be a valid changelog
            next_id[side] += 1
            row = (key, next_id[side] if layout != "multiset" else value, value)
            if layout == "multiset" and table and pick % 3 == 0:
                row = table[pick % len(table)]  # an exact duplicate
            table.append(row)
            out.append((side, RowKind.INSERT, row))
        elif op == "delete":
            row = table.pop(pick % len(table))
            out.append((side, RowKind.DELETE, row))
        else:
            i = pick % len(table)
            old = table[i]
            if layout == "join_key_unique":
                new = (old[K], old[ID], value)
            elif layout == "row_unique":
                new = (key, old[ID], value)  # may move to another join key
            else:
                new = (key, value, value)
            table[i] = new
            out += [(side, RowKind.UPDATE_BEFORE, old), (side, RowKind.UPDATE_AFTER, new)]
    return out


def build(join_type, layouts, cond_sql, null_safe, mini_batch=False):
    """The join operator; with ``mini_batch``, the mini-batch operator, whose bundles are then
    whatever each call hands it (its size is never reached)."""
    sides = [InputSpec(COLUMNS, (K,), LAYOUTS[layout]) for layout in layouts]
    cond = compile_condition(cond_sql, COLUMNS, COLUMNS) if cond_sql else None
    size = 10**9 if mini_batch else None
    return make_join(JoinSpec(join_type, sides[0], sides[1], (not null_safe,), cond, mini_batch_size=size)), cond


def bundles(records, bundle_sizes=None):
    """The micro-batches a host hands over (``LocalRunner.process`` makes one call per join key of
    each): without ``bundle_sizes``, one per record; else bundles of those sizes (then 3)."""
    if bundle_sizes is None:
        for record in records:
            yield [record]
        return
    sizes = iter(bundle_sizes)
    while records:
        size = next(sizes, 3)
        batch, records = records[:size], records[size:]
        yield batch


settings_ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
layouts_ = st.tuples(st.sampled_from(list(LAYOUTS)), st.sampled_from(list(LAYOUTS)))
