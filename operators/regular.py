"""Regular streaming joins (INNER, LEFT, RIGHT, FULL) and LEFT SEMI / ANTI joins over changelogs.

The emission rules are Flink's ``StreamingJoinOperator`` and ``StreamingSemiAntiJoinOperator``,
with FLINK-40681 fixed: an accumulate that *replaces* a stored row of the same unique key (a bare
``+U`` or a repeated ``+I`` from an upsert input) is not a new match for the other-side rows the
replaced row already matched, and the matches it loses are retracted.

One call processes all records of one join key (in order) with one state read and one write.

An upsert input (``InputSpec.upsert``) is joined directly: its bare accumulates and key-only
retractions are first turned into a full changelog against the rows the join stores for their
unique keys (the rule of ``normalize.py``), so the output is a full changelog too.
"""
from __future__ import annotations

from typing import Callable, Iterable

from .layouts import ASSOC, COPIES, ROW, WRITTEN, view_for
from .minibatch import MiniBatchJoin
from .normalize import upsert_changes
from .rowkind import ACCUMULATE, DELETE, INSERT
from .rows import nulls, row_builder
from .spec import JoinSpec, null_key_filter
from .splitside import SplitSide
from .state import PROC, Context, KeyState, Output, Record

MAPS = ("left", "right")
"""The maps a key's state may have (``KeyState.map``): a side too large for the key's value."""


