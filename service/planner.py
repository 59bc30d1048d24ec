"""The planner: the configuration resolved against the input schemas into a :class:`JoinPlan`.

``build_plan`` runs once on the driver (``run`` and ``check-config``). It reads nothing: the input
schemas and a lookup join's table come in an :class:`InputCatalog` (``service/catalog.py`` reads
them; a test builds one). It parses ``JOIN_SQL`` (``service.sql``), resolves every column to its
index, chooses each input's state layout from its join key and primary key, and derives the
output schema. The plan it returns is what the workers receive (``service/plan.py``); this module
and the SQL front end stay on the driver. ``service/explain.py`` renders a plan for ``check-config`` and the start-up log.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from operators import ConditionError, ConfigurationError, JoinType, TemporalKind
from operators.condition import comparable
from operators.spec import WINDOW_COLUMNS

from expressions import from_avro

from .avro import SchemaError, output_schema, record_columns
from .config import Settings
from .formats import format_of
from .keys import KeyDecoder
from .plan import (
    DEFAULT_STATE_BUCKETS,
    JoinPlan,
    OutputMode,
    PlanError,
    PlanKind,
    SidePlan,
    record_name,
)
from .sql import JoinQuery, QueryError, describe, parse_join_sql


@dataclass(frozen=True)
class InputCatalog:
    """What the inputs are, as the planner needs them: each stream input's reader schema (an Avro
    record of its row, as its format found it) and a lookup join's table (``database.TableInfo``)."""

    left_schema: dict
    right_schema: dict | None = None  # None for a lookup join: its table's columns
    table: Any = None  # database.TableInfo of RIGHT_LOOKUP_TABLE, for a lookup join


def _index(columns: tuple[str, ...], name: str, what: str) -> int:
    if name in columns:
        return columns.index(name)
    lowered = [c for c in columns if c.lower() == name.lower()]
    if len(lowered) == 1:
        return columns.index(lowered[0])
    raise PlanError(f"{what}: no column {name!r}; the columns are {', '.join(columns)}")


def with_source_times(settings: Settings, schemas) -> tuple[dict, dict]:
    """The row schemas, an input whose ``*_EVENT_TIME_COLUMN`` is its envelopes' time (a Debezium
    topic's ``source.ts_ms``: ``formats.SOURCE_TIME``) with the column that carries it appended."""
    out = list(schemas)
    for side, (fmt, column) in enumerate(((settings.left_format, settings.left_event_time_column),
                                          (settings.right_format, settings.right_event_time_column))):
        time = format_of(fmt).envelope_time
        if time is None or column != time or out[side] is None:
            continue
        fields = out[side].get("fields") or []
        if any(f.get("name") == time for f in fields):
            raise PlanError(f"{('LEFT', 'RIGHT')[side]}_EVENT_TIME_COLUMN: the {('left', 'right')[side]} topic's rows "
                            f"have a column named {time}, the name of the envelope's time; rename the column")
        out[side] = {**out[side], "fields": [*fields, {"name": time, "type": format_of(fmt).envelope_time_type}]}
    return out[0], out[1]


def _named_in_sql(settings: Settings, column: str) -> bool:
    """Whether JOIN_SQL names ``column`` (as a word, any case, quoted or not)."""
    import re

    return re.search(rf"(?i)(?<![\w\"]){re.escape(column)}(?![\w\"])", settings.join_sql) is not None


def _unreadable_columns(settings: Settings, schemas) -> None:
    """A column of a type its input's format does not read, named in JOIN_SQL: refused by name."""
    for side, schema in enumerate(schemas):
        fmt = format_of((settings.left_format, settings.right_format)[side])
        for column, why in fmt.unreadable_columns(schema).items():
            if _named_in_sql(settings, column):
                raise PlanError(f"JOIN_SQL: column {column} of the {('left', 'right')[side]} {fmt.protocol} topic has "
                                f"{why}, which the {fmt.name} format does not read; leave it out of the query")


