"""What the SQL front end produces: a :class:`JoinQuery` (with its :class:`OutputColumn` list and an
interval join's :class:`IntervalBounds` or a window join's :class:`WindowTVF`), or a
:class:`QueryError`. Plain data; no SQL parsing here."""

from __future__ import annotations

from dataclasses import dataclass

from operators import JoinType, TemporalKind


class QueryError(ValueError):
    """The JOIN_SQL query is invalid or outside the supported subset."""


@dataclass(frozen=True)
class OutputColumn:
    name: str  # output field name (alias or the column name)
    side: str  # "L" or "R"
    column: str  # source column name on that side


@dataclass(frozen=True)
class IntervalBounds:
    """The time range of an interval join: ``r.t + lower_ms <= l.t <= r.t + upper_ms`` (both
    inclusive; a strict SQL bound is the inclusive bound 1 ms inside)."""

    lower_ms: int
    upper_ms: int
    left_time_column: str | None  # None: processing time (the ``proctime`` pseudo-column)
    right_time_column: str | None
    sql: str  # the bound conjuncts as written

    @property
    def processing_time(self) -> bool:
        return self.left_time_column is None


def interval_sql(ms: int) -> str:
    """``INTERVAL 'n' <unit>`` in the largest unit that gives a whole number."""
    for unit, size in (("DAY", 86_400_000), ("HOUR", 3_600_000), ("MINUTE", 60_000), ("SECOND", 1000)):
        if ms and ms % size == 0:
            return f"INTERVAL '{ms // size}' {unit}"
    return f"INTERVAL '{ms}' MILLISECOND"


@dataclass(frozen=True)
class WindowTVF:
    """The window table function of a window join, the same on both inputs."""

    kind: str  # TUMBLE | HOP | CUMULATE
    size_ms: int  # TUMBLE / HOP size, CUMULATE max size
    slide_ms: int | None
    step_ms: int | None
    offset_ms: int
    left_time_column: str  # each input's DESCRIPTOR column
    right_time_column: str

    def sql(self, table: str, column: str) -> str:
        sizes = {"TUMBLE": (self.size_ms,), "HOP": (self.slide_ms, self.size_ms),
                 "CUMULATE": (self.step_ms, self.size_ms)}[self.kind]
        if self.offset_ms:
            sizes += (self.offset_ms,)
        args = ", ".join(interval_sql(ms) for ms in sizes)
        return f"{self.kind}(TABLE {table}, DESCRIPTOR({column}), {args})"


@dataclass(frozen=True)
class JoinQuery:
    join_type: JoinType
    temporal: TemporalKind | None  # None for a regular or semi/anti join
    left_table: str
    left_alias: str
    right_table: str
    right_alias: str
    equi_keys: tuple[tuple[str, str], ...]  # (left column, right column), in ON order
    null_safe_keys: tuple[bool, ...]  # per key: True for IS NOT DISTINCT FROM
    condition_sql: str | None  # residual condition over l.<col> / r.<col>, or None
    left_time_column: str | None  # event-time temporal: the FOR SYSTEM_TIME AS OF column
    projection: tuple[OutputColumn, ...]
    interval: IntervalBounds | None = None  # an interval join's time range
    window: WindowTVF | None = None  # a window join's window table function
