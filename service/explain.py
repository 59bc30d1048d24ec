"""``check-config``'s explanation of a plan (also the start-up log's): what each input is, how it
is read and keyed, what the join keeps and for how long, and the stages a record goes through.

Plain text from a built plan (``service/plan.py``); no planning happens here.
"""
from __future__ import annotations

import json

from operators import JoinType, WindowKind

from .formats import format_of
from .plan import TIME_BOUNDED_KINDS, JoinPlan, PlanKind
from .sql import interval_sql


def explain(plan: JoinPlan) -> str:
    """The plan as ``check-config`` prints it."""
    lines = [plan.description or f"{plan.join_type.value} join", f"kind: {plan.kind.value}"]
    for s in plan.sides:
        if plan.kind is PlanKind.LOOKUP:
            lines += _explain_lookup(plan, s)
            continue
        keys = ", ".join(s.state_columns[i] for i in s.join_key)
        pk = ", ".join(s.columns[i] for i in s.primary_key) if s.primary_key else "none"
        extra = f", event time {s.columns[s.time_column]}" if s.time_column is not None else ""
        if plan.kind is PlanKind.INTERVAL_PROCESSING_TIME:
            extra = ", processing time"
        ttl = f", state TTL {s.state_ttl_ms} ms" if s.state_ttl_ms else ""
        upsert = ""
        if s.direct_upsert:
            upsert = f", joined directly; tombstones by message key, {s.name.upper()}_KEY_FORMAT={s.key_format}"
        elif s.normalized:
            upsert = ", normalized per primary key before the join"
        layout = "" if plan.kind in TIME_BOUNDED_KINDS else f"; state layout {s.layout.value}"
        if s.primary_key and s.unique_key is None and plan.kind not in TIME_BOUNDED_KINDS:
            layout += " (JOIN_SQL's subquery does not keep the whole primary key: no unique key)"
        before = _explain_calc(s)
        mode = format_of(s.format).explain(s)
        lines.append(
            f"{s.name}: topic {s.topic} as {s.table} ({mode}{upsert}); join key ({keys}); "
            f"primary key ({pk}){layout}{extra}{ttl}{before}"
        )
    if plan.mini_batch_size:
        lines.append(f"mini-batch: fold up to {plan.mini_batch_size} records per key")
    lines += _explain_time(plan)
    key = ", ".join(plan.output_names[i] for i in plan.output_key) if plan.output_key else "none"
    lines.append(f"output: {', '.join(plan.output_names)}; message key ({key}); {plan.output_mode.value}")
    if plan.output is not None:
        computed = [f"{name} = {c['sql']} ({c['type']})" for name, c in zip(plan.output_names, plan.output["columns"])
                    if "expr" in c]
        if computed:
            lines.append("output computed from the joined rows: " + "; ".join(computed))
        if plan.output.get("where_sql"):
            lines.append(f"output filtered after the join: WHERE {plan.output['where_sql']} (each change, its "
                         "retraction as the row it retracts)")
    lines.append("stages: " + "; then ".join(plan.stages()))
    if plan.state_buckets:
        lines.append(f"state: the keys of every stage in {plan.state_buckets} buckets (STATE_BUCKETS; state calls "
                     "to Spark per bucket of keys)")
    else:
        lines.append("state: one Spark grouping key per key (STATE_BUCKETS=0)")
    return "\n".join(lines)


def _explain_calc(s) -> str:
    """What JOIN_SQL does to an input's rows before the join, for ``check-config``."""
    if not s.calc:
        return ""
    parts = []
    if s.calc.get("filter_sql"):
        parts.append(f"filtered by {s.calc['filter_sql']}")
    if s.computed:
        parts.append("computes " + ", ".join(f"{name} = {sql} ({sql_type})" for name, sql_type, _, sql in s.computed))
    if s.calc.get("kept") is not None:
        parts.append(f"keeps {', '.join(s.calc['kept']) or 'no input column'} (the others NULL in the join's state)")
    where = "after the normalize stage" if s.normalized else "before the shuffle"
    return f"; {where}: " + "; ".join(parts)