def table_schema(table, read: set[str] | None = None) -> dict:
    """The Avro record of the table columns the join can read (unsupported types are left out);
    with ``read``, of those columns only."""
    fields = []
    for c in table.columns:
        if c.avro_type is None or (read is not None and c.name not in read):
            continue
        fields.append({"name": c.name, "type": ["null", c.avro_type], "default": None} if c.nullable
                      else {"name": c.name, "type": c.avro_type})
    return {"type": "record", "name": record_name(table.table), "fields": fields}


def _lookup(settings: Settings, table, keys, sides) -> dict:
    """How the lookup join asks the table (``JoinPlan.lookup``)."""
    from .database import redact

    left = sides[0]
    if left.changelog_mode == "append":
        identity = "none"
    else:
        identity = "key" if left.primary_key else "row"
    cache = None
    if settings.lookup_cache == "partial":
        cache = {"max_rows": settings.lookup_cache_max_rows,
                 "expire_after_write_s": _seconds(settings.lookup_cache_expire_after_write_ms),
                 "expire_after_access_s": _seconds(settings.lookup_cache_expire_after_access_ms),
                 "cache_missing_key": settings.lookup_cache_missing_key}
    return {
        "url": redact(settings.right_lookup_url), "table": table.to_dict(),
        "left_key": list(keys[0]), "key_columns": [sides[1].columns[i] for i in keys[1]],
        "identity": identity, "batch_size": settings.lookup_batch_size,
        "query_timeout_s": settings.lookup_query_timeout_ms / 1000, "max_retries": settings.lookup_max_retries,
        "retry_backoff_s": settings.lookup_retry_backoff_ms / 1000, "cache": cache,
    }


def _read_columns(query: JoinQuery, names: tuple[str, ...]) -> set[str]:
    """The table columns a lookup join reads: its keys, the SELECT list's, the condition's and
    the WHERE's.

    Only these are asked of the database and kept in the join's state and in the checkpoint's
    facts, so that what happens to the table's other columns (dropped, added NOT NULL, retyped)
    never concerns the join."""
    if query.inputs[1] is not None:
        raise PlanError("JOIN_SQL: a lookup join looks up the table by its columns: an equality with the table's "
                        "side computed (or a filter of the table before the join) cannot be asked of it; compare "
                        "the table's column with an expression of the stream, and filter in ON")
    read = {right for _, right in query.equi_keys} | {c.column for c in query.projection if c.side == "R"}
    nodes = [query.condition, query.where] + [c.expression for c in query.projection]
    for node in nodes:
        read |= {names[i] for i in _columns_of(node, "R")}
    return read


def _columns_of(node, row: str) -> set[int]:
    """The indexes of the columns of ``row`` a typed expression reads."""
    if not node:
        return set()
    if node[0] == "col":
        return {node[3]} if node[2] == row else set()
    if node[0] == "call":
        return set().union(*(_columns_of(o, row) for o in node[3:]))
    return set()


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def _unsupported_columns(settings: Settings, table) -> None:
    """A column of the table whose type the join cannot read, named in JOIN_SQL: refused by name."""
    for c in table.columns:
        if c.avro_type is None and _named_in_sql(settings, c.name):
            raise PlanError(f"JOIN_SQL: column {c.name} of {table.table} has type {c.pg_type}, which a lookup join "
                            f"cannot read ({c.unsupported}); leave it out of the query, or cast it in a view")


