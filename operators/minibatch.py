"""Mini-batch folding (Flink's ``MiniBatchStreamingJoinOperator``).

Records of a bundle are folded per side before they reach the join:

- inputs with a unique key, per unique key: accumulate after accumulate keeps the later row (with
  the earlier kind, so ``+I`` then ``+U`` stays ``+I``); accumulate then retract cancel out; retract
  after retract keeps the later retraction; a retraction followed by an accumulate stays a pair and
  is processed without the transient null-padding flips between the two;
- inputs without a unique key: an accumulate and a retraction of the identical row cancel out.

Records of upsert inputs are first turned into a full changelog (``_KeyedJoin.upserts_to_changes``).
:class:`MiniBatchJoin` is the operator; ``regular.make_join`` returns it for a spec with a
``mini_batch_size``.

A flush processes the non-preserved side first (left then right for RIGHT joins, right then left
otherwise), so rows matched within the same bundle get no transient null-padded output.
"""
from __future__ import annotations

from typing import Iterable

from .rowkind import ACCUMULATE
from .rows import identity
from .spec import JoinType
from .state import Context, KeyState, Output, Record


def _fold_unique(records: list) -> list[list]:
    groups: dict = {}
    for record in records:
        key, kind, row = record[0], record[1], record[2]
        group = groups.setdefault(key, [])
        accumulate = kind in ACCUMULATE
        if group and group[-1][1] in ACCUMULATE:
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
    kept: list = []  # (kind, row, identity) or None once cancelled
    for kind, row in records:
        accumulate = kind in ACCUMULATE
        key = identity(row)
        for i in range(len(kept) - 1, -1, -1):
            if kept[i] is not None and kept[i][2] == key and (kept[i][0] in ACCUMULATE) != accumulate:
                kept[i] = None
                break
        else:
            kept.append((kind, row, key))
    return [[r[:2]] for r in kept if r is not None]


def fold(join, side: int, records: list) -> list[list]:
    """Fold one side's records of a bundle (all of one join key) into groups to process in order."""
    view = join.views[side]
    if view.replaces:
        return _fold_unique([(view.entry_key(row), kind, row) for kind, row in records])
    return _fold_multiset(records)


class MiniBatchJoin:
    """A regular or semi/anti join whose records are folded in bundles of up to ``size`` records
    per key before they are joined. One call reads and writes the key's state once, whatever the
    number of bundles; the join's own state and timers are used unchanged."""

    def __init__(self, join, size: int):
        self.join = join
        self.size = size
        self.spec = join.spec
        self.cleanup_grain = join.cleanup_grain
        # The non-preserved side first, so rows matched within a bundle get no transient padding.
        self._order = (0, 1) if join.spec.join_type is JoinType.RIGHT else (1, 0)

    def process(self, state: KeyState, records: Iterable[Record], ctx: Context, out: Output) -> None:
        records = list(records)
        size = self.size
        bundles = [records[i : i + size] for i in range(0, len(records), size)]
        self.join.run_bundles(state, bundles, ctx.now, out, self._flush)

    def on_timer(self, state: KeyState, domain: str, ts: int, ctx: Context, out: Output) -> None:
        self.join.on_timer(state, domain, ts, ctx, out)

    def map_rows(self, value, left, right):
        return self.join.map_rows(value, left, right)

    def _flush(self, sides: list | None, changes: list, now: int, out: Output) -> None:
        """Fold one bundle's full changelog per side and apply the groups (``sides=None``: a key
        that cannot match, whose records are only null-padded)."""
        join = self.join
        per_side = [[(k, r) for s, k, r in changes if s == side] for side in (0, 1)]
        for side in self._order:
            for group in fold(join, side, per_side[side]):
                if sides is None:
                    for kind, row in group:
                        join.unmatched(side, kind, row, out)
                elif len(group) == 2 and join.folds_pairs and group[0][0] not in ACCUMULATE \
                        and group[1][0] in ACCUMULATE:
                    join.apply_pair(sides, side, group[0], group[1], now, out)
                else:
                    for kind, row in group:
                        join.apply(sides, side, kind, row, now, out)
