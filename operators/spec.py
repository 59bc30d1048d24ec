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


def _require_append_only(inputs_append_only: tuple[bool, bool], left: InputSpec, right: InputSpec, what: str) -> None:
    for name, append_only, side in (("left", inputs_append_only[0], left), ("right", inputs_append_only[1], right)):
        if side.upsert or not append_only:
            raise ConfigurationError(
                f"the {name} input of {what} must be append-only (every record +I): Flink plans this join "
                f"only for insert-only inputs; use a regular join for changelog inputs"
            )


@dataclass(frozen=True)
class IntervalJoinSpec:
    """``l.k = r.k AND r.t + lower_ms <= l.t <= r.t + upper_ms``: a time-bounded join of two
    append-only streams (Flink's ``RowTimeIntervalJoin`` / ``ProcTimeIntervalJoin``).

    Both bounds are inclusive (a strict SQL bound is given as the inclusive bound 1 ms inside).
    ``left_time`` / ``right_time`` are the event-time column indexes; both None means processing
    time (a row's time is the clock at its arrival)."""

    join_type: JoinType  # INNER, LEFT, RIGHT or FULL
    left: InputSpec
    right: InputSpec
    lower_ms: int
    upper_ms: int
    left_time: int | None = None
    right_time: int | None = None
    filter_nulls: tuple[bool, ...] = ()
    condition: Condition | None = None
    projection: tuple[tuple[int, int], ...] | None = None
    # Flink's table.exec.interval-join.min-cleanup-interval: delays clean-up timers, hence padding.
    min_cleanup_interval_ms: int = 0
    # Converts a time column's value to epoch millis; identity by default.
    time_of: Callable[[Any], Any] | None = None
    inputs_append_only: tuple[bool, bool] = (True, True)

    def __post_init__(self):
        if self.join_type.is_semi_anti:
            raise ConfigurationError(f"interval joins support INNER, LEFT, RIGHT and FULL, not {self.join_type.value}")
        _require_append_only(self.inputs_append_only, self.left, self.right, "an interval join")
        for name in ("lower_ms", "upper_ms"):
            bound = getattr(self, name)
            if isinstance(bound, bool) or not isinstance(bound, int):
                raise ConfigurationError(f"an interval join needs an integer {name}, got {bound!r}")
        if len(self.left.join_key) != len(self.right.join_key):
            raise ValueError("left and right join keys must have the same number of columns")
        if (self.left_time is None) != (self.right_time is None):
            raise ConfigurationError(
                "both inputs of an interval join must use the same time domain: give an event-time column "
                "on both sides, or processing time on both"
            )
        if self.min_cleanup_interval_ms < 0:
            raise ConfigurationError("min_cleanup_interval_ms must not be negative")
        if not self.filter_nulls:
            object.__setattr__(self, "filter_nulls", (True,) * len(self.left.join_key))

    @property
    def event_time(self) -> bool:
        return self.left_time is not None

    @property
    def negative_size(self) -> bool:
        """No pair can ever match (``lower_ms > upper_ms``): Flink plans no join operator."""
        return self.lower_ms > self.upper_ms

    @property
    def left_relative_size(self) -> int:
        """How long after a left row's time a right row may still match it: ``-lower_ms``."""
        return -self.lower_ms

    @property
    def right_relative_size(self) -> int:
        return self.upper_ms

    @property
    def output_watermark_delay_ms(self) -> int:
        """How far the output watermark is held back so joined rows are not late downstream."""
        if not self.event_time or self.negative_size:
            return 0
        return max(-self.lower_ms, self.upper_ms)

    @property
    def output_width(self) -> int:
        return len(self.projection) if self.projection is not None else self.left.width + self.right.width


class WindowKind(str, Enum):
    TUMBLE = "TUMBLE"
    HOP = "HOP"
    CUMULATE = "CUMULATE"


WINDOW_COLUMNS = ("window_start", "window_end", "window_time")


@dataclass(frozen=True)
class WindowSpec:
    """A window table function, the same on both inputs of a window join.

    ``size_ms`` is the window size (TUMBLE, HOP) or the maximum size (CUMULATE); ``slide_ms`` is
    HOP's slide, ``step_ms`` CUMULATE's step."""

    kind: WindowKind
    size_ms: int
    slide_ms: int | None = None
    step_ms: int | None = None
    offset_ms: int = 0

    def __post_init__(self):
        if self.size_ms is None or self.size_ms <= 0:
            raise ConfigurationError(f"a {self.kind.value} window needs a positive size")
        if self.kind is WindowKind.HOP and (self.slide_ms is None or self.slide_ms <= 0):
            raise ConfigurationError("a HOP window needs a positive slide")
        if self.kind is WindowKind.CUMULATE:
            if self.step_ms is None or self.step_ms <= 0:
                raise ConfigurationError("a CUMULATE window needs a positive step")
            if self.size_ms % self.step_ms:
                raise ConfigurationError(
                    f"a CUMULATE window's max size ({self.size_ms} ms) must be an integral multiple of its "
                    f"step ({self.step_ms} ms)"
                )

    @staticmethod
    def _start(t: int, offset: int, size: int) -> int:
        return t - (t - offset) % size  # Python's % is non-negative for a positive size

    def windows(self, t: int) -> list[tuple[int, int]]:
        """The windows ``[start, end)`` a row with time ``t`` belongs to, in increasing end order."""
        o = self.offset_ms
        if self.kind is WindowKind.TUMBLE:
            s = self._start(t, o, self.size_ms)
            return [(s, s + self.size_ms)]
        if self.kind is WindowKind.HOP:
            out = []
            s = self._start(t, o, self.slide_ms)
            while s > t - self.size_ms:
                out.append((s, s + self.size_ms))
                s -= self.slide_ms
            out.reverse()
            return out
        s = self._start(t, o, self.size_ms)
        e = self._start(t, o, self.step_ms) + self.step_ms
        out = []
        while e <= s + self.size_ms:
            out.append((s, e))
            e += self.step_ms
        return out


@dataclass(frozen=True)
class WindowJoinSpec:
    """A join of two window table functions on window equality plus the join key (Flink's
    ``WindowJoinOperator``). Event time only; ``left_time`` / ``right_time`` are the columns the
    windows are assigned on.

    The condition and the projection see *windowed* rows: the input row followed by
    ``window_start``, ``window_end`` and ``window_time`` (``WINDOW_COLUMNS``)."""

    join_type: JoinType  # INNER, LEFT, RIGHT, FULL, SEMI or ANTI
    left: InputSpec
    right: InputSpec
    window: WindowSpec
    left_time: int | None
    right_time: int | None
    filter_nulls: tuple[bool, ...] = ()
    condition: Condition | None = None
    projection: tuple[tuple[int, int], ...] | None = None
    time_of: Callable[[Any], Any] | None = None
    inputs_append_only: tuple[bool, bool] = (True, True)

    def __post_init__(self):
        _require_append_only(self.inputs_append_only, self.left, self.right, "a window join")
        if len(self.left.join_key) != len(self.right.join_key):
            raise ValueError("left and right join keys must have the same number of columns")
        if self.left_time is None or self.right_time is None:
            raise ConfigurationError(
                "a window join needs an event-time column on both sides: Flink's window join has no "
                "processing-time mode"
            )
        if not self.filter_nulls:
            object.__setattr__(self, "filter_nulls", (True,) * len(self.left.join_key))

    @property
    def output_width(self) -> int:
        if self.projection is not None:
            return len(self.projection)
        width = self.left.width + len(WINDOW_COLUMNS)
        return width if self.join_type.is_semi_anti else width + self.right.width + len(WINDOW_COLUMNS)