def build_plan(settings: Settings, catalog: InputCatalog) -> JoinPlan:
    """Resolve the configuration against the inputs' catalog (``catalog.read_catalog``: their reader
    schemas, a lookup join's table) into a plan; raises PlanError naming what to fix. Reads nothing.

    Each step below decides one thing; they run in this order, which is the order in which
    problems are reported (the first one found is the error)."""
    table = catalog.table
    schemas = (catalog.left_schema, table_schema(table) if table is not None else catalog.right_schema)
    schemas = with_source_times(settings, schemas)
    columns = _input_columns(settings, schemas)
    names = [tuple(c.name for c in cols) for cols in columns]
    configured_times = _configured_time_columns(settings, names)
    if table is not None:
        _unsupported_columns(settings, table)
    _unreadable_columns(settings, schemas)
    query = _parse_query(settings, names, configured_times, _types(columns))
    kind = _plan_kind(query, settings)
    steps = KIND_STEPS[kind]
    if steps.lookup:  # the table's side: the columns the query reads, and nothing else
        schemas = (schemas[0], table_schema(table, _read_columns(query, names[1])))
        columns = _input_columns(settings, schemas)
        names = [tuple(c.name for c in cols) for cols in columns]
        query = _parse_query(settings, names, configured_times, _types(columns))  # its columns' positions
    names = _joined_names(query, names)
    keys = _join_keys(query, names)
    pks = _primary_keys(settings, names)
    if steps.lookup:
        pks[1] = None  # the table's primary key makes no difference to the join's state
    time_columns = steps.time_columns(settings, kind, query, names, configured_times)
    for check in steps.checks:
        check(settings, kind)
    sides = steps.sides(settings, kind, schemas, columns, names, keys, pks, time_columns, query.inputs)
    projection, output_names, output = _projection(query, kind, names)
    schema = _output_schema(settings.output_topic, kind, query.join_type, sides, projection, output_names, output)
    output_key = _output_key(settings, output_names)
    plan = JoinPlan(
        kind=kind, join_type=query.join_type, left=sides[0], right=sides[1],
        filter_nulls=tuple(not ns for ns in query.null_safe_keys), condition_sql=query.condition_sql,
        condition=query.condition, output=output,
        projection=projection, output_names=output_names, output_schema=schema, output_key=output_key,
        mini_batch_size=settings.mini_batch_size, retention_ms=_retention(settings) if steps.retention else None,
        output_mode=OutputMode(settings.output_mode), interval_ms=_interval_ms(query), window=_window(query),
        state_buckets=DEFAULT_STATE_BUCKETS if settings.state_buckets is None else settings.state_buckets,
        lookup=_lookup(settings, table, keys, sides) if steps.lookup else None,
        description=describe(query).replace("processing-time temporal", "lookup") if steps.lookup
        else describe(query),
    )
    _check_types(plan)
    _check_upsert_key(plan)
    _compile_operator(plan)
    return plan


def _check_upsert_key(plan: JoinPlan) -> None:
    """An upsert key must never be NULL as a whole: when all its columns come from an input that the
    outer join pads with NULLs, every padded row's upserts and deletes would share one NULL key."""
    if plan.output_mode is not OutputMode.UPSERT or not plan.output_key:
        return
    sources = [plan.output_source(i) for i in plan.output_key]
    sides = {source[0] if source is not None else None for source in sources}
    padded = {0: plan.join_type.right_outer, 1: plan.join_type.left_outer}
    side = next(iter(sides))
    if len(sides) == 1 and side is not None and padded.get(side):
        other = "right" if side == 0 else "left"
        names = ", ".join(plan.output_names[i] for i in plan.output_key)
        raise PlanError(
            f"OUTPUT_KEY: {names} {'comes' if len(plan.output_key) == 1 else 'come'} from the "
            f"{('left', 'right')[side]} input, which this {plan.join_type.value} join pads with NULLs when a "
            f"{other} row has no match: the upsert key of every padded row would be NULL. Add output columns of "
            f"the {other} input (its primary key)")


def _input_columns(settings: Settings, schemas) -> list:
    """Each input schema's columns; a schema that is no record names where it came from."""
    columns = []
    for side, schema in zip(("LEFT", "RIGHT"), schemas):
        try:
            columns.append(record_columns(schema))
        except SchemaError as err:
            path = getattr(settings, f"{side.lower()}_schema_file")
            where = f"{side}_SCHEMA_FILE" if path else \
                f"SCHEMA_REGISTRY_URL (subject {getattr(settings, f'{side.lower()}_topic')}-value)"
            raise PlanError(f"{where}: {err}: the {side.lower()} input's values must be Avro records") from None
    return columns


def _configured_time_columns(settings: Settings, names) -> tuple[str | None, str | None]:
    """The columns LEFT_EVENT_TIME_COLUMN / RIGHT_EVENT_TIME_COLUMN name, in the schema's spelling."""
    time_vars = ("LEFT_EVENT_TIME_COLUMN", "RIGHT_EVENT_TIME_COLUMN")
    return tuple(
        names[i][_index(names[i], column, time_vars[i])] if column else None
        for i, column in enumerate((settings.left_event_time_column, settings.right_event_time_column))
    )


