"""The join plan: what the configuration asks for, resolved against the input schemas.

``build_plan`` runs once on the driver (``run`` and ``check-config``). It loads the input schemas,
parses ``JOIN_SQL``, resolves every column to its index, chooses each input's state layout from
its join key and primary key, and derives the output schema. The resulting :class:`JoinPlan` is
plain data (JSON-serializable), shipped to Spark's Python workers, where
:meth:`JoinPlan.operator` builds the join operator once per process.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from enum import StrEnum
from functools import cached_property

from operators import (
    ConditionError,
    ConfigurationError,
    InputSpec,
    IntervalJoinSpec,
    JoinSpec,
    JoinType,
    StateLayout,
    TemporalJoinSpec,
    TemporalKind,
    WindowJoinSpec,
    WindowKind,
    WindowSpec,
    choose_layout,
    compile_condition,
    make_interval_join,
    make_join,
    make_temporal_join,
    make_window_join,
)
from operators.condition import comparable
from operators.spec import WINDOW_COLUMNS

from .avro import (
    SchemaRegistry,
    field_defaults,
    load_schema_file,
    output_schema,
    record_columns,
    to_epoch_millis,
    type_family,
)
from .config import Settings
from .keys import KeyDecoder
from .sql import QueryError, describe, interval_sql, parse_join_sql

log = logging.getLogger(__name__)



class PlanKind(StrEnum):
    """Which family of join the plan runs."""

    REGULAR = "regular"  # regular and semi/anti joins
    TEMPORAL_EVENT_TIME = "temporal_event_time"  # FOR SYSTEM_TIME AS OF <left time column>
    TEMPORAL_PROCESSING_TIME = "temporal_processing_time"  # FOR SYSTEM_TIME AS OF PROCTIME()
    INTERVAL_EVENT_TIME = "interval_event_time"  # ON ... r.t BETWEEN l.t - INTERVAL ... AND l.t + INTERVAL ...
    INTERVAL_PROCESSING_TIME = "interval_processing_time"  # the same bounds on l.proctime / r.proctime
    WINDOW = "window"  # TABLE(TUMBLE | HOP | CUMULATE(...)) joined on window_start, window_end and the key


#: Kinds whose rows carry event times and whose join runs on the watermark.
EVENT_TIME_KINDS = (PlanKind.TEMPORAL_EVENT_TIME, PlanKind.INTERVAL_EVENT_TIME, PlanKind.WINDOW)
#: Kinds that need append-only inputs (as in Flink) and clean their state up by time, not by TTL.
TIME_BOUNDED_KINDS = (PlanKind.INTERVAL_EVENT_TIME, PlanKind.INTERVAL_PROCESSING_TIME, PlanKind.WINDOW)
# A window column's Avro type: epoch milliseconds.
_WINDOW_COLUMN_TYPE = {"type": "long", "logicalType": "timestamp-millis"}


class TimeMode(StrEnum):
    """The ``timeMode`` of the join's ``transformWithState``: which timers the operator gets."""

    NONE = "None"
    PROCESSING_TIME = "ProcessingTime"
    EVENT_TIME = "EventTime"


class OutputMode(StrEnum):
    RETRACT = "retract"
    UPSERT = "upsert"


class PlanError(ValueError):
    """The configuration is consistent but the join it describes cannot be built."""


@dataclass(frozen=True)
class SidePlan:
    """One input: its topic, columns and how its rows are keyed."""

    side: int  # 0 = left, 1 = right
    topic: str
    table: str
    columns: tuple[str, ...]
    avro_types: tuple  # per column, the Avro type JSON
    nullable: tuple[bool, ...]
    reader_schema: dict
    join_key: tuple[int, ...]
    primary_key: tuple[int, ...] | None
    changelog_mode: str  # retract | upsert | append
    time_column: int | None = None  # event-time column (temporal joins)
    watermark_delay_ms: int = 0
    state_ttl_ms: int | None = None
    # An upsert input whose join key is its primary key is joined directly, without a normalize
    # stage; its tombstones find their join key through the message key (keys.py).
    direct_upsert: bool = False
    key_format: str = "auto"

    @property
    def name(self) -> str:
        return "left" if self.side == 0 else "right"

    @property
    def families(self) -> tuple[str, ...]:
        """Each column's type family (``avro.type_family``), for type checks."""
        return tuple(type_family(t) for t in self.avro_types)

    @property
    def layout(self) -> StateLayout:
        return choose_layout(self.join_key, self.primary_key)

    def input_spec(self) -> InputSpec:
        return InputSpec(self.columns, self.join_key, self.primary_key, self.state_ttl_ms, upsert=self.direct_upsert)

    @property
    def normalized(self) -> bool:
        """An upsert input that goes through a normalize stage before the join."""
        return self.changelog_mode == "upsert" and not self.direct_upsert