class _KeyedJoin:
    """What regular and semi/anti joins share: key checks, state load/store and TTL timers."""

    folds_pairs = False
    split_at = 512
    """Entries of one side beyond which it leaves the key's value for a map of its own
    (``splitside.py``): below it, one read and one write of everything is cheapest."""

    def __init__(self, spec: JoinSpec):
        self.spec = spec
        self.views = (view_for(spec.left), view_for(spec.right))
        self.condition = spec.condition
        self.key_can_match = null_key_filter(spec.filter_nulls, spec.left.join_key, spec.right.join_key)
        ttls = [t for t in (spec.left.state_ttl_ms, spec.right.state_ttl_ms) if t is not None]
        self._ttl = bool(ttls)
        # TTL timers only purge entries that are invisible already (layouts.SideView.visible).
        self.cleanup_grain = max(1, min(ttls) // 16) if ttls else None
        self._upsert = tuple(i for i, s in enumerate((spec.left, spec.right)) if s.upsert)

    def matches(self, side: int, row: tuple, other: dict, now: int) -> list:
        """Visible entries of the other side that ``row`` (on ``side``) joins with."""
        entries = self.views[1 - side].entries(other, now)
        cond = self.condition
        if cond is None:
            return list(entries)
        if side == 0:
            return [e for e in entries if cond(row, e[ROW]) is True]
        return [e for e in entries if cond(e[ROW], row) is True]

    # -- state ---------------------------------------------------------------------------------
    def _load(self, state: KeyState):
        value = state.get()
        if value is None:
            return [{}, {}], None
        left, right, timer = value
        if dict is type(left) is type(right):  # the usual key: both sides in the value
            return [left, right], timer
        sides = [left, right]
        for i, side in enumerate(sides):
            if not isinstance(side, dict):  # a split side's marker: [count, latest written(, row map)]
                row_map = side[2] if len(side) > 2 else None
                sides[i] = SplitSide(state.map(MAPS[i]), side[0], side[1], row_map, self.views[i].entry_key)
        return sides, timer

    def _store(self, state: KeyState, sides: list, timer, now: int) -> None:
        if self._ttl:
            for view, side in zip(self.views, sides):
                view.purge(side, now)
            expiries = [e for e in (v.latest_expiry(s) for v, s in zip(self.views, sides)) if e is not None]
            wanted = max(expiries) if expiries else None
            if wanted != timer:
                if timer is not None:
                    state.delete_timer(PROC, timer)
                if wanted is not None:
                    state.register_timer(PROC, wanted)
                timer = wanted
        left, right = sides
        if dict is type(left) is type(right) and len(left) + len(right) <= self.split_at:
            stored = sides  # the usual key: both sides stay in the value (else each side is checked)
        else:
            stored = [self._split_or_flush(state, i, side) for i, side in enumerate(sides)]
        if stored[0] or stored[1]:
            state.put((stored[0], stored[1], timer))
        else:
            state.clear()

    def _split_or_flush(self, state: KeyState, i: int, side):
        """Side ``i`` as the value keeps it: a dict, or a split side's marker once its changes are
        written to its map (a dict beyond ``split_at`` entries is split first)."""
        if isinstance(side, dict) and len(side) > self.split_at:
            store = state.map(MAPS[i])
            if store is not None:
                side = SplitSide.moved(store, side)
        if isinstance(side, SplitSide):
            if side:
                side = side.flush()
            else:  # back in the value, the map gone
                side.clear()
                side = {}
        return side

    def map_rows(self, value, left, right):
        if value is None:
            return None
        sides = []
        for view, rows, row_map in zip(self.views, value[:2], (left, right)):
            if not isinstance(rows, dict):  # split: its entries are mapped as they are read (_load)
                sides.append([rows[0], rows[1], row_map])
                continue
            entries = {}
            for entry in rows.values():
                row = row_map(entry[ROW])
                entries[view.entry_key(row)] = [row, *entry[1:]]
            sides.append(entries)
        return (sides[0], sides[1], value[2])

    def on_timer(self, state: KeyState, domain: str, ts: int, ctx: Context, out: Output) -> None:
        """A TTL cleanup timer: drop what expired; nothing is emitted."""
        sides, timer = self._load(state)
        if timer == ts:
            timer = None
        self._store(state, sides, timer, ctx.now)

    def process(self, state: KeyState, records: Iterable[Record], ctx: Context, out: Output) -> None:
        """Process records of one join key in order."""
        self.run_bundles(state, (records,), ctx.now, out, self.apply_all)

    def run_bundles(self, state: KeyState, bundles: Iterable[Iterable[Record]], now: int, out: Output,
                    apply: Callable) -> None:
        """The skeleton of one call, shared with mini-batch folding: one state read, then per bundle
        the upsert records turned into a full changelog and ``apply(sides, changes, now, out)``, then
        one state write. A key that can never match (NULL in a key column compared with ``=``) keeps
        no state: ``apply`` gets ``sides=None`` and only null-pads."""
        bundles = [b for b in map(list, bundles) if b]
        if not bundles:
            return
        first = bundles[0][0]
        if not self.key_can_match(first[0], first[2]):
            for bundle in bundles:
                apply(None, self.upserts_to_changes([{}, {}], bundle, now), now, out)
            return
        sides, timer = self._load(state)
        for bundle in bundles:
            apply(sides, self.upserts_to_changes(sides, bundle, now), now, out)
        self._store(state, sides, timer, now)

    def apply_all(self, sides: list | None, changes: list, now: int, out: Output) -> None:
        """Apply full-changelog records one at a time (``sides=None``: a key that cannot match)."""
        if sides is None:
            for side, kind, row in changes:
                self.unmatched(side, kind, row, out)
        else:
            for side, kind, row in changes:
                self.apply(sides, side, kind, row, now, out)

    def upserts_to_changes(self, sides: list, records: list, now: int) -> list:
        """``records`` with those of upsert inputs turned into a full changelog: each against the
        row currently stored for its unique key, or the one an earlier record of the call left.
        (Only an input's own records change its stored rows, so converting up front is exact.)
        Keys that can never match are not stored: their rows are converted within the call only."""
        if not self._upsert:
            return records
        changes, latest = [], {}
        for record in records:
            side, kind, row = record
            if side not in self._upsert:
                changes.append(record)
                continue
            view = self.views[side]
            key = (side, view.entry_key(row))
            if key in latest:
                last = latest[key]
            else:
                entry = view.replaced(sides[side], row, now)
                last = entry[ROW] if entry is not None else None
            new = row if kind in ACCUMULATE else None
            changes.extend((side, k, r) for k, r in upsert_changes(last, new))
            latest[key] = new
        return changes

    def unmatched(self, side: int, kind: int, row: tuple, out: Output) -> None:
        """A record whose join key can never match: no state needed, the output is known."""
        raise NotImplementedError

    def apply(self, sides, side, kind, row, now, out, pending=None) -> None:
        raise NotImplementedError


class RegularJoin(_KeyedJoin):
    """INNER / LEFT / RIGHT / FULL OUTER join with retractions and association counts."""

    folds_pairs = True  # mini-batch -U/+U pairs go through apply_pair

    def __init__(self, spec: JoinSpec):
        if spec.join_type.is_semi_anti:
            raise ValueError("use SemiAntiJoin for SEMI and ANTI joins")
        super().__init__(spec)
        self.outer = (spec.join_type.left_outer, spec.join_type.right_outer)
        self._build = row_builder(spec.projection)
        self._nulls = (nulls(spec.left.width), nulls(spec.right.width))

    # -- emission helpers ----------------------------------------------------------------------
    def _joined(self, out, kind, side, row, other_row, copies=1):
        built = self._build(row, other_row) if side == 0 else self._build(other_row, row)
        for _ in range(copies):
            out.rows.append((kind, built))

    def _padded(self, out, kind, side, row, copies=1):
        built = self._build(row, self._nulls[1]) if side == 0 else self._build(self._nulls[0], row)
        for _ in range(copies):
            out.rows.append((kind, built))

    def unmatched(self, side, kind, row, out):
        if self.outer[side]:
            self._padded(out, INSERT if kind in ACCUMULATE else DELETE, side, row)

    # -- the algorithm -------------------------------------------------------------------------
    def apply(self, sides, side, kind, row, now, out, pending=None):
        """Apply one record. ``pending`` is set while processing a suppressed ``-U``/``+U`` pair of a
        mini-batch: null-padding flips of other-side rows are collected there instead of emitted,
        so that a flip undone by the pair's accumulate is never emitted at all."""
        if kind in ACCUMULATE:
            self._accumulate(sides, side, kind, row, now, out, pending)
        else:
            self._retract(sides, side, kind, row, now, out, pending)

    def _accumulate(self, sides, side, kind, row, now, out, pending):
        mine, other = sides[side], sides[1 - side]
        view = self.views[side]
        input_outer, other_outer = self.outer[side], self.outer[1 - side]
        found = self.matches(side, row, other, now)
        gained = found
        replaced = view.replaced(mine, row, now)
        if replaced is not None:
            gained = self._replace(side, replaced[ROW], found, other, now, out)
        if input_outer and not found:
            self._padded(out, INSERT, side, row)
        else:
            if other_outer:
                for e in gained:
                    if e[ASSOC] == 0:
                        if pending is not None and id(e) in pending:
                            del pending[id(e)]  # the pair's retraction left it at 0: no flip at all
                        else:
                            self._padded(out, DELETE, 1 - side, e[ROW], e[COPIES])
                    e[ASSOC] += 1
                    e[WRITTEN] = now
            out_kind = kind if not (input_outer or other_outer) else INSERT
            for e in found:
                self._joined(out, out_kind, side, row, e[ROW], e[COPIES])
        view.add(mine, row, sum(e[COPIES] for e in found), now)

    def _replace(self, side, old_row, found, other, now, out) -> list:
        """FLINK-40681: retract the matches the replaced row loses; return the truly new matches."""
        before = self.matches(side, old_row, other, now)
        kept = {id(e) for e in found}
        lost = [e for e in before if id(e) not in kept]
        for e in lost:
            self._joined(out, DELETE, side, old_row, e[ROW], e[COPIES])
        if self.outer[1 - side]:
            for e in lost:
                if e[ASSOC] == 1:
                    self._padded(out, INSERT, 1 - side, e[ROW], e[COPIES])
                e[ASSOC] = max(0, e[ASSOC] - 1)
                e[WRITTEN] = now
        had = {id(e) for e in before}
        return [e for e in found if id(e) not in had]

    def _retract(self, sides, side, kind, row, now, out, pending):
        mine, other = sides[side], sides[1 - side]
        self.views[side].retract(mine, row, now)
        input_outer, other_outer = self.outer[side], self.outer[1 - side]
        # A retraction is joined with the other side's current rows even when the retracted row is
        # not (or no longer) stored, e.g. after its TTL expired: its join results were emitted.
        found = self.matches(side, row, other, now)
        if not found:
            if input_outer:
                self._padded(out, DELETE, side, row)
            return
        out_kind = DELETE if input_outer else kind
        for e in found:
            self._joined(out, out_kind, side, row, e[ROW], e[COPIES])
        if other_outer:
            for e in found:
                if e[ASSOC] == 1:
                    if pending is not None:
                        pending[id(e)] = e
                    else:
                        self._padded(out, INSERT, 1 - side, e[ROW], e[COPIES])
                e[ASSOC] = max(0, e[ASSOC] - 1)
                e[WRITTEN] = now

    def apply_pair(self, sides, side, retract: tuple, accumulate: tuple, now, out) -> None:
        """A mini-batch ``-U``/``+U`` pair (``(kind, row)`` each) of one unique key, processed without
        transient flips. Flink suppresses both flips; where the accumulate no longer matches an
        other-side row the retraction left without a match, that row is null-padded after the pair
        (released Flink leaves it with no output row at all)."""
        pending: dict = {}
        self._retract(sides, side, retract[0], retract[1], now, out, pending)
        self._accumulate(sides, side, accumulate[0], accumulate[1], now, out, pending)
        for e in pending.values():  # rows the pair really left without a match
            self._padded(out, INSERT, 1 - side, e[ROW], e[COPIES])


class SemiAntiJoin(_KeyedJoin):
    """LEFT SEMI / LEFT ANTI join: emits left rows while they have (SEMI) or lack (ANTI) a match."""

    def __init__(self, spec: JoinSpec):
        if not spec.join_type.is_semi_anti:
            raise ValueError("SemiAntiJoin is for SEMI and ANTI joins")
        super().__init__(spec)
        self.anti = spec.join_type.value == "ANTI"
        build = row_builder(spec.projection, right=False)
        self._left_out = lambda row: build(row, ())

    def unmatched(self, side, kind, row, out):
        if side == 0 and self.anti:
            out.rows.append((kind, self._left_out(row)))

    def apply(self, sides, side, kind, row, now, out, pending=None):
        if side == 0:
            self._left(sides, kind, row, now, out)
        elif kind in ACCUMULATE:
            self._right_accumulate(sides, kind, row, now, out)
        else:
            self._right_retract(sides, kind, row, now, out)

    def _left(self, sides, kind, row, now, out):
        found = self.matches(0, row, sides[1], now)
        if bool(found) != self.anti:
            out.rows.append((kind, self._left_out(row)))
        if kind in ACCUMULATE:
            self.views[0].add(sides[0], row, sum(e[COPIES] for e in found), now)
        else:
            self.views[0].retract(sides[0], row, now)

    def _gain(self, e, kind, now, out):
        if e[ASSOC] == 0:
            emitted = (DELETE if self.anti else kind, self._left_out(e[ROW]))
            out.rows.extend([emitted] * e[COPIES])
        e[ASSOC] += 1
        e[WRITTEN] = now

    def _lose(self, e, kind, now, out):
        if e[ASSOC] == 1:
            emitted = (INSERT if self.anti else kind, self._left_out(e[ROW]))
            out.rows.extend([emitted] * e[COPIES])
        e[ASSOC] = max(0, e[ASSOC] - 1)
        e[WRITTEN] = now

    def _right_accumulate(self, sides, kind, row, now, out):
        left, right = sides
        found = self.matches(1, row, left, now)
        gained = found
        replaced = self.views[1].replaced(right, row, now)
        if replaced is not None:  # FLINK-40681: only lost and truly new matches count
            before = self.matches(1, replaced[ROW], left, now)
            kept, had = {id(e) for e in found}, {id(e) for e in before}
            for e in before:
                if id(e) not in kept:
                    self._lose(e, DELETE, now, out)
            gained = [e for e in found if id(e) not in had]
        for e in gained:
            self._gain(e, kind, now, out)
        self.views[1].add(right, row, 0, now)

    def _right_retract(self, sides, kind, row, now, out):
        left, right = sides
        self.views[1].retract(right, row, now)
        for e in self.matches(1, row, left, now):
            self._lose(e, kind, now, out)


def make_join(spec: JoinSpec):
    """The operator for ``spec``: the join itself, or, with a bundle size, mini-batch folding over it."""
    join = SemiAntiJoin(spec) if spec.join_type.is_semi_anti else RegularJoin(spec)
    return MiniBatchJoin(join, spec.mini_batch_size) if spec.mini_batch_size else join