def _types(columns) -> list[list]:
    """Each input's columns as Flink types (what an expression over them is typed with)."""
    return [[from_avro(c.avro_type, c.nullable) for c in cols] for cols in columns]


def _joined_names(query: JoinQuery, names) -> list[tuple[str, ...]]:
    """Each input's columns as the join receives them: the input's, then those JOIN_SQL computes
    before the join (an input subquery's expressions, computed equi-keys)."""
    return [names[i] + tuple(c[0] for c in query.inputs[i].computed) if query.inputs[i] else names[i]
            for i in (0, 1)]


def _parse_query(settings: Settings, names, configured_times, types=None) -> JoinQuery:
    """JOIN_SQL, parsed against the two inputs' columns."""
    try:
        return parse_join_sql(
            settings.join_sql, settings.left_table_name, list(names[0]), settings.right_table_name, list(names[1]),
            time_columns=configured_times, left_types=types[0] if types else None,
            right_types=types[1] if types else None,
        )
    except QueryError as err:
        raise PlanError(f"JOIN_SQL: {err}") from None
    except RecursionError:
        raise PlanError("JOIN_SQL: too long or too deeply nested to plan; simplify the condition") from None


def _plan_kind(query: JoinQuery, settings: Settings) -> PlanKind:
    """Which family of join the query is; with RIGHT_LOOKUP_URL, a lookup join or nothing."""
    if settings.lookup:
        if query.temporal is not TemporalKind.PROCESSING_TIME or query.window is not None or query.interval is not None:
            raise PlanError(
                f"JOIN_SQL: with RIGHT_LOOKUP_URL the right side is a database table, joined by a lookup join: "
                f"SELECT ... FROM {settings.left_table_name} AS o [LEFT] JOIN {settings.right_table_name} FOR "
                "SYSTEM_TIME AS OF PROCTIME() AS c ON o.<column> = c.<column> [AND ...] (INNER or LEFT, an equality "
                "on columns of the table)")
        return PlanKind.LOOKUP
    if query.window is not None:
        return PlanKind.WINDOW
    if query.interval is not None:
        return PlanKind.INTERVAL_PROCESSING_TIME if query.interval.processing_time else PlanKind.INTERVAL_EVENT_TIME
    return {None: PlanKind.REGULAR, TemporalKind.EVENT_TIME: PlanKind.TEMPORAL_EVENT_TIME,
            TemporalKind.PROCESSING_TIME: PlanKind.TEMPORAL_PROCESSING_TIME}[query.temporal]


def _join_keys(query: JoinQuery, names) -> list[tuple[int, ...]]:
    """Each input's join key: the indexes of its columns in the query's equi keys, in their order."""
    return [tuple(_index(names[0], l, "JOIN_SQL") for l, _ in query.equi_keys),
            tuple(_index(names[1], r, "JOIN_SQL") for _, r in query.equi_keys)]


def _primary_keys(settings: Settings, names) -> list[tuple[int, ...] | None]:
    """Each input's primary key (LEFT_PRIMARY_KEY / RIGHT_PRIMARY_KEY), as column indexes; None when unset."""
    pks = []
    for var, pk, cols in (("LEFT_PRIMARY_KEY", settings.left_primary_key, names[0]),
                          ("RIGHT_PRIMARY_KEY", settings.right_primary_key, names[1])):
        pks.append(tuple(_index(cols, c, var) for c in pk) if pk else None)
    return pks


def _no_time_columns(settings: Settings, kind: PlanKind, query: JoinQuery, names, configured) -> list[int | None]:
    """A regular or lookup join has no time columns."""
    return [None, None]


def _processing_time_columns(settings: Settings, kind: PlanKind, query: JoinQuery, names,
                             configured) -> list[int | None]:
    """A processing-time temporal join has none, and refuses a versioned table's time."""
    if settings.right_event_time_column:
        raise PlanError(
            "RIGHT_EVENT_TIME_COLUMN: a processing-time temporal join (FOR SYSTEM_TIME AS OF PROCTIME()) "
            "cannot use a versioned table with an event-time attribute; Flink only allows processing-time "
            "temporal joins against lookup tables. Use FOR SYSTEM_TIME AS OF <left>.<time column> instead, "
            "or unset RIGHT_EVENT_TIME_COLUMN"
        )
    return [None, None]


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