@dataclass(frozen=True)
class JoinPlan:
    kind: PlanKind
    join_type: JoinType
    left: SidePlan
    right: SidePlan
    filter_nulls: tuple[bool, ...]
    condition_sql: str | None
    projection: tuple[tuple[int, int], ...]
    output_names: tuple[str, ...]
    output_schema: dict
    output_key: tuple[int, ...] | None  # output column indexes forming the message key
    mini_batch_size: int | None = None
    retention_ms: tuple[int, int] | None = None
    output_mode: OutputMode = OutputMode.RETRACT
    # Interval joins: (lower, upper) in ms, a pair matching when r.t + lower <= l.t <= r.t + upper.
    interval_ms: tuple[int, int] | None = None
    # Window joins: the window table function, as WindowSpec's fields (kind, size_ms, slide_ms, ...).
    window: dict | None = None
    # The input columns (left, right) of every schema the checkpoint's state has seen, oldest first
    # (service/checkpoint.py); stored rows of an older generation are upgraded as they are read.
    state_generations: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    # The upsert materializer's output rows of every output the checkpoint's state has seen, oldest
    # first: per output column [side, input column, nullable] (``output_sources``).
    output_generations: tuple[tuple[tuple, ...], ...] = ()
    description: str = field(default="", compare=False)

    @property
    def sides(self) -> tuple[SidePlan, SidePlan]:
        return (self.left, self.right)

    @property
    def state_generation(self) -> int:
        """The generation rows are stored in now (0 without schema evolution)."""
        return max(0, len(self.state_generations) - 1)

    def row_upgrade(self, generation: int, side: int):
        """``row -> row``: a stored row of ``generation`` in this plan's columns of ``side``; columns
        that were added get their Avro default, removed ones are dropped."""
        old = self.state_generations[generation][side]
        side_plan = self.sides[side]
        added = [c for c in side_plan.columns if c not in old]
        defaults = field_defaults(side_plan.reader_schema, added) if added else {}
        picks = tuple((old.index(c), None) if c in old else (None, defaults[c]) for c in side_plan.columns)
        return lambda row: tuple(row[i] if i is not None else default for i, default in picks)

    @property
    def is_event_time(self) -> bool:
        """Rows carry event times and the join runs on the watermark."""
        return self.kind in EVENT_TIME_KINDS

    @property
    def time_mode(self) -> TimeMode:
        """One time mode per stateful operator in Spark: event time for the joins on the watermark,
        processing time for processing-time interval joins and for state TTL / retention timers."""
        if self.is_event_time:
            return TimeMode.EVENT_TIME
        if self.kind is PlanKind.INTERVAL_PROCESSING_TIME:
            return TimeMode.PROCESSING_TIME
        if self.retention_ms is not None or any(s.state_ttl_ms for s in self.sides):
            return TimeMode.PROCESSING_TIME  # state TTL or idle-state retention timers
        return TimeMode.NONE

    def join_key_of(self, side: int):
        """``row -> tuple``: the join key of a row of ``side``, as the values both sides group by.
        Spark groups by the key's bytes (``envelope.join_key_group``), so where SQL compares
        numbers of different types (an INT with a DOUBLE) the values are cast as SQL would (to
        DOUBLE; to DECIMAL between integers and decimals), and decimals of any scale normalized
        (1.50 and 1.5 are one key)."""
        indexes = self.sides[side].join_key
        casts = []
        for left, right in zip(self.left.join_key, self.right.join_key):
            pair = {self.left.families[left], self.right.families[right]}
            casts.append(_to_float if "float" in pair and len(pair) > 1 else _to_decimal if "decimal" in pair else None)
        if not any(casts):
            return lambda row: tuple(row[i] for i in indexes)
        steps = tuple(zip(indexes, casts))
        return lambda row: tuple(row[i] if cast is None or row[i] is None else cast(row[i]) for i, cast in steps)

    @property
    def late_sides(self) -> tuple[int, ...]:
        """The inputs whose rows the join may drop as late (and so dead-letter): the probe side of
        an event-time temporal join, both inputs of a window join. Their envelopes carry the
        original Kafka record, for the dead letter (decode.py, processor.py)."""
        if self.kind is PlanKind.TEMPORAL_EVENT_TIME:
            return (0,)
        if self.kind is PlanKind.WINDOW:
            return (0, 1)
        return ()

    @property
    def output_sources(self) -> tuple[tuple[int, str, bool], ...]:
        """Per output column: (side, the joined column it is, whether that column is nullable)."""
        return tuple((side, self.joined_columns(side)[i], bool(self.column_type(side, i)[1]))
                     for side, i in self.projection)

    @property
    def output_generation(self) -> int:
        """The output generation the upsert materializer stores rows in now."""
        return max(0, len(self.output_generations) - 1)

    def output_upgrade(self, generation: int):
        """``row -> row``: an output row the upsert materializer stored in ``generation``, in this
        plan's output. A column of the old output keeps its value; a column the output gained is an
        input column added with a default (``service/checkpoint.py`` refuses any other change): it
        takes the default where its side is in the row, NULL where the side was null-padded, which a
        non-nullable column of that side in the old output tells (None only when padded)."""
        old = [tuple(source[:2]) for source in self.output_generations[generation]]
        picks = []
        for side, column, _ in self.output_sources:
            if (side, column) in old:
                picks.append((old.index((side, column)), None, None))
                continue
            default = field_defaults(self.sides[side].reader_schema, [column])[column]
            probe = None
            if side in self.null_padded_sides:
                probe = next(i for i, source in enumerate(self.output_generations[generation])
                             if source[0] == side and not source[2])
            picks.append((None, default, probe))
        return lambda row: tuple(row[i] if i is not None else (None if probe is not None and row[probe] is None
                                                              else default)
                                 for i, default, probe in picks)

    def joined_columns(self, side: int) -> tuple[str, ...]:
        """The columns the condition and the projection see on ``side``: a window join adds
        ``window_start``, ``window_end`` and ``window_time`` to every input row."""
        columns = self.sides[side].columns
        return columns + WINDOW_COLUMNS if self.kind is PlanKind.WINDOW else columns

    def joined_families(self, side: int) -> tuple[str, ...]:
        """The type family (``avro.type_family``) of each of :meth:`joined_columns`."""
        families = self.sides[side].families
        return families + ("timestamp",) * len(WINDOW_COLUMNS) if self.kind is PlanKind.WINDOW else families

    def column_type(self, side: int, index: int) -> tuple[object, bool]:
        """(Avro type, nullable) of column ``index`` of :meth:`joined_columns` on ``side``."""
        s = self.sides[side]
        if index < len(s.columns):
            return s.avro_types[index], s.nullable[index]
        return _WINDOW_COLUMN_TYPE, False

    @property
    def window_spec(self) -> WindowSpec | None:
        if self.window is None:
            return None
        return WindowSpec(**{**self.window, "kind": WindowKind(self.window["kind"])})

    @property
    def null_padded_sides(self) -> tuple[int, ...]:
        """The sides whose columns an outer join pads with NULLs in some output rows."""
        return tuple(side for side, padded in ((0, self.join_type.right_outer), (1, self.join_type.left_outer))
                     if padded)

    @property
    def upsert_materializer(self) -> bool:
        """Upsert output under a key the join key does not determine needs the upsert materializer
        stage (the changes of one output key then come from several join tasks).

        The join key determines the output key when, for every join-key column, the output key
        holds that column from a side that is never null-padded."""
        if self.output_mode is not OutputMode.UPSERT or not self.output_key:
            return False
        unpadded = [side for side in (0, 1) if side not in self.null_padded_sides]
        keyed = {self.projection[i] for i in self.output_key}
        return any(
            not any((side, self.sides[side].join_key[j]) in keyed for side in unpadded)
            for j in range(len(self.left.join_key))
        )

    def stages(self) -> list[str]:
        """The stateful stages the query runs, in the order a record meets them."""
        stages = [f"normalize {s.name} (keyed by message key: the last row per primary key)"
                  for s in self.sides if s.normalized]
        stages.append(f"join (keyed by join key: {self.kind.value} {self.join_type.value} join)")
        if self.upsert_materializer:
            stages.append("upsert materializer (keyed by OUTPUT_KEY: the latest row per output key)")
        return stages

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "JoinPlan":
        data = json.loads(text)
        data["kind"] = PlanKind(data["kind"])
        data["join_type"] = JoinType(data["join_type"])
        data["output_mode"] = OutputMode(data["output_mode"])
        data["state_generations"] = tuple(tuple(tuple(columns) for columns in g) for g in data["state_generations"])
        data["output_generations"] = tuple(tuple(tuple(source) for source in g)
                                           for g in data.get("output_generations", ()))
        sides = []
        for name in ("left", "right"):
            s = data.pop(name)
            for key in ("columns", "avro_types", "nullable", "join_key"):
                s[key] = tuple(s[key])
            if s["primary_key"] is not None:
                s["primary_key"] = tuple(s["primary_key"])
            sides.append(SidePlan(**s))
        data["filter_nulls"] = tuple(data["filter_nulls"])
        data["projection"] = tuple(tuple(p) for p in data["projection"])
        data["output_names"] = tuple(data["output_names"])
        if data["output_key"] is not None:
            data["output_key"] = tuple(data["output_key"])
        if data["retention_ms"] is not None:
            data["retention_ms"] = tuple(data["retention_ms"])
        if data.get("interval_ms") is not None:
            data["interval_ms"] = tuple(data["interval_ms"])
        return cls(left=sides[0], right=sides[1], **data)

    # -- the operator --------------------------------------------------------------------------
    @cached_property
    def operator(self):
        """The join operator for this plan (built lazily, once per process)."""
        left, right = self.left.input_spec(), self.right.input_spec()
        condition = None
        if self.condition_sql:
            condition = compile_condition(self.condition_sql, self.joined_columns(0), self.joined_columns(1),
                                          left_types=self.joined_families(0), right_types=self.joined_families(1))
        append_only = tuple(s.changelog_mode == "append" for s in self.sides)
        if self.kind in (PlanKind.INTERVAL_EVENT_TIME, PlanKind.INTERVAL_PROCESSING_TIME):
            return make_interval_join(IntervalJoinSpec(
                join_type=self.join_type, left=left, right=right,
                lower_ms=self.interval_ms[0], upper_ms=self.interval_ms[1],
                left_time=self.left.time_column, right_time=self.right.time_column,
                filter_nulls=self.filter_nulls, condition=condition, projection=self.projection,
                time_of=to_epoch_millis, inputs_append_only=append_only,
            ))
        if self.kind is PlanKind.WINDOW:
            return make_window_join(WindowJoinSpec(
                join_type=self.join_type, left=left, right=right, window=self.window_spec,
                left_time=self.left.time_column, right_time=self.right.time_column,
                filter_nulls=self.filter_nulls, condition=condition, projection=self.projection,
                time_of=to_epoch_millis, inputs_append_only=append_only,
            ))
        if self.kind is PlanKind.REGULAR:
            spec = JoinSpec(
                self.join_type, left, right, self.filter_nulls, condition, self.projection,
                self.mini_batch_size,
            )
            return make_join(spec)
        spec = TemporalJoinSpec(
            kind=TemporalKind.EVENT_TIME if self.is_event_time else TemporalKind.PROCESSING_TIME,
            join_type=self.join_type,
            left=left,
            right=right,
            filter_nulls=self.filter_nulls,
            condition=condition,
            projection=self.projection,
            left_time=self.left.time_column,
            right_time=self.right.time_column,
            time_of=to_epoch_millis,
            retention_ms=self.retention_ms,
            right_is_versioned=self.is_event_time,
            # A versioned table's -U carries the old row at its old version time: a version ends
            # where the next begins, so Flink's planner drops -U before the join, and so do we.
            drop_update_before_on_right=self.is_event_time,
        )
        return make_temporal_join(spec)

    def _explain_time(self) -> list[str]:
        """The time semantics and the state kept per key, for the joins on time."""
        lines = []
        if self.is_event_time:
            lines.append(
                f"watermark: the smaller of the inputs' watermarks (largest event time seen minus "
                f"LEFT_WATERMARK_DELAY={self.left.watermark_delay_ms} ms / "
                f"RIGHT_WATERMARK_DELAY={self.right.watermark_delay_ms} ms), advanced between micro-batches"
            )
        if self.interval_ms is not None:
            lower, upper = self.interval_ms
            l_time, r_time = (("l." + self.left.columns[self.left.time_column], "r." + self.right.columns[self.right.time_column])
                              if self.is_event_time else ("l.proctime", "r.proctime"))
            domain = ("event time: the operator time is the watermark" if self.is_event_time else
                      "processing time: a row's time is the clock when its micro-batch runs, the operator time is the clock")
            def plus(ms: int) -> str:
                return f" + {ms} ms" if ms > 0 else f" - {-ms} ms" if ms < 0 else ""

            lines.append(f"interval: a pair matches when {r_time}{plus(lower)} <= {l_time} <= {r_time}{plus(upper)}; {domain}")
            if lower > upper:
                lines.append("state: none (the interval is empty, nothing can match: preserved rows are null-padded "
                             "on arrival, the others discarded)")
            else:
                padded = {JoinType.LEFT: "unmatched left rows are null-padded then",
                          JoinType.RIGHT: "unmatched right rows are null-padded then",
                          JoinType.FULL: "unmatched rows of both sides are null-padded then"}.get(self.join_type, "")
                lines.append(
                    f"state per join key: the rows of both inputs, each kept while a row of the other input may still "
                    f"match it: a left row until the operator time passes its time + {-lower} ms, a right row until "
                    f"it passes its time + {upper} ms; a clean-up timer per key and side removes them"
                    f"{'; ' + padded if padded else ''}; output is insert-only (+I); no row is ever late"
                )
        if self.window is not None:
            w = self.window_spec
            sizes = {WindowKind.TUMBLE: f"size {interval_sql(w.size_ms)}",
                     WindowKind.HOP: f"slide {interval_sql(w.slide_ms)}, size {interval_sql(w.size_ms)}",
                     WindowKind.CUMULATE: f"step {interval_sql(w.step_ms)}, max size {interval_sql(w.size_ms)}"}[w.kind]
            offset = f", offset {interval_sql(w.offset_ms)}" if w.offset_ms else ""
            lines.append(
                f"window: {w.kind.value} ({sizes}{offset}) on l.{self.left.columns[self.left.time_column]} and "
                f"r.{self.right.columns[self.right.time_column]}; rows join within the same window (window_start, "
                f"window_end) and join key"
            )
            lines.append(
                "state per join key and window: the rows of both inputs, buffered until the watermark reaches "
                "window_end - 1; then the window fires (its joined rows are emitted, insert-only +I) and its rows "
                "are dropped. A row for a window that has already fired is late: dropped from the join and sent "
                "to the dead-letter topic (reason late)"
            )
        return lines

    def explain(self) -> str:
        """The plan as ``check-config`` prints it."""
        lines = [self.description or f"{self.join_type.value} join", f"kind: {self.kind.value}"]
        for s in self.sides:
            keys = ", ".join(s.columns[i] for i in s.join_key)
            pk = ", ".join(s.columns[i] for i in s.primary_key) if s.primary_key else "none"
            extra = f", event time {s.columns[s.time_column]}" if s.time_column is not None else ""
            if self.kind is PlanKind.INTERVAL_PROCESSING_TIME:
                extra = ", processing time"
            ttl = f", state TTL {s.state_ttl_ms} ms" if s.state_ttl_ms else ""
            upsert = ""
            if s.direct_upsert:
                upsert = f", joined directly; tombstones by message key, {s.name.upper()}_KEY_FORMAT={s.key_format}"
            elif s.normalized:
                upsert = ", normalized per primary key before the join"
            layout = "" if self.kind in TIME_BOUNDED_KINDS else f"; state layout {s.layout.value}"
            lines.append(
                f"{s.name}: topic {s.topic} as {s.table} ({s.changelog_mode}{upsert}); join key ({keys}); "
                f"primary key ({pk}){layout}{extra}{ttl}"
            )
        if self.mini_batch_size:
            lines.append(f"mini-batch: fold up to {self.mini_batch_size} records per key")
        lines += self._explain_time()
        key = ", ".join(self.output_names[i] for i in self.output_key) if self.output_key else "none"
        lines.append(f"output: {', '.join(self.output_names)}; message key ({key}); {self.output_mode.value}")
        lines.append("stages: " + "; then ".join(self.stages()))
        return "\n".join(lines)


