"""Replay conformance cases through the real operators.

    python -m operators.conformance CASES.json [--observed OBSERVED.json] [--case NAME ...]

Each case of a ``flink-join-conformance/1`` file is run through the operators of this package on
in-memory state, exactly as the service runs them on Spark state: records are routed by join key,
the processing-time clock and the watermarks come from the case's events, timers fire when due.
The output is cut into segments at the case's checkpoints, written to OBSERVED (format:
tests/conformance/README.md section 8), compared with the expectation, and reported as
``PASS``/``FAIL`` per case with a last line ``N passed, M failed`` (exit status 1 if any case
fails). The cases are in tests/conformance/ (``cases.json``, ``cases-interval-window.json``).

The host is :class:`~operators.testing.LocalRunner`, which also checks the state protocol on
every call. Event-time joins (temporal, interval, window) mark every advance of the combined
watermark in the output, held back by the operator's ``output_watermark_delay_ms`` (interval joins,
tests/conformance/README.md section 10.5). Window cases also report their late windowed copies per
input side (``late_rows_dropped``), counted from what each ``process`` call puts in ``Output.late``.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from datetime import datetime, timezone
from typing import Any

from . import (
    EVENT,
    ConfigurationError,
    InputSpec,
    IntervalJoinSpec,
    JoinSpec,
    JoinType,
    RowKind,
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
from .spec import WINDOW_COLUMNS
from .testing import InMemoryState, LocalRunner

SIDES = {"L": 0, "R": 1}


def to_tuple(value: Any) -> Any:
    """JSON lists (ROW values) become tuples so rows can be hashed and used as keys."""
    return tuple(to_tuple(v) for v in value) if isinstance(value, list) else value


def to_json(value: Any) -> Any:
    return [to_json(v) for v in value] if isinstance(value, tuple) else value


def _iso_millis(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp() * 1000)


def _watermark(value: Any) -> float:
    return float("inf") if value == "+inf" else value


def build_operator(case: dict):
    """The operator a case asks for; raises ConfigurationError for a join that must be refused."""
    return operator_for(case_spec(case))


def case_spec(case: dict):
    """The spec of the join a case asks for (``operators.operator_for`` builds its operator)."""
    kind = case["kind"]
    if kind == "config_error":
        kind = case.get("requested_kind", kind)
    left_cols, right_cols = tuple(case["left_schema"]), tuple(case["right_schema"])
    lk, rk = tuple(case["left_join_key"]), tuple(case["right_join_key"])
    filter_nulls = (bool(case["filter_null_keys"]),) * len(lk)
    projection = None
    if case.get("projection") is not None:
        projection = tuple((SIDES[s], i) for s, i in case["projection"])
    if kind == "window":  # the condition may name the window columns of either side
        left_cols, right_cols = left_cols + WINDOW_COLUMNS, right_cols + WINDOW_COLUMNS
    condition = None
    if case.get("condition_sql"):
        condition = compile_condition(case["condition_sql"], left_cols, right_cols)
    join_type = JoinType(case["join_type"])

    if kind in ("regular", "semi_anti", "mini_batch"):
        ttl = case.get("state_ttl_ms") or {}
        sides = []
        for name, cols, key in (("left", left_cols, lk), ("right", right_cols, rk)):
            declared = case[f"{name}_input_spec"]
            uk = declared.get("unique_key")
            side = InputSpec(cols, key, tuple(uk) if uk else None, ttl.get(name))
            if StateLayout(declared["kind"]) is not choose_layout(key, side.unique_key):
                raise ValueError(f"{name} input declares {declared['kind']} but its keys give {side.layout.value}")
            sides.append(side)
        spec = JoinSpec(
            join_type, sides[0], sides[1], filter_nulls, condition, projection, case.get("mini_batch_size")
        )
        return spec

    if kind in ("interval", "window"):
        return _time_bounded_spec(case, kind, join_type, filter_nulls, condition, projection)

    attr = case["time_attribute"]
    iso = attr.get("unit") == "iso8601"
    retention = case.get("state_retention_ms")
    spec = TemporalJoinSpec(
        kind=TemporalKind.PROCESSING_TIME if attr["left"] == "proctime" else TemporalKind.EVENT_TIME,
        join_type=join_type,
        left=InputSpec(left_cols, lk),
        right=InputSpec(right_cols, rk),
        filter_nulls=filter_nulls,
        condition=condition,
        projection=projection,
        left_time=None if attr["left"] == "proctime" else attr["left"],
        right_time=None if attr["right"] == "proctime" else attr["right"],
        time_of=(lambda v: None if v is None else _iso_millis(v)) if iso else None,
        retention_ms=(retention["min"], retention["max"]) if retention else None,
        drop_update_before_on_right=bool(case.get("drop_update_before_on_right")),
        right_is_versioned=case["right_input_spec"]["kind"] == "versioned",
    )
    return spec


def _time_column(value):
    return None if value == "proctime" else value


def _time_bounded_spec(case, kind, join_type, filter_nulls, condition, projection):
    """An interval or window join (tests/conformance/README.md sections 10 and 11)."""
    left = InputSpec(tuple(case["left_schema"]), tuple(case["left_join_key"]))
    right = InputSpec(tuple(case["right_schema"]), tuple(case["right_join_key"]))
    attr = case["time_attribute"]
    time_of = (lambda v: None if v is None else _iso_millis(v)) if attr.get("unit") == "iso8601" else None
    append_only = tuple(case[f"{s}_input_spec"].get("kind") == "append_only" for s in ("left", "right"))
    if kind == "interval":
        interval = case.get("interval") or {}
        spec = IntervalJoinSpec(
            join_type=join_type,
            left=left,
            right=right,
            lower_ms=interval.get("lower_ms"),
            upper_ms=interval.get("upper_ms"),
            left_time=_time_column(attr["left"]),
            right_time=_time_column(attr["right"]),
            filter_nulls=filter_nulls,
            condition=condition,
            projection=projection,
            min_cleanup_interval_ms=case.get("min_cleanup_interval_ms") or 0,
            time_of=time_of,
            inputs_append_only=append_only,
        )
        return spec
    window = case.get("window") or {}
    try:
        window_kind = WindowKind(window.get("type"))
    except ValueError:
        kinds = ", ".join(k.value for k in WindowKind)
        raise ConfigurationError(f"a window join needs a window of type {kinds}, got {window.get('type')!r}") from None
    spec = WindowJoinSpec(
        join_type=join_type,
        left=left,
        right=right,
        window=WindowSpec(
            kind=window_kind,
            size_ms=window.get("max_size_ms" if window_kind is WindowKind.CUMULATE else "size_ms"),
            slide_ms=window.get("slide_ms"),
            step_ms=window.get("step_ms"),
            offset_ms=window.get("offset_ms") or 0,
        ),
        left_time=_time_column(attr["left"]),
        right_time=_time_column(attr["right"]),
        filter_nulls=filter_nulls,
        condition=condition,
        projection=projection,
        time_of=time_of,
        inputs_append_only=append_only,
    )
    return spec


def run_case(case: dict, state: InMemoryState | None = None) -> dict:
    """Replay one case (on ``state``, a fresh in-memory state by default); returns its OBSERVED entry."""
    try:
        operator = build_operator(case)
    except ConfigurationError as err:
        return {"error": str(err)}
    if case["kind"] == "config_error":
        return {"segments": []}  # a join that should have been refused was accepted

    runner = LocalRunner(operator, state=state)
    segments: list[list] = [[]]
    # Event-time joins report each advance of the combined watermark, held back by the join's delay.
    marks = case["kind"] == "temporal_event_time" or getattr(operator, "time_domain", None) == EVENT
    delay = getattr(operator, "output_watermark_delay_ms", 0)
    late = 0
    bundle: list = []
    bundle_size = case.get("mini_batch_size") if case["kind"] == "mini_batch" else None

    def drain():
        nonlocal late
        rows, dropped = runner.drain()
        segments[-1].extend({"kind": RowKind(kind).short, "row": to_json(row)} for kind, row in rows)
        late += len(dropped)

    for event in case["events"]:
        if "expect" in event:
            segments.append([])
        elif "proctime" in event:
            runner.advance_clock(event["proctime"])
        elif "watermark" in event:
            if runner.advance_watermark(SIDES[event["side"]], _watermark(event["watermark"])) and marks:
                drain()
                new = runner.watermark
                segments[-1].append({"watermark": "+inf" if new == float("inf") else new - delay})
        else:
            record = (SIDES[event["side"]], int(RowKind.parse(event["kind"])), to_tuple(event["row"]))
            if bundle_size is None:
                runner.process([record])
            else:  # the count trigger: each key's share of a full bundle in one call, folded
                bundle.append(record)
                if len(bundle) >= bundle_size:
                    runner.process(bundle)
                    bundle.clear()
        drain()
    if bundle and not any("expect" in e for e in case["events"]):
        runner.process(bundle)  # end of input; with checkpoints, anything after the last one would be a failure
        drain()
    if segments[-1] == [] and len(segments) > 1:
        segments.pop()
    observed: dict = {"segments": segments}
    if case["kind"] == "temporal_event_time":
        observed["late_probe_rows_dropped"] = late
    if case["kind"] == "window":  # late windowed copies, per input side (tests/conformance/README.md section 11.4)
        observed["late_rows_dropped"] = {"left": runner.late_by_side[0], "right": runner.late_by_side[1]}
    return observed


# -- comparison (the rules of tests/conformance/README.md section 8) ---------------------------------
def _canon(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_canon(v) for v in value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return (type(value).__name__, value)
    if isinstance(value, (int, float)):
        return ("num", float(value))
    return ("other", json.dumps(value, sort_keys=True))


def _canon_watermark(value: Any) -> Any:
    if value in ("+inf", float("inf")):
        return ("num", float("inf"))
    return _canon(value)


def _entry(entry: dict) -> tuple:
    if "watermark" in entry:
        return ("wm", _canon_watermark(entry["watermark"]))
    return (entry["kind"], _canon(entry["row"]))


def _rows_only(segment: list) -> list:
    return [e for e in segment if "watermark" not in e]


def _diff_multiset(expected: list, observed: list) -> str | None:
    exp_c, obs_c = Counter(map(_entry, expected)), Counter(map(_entry, observed))
    if exp_c == obs_c:
        return None
    return f"missing {list((exp_c - obs_c).elements())}, unexpected {list((obs_c - exp_c).elements())}"


def _diff_ordered(expected: list, observed: list) -> str | None:
    exp, obs = list(map(_entry, expected)), list(map(_entry, observed))
    if exp == obs:
        return None
    for i, (a, b) in enumerate(zip(exp, obs)):
        if a != b:
            return f"entry {i}: expected {expected[i]}, observed {observed[i]}"
    return f"expected {len(exp)} entries, observed {len(obs)}"


def _runs(segment: list) -> list[list]:
    """The rows before the first watermark marker, then the rows after each marker."""
    runs: list[list] = [[]]
    for e in segment:
        if "watermark" in e:
            runs.append([])
        else:
            runs[-1].append(e)
    return runs


def _diff_multiset_runs(expected: list, observed: list) -> str | None:
    """Markers exactly as in ``ordered_with_watermarks``; the rows between two markers as a multiset."""
    exp_marks = [_entry(e) for e in expected if "watermark" in e]
    obs_marks = [_entry(e) for e in observed if "watermark" in e]
    if exp_marks != obs_marks:
        shown = lambda seg: [e["watermark"] for e in seg if "watermark" in e]  # noqa: E731
        return f"watermark markers: expected {shown(expected)}, observed {shown(observed)}"
    for i, (exp_run, obs_run) in enumerate(zip(_runs(expected), _runs(observed))):
        diff = _diff_multiset(exp_run, obs_run)
        if diff:
            where = "before the first watermark" if i == 0 else f"after watermark marker {i}"
            return f"rows {where}: {diff}"
    return None


def _diff_late_rows(expected: dict, observed: Any) -> str | None:
    if not (isinstance(observed, dict) and set(observed) == {"left", "right"}
            and all(isinstance(v, int) and not isinstance(v, bool) for v in observed.values())):
        return f"late_rows_dropped must be {{'left': N, 'right': M}}, got {observed!r}"
    if observed != expected:
        return f"late_rows_dropped {observed} != {expected}"
    return None


def _materialize(rows: list, upsert_key: list | None) -> tuple[Counter | None, str | None]:
    if upsert_key is None:
        table: Counter = Counter()
        for e in rows:
            row = _canon(e["row"])
            if e["kind"] in ("+I", "+U"):
                table[row] += 1
            elif table[row] > 0:
                table[row] -= 1
            else:
                return None, f"retraction of a row that is not in the table: {e}"
        return +table, None
    keyed: dict = {}
    for e in rows:
        key = tuple(_canon(e["row"][i]) for i in upsert_key)
        if e["kind"] in ("+I", "+U"):
            keyed[key] = _canon(e["row"])
        else:
            keyed.pop(key, None)
    return Counter(keyed.values()), None


def compare(case: dict, observed: dict | None) -> str | None:
    """None when ``observed`` satisfies the case, else a short description of the difference."""
    if observed is None:
        return "no observed output"
    mode = case["expected_mode"]
    if mode == "error":
        if observed.get("segments"):
            return "the configuration was accepted but must be rejected"
        return None if observed.get("error") else "no configuration error reported"
    if "error" in observed:
        return f"unexpected error: {observed['error']}"
    segments = observed.get("segments", [])
    if "late_probe_rows_dropped" in case and "late_probe_rows_dropped" in observed:
        if observed["late_probe_rows_dropped"] != case["late_probe_rows_dropped"]:
            return f"late_probe_rows_dropped {observed['late_probe_rows_dropped']} != {case['late_probe_rows_dropped']}"
    if "late_rows_dropped" in case and "late_rows_dropped" in observed:
        diff = _diff_late_rows(case["late_rows_dropped"], observed["late_rows_dropped"])
        if diff:
            return diff
    expects = [e["expect"] for e in case["events"] if "expect" in e]
    per_checkpoint = mode in ("ordered_per_checkpoint", "multiset_per_checkpoint")
    if per_checkpoint or (mode == "multiset_with_watermarks" and expects):
        if len(segments) > len(expects) and any(segments[len(expects):]):
            return "output after the last checkpoint"
        for i, expected in enumerate(expects):
            seen = segments[i] if i < len(segments) else []
            if mode == "multiset_with_watermarks":
                diff = _diff_multiset_runs(expected, seen)
            elif mode == "ordered_per_checkpoint":
                diff = _diff_ordered(expected, _rows_only(seen))
            else:
                diff = _diff_multiset(expected, _rows_only(seen))
            if diff:
                return f"checkpoint {i}: {diff}"
        return None
    flat = [e for seg in segments for e in seg]
    if mode == "multiset_with_watermarks":
        return _diff_multiset_runs(case["expected_changelog"], flat)
    if mode == "ordered":
        return _diff_ordered(case["expected_changelog"], _rows_only(flat))
    if mode == "ordered_with_watermarks":
        return _diff_ordered(case["expected_changelog"], flat)
    if mode in ("materialized_multiset", "materialized_upsert"):
        table, err = _materialize(_rows_only(flat), case.get("upsert_key") if mode == "materialized_upsert" else None)
        if err:
            return err
        expected = Counter(_canon(r) for r in case["expected_materialized"])
        if table != expected:
            return f"final table: missing {list((expected - table).elements())}, unexpected {list((table - expected).elements())}"
        return None
    return f"unknown expected_mode {mode!r}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m operators.conformance", description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", help="a flink-join-conformance/1 JSON file")
    parser.add_argument("--observed", help="write the OBSERVED file here")
    parser.add_argument("--case", action="append", help="run only this case (repeatable)")
    args = parser.parse_args(argv)
    with open(args.cases) as f:
        cases = json.load(f)["cases"]
    if args.case:
        cases = [c for c in cases if c["name"] in args.case]
    observed: dict = {}
    passed = failed = 0
    for case in cases:
        try:
            observed[case["name"]] = run_case(case)
            diff = compare(case, observed[case["name"]])
        except Exception as err:  # a crashing case is a failing case, the others still run
            observed[case["name"]] = {"error": f"{type(err).__name__}: {err}"}
            diff = f"crashed: {type(err).__name__}: {err}"
        if diff is None:
            passed += 1
            print(f"PASS {case['name']}")
        else:
            failed += 1
            print(f"FAIL {case['name']}: {diff}")
    if args.observed:
        with open(args.observed, "w") as f:
            json.dump({"cases": observed}, f, indent=1)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