def _temporal_time_columns(settings: Settings, kind: PlanKind, query: JoinQuery, names,
                           configured_times) -> list[int | None]:
    """An event-time temporal join's times: the left input's AS OF column (its one time attribute)
    and the versioned table's RIGHT_EVENT_TIME_COLUMN."""
    left = _index(names[0], query.left_time_column, "JOIN_SQL (FOR SYSTEM_TIME AS OF)")
    if configured_times[0] is not None and configured_times[0] != names[0][left]:
        raise PlanError(
            f"LEFT_EVENT_TIME_COLUMN: is {configured_times[0]}, but JOIN_SQL joins as of "
            f"{query.left_time_column}; the left input has one time attribute: make them the same or unset "
            "LEFT_EVENT_TIME_COLUMN"
        )
    if not settings.right_event_time_column:
        raise PlanError(
            "RIGHT_EVENT_TIME_COLUMN: required for an event-time temporal join (the versioned table's time)"
        )
    return [left, _index(names[1], settings.right_event_time_column, "RIGHT_EVENT_TIME_COLUMN")]


def _no_mini_batch(settings: Settings, kind: PlanKind) -> None:
    """Mini-batch folding (MINI_BATCH_SIZE) is for regular joins."""
    if settings.mini_batch_size:
        raise PlanError("MINI_BATCH_SIZE: mini-batch folding applies to regular joins only")


def _check_time_bounded_inputs(settings: Settings, kind: PlanKind) -> None:
    """An interval or window join takes append-only inputs and cleans its state up by time, without a TTL."""
    what = "a window join" if kind is PlanKind.WINDOW else "an interval join"
    for var, mode, fmt in (("LEFT_CHANGELOG_MODE", settings.left_changelog_mode, settings.left_format),
                           ("RIGHT_CHANGELOG_MODE", settings.right_changelog_mode, settings.right_format)):
        if format_of(fmt).changes_in_messages and mode != "append":
            raise PlanError(
                f"{var.replace('CHANGELOG_MODE', 'FORMAT')}: a {fmt} topic is a changelog (updates and deletes), "
                f"but the inputs of {what} must be append-only, as in Flink; for an insert-only table set "
                f"{var}=append (its updates and deletes become dead letters), else join it by a regular join or "
                "as the versioned table (or the probe side) of an event-time temporal join (FOR SYSTEM_TIME AS OF)")
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


def _joins_upsert_directly(mode: str, key: tuple[int, ...], pk: tuple[int, ...] | None,
                           filtered: bool = False, keeps_key: bool = True) -> bool:
    """Whether an input goes to the join without a normalize stage.

    An upsert input goes to the join directly when its join key is its primary key: every change
    of a primary key then meets the join in one join key, and the join itself turns bare +U and
    tombstones into a full changelog. Otherwise it is normalized first: with join-key columns
    beyond the primary key a row can move to another join key, where only a stage keyed by the
    primary key can retract it; with primary-key columns beyond the join key direct feeding would
    be correct too, but the normalize stage needs no key format to route tombstones. An input
    JOIN_SQL filters before the join is normalized first too (a row that leaves the filter must
    retract the row it replaces), and so is one whose primary key its input subquery drops."""
    if filtered or not keeps_key:
        return False
    return mode == "upsert" and pk is not None and set(key) == set(pk)


