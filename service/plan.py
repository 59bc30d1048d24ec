"""The join plan: what every Spark worker receives.

:class:`JoinPlan` (with a :class:`SidePlan` per input) is the configuration resolved against the
input schemas by the driver (``service/planner.py``). It is plain data (JSON-serializable),
shipped to Spark's Python workers, where :meth:`JoinPlan.operator` builds the join operator once
per process and the row helpers (join keys, upgrades of rows stored by an older schema) run on
every record. Nothing here parses SQL or reads the configuration.
"""
from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from enum import StrEnum
from functools import cached_property

from operators import (
    Identity,
    InputSpec,
    IntervalJoinSpec,
    JoinSpec,
    JoinType,
    LookupJoinSpec,
    OutputCalc,
    StateLayout,
    TemporalJoinSpec,
    TemporalKind,
    WindowJoinSpec,
    WindowKind,
    WindowSpec,
    choose_layout,
    compile_condition,
    operator_for,
)
from operators.spec import WINDOW_COLUMNS

from expressions.types import parse_type

from .avro import field_defaults, to_epoch_millis, type_family
from .errors import ChangejoinError
from .formats import DEFAULT as DEFAULT_FORMAT
from .formats import format_of

log = logging.getLogger(__name__)



class PlanKind(StrEnum):
    """Which family of join the plan runs."""

    REGULAR = "regular"  # regular and semi/anti joins
    TEMPORAL_EVENT_TIME = "temporal_event_time"  # FOR SYSTEM_TIME AS OF <left time column>
    TEMPORAL_PROCESSING_TIME = "temporal_processing_time"  # FOR SYSTEM_TIME AS OF PROCTIME()
    INTERVAL_EVENT_TIME = "interval_event_time"  # ON ... r.t BETWEEN l.t - INTERVAL ... AND l.t + INTERVAL ...
    INTERVAL_PROCESSING_TIME = "interval_processing_time"  # the same bounds on l.proctime / r.proctime
    WINDOW = "window"  # TABLE(TUMBLE | HOP | CUMULATE(...)) joined on window_start, window_end and the key
    LOOKUP = "lookup"  # FOR SYSTEM_TIME AS OF PROCTIME() against a database table (RIGHT_LOOKUP_URL)


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


