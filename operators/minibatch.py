"""Mini-batch folding (Flink's ``MiniBatchStreamingJoinOperator``).

Records of a bundle are folded per side before they reach the join:

- inputs with a unique key, per unique key: accumulate after accumulate keeps the later row (with
  the earlier kind, so ``+I`` then ``+U`` stays ``+I``); accumulate then retract cancel out; retract
  after retract keeps the later retraction; a retraction followed by an accumulate stays a pair and
  is processed without the transient null-padding flips between the two;
- inputs without a unique key: an accumulate and a retraction of the identical row cancel out.

Records of upsert inputs are first turned into a full changelog (``_KeyedJoin.upserts_to_changes``).

A flush processes the non-preserved side first (left then right for RIGHT joins, right then left
otherwise), so rows matched within the same bundle get no transient null-padded output.
"""
from __future__ import annotations

from typing import Iterable

from .regular import RegularJoin, _KeyedJoin
from .rowkind import RowKind
from .spec import JoinType
from .state import Context, KeyState, Output

_ACCUMULATE = (RowKind.INSERT, RowKind.UPDATE_AFTER)


def _fold_unique(records: list) -> list[list]:
    groups: dict = {}
    for record in records:
        key, kind, row = record[0], record[1], record[2]
        group = groups.setdefault(key, [])
        accumulate = kind in _ACCUMULATE
        if group and group[-1][1] in _ACCUMULATE:
            if accumulate:
                group[-1] = (key, group[-1][1], row)
            else:
                group.pop()
        elif group and not accumulate:
            group[-1] = (key, kind, row)
        else:
            group.append(record)
    return [[(kind, row) for _, kind, row in g] for g in groups.values() if g]


def _fold_multiset(records: list) -> list[list]:
    kept: list = []
    for kind, row in records:
        accumulate = kind in _ACCUMULATE
        for i in range(len(kept) - 1, -1, -1):
            if kept[i] is not None and kept[i][1] == row and (kept[i][0] in _ACCUMULATE) != accumulate:
                kept[i] = None
                break
        else:
            kept.append((kind, row))
    return [[r] for r in kept if r is not None]


def fold(join: _KeyedJoin, side: int, records: list) -> list[list]:
    """Fold one side's records of a bundle (all of one join key) into groups to process in order."""
    view = join.views[side]
    if view.replaces:
        return _fold_unique([(view.entry_key(row), kind, row) for kind, row in records])
    return _fold_multiset(records)


def process_bundle(join: _KeyedJoin, state: KeyState, records: Iterable, ctx: Context, out: Output) -> None:
    """Fold and process one join key's records of a bundle with one state read and one write."""
    records = list(records)
    if not records:
        return
    if not join.key_can_match(records[0][0], records[0][2]):
        records = join.upserts_to_changes([{}, {}], records, ctx.now)
        per_side = [[(k, r) for s, k, r in records if s == side] for side in (0, 1)]
        for side in _order(join):
            for group in fold(join, side, per_side[side]):
                for kind, row in group:
                    join.unmatched(side, kind, row, out)
        return
    sides, timer = join._load(state)
    now = ctx.now
    records = join.upserts_to_changes(sides, records, now)
    per_side = [[(k, r) for s, k, r in records if s == side] for side in (0, 1)]
    for side in _order(join):
        for group in fold(join, side, per_side[side]):
            if (
                len(group) == 2
                and isinstance(join, RegularJoin)
                and group[0][0] not in _ACCUMULATE
                and group[1][0] in _ACCUMULATE
            ):
                join.apply_pair(sides, side, group[0], group[1], now, out)
            else:
                for kind, row in group:
                    join.apply(sides, side, kind, row, now, out)
    join._store(state, sides, timer, now)


def _order(join: _KeyedJoin) -> tuple[int, int]:
    return (0, 1) if join.spec.join_type is JoinType.RIGHT else (1, 0)