def _side_plans(settings: Settings, kind: PlanKind, schemas, columns, names, keys, pks,
                time_columns, inputs=(None, None)) -> list[SidePlan]:
    """Each input's plan: its topic, columns, keys, time column, state TTL and how its rows reach the join."""
    steps = KIND_STEPS[kind]
    ttls = (settings.left_ttl_ms, settings.right_ttl_ms) if steps.side_ttls else (None, None)
    calcs = [_calc(i, columns) for i in inputs]
    modes = (settings.left_changelog_mode, settings.right_changelog_mode)
    delays = (settings.left_watermark_delay_ms, settings.right_watermark_delay_ms)
    topics = (settings.left_topic, settings.right_topic)
    tables = (settings.left_table_name, settings.right_table_name)
    key_formats = (settings.left_key_format, settings.right_key_format)
    formats = (settings.left_format, settings.right_format)
    given = tuple(f"{side}_changelog_mode" in settings.model_fields_set for side in ("left", "right"))
    modes = tuple(format_of(f).changelog_mode(m, g, pk) for m, f, pk, g in zip(modes, formats, pks, given))
    sides = []
    for i in (0, 1):
        calc = inputs[i]
        keeps_key = calc is None or calc.kept is None or pks[i] is None or all(names[i][j] in calc.kept for j in pks[i])
        direct = format_of(formats[i]).message_keys and steps.direct_upserts and _joins_upsert_directly(
            modes[i], keys[i], pks[i], filtered=calc is not None and calc.filter is not None, keeps_key=keeps_key)
        sides.append(
            SidePlan(
                side=i, topic=topics[i], table=tables[i], columns=names[i][:len(columns[i])], calc=calcs[i],
                avro_types=tuple(c.avro_type for c in columns[i]), nullable=tuple(c.nullable for c in columns[i]),
                reader_schema=schemas[i], join_key=keys[i], primary_key=pks[i], changelog_mode=modes[i],
                time_column=time_columns[i], watermark_delay_ms=delays[i], state_ttl_ms=ttls[i],
                direct_upsert=direct, key_format=key_formats[i], format=formats[i],
                source_types=format_of(formats[i]).source_types(schemas[i]),
            )
        )
        if direct:
            try:
                KeyDecoder(sides[i], key_formats[i], None)
            except ValueError as err:
                raise PlanError(f"{sides[i].name.upper()}_KEY_FORMAT: {err}") from None
    return sides


def _calc(calc, columns) -> dict | None:
    """An input's ``SidePlan.calc`` from JOIN_SQL's ``InputCalc``."""
    if calc is None:
        return None
    return {"computed": [list(c) for c in calc.computed], "filter": calc.filter, "filter_sql": calc.filter_sql,
            "kept": list(calc.kept) if calc.kept is not None else None}


def _lookup_sides(settings: Settings, kind: PlanKind, schemas, columns, names, keys, pks, time_columns,
                  inputs=(None, None)) -> list[SidePlan]:
    """A lookup join's stream, grouped by its rows' identity (its primary key, else every column),
    and its table, asked by the lookup key."""
    calc = _calc(inputs[0], columns)
    fmt = format_of(settings.left_format)
    mode = fmt.changelog_mode(settings.left_changelog_mode, "left_changelog_mode" in settings.model_fields_set, pks[0])
    identity = pks[0] if pks[0] else tuple(range(len(names[0])))  # every column the join receives
    left = SidePlan(
        side=0, topic=settings.left_topic, table=settings.left_table_name, columns=names[0][:len(columns[0])], calc=calc,
        avro_types=tuple(c.avro_type for c in columns[0]), nullable=tuple(c.nullable for c in columns[0]),
        reader_schema=schemas[0], join_key=identity, primary_key=pks[0], changelog_mode=mode,
        state_ttl_ms=settings.left_ttl_ms if mode != "append" else None, key_format=settings.left_key_format,
        lookup_stream=True, format=settings.left_format,
        source_types=fmt.source_types(schemas[0]),
    )
    right = SidePlan(
        side=1, topic="", table=settings.right_table_name, columns=names[1],
        avro_types=tuple(c.avro_type for c in columns[1]), nullable=tuple(c.nullable for c in columns[1]),
        reader_schema=schemas[1], join_key=keys[1], primary_key=pks[1], changelog_mode="lookup",
    )
    return [left, right]