class PlanError(ValueError, ChangejoinError):
    """The configuration is consistent but the join it describes cannot be built."""

    exit_code = 2


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
    # The stream of a lookup join: its rows are grouped by their identity (join_key holds the
    # identity's columns: the primary key, or every column), an upsert input by its message key.
    lookup_stream: bool = False
    # How records are read: the name of its input format (service/formats/), and each column's
    # type name in the source where the format has them (a Debezium topic's Connect types, where
    # its schema told them: its values' encodings).
    format: str = DEFAULT_FORMAT
    source_types: dict | None = None
    # What the rows go through before the join (JOIN_SQL's input subquery, a WHERE pushed down,
    # computed equi-keys; ``service.sql.InputCalc``): "computed" [[name, type, typed node, SQL]],
    # "filter" (a typed node) and "filter_sql", "kept" (the input columns kept, None for all).
    # The join sees the input row, the columns not kept NULL, then the computed columns.
    calc: dict | None = None

    @property
    def name(self) -> str:
        return "left" if self.side == 0 else "right"

    @property
    def computed(self) -> tuple:
        return tuple(tuple(c) for c in self.calc["computed"]) if self.calc else ()

    @property
    def state_columns(self) -> tuple[str, ...]:
        """The columns of the rows the join receives and keeps: the input's, then the computed ones."""
        return self.columns + tuple(c[0] for c in self.computed)

    @property
    def families(self) -> tuple[str, ...]:
        """Each column's type family (``avro.type_family``), for type checks; the computed ones' too."""
        return tuple(type_family(t) for t in self.avro_types) + tuple(parse_type(c[1]).family for c in self.computed)

    @property
    def unique_key(self) -> tuple[int, ...] | None:
        """The primary key, when the rows the join receives still hold it (an input subquery that
        does not select every primary-key column leaves none: Flink's unique key does not survive
        a projection that drops it)."""
        if self.primary_key is None or not self.calc or self.calc.get("kept") is None:
            return self.primary_key
        kept = set(self.calc["kept"])
        return self.primary_key if all(self.columns[i] in kept for i in self.primary_key) else None

    @property
    def layout(self) -> StateLayout:
        return choose_layout(self.join_key, self.unique_key)

    def input_spec(self) -> InputSpec:
        return InputSpec(self.state_columns, self.join_key, self.unique_key, self.state_ttl_ms,
                         upsert=self.direct_upsert)

    def input_calc(self):
        """``calc(row) -> row | None``: an input row as the join receives it (None: filtered
        out), compiled once; None when the input goes to the join as it is. Raises
        ``expressions.ExpressionError`` naming the expression that failed."""
        if not self.calc:
            return None
        from expressions import compile_projection

        kept = self.calc.get("kept")
        kept = set(self.columns) if kept is None else set(kept)
        columns, sqls = [], []
        for i, (name, avro_type, nullable) in enumerate(zip(self.columns, self.avro_types, self.nullable)):
            columns.append(["col", "NULL", "I", i] if name in kept else ["lit", "NULL", None])
            sqls.append(name)
        for name, sql_type, node, sql in self.computed:
            columns.append(node)
            sqls.append(sql)
        return compile_projection(columns, sqls, self.calc.get("filter"), self.calc.get("filter_sql") or "")

    @property
    def source_time(self) -> bool:
        """Whether this side's event time is its envelopes' time (a Debezium topic's ``source.ts_ms``:
        ``formats.SOURCE_TIME``)."""
        envelope_time = format_of(self.format).envelope_time
        return self.time_column is not None and envelope_time is not None and self.columns[self.time_column] == envelope_time

    @property
    def normalized(self) -> bool:
        """An upsert input that goes through a normalize stage before the join."""
        return self.changelog_mode == "upsert" and not self.direct_upsert and not self.lookup_stream


DEFAULT_STATE_BUCKETS = 256
"""Buckets of a new checkpoint unless ``STATE_BUCKETS`` says otherwise. The bucket is the unit
Spark places on a task, so the count is the most tasks a checkpoint can ever run
(``changejoin rescale``), as Flink's maximum parallelism; with balanced bucket keys
(``JoinPlan.bucket_keys``) each of ``P`` tasks holds ``256/P`` buckets, exactly where ``P``
divides 256. A touched bucket costs one round trip to the JVM per call (``sparkstate.py``)."""

