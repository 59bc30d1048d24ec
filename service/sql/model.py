"""What the SQL front end produces: a :class:`JoinQuery` (with its :class:`OutputColumn` list and an
interval join's :class:`IntervalBounds` or a window join's :class:`WindowTVF`), or a
:class:`QueryError`. Plain data; no SQL parsing here."""

from __future__ import annotations

from dataclasses import dataclass

from operators import JoinType, TemporalKind

from ..errors import ChangejoinError


class QueryError(ValueError, ChangejoinError):
    """The JOIN_SQL query is invalid or outside the supported subset."""


@dataclass(frozen=True)
class OutputColumn:
    """One column of the output: a column of one input copied (``side``, ``column``), or an
    expression over the joined row (``expression``: a typed node of ``expressions``, its columns
    ``["col", type, "L" | "R", index into that side's joined columns]``)."""

    name: str  # output field name (alias, the column name, or EXPR$<position>)
    side: str | None  # "L" or "R"; None for an expression
    column: str | None  # source column name on that side
    expression: list | None = None
    sql: str | None = None  # the expression as written
    type: str | None = None  # the expression's derived type


@dataclass(frozen=True)
class InputCalc:
    """What an input goes through before the join: an input subquery's filter and projection
    (``FROM (SELECT ... FROM t WHERE ...) AS a``), a pushed-down WHERE, computed equi-keys.

    The joined row is the input row, the columns the query does not read set to NULL (``kept``:
    the input columns kept, None for all), followed by the ``computed`` columns, each ``(name,
    type, typed node over the input row "I", SQL)``; ``filter`` keeps the rows it is TRUE for."""

    computed: tuple[tuple[str, str, list, str], ...] = ()
    filter: list | None = None
    filter_sql: str | None = None
    kept: tuple[str, ...] | None = None


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
    condition: list | None = None  # the residual condition, typed (over "L"/"R" joined columns)
    where: list | None = None  # a WHERE kept after the join (over "L"/"R" joined columns, padded sides nullable)
    where_sql: str | None = None
    inputs: tuple = (None, None)  # per input, its InputCalc or None