def _projection(query: JoinQuery, kind: PlanKind, names):
    """The output: per output column (side, index of the joined column it copies), the names,
    and ``JoinPlan.output`` when the output is computed (expressions, a WHERE after the join): the
    projection then holds the joined columns those read, each once, and ``output`` the columns
    computed from that row."""
    joined = [names[i] + (WINDOW_COLUMNS if kind is PlanKind.WINDOW else ()) for i in (0, 1)]
    output_names = tuple(c.name for c in query.projection)

    def pair(c) -> tuple[int, int]:
        side = 0 if c.side == "L" else 1
        return side, _index(joined[side], c.column, "JOIN_SQL")

    if query.where is None and all(c.expression is None for c in query.projection):
        return tuple(pair(c) for c in query.projection), output_names, None
    read: list[tuple[int, int]] = []

    def position(side: int, index: int) -> int:
        if (side, index) not in read:
            read.append((side, index))
        return read.index((side, index))

    def over_read(node):
        if node[0] == "col":
            return ["col", node[1], "I", position(0 if node[2] == "L" else 1, node[3])]
        if node[0] == "call":
            return [*node[:3], *(over_read(o) for o in node[3:])]
        return node

    columns = []
    for c in query.projection:
        if c.expression is None:
            columns.append({"at": position(*pair(c))})
        else:
            columns.append({"expr": over_read(c.expression), "sql": c.sql, "type": c.type})
    where = over_read(query.where) if query.where is not None else None
    output = {"columns": columns, "where": where, "where_sql": query.where_sql}
    return tuple(read), output_names, output


def _output_schema(topic: str, kind: PlanKind, join_type: JoinType, sides, projection, output_names,
                   output=None) -> dict:
    """The output's Avro schema: a copied column keeps its input's type, nullable where the
    input column is or where an outer join pads its side with NULLs; a computed one has the Avro
    type of its derived type (DECIMAL as bytes with the decimal logical type, TIMESTAMP(3) as
    timestamp-millis, DATE as date), nullable as Flink derives it."""
    draft = JoinPlan(kind=kind, join_type=join_type, left=sides[0], right=sides[1], filter_nulls=(),
                     condition_sql=None, projection=projection, output_names=output_names, output_schema={},
                     output_key=None, output=output)
    fields = [(name, *draft.output_column_type(i)) for i, name in enumerate(output_names)]
    return output_schema(record_name(topic), fields)


def _output_key(settings: Settings, output_names: tuple[str, ...]) -> tuple[int, ...] | None:
    """The output columns OUTPUT_KEY names (the message key), as output column indexes."""
    if not settings.output_key:
        return None
    return tuple(_index(output_names, c, "OUTPUT_KEY") for c in settings.output_key)