#: ``JoinPlan.bucket_keys`` of a new checkpoint (``envelope.bucket_group``).
BALANCED_BUCKET_KEYS = 2


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
    # Keys per grouping key of every stateful stage: 0 = one grouping key per key; N = the keys in
    # N buckets (sparkstate.py), fixed once a checkpoint exists (checkpoint.py).
    state_buckets: int = 0
    # How a bucket's grouping key is made (envelope.bucket_group), fixed with the checkpoint:
    # 2 = its Spark hash is the bucket number (balanced tasks), 1 = the first layout's.
    bucket_keys: int = BALANCED_BUCKET_KEYS
    # A lookup join's table and how it is asked (PlanKind.LOOKUP; planner._lookup): "table" (the
    # database's catalog: service.database.TableInfo.to_dict()), "url" (no password), "left_key"
    # (stream column indexes), "key_columns" (table columns), "identity", and the options.
    lookup: dict | None = None
    # The extra condition, typed (``expressions``: over the joined rows "L" and "R"), compiled on
    # the workers; ``condition_sql`` is its text. None with ``condition_sql`` set: the text is
    # compiled untyped (tests).
    condition: list | None = None
    # The output when it is computed (expressions in the select list, a WHERE kept after the
    # join), else None (the output columns are ``projection``'s): "columns", per output column
    # {"at": i} (the i-th of ``projection``, copied) or {"expr": a typed node over the row of
    # ``projection``'s columns ("I"), "sql", "type"}; "where" (a typed node) and "where_sql".
    output: dict | None = None
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
        tail = len(side_plan.computed)  # computed columns follow the input's (the checkpoint keeps their SQL)
        if tail:
            start = len(old)
            return lambda row: tuple(row[i] if i is not None else default for i, default in picks) + \
                tuple(row[start:start + tail])
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
        if self.kind is PlanKind.LOOKUP:  # the stream row's identity
            return lambda row: tuple(row[i] for i in indexes)
        casts = []
        for left, right in zip(self.left.join_key, self.right.join_key):
            pair = {self.left.families[left], self.right.families[right]}
            casts.append(_to_float if "float" in pair and len(pair) > 1 else _to_decimal if "decimal" in pair else None)
        if not any(casts):
            return lambda row: tuple(row[i] for i in indexes)
        steps = tuple(zip(indexes, casts))
        return lambda row: tuple(row[i] if cast is None or row[i] is None else cast(row[i]) for i, cast in steps)

    @property
    def dated_deletes(self) -> tuple[int, ...]:
        """The inputs whose deletes carry their own time to the normalize stage (decode.py,
        processor.py): the versioned table of an event-time temporal join, keyed and timed by its
        Debezium envelopes' source.ts_ms. A delete's image holds only the key, so the -D is derived
        from the stored row; dated by the delete, it ends the key's version when the delete was
        made (dated by the row, it would end the version where it began). A probe side's -U and
        -D keep their rows' own times: they retract exactly the pairs those rows joined."""
        if self.kind is PlanKind.TEMPORAL_EVENT_TIME and self.right.source_time and self.right.normalized:
            return (1,)
        return ()

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

    def output_source(self, i: int) -> tuple[int, int] | None:
        """(side, joined column index) of output column ``i`` when it copies a column, else None
        (an expression)."""
        if self.output is None:
            return tuple(self.projection[i])
        column = self.output["columns"][i]
        return tuple(self.projection[column["at"]]) if "at" in column else None

    def output_column_type(self, i: int) -> tuple[object, bool]:
        """(Avro type, nullable) of output column ``i`` (a padded side's columns are nullable)."""
        source = self.output_source(i)
        if source is None:
            sql_type = parse_type(self.output["columns"][i]["type"])
            return sql_type.avro(), sql_type.nullable
        side, index = source
        avro_type, nullable = self.column_type(side, index)
        return avro_type, bool(nullable) or side in self.null_padded_sides

    @property
    def output_sources(self) -> tuple[tuple, ...]:
        """Per output column: (side, the joined column it is, whether that column is nullable), or
        for an expression ("expr", its SQL, nullable)."""
        sources = []
        for i in range(len(self.output_names)):
            source = self.output_source(i)
            if source is None:
                column = self.output["columns"][i]
                sources.append(("expr", column["sql"], parse_type(column["type"]).nullable))
                continue
            side, index = source
            sources.append((side, self.joined_columns(side)[index], bool(self.column_type(side, index)[1])))
        return tuple(sources)

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
        """The columns the condition and the projection see on ``side``: the input's, the computed
        ones (``SidePlan.calc``), and for a window join ``window_start``, ``window_end`` and
        ``window_time``, which the join adds to every row."""
        columns = self.sides[side].state_columns
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
        computed = s.computed
        if index < len(s.columns) + len(computed):
            sql_type = parse_type(computed[index - len(s.columns)][1])
            return sql_type.avro(), sql_type.nullable
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
        keyed = {self.output_source(i) for i in self.output_key} - {None}
        if self.kind is PlanKind.LOOKUP:  # grouped by the stream row's identity, never padded
            return not all((0, i) in keyed for i in self.left.join_key)
        unpadded = [side for side in (0, 1) if side not in self.null_padded_sides]
        return any(
            not any((side, self.sides[side].join_key[j]) in keyed for side in unpadded)
            for j in range(len(self.left.join_key))
        )

    @property
    def lookup_identity(self) -> Identity:
        """What a lookup join's stream rows are grouped by, and so what it remembers per group."""
        return Identity(self.lookup["identity"])

    def stages(self) -> list[str]:
        """The stateful stages the query runs, in the order a record meets them."""
        if self.kind is PlanKind.LOOKUP:
            keyed = {Identity.KEY: f"keyed by the {self.left.table} row's primary key: the table rows it joined",
                     Identity.ROW: f"keyed by the whole {self.left.table} row: the table rows each copy joined",
                     Identity.NONE: "no state: an append-only input is joined and forgotten"}[self.lookup_identity]
            stages = [f"lookup (in each reading task: its rows' distinct keys, {self.lookup['batch_size']} per query, "
                      "one snapshot)", f"join ({keyed})"]
            if self.upsert_materializer:
                stages.append("upsert materializer (keyed by OUTPUT_KEY: the latest row per output key)")
            return stages
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
        data.setdefault("condition", None)
        data.setdefault("output", None)
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
        operator = self._join_operator()
        if self.output is None:
            return operator
        from expressions import compile_projection

        columns, sqls = [], []
        for column in self.output["columns"]:
            if "at" in column:
                columns.append(["col", "NULL", "I", column["at"]])
                sqls.append("")
            else:
                columns.append(column["expr"])
                sqls.append(column["sql"])
        calc = compile_projection(columns, sqls, self.output.get("where"), self.output.get("where_sql") or "")
        # Where a zero may be a float's or a decimal's (-0.0 == 0.0): a joined row with one there
        # is computed each time, not kept for its retractions (OutputCalc).
        zeros = tuple(i for i, (side, index) in enumerate(self.projection)
                      if self.joined_families(side)[index] in ("float", "decimal", "other"))
        return OutputCalc(operator, calc, zeros)

    def _join_operator(self):
        return operator_for(self.operator_spec())

    def operator_spec(self):
        """What the join operator is (an ``operators`` spec; ``operators.operator_for`` builds it)."""
        left, right = self.left.input_spec(), self.right.input_spec()
        condition = None
        if self.condition is not None:
            from expressions import compile_condition as compile_typed

            condition = compile_typed(self.condition, self.condition_sql or "the join condition")
        elif self.condition_sql:
            condition = compile_condition(self.condition_sql, self.joined_columns(0), self.joined_columns(1),
                                          left_types=self.joined_families(0), right_types=self.joined_families(1))
        append_only = tuple(s.changelog_mode == "append" for s in self.sides)
        if self.kind is PlanKind.LOOKUP:
            return LookupJoinSpec(
                join_type=self.join_type, left_width=len(self.left.columns), right_width=len(self.right.columns),
                identity=self.lookup_identity, upsert=self.left.changelog_mode == "upsert", condition=condition,
                projection=self.projection, state_ttl_ms=self.left.state_ttl_ms,
            )
        if self.kind in (PlanKind.INTERVAL_EVENT_TIME, PlanKind.INTERVAL_PROCESSING_TIME):
            return IntervalJoinSpec(
                join_type=self.join_type, left=left, right=right,
                lower_ms=self.interval_ms[0], upper_ms=self.interval_ms[1],
                left_time=self.left.time_column, right_time=self.right.time_column,
                filter_nulls=self.filter_nulls, condition=condition, projection=self.projection,
                time_of=to_epoch_millis, inputs_append_only=append_only,
            )
        if self.kind is PlanKind.WINDOW:
            return WindowJoinSpec(
                join_type=self.join_type, left=left, right=right, window=self.window_spec,
                left_time=self.left.time_column, right_time=self.right.time_column,
                filter_nulls=self.filter_nulls, condition=condition, projection=self.projection,
                time_of=to_epoch_millis, inputs_append_only=append_only,
            )
        if self.kind is PlanKind.REGULAR:
            return JoinSpec(
                self.join_type, left, right, self.filter_nulls, condition, self.projection,
                self.mini_batch_size,
            )
        return TemporalJoinSpec(
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

def record_name(topic: str) -> str:
    """An Avro record name made of a topic's (or a table's) name: the output schema's, a derived
    reader schema's."""
    cleaned = "".join(ch if ch.isalnum() else "_" for ch in topic)
    return cleaned if cleaned[:1].isalpha() else f"t_{cleaned}"


def _to_float(value) -> float:
    return float(value)


def _to_decimal(value) -> Decimal:
    return Decimal(value).normalize()