def _index(columns: tuple[str, ...], name: str, what: str) -> int:
    if name in columns:
        return columns.index(name)
    lowered = [c for c in columns if c.lower() == name.lower()]
    if len(lowered) == 1:
        return columns.index(lowered[0])
    raise PlanError(f"{what}: no column {name!r}; the columns are {', '.join(columns)}")


def load_input_schemas(settings: Settings, registry: SchemaRegistry | None) -> tuple[dict, dict]:
    """Reader schemas: the local .avsc files if given, else the registry's latest `<topic>-value`."""
    schemas = []
    for var, path, topic in (
        ("LEFT_SCHEMA_FILE", settings.left_schema_file, settings.left_topic),
        ("RIGHT_SCHEMA_FILE", settings.right_schema_file, settings.right_topic),
    ):
        if path:
            try:
                schemas.append(load_schema_file(path))
            except Exception as err:
                raise PlanError(f"{var}: {err}") from None
        else:
            try:
                schemas.append(registry.latest(f"{topic}-value")[1])
            except Exception as err:
                raise PlanError(
                    f"SCHEMA_REGISTRY_URL: cannot get the latest schema of subject {topic}-value ({err}); "
                    f"register it or set {var}"
                ) from None
    return schemas[0], schemas[1]


def build_plan(settings: Settings, schemas: tuple[dict, dict] | None = None) -> JoinPlan:
    """Resolve the configuration into a plan; raises PlanError/QueryError naming what to fix."""
    if schemas is None:
        registry = None
        if settings.schema_registry_url:
            registry = SchemaRegistry(settings.schema_registry_url, settings.schema_registry_basic_auth_user_info)
        schemas = load_input_schemas(settings, registry)
    columns = [record_columns(s) for s in schemas]
    names = [tuple(c.name for c in cols) for cols in columns]
    time_vars = ("LEFT_EVENT_TIME_COLUMN", "RIGHT_EVENT_TIME_COLUMN")
    configured_times = tuple(
        names[i][_index(names[i], column, time_vars[i])] if column else None
        for i, column in enumerate((settings.left_event_time_column, settings.right_event_time_column))
    )
    try:
        query = parse_join_sql(
            settings.join_sql, settings.left_table_name, list(names[0]), settings.right_table_name, list(names[1]),
            time_columns=configured_times,
        )
    except QueryError as err:
        raise PlanError(f"JOIN_SQL: {err}") from None

    if query.window is not None:
        kind = PlanKind.WINDOW
    elif query.interval is not None:
        kind = PlanKind.INTERVAL_PROCESSING_TIME if query.interval.processing_time else PlanKind.INTERVAL_EVENT_TIME
    else:
        kind = {None: PlanKind.REGULAR, TemporalKind.EVENT_TIME: PlanKind.TEMPORAL_EVENT_TIME,
                TemporalKind.PROCESSING_TIME: PlanKind.TEMPORAL_PROCESSING_TIME}[query.temporal]
    keys = [tuple(_index(names[0], l, "JOIN_SQL") for l, _ in query.equi_keys),
            tuple(_index(names[1], r, "JOIN_SQL") for _, r in query.equi_keys)]
    pks = []
    for var, pk, cols in (("LEFT_PRIMARY_KEY", settings.left_primary_key, names[0]),
                          ("RIGHT_PRIMARY_KEY", settings.right_primary_key, names[1])):
        pks.append(tuple(_index(cols, c, var) for c in pk) if pk else None)

    time_columns: list[int | None] = [None, None]
    if kind in TIME_BOUNDED_KINDS:
        time_columns = _time_attributes(settings, kind, query, names, configured_times)
    elif kind is PlanKind.TEMPORAL_EVENT_TIME:
        time_columns[0] = _index(names[0], query.left_time_column, "JOIN_SQL (FOR SYSTEM_TIME AS OF)")
        if configured_times[0] is not None and configured_times[0] != names[0][time_columns[0]]:
            raise PlanError(
                f"LEFT_EVENT_TIME_COLUMN: is {configured_times[0]}, but JOIN_SQL joins as of "
                f"{query.left_time_column}; the left input has one time attribute: make them the same or unset "
                "LEFT_EVENT_TIME_COLUMN"
            )
        if not settings.right_event_time_column:
            raise PlanError(
                "RIGHT_EVENT_TIME_COLUMN: required for an event-time temporal join (the versioned table's time)"
            )
        time_columns[1] = _index(names[1], settings.right_event_time_column, "RIGHT_EVENT_TIME_COLUMN")
    elif kind is PlanKind.TEMPORAL_PROCESSING_TIME and settings.right_event_time_column:
        raise PlanError(
            "RIGHT_EVENT_TIME_COLUMN: a processing-time temporal join (FOR SYSTEM_TIME AS OF PROCTIME()) "
            "cannot use a versioned table with an event-time attribute; Flink only allows processing-time "
            "temporal joins against lookup tables. Use FOR SYSTEM_TIME AS OF <left>.<time column> instead, "
            "or unset RIGHT_EVENT_TIME_COLUMN"
        )
    if kind is not PlanKind.REGULAR and settings.mini_batch_size:
        raise PlanError("MINI_BATCH_SIZE: mini-batch folding applies to regular joins only")

    sides = []
    ttls = (settings.left_ttl_ms, settings.right_ttl_ms) if kind is PlanKind.REGULAR else (None, None)
    modes = (settings.left_changelog_mode, settings.right_changelog_mode)
    if kind in TIME_BOUNDED_KINDS:
        what = "a window join" if kind is PlanKind.WINDOW else "an interval join"
        for var, mode in (("LEFT_CHANGELOG_MODE", modes[0]), ("RIGHT_CHANGELOG_MODE", modes[1])):
            if mode != "append":
                raise PlanError(
                    f"{var}: is {mode}, but the inputs of {what} must be append-only (every record +I), as in "
                    f"Flink, which plans this join only for insert-only inputs; set {var}=append, or use a "
                    "regular join for a changelog input"
                )
        for var, ttl in (("STATE_TTL", settings.state_ttl_ms), ("LEFT_STATE_TTL", settings.left_state_ttl_ms),
                         ("RIGHT_STATE_TTL", settings.right_state_ttl_ms)):
            if ttl:
                raise PlanError(
                    f"{var}: {what} keeps each row only while it can still match and cleans its state up by "
                    f"{'processing ' if kind is PlanKind.INTERVAL_PROCESSING_TIME else 'event '}time itself; "
                    f"a state TTL does not apply (and Spark refuses TTL in EventTime mode): unset {var}"
                )
    delays = (settings.left_watermark_delay_ms, settings.right_watermark_delay_ms)
    topics = (settings.left_topic, settings.right_topic)
    tables = (settings.left_table_name, settings.right_table_name)
    key_formats = (settings.left_key_format, settings.right_key_format)
    for i in (0, 1):
        # An upsert input goes to the join directly when its join key is its primary key: every change
        # of a primary key then meets the join in one join key, and the join itself turns bare +U and
        # tombstones into a full changelog. Otherwise it is normalized first: with join-key columns
        # beyond the primary key a row can move to another join key, where only a stage keyed by the
        # primary key can retract it; with primary-key columns beyond the join key direct feeding would
        # be correct too, but the normalize stage needs no key format to route tombstones.
        direct = (kind is PlanKind.REGULAR and modes[i] == "upsert" and pks[i] is not None
                  and set(keys[i]) == set(pks[i]))
        sides.append(
            SidePlan(
                side=i, topic=topics[i], table=tables[i], columns=names[i],
                avro_types=tuple(c.avro_type for c in columns[i]), nullable=tuple(c.nullable for c in columns[i]),
                reader_schema=schemas[i], join_key=keys[i], primary_key=pks[i], changelog_mode=modes[i],
                time_column=time_columns[i], watermark_delay_ms=delays[i], state_ttl_ms=ttls[i],
                direct_upsert=direct, key_format=key_formats[i],
            )
        )
        if direct:
            try:
                KeyDecoder(sides[i], key_formats[i], None)
            except ValueError as err:
                raise PlanError(f"{sides[i].name.upper()}_KEY_FORMAT: {err}") from None

    joined = [names[i] + (WINDOW_COLUMNS if kind is PlanKind.WINDOW else ()) for i in (0, 1)]
    projection = tuple((0 if c.side == "L" else 1, _index(joined[0 if c.side == "L" else 1], c.column, "JOIN_SQL"))
                       for c in query.projection)
    output_names = tuple(c.name for c in query.projection)
    join_type = query.join_type
    interval_ms = (query.interval.lower_ms, query.interval.upper_ms) if query.interval is not None else None
    window = None
    if query.window is not None:
        w = query.window
        window = {"kind": w.kind, "size_ms": w.size_ms, "slide_ms": w.slide_ms, "step_ms": w.step_ms,
                  "offset_ms": w.offset_ms}
    draft = JoinPlan(kind=kind, join_type=join_type, left=sides[0], right=sides[1], filter_nulls=(),
                     condition_sql=None, projection=projection, output_names=output_names, output_schema={},
                     output_key=None)
    fields = []
    for (side, index), name in zip(projection, output_names):
        avro_type, nullable = draft.column_type(side, index)
        padded = join_type.left_outer if side == 1 else join_type.right_outer
        fields.append((name, avro_type, nullable or padded))
    schema = output_schema(_record_name(settings.output_topic), fields)

    output_key = None
    if settings.output_key:
        output_key = tuple(_index(output_names, c, "OUTPUT_KEY") for c in settings.output_key)

    retention = None
    if kind in (PlanKind.TEMPORAL_EVENT_TIME, PlanKind.TEMPORAL_PROCESSING_TIME) and settings.state_ttl_ms:
        retention = (settings.state_ttl_ms, settings.state_ttl_ms * 3 // 2)  # Flink's min/max retention ratio

    plan = JoinPlan(
        kind=kind, join_type=join_type, left=sides[0], right=sides[1],
        filter_nulls=tuple(not ns for ns in query.null_safe_keys), condition_sql=query.condition_sql,
        projection=projection, output_names=output_names, output_schema=schema, output_key=output_key,
        mini_batch_size=settings.mini_batch_size, retention_ms=retention, output_mode=OutputMode(settings.output_mode),
        interval_ms=interval_ms, window=window, description=describe(query),
    )
    _check_types(plan)
    try:
        plan.operator  # noqa: B018 - compile (and type-check) the condition and validate the operator now
    except (ConfigurationError, ConditionError) as err:
        raise PlanError(f"JOIN_SQL: {err}") from None
    return plan


def _to_float(value) -> float:
    return float(value)


def _to_decimal(value) -> Decimal:
    return Decimal(value).normalize()


# Event times are Avro timestamps or epoch milliseconds in an int or long.
_TIME_FAMILIES = ("timestamp", "integer")


def _check_types(plan: JoinPlan) -> None:
    """Refuse, naming the variable, what would fail on every record: event-time columns that hold
    no time, and join-key pairs SQL could not compare."""
    for side in plan.sides:
        if side.time_column is not None and side.families[side.time_column] not in _TIME_FAMILIES:
            column = side.columns[side.time_column]
            var = "RIGHT_EVENT_TIME_COLUMN" if side.side == 1 else "LEFT_EVENT_TIME_COLUMN / JOIN_SQL"
            raise PlanError(f"{var}: column {column!r} of {side.table} holds {side.families[side.time_column]} values; an "
                            "event time is an Avro timestamp (timestamp-millis/-micros) or epoch milliseconds in "
                            "an int or long")
    for left, right in zip(plan.left.join_key, plan.right.join_key):
        a, b = plan.left.families[left], plan.right.families[right]
        if not comparable(a, b) or "other" in (a, b):
            raise PlanError(f"JOIN_SQL: the join key {plan.left.table}.{plan.left.columns[left]} ({a}) = "
                            f"{plan.right.table}.{plan.right.columns[right]} ({b}) compares values SQL cannot "
                            "compare; join columns of the same type")


def _time_attributes(settings: Settings, kind: PlanKind, query, names, configured) -> list[int | None]:
    """Each input's time column of an interval or window join: the one JOIN_SQL uses, which must be
    the input's configured ``*_EVENT_TIME_COLUMN`` (processing time: none may be configured)."""
    if kind is PlanKind.WINDOW:
        used = (query.window.left_time_column, query.window.right_time_column)
        where = "the DESCRIPTOR of its window table function"
    else:
        used = (query.interval.left_time_column, query.interval.right_time_column)
        where = "its interval bound"
    out: list[int | None] = []
    for i, (var, column, name) in enumerate(zip(("LEFT_EVENT_TIME_COLUMN", "RIGHT_EVENT_TIME_COLUMN"), used, configured)):
        side = "left" if i == 0 else "right"
        if column is None:  # processing time
            if name is not None:
                raise PlanError(
                    f"{var}: is {name}, but JOIN_SQL's interval bound uses the {side} input's processing time "
                    f"(proctime); bound on its event-time column {name} instead, or unset {var}"
                )
            out.append(None)
            continue
        if name is None:
            raise PlanError(
                f"{var}: required: JOIN_SQL uses the {side} input's column {column} as its time attribute in "
                f"{where}; set {var}={column} (with {side.upper()}_WATERMARK_DELAY for out-of-order rows)"
            )
        if name != column:
            raise PlanError(
                f"{var}: is {name}, but JOIN_SQL uses the {side} input's column {column} as its time attribute "
                f"in {where}; an input has one time attribute: use {name} in JOIN_SQL or set {var}={column}"
            )
        out.append(_index(names[i], column, var))
    return out


def _record_name(topic: str) -> str:
    cleaned = "".join(ch if ch.isalnum() else "_" for ch in topic)
    return cleaned if cleaned[:1].isalpha() else f"t_{cleaned}"