def _retention(settings: Settings) -> tuple[int, int] | None:
    """A temporal join's idle-state retention (min, max) from STATE_TTL."""
    if settings.state_ttl_ms:
        return (settings.state_ttl_ms, settings.state_ttl_ms * 3 // 2)  # Flink's min/max retention ratio
    return None


def _interval_ms(query: JoinQuery) -> tuple[int, int] | None:
    """An interval join's (lower, upper) bound in ms."""
    return (query.interval.lower_ms, query.interval.upper_ms) if query.interval is not None else None


def _window(query: JoinQuery) -> dict | None:
    """A window join's window table function, as the plan carries it (WindowSpec's fields)."""
    if query.window is None:
        return None
    w = query.window
    return {"kind": w.kind, "size_ms": w.size_ms, "slide_ms": w.slide_ms, "step_ms": w.step_ms,
            "offset_ms": w.offset_ms}


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
    left_key = plan.lookup["left_key"] if plan.kind is PlanKind.LOOKUP else plan.left.join_key
    for left, right in zip(left_key, plan.right.join_key):
        a, b = plan.left.families[left], plan.right.families[right]
        if not comparable(a, b) or "other" in (a, b):
            raise PlanError(f"JOIN_SQL: the join key {plan.left.table}.{plan.left.columns[left]} ({a}) = "
                            f"{plan.right.table}.{plan.right.columns[right]} ({b}) compares values SQL cannot "
                            "compare; join columns of the same type")
        if plan.kind is PlanKind.LOOKUP and (a, b) in _LOOKUP_CASTS:
            _refuse_lookup_cast(plan, left, right, a, b)


# A lookup key of these (stream, table) families: Flink's lookup join refuses every key whose two
# types are not "interoperable" (one type, ignoring nullability and string lengths: "Temporal table
# join requires equivalent condition of the same type"), and these are the pairs whose values
# PostgreSQL's index cannot answer (an integer column asked for 3.5, a numeric one for a binary
# double). Integers of any width against an integer, numeric or float column, and decimals against
# a numeric or float one, are compared by value and joined, as PostgreSQL compares them.
_LOOKUP_CASTS = {("float", "integer"): "double precision", ("decimal", "integer"): "numeric",
                 ("float", "decimal"): "double precision"}


def _refuse_lookup_cast(plan: JoinPlan, left: int, right: int, a: str, b: str) -> None:
    """A lookup key whose stream values and table column are of two kinds of number: refused at
    start, as Flink refuses it, naming the casts that make it one type."""
    column = plan.right.columns[right]
    table = plan.lookup["table"]
    pg_type = next(c["pg_type"] for c in table["columns"] if c["name"] == column)
    cast = _LOOKUP_CASTS[(a, b)]
    alias = f"{column}_{cast.split()[0]}"
    raise PlanError(
        f"JOIN_SQL: the lookup key {plan.left.table}.{plan.left.columns[left]} ({a}) = {plan.right.table}.{column} "
        f"({pg_type} in {table['table']}) compares two kinds of number, which Flink's lookup join refuses (it needs "
        f"one type on both sides) and which the table's index cannot answer; make the stream's column "
        f"{'an integer (int or long)' if b == 'integer' else 'a decimal'} in its schema, or look up a column of "
        f"{cast}: a view over {table['table']} with CAST({column} AS {cast}) AS {alias}, indexed by "
        f"CREATE INDEX ON {table['table']} ((CAST({column} AS {cast}))), as RIGHT_LOOKUP_TABLE")


def _compile_operator(plan: JoinPlan) -> None:
    """Build the operator now, as the workers will: this compiles (and type-checks) the condition
    and validates the operator's spec on the driver."""
    try:
        plan.operator  # noqa: B018 - compile (and type-check) the condition and validate the operator now
    except (ConfigurationError, ConditionError) as err:
        raise PlanError(f"JOIN_SQL: {err}") from None
    except RecursionError:
        raise PlanError("JOIN_SQL: the join condition is too long or too deeply nested to compile; simplify it") from None


@dataclass(frozen=True)
class KindSteps:
    """What planning does for one kind of join, where the kinds differ: the one place to look (and
    to add to) for a new kind. The steps run in :func:`build_plan`'s order."""

    #: Each input's time column: ``(settings, kind, query, names, configured) -> [left, right]``.
    time_columns: Callable
    #: The refusals of settings this kind cannot run, in order: ``(settings, kind) -> None``.
    checks: tuple[Callable, ...] = ()
    #: Each input's plan: :func:`_side_plans`, or a lookup join's stream and table.
    sides: Callable = _side_plans
    #: Per-side state TTLs (``LEFT_STATE_TTL``, ``RIGHT_STATE_TTL``, ``STATE_TTL``) apply to its inputs.
    side_ttls: bool = False
    #: An upsert input whose join key is its primary key goes to the join directly.
    direct_upserts: bool = False
    #: ``STATE_TTL`` is its idle-state retention (a temporal join's).
    retention: bool = False
    #: The right side is a database table (``JoinPlan.lookup``), read by the columns the query uses.
    lookup: bool = False


_TIME_BOUNDED = KindSteps(_time_attributes, checks=(_no_mini_batch, _check_time_bounded_inputs))

KIND_STEPS: dict[PlanKind, KindSteps] = {
    PlanKind.REGULAR: KindSteps(_no_time_columns, side_ttls=True, direct_upserts=True),
    PlanKind.TEMPORAL_EVENT_TIME: KindSteps(_temporal_time_columns, checks=(_no_mini_batch,), retention=True),
    PlanKind.TEMPORAL_PROCESSING_TIME: KindSteps(_processing_time_columns, checks=(_no_mini_batch,), retention=True),
    PlanKind.INTERVAL_EVENT_TIME: _TIME_BOUNDED,
    PlanKind.INTERVAL_PROCESSING_TIME: _TIME_BOUNDED,
    PlanKind.WINDOW: _TIME_BOUNDED,
    PlanKind.LOOKUP: KindSteps(_no_time_columns, checks=(_no_mini_batch,), sides=_lookup_sides, lookup=True),
}