def _explain_lookup(plan: JoinPlan, s) -> list[str]:
    """A lookup join's stream and table, for ``check-config``."""
    lookup = plan.lookup
    if s.side == 0:
        keyed = {"key": f"grouped by its primary key ({', '.join(s.columns[i] for i in s.primary_key or ())})",
                 "row": "grouped by the whole row (no LEFT_PRIMARY_KEY: a multiset of rows)",
                 "none": "append-only: no state"}[lookup["identity"]]
        ttl = f", state TTL {s.state_ttl_ms} ms" if s.state_ttl_ms else ""
        key = ", ".join(s.state_columns[i] for i in lookup["left_key"])
        return [f"left: topic {s.topic} as {s.table} ({s.changelog_mode}); {keyed}; looks up ({key}){ttl}"]
    table = lookup["table"]
    unique = "; ".join(", ".join(u) for u in table["unique_keys"]) or "none"
    lines = [f"right: table {table['table']} in {lookup['url']} as {s.table}; looked up by "
             f"({', '.join(lookup['key_columns'])}); primary key ({', '.join(table['primary_key'] or ()) or 'none'}); "
             f"unique keys ({unique})"]
    for c in table["columns"]:
        if c["avro_type"] is None:
            lines.append(f"  column {c['name']}: {c['pg_type']} -> not read ({c['unsupported']})")
        elif c["name"] not in s.columns:
            lines.append(f"  column {c['name']}: {c['pg_type']} -> not read (the query does not use it)")
        else:
            avro = json.dumps(c["avro_type"]) if isinstance(c["avro_type"], dict) else c["avro_type"]
            lines.append(f"  column {c['name']}: {c['pg_type']}{'' if c['nullable'] else ' not null'} -> Avro {avro}")
    cache = lookup["cache"]
    if cache is None:
        lines.append(f"lookup: {lookup['batch_size']} keys per query, every micro-batch reads the table as it is "
                     "(LOOKUP_CACHE=none)")
    else:
        expiry = ", ".join(f"{what} {cache[f'expire_after_{what}_s']} s" for what in ("write", "access")
                           if cache[f"expire_after_{what}_s"]) or "no expiry"
        lines.append(f"lookup: {lookup['batch_size']} keys per query; a partial cache per Python worker of at most "
                     f"{cache['max_rows']} keys ({expiry}; missing keys {'cached' if cache['cache_missing_key'] else 'not cached'})")
    lines.append(f"lookup: query timeout {lookup['query_timeout_s']} s, up to {lookup['max_retries']} retries from "
                 f"{lookup['retry_backoff_s']} s back-off; the rows each task looked up are pinned under the "
                 "checkpoint, so a replayed micro-batch joins the same rows")
    return lines


def _explain_time(plan: JoinPlan) -> list[str]:
    """The time semantics and the state kept per key, for the joins on time."""
    lines = []
    if plan.is_event_time:
        lines.append(
            f"watermark: the smaller of the inputs' watermarks (largest event time seen minus "
            f"LEFT_WATERMARK_DELAY={plan.left.watermark_delay_ms} ms / "
            f"RIGHT_WATERMARK_DELAY={plan.right.watermark_delay_ms} ms), advanced between micro-batches"
        )
    if plan.interval_ms is not None:
        lower, upper = plan.interval_ms
        l_time, r_time = (("l." + plan.left.columns[plan.left.time_column], "r." + plan.right.columns[plan.right.time_column])
                          if plan.is_event_time else ("l.proctime", "r.proctime"))
        domain = ("event time: the operator time is the watermark" if plan.is_event_time else
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
                      JoinType.FULL: "unmatched rows of both sides are null-padded then"}.get(plan.join_type, "")
            lines.append(
                f"state per join key: the rows of both inputs, each kept while a row of the other input may still "
                f"match it: a left row until the operator time passes its time + {-lower} ms, a right row until "
                f"it passes its time + {upper} ms; a clean-up timer per key and side removes them"
                f"{'; ' + padded if padded else ''}; output is insert-only (+I); no row is ever late"
            )
    if plan.window is not None:
        w = plan.window_spec
        sizes = {WindowKind.TUMBLE: f"size {interval_sql(w.size_ms)}",
                 WindowKind.HOP: f"slide {interval_sql(w.slide_ms)}, size {interval_sql(w.size_ms)}",
                 WindowKind.CUMULATE: f"step {interval_sql(w.step_ms)}, max size {interval_sql(w.size_ms)}"}[w.kind]
        offset = f", offset {interval_sql(w.offset_ms)}" if w.offset_ms else ""
        lines.append(
            f"window: {w.kind.value} ({sizes}{offset}) on l.{plan.left.columns[plan.left.time_column]} and "
            f"r.{plan.right.columns[plan.right.time_column]}; rows join within the same window (window_start, "
            f"window_end) and join key"
        )
        lines.append(
            "state per join key and window: the rows of both inputs, buffered until the watermark reaches "
            "window_end - 1; then the window fires (its joined rows are emitted, insert-only +I) and its rows "
            "are dropped. A row for a window that has already fired is late: dropped from the join and sent "
            "to the dead-letter topic (reason late)"
        )
    return lines
