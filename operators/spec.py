"""What a join is: its type, keys, unique keys, condition, output and state settings.

A :class:`JoinSpec` is pure data handed to the operators. Rows are tuples in schema order, columns
are referenced by index, and the extra condition is a compiled callable (see ``condition.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Sequence

from .condition import Condition


class JoinType(str, Enum):
    INNER = "INNER"
    LEFT = "LEFT"
    RIGHT = "RIGHT"
    FULL = "FULL"
    SEMI = "SEMI"
    ANTI = "ANTI"

    @property
    def left_outer(self) -> bool:
        return self in (JoinType.LEFT, JoinType.FULL)

    @property
    def right_outer(self) -> bool:
        return self in (JoinType.RIGHT, JoinType.FULL)

    @property
    def is_semi_anti(self) -> bool:
        return self in (JoinType.SEMI, JoinType.ANTI)


class StateLayout(str, Enum):
    """How one input's rows are kept per join key (Flink's ``JoinInputSideSpec``)."""

    JOIN_KEY_CONTAINS_UNIQUE_KEY = "JoinKeyContainsUniqueKey"  # at most one row per join key
    INPUT_SIDE_HAS_UNIQUE_KEY = "InputSideHasUniqueKey"  # unique key -> row
    INPUT_SIDE_HAS_NO_UNIQUE_KEY = "InputSideHasNoUniqueKey"  # multiset: row -> number of copies


def choose_layout(join_key: Sequence[int], unique_key: Sequence[int] | None) -> StateLayout:
    """Pick the state layout from the join key and the input's declared unique (primary) key.

    Mirrors Flink's planner: a unique key contained in the join key means one row per join key;
    any other unique key means a map keyed by it; no unique key means a multiset.
    """
    if not unique_key:
        return StateLayout.INPUT_SIDE_HAS_NO_UNIQUE_KEY
    if set(unique_key) <= set(join_key):
        return StateLayout.JOIN_KEY_CONTAINS_UNIQUE_KEY
    return StateLayout.INPUT_SIDE_HAS_UNIQUE_KEY


@dataclass(frozen=True)
class InputSpec:
    """One input of a regular or semi/anti join."""

    columns: tuple[str, ...]
    join_key: tuple[int, ...]
    unique_key: tuple[int, ...] | None = None
    state_ttl_ms: int | None = None  # processing-time TTL of this side's state, None = keep forever
    # An upsert input joined directly: an accumulate is the new row of its unique key (a bare +U),
    # a retraction deletes the key's row and needs to carry only the unique-key columns (a
    # tombstone). The join turns these into a full changelog against the row it stores for the key.
    upsert: bool = False

    def __post_init__(self):
        if self.upsert and not (self.unique_key and set(self.join_key) <= set(self.unique_key)):
            raise ConfigurationError(
                "an upsert input can be joined directly only when every join-key column is part of its "
                "unique key (all changes of a unique key then meet in one join key); normalize it first"
            )

    @property
    def width(self) -> int:
        return len(self.columns)

    @property
    def layout(self) -> StateLayout:
        return choose_layout(self.join_key, self.unique_key)


@dataclass(frozen=True)
class JoinSpec:
    """A regular (INNER/LEFT/RIGHT/FULL) or LEFT SEMI/ANTI join."""

    join_type: JoinType
    left: InputSpec
    right: InputSpec
    # Per join-key column: True when NULL never matches (SQL `=`), False for null-safe equality.
    filter_nulls: tuple[bool, ...] = ()
    condition: Condition | None = None
    # Output columns as (side, index) with side 0 = left, 1 = right; None = all left then all right.
    projection: tuple[tuple[int, int], ...] | None = None
    mini_batch_size: int | None = None

    def __post_init__(self):
        if len(self.left.join_key) != len(self.right.join_key):
            raise ValueError("left and right join keys must have the same number of columns")
        if not self.filter_nulls:
            object.__setattr__(self, "filter_nulls", (True,) * len(self.left.join_key))

    @property
    def output_width(self) -> int:
        if self.projection is not None:
            return len(self.projection)
        return self.left.width + (0 if self.join_type.is_semi_anti else self.right.width)


class TemporalKind(str, Enum):
    EVENT_TIME = "event_time"
    PROCESSING_TIME = "processing_time"


@dataclass(frozen=True)
class TemporalJoinSpec:
    """``probe FOR SYSTEM_TIME AS OF`` join: left = probe stream, right = versioned/latest table."""

    kind: TemporalKind
    join_type: JoinType  # INNER or LEFT
    left: InputSpec
    right: InputSpec
    filter_nulls: tuple[bool, ...] = ()
    condition: Condition | None = None
    projection: tuple[tuple[int, int], ...] | None = None
    left_time: int | None = None  # event-time column index of the probe side
    right_time: int | None = None  # version-time column index of the build side
    # Converts a time column's value to a comparable number (epoch millis); identity by default.
    time_of: Callable[[Any], Any] | None = None
    # Idle-state retention (processing time): (min, max) milliseconds, None = keep forever.
    retention_ms: tuple[int, int] | None = None
    drop_update_before_on_right: bool = False
    right_is_versioned: bool = True  # build side has a primary key and event time (a versioned table)

    def __post_init__(self):
        if self.left.upsert or self.right.upsert:
            raise ConfigurationError("the inputs of a temporal join must be changelogs: normalize upsert inputs first")
        if self.join_type not in (JoinType.INNER, JoinType.LEFT):
            raise ConfigurationError(f"temporal joins support INNER and LEFT, not {self.join_type.value}")
        if not self.filter_nulls:
            object.__setattr__(self, "filter_nulls", (True,) * len(self.left.join_key))
        if self.kind is TemporalKind.EVENT_TIME and (self.left_time is None or self.right_time is None):
            raise ConfigurationError("an event-time temporal join needs an event-time column on both sides")
        if self.kind is TemporalKind.PROCESSING_TIME and self.right_time is not None and self.right_is_versioned:
            raise ConfigurationError(
                "a processing-time temporal join (FOR SYSTEM_TIME AS OF PROCTIME()) cannot use a versioned "
                "table with an event-time attribute as its build side; Flink only allows processing-time "
                "temporal joins against lookup tables. Join the versioned table as of the probe's event "
                "time instead (FOR SYSTEM_TIME AS OF <left>.<time column>)"
            )


class ConfigurationError(ValueError):
    """A join that cannot be built as configured."""


def null_key_filter(filter_nulls, left_key, right_key):
    """``can_match(side, row)``: False when a NULL sits in a join-key column compared with ``=``;
    such a row matches nothing (it is still stored, and null-padded on a preserved side)."""
    filtered = tuple((left_key[i], right_key[i]) for i, f in enumerate(filter_nulls) if f)

    def can_match(side: int, row: tuple) -> bool:
        for pair in filtered:
            if row[pair[side]] is None:
                return False
        return True

    return can_match
