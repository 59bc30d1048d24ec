"""Interval and window joins against their definitions.

Property tests: random append-only inputs on two sides (a few join keys, NULL keys, times),
interleaved with watermark advances (event time) or clock ticks (processing time), replayed through
the operator the way the service drives it (records routed by join key, timers fired when due).
Once the end of input has passed everything, the emitted rows, as a multiset, must equal the join
computed from scratch with nested loops over all pairs of the materialized inputs; and no state
or timer may be left behind.

The generated watermarks never make a row late (each one stays below every later row's time), so
the definition needs no notion of lateness; late rows have their own example-based tests below.
"""
import os
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators import (
    ConfigurationError,
    InputSpec,
    IntervalJoinSpec,
    JoinType,
    RowKind,
    WindowJoinSpec,
    WindowKind,
    WindowSpec,
    compile_condition,
    make_interval_join,
    make_window_join,
)
from operators.testing import LocalRunner

INSERT = int(RowKind.INSERT)
EXAMPLES = int(os.environ.get("CHANGEJOIN_EXAMPLES", "150"))

# Both sides: (k, t, v, id): join key, event time (unused in processing time), payload, row id.
COLUMNS = ("k", "t", "v", "id")
K, T, V, ID = range(4)
SIDE = InputSpec(COLUMNS, (K,))
INF = float("inf")

OUTER_JOINS = [JoinType.INNER, JoinType.LEFT, JoinType.RIGHT, JoinType.FULL]
ALL_JOINS = OUTER_JOINS + [JoinType.SEMI, JoinType.ANTI]
INTERVAL_CONDITIONS = [None, "l.v < r.v", "l.v + r.v <> 3 OR r.v IS NULL"]
WINDOW_CONDITIONS = [None, "l.v <= r.v", "l.v <> r.v OR l.window_end > 12", "r.window_start < 6"]


# -- driving an operator as the service does ---------------------------------------------------
class Driver(LocalRunner):
    """The service's host (``operators.testing.LocalRunner``: records routed by join key, the clock
    and the combined watermark, due timers fired, the state protocol checked on every call), and
    what interval and window joins promise on top of it: at most one registered timer per key, in
    the operator's one time domain."""

    def after_call(self, key):
        timers = self.state.timers(key)
        assert len(timers) <= 1, (key, timers)
        assert all(domain == self.operator.time_domain for domain, _ in timers), (key, timers)

    def row(self, side, row):
        self.process([(side, INSERT, row)])

    def emitted(self) -> Counter:
        assert all(kind == INSERT for kind, _ in self.output.rows)
        return Counter(row for _, row in self.output.rows)


# -- generated inputs --------------------------------------------------------------------------
keys = st.sampled_from([0, 1, None])
payloads = st.sampled_from([0, 1, 2, 3, None])

event_time_steps = st.lists(
    st.one_of(
        st.tuples(st.just("row"), st.integers(0, 1), keys, st.integers(1, 24), payloads),
        st.tuples(st.just("watermark"), st.integers(0, 1), st.integers(0, 6)),
    ),
    max_size=30,
)

processing_time_steps = st.lists(
    st.one_of(
        st.tuples(st.just("row"), st.integers(0, 1), keys, st.just(None), payloads),
        st.tuples(st.just("tick"), st.sampled_from([0, 0, 1, 1, 2, 3, 5])), # many rows share a clock
    ),
    max_size=30,
)


def event_time_schedule(steps):
    """Rows (side, row) and watermarks (side, value); every watermark stays below the time of every
    later row, so no row is ever late. Ends with +inf on both sides."""
    times = [s[3] for s in steps if s[0] == "row"]
    out, seen, marks = [], 0, [None, None]
    for step in steps:
        if step[0] == "row":
            _, side, key, t, v = step
            out.append(("row", side, (key, t, v, len(out))))
            seen += 1
        else:
            _, side, back = step
            future = min(times[seen:], default=30)
            value = future - 1 - back
            if marks[side] is not None:
                value = max(value, marks[side])  # per input, watermarks never go back
            marks[side] = value
            out.append(("watermark", side, value))
    return out + [("watermark", 0, INF), ("watermark", 1, INF)]


def processing_time_schedule(steps):
    """Rows (side, row, arrival clock) and clock ticks; ends far past every clean-up timer."""
    out, now = [], 0
    for step in steps:
        if step[0] == "row":
            _, side, key, _, v = step
            out.append(("row", side, (key, now, v, len(out))))  # t = the arrival clock, for the reference
        else:
            now += step[1]
            out.append(("clock", now))
    return out + [("clock", now + 10_000)]


def replay(operator, schedule) -> Driver:
    driver = Driver(operator)
    for event in schedule:
        if event[0] == "row":
            driver.row(event[1], event[2])
        elif event[0] == "watermark":
            driver.advance_watermark(event[1], event[2])
        else:
            driver.advance_clock(event[1])
    return driver


def replay_batched(operator, schedule) -> Driver:
    """Like ``replay``, but the rows between two advances of time go in one call per join key."""
    driver, pending = Driver(operator), []
    for event in schedule:
        if event[0] == "row":
            pending.append((event[1], INSERT, event[2]))
            continue
        driver.process(pending)
        pending = []
        if event[0] == "watermark":
            driver.advance_watermark(event[1], event[2])
        else:
            driver.advance_clock(event[1])
    driver.process(pending)
    return driver


def rows_of(schedule):
    """The materialized inputs: per side, (arrival position, row)."""
    sides = ([], [])
    for i, event in enumerate(schedule):
        if event[0] == "row":
            sides[event[1]].append((i, event[2]))
    return sides


def keys_equal(left, right, null_safe):
    if left[K] is None or right[K] is None:
        return null_safe and left[K] is None and right[K] is None
    return left[K] == right[K]


# -- interval joins ----------------------------------------------------------------------------
def interval_spec(join_type, lower, upper, cleanup, condition, null_safe, event_time):
    return IntervalJoinSpec(
        join_type=join_type,
        left=SIDE,
        right=SIDE,
        lower_ms=lower,
        upper_ms=upper,
        left_time=T if event_time else None,
        right_time=T if event_time else None,
        filter_nulls=(not null_safe,),
        condition=compile_condition(condition, COLUMNS, COLUMNS) if condition else None,
        min_cleanup_interval_ms=cleanup,
    )


def interval_reference(join_type, lower, upper, condition, null_safe, schedule, arrival_time=None):
    """Every pair with ``lower <= l.t - r.t <= upper`` (both inclusive), equal keys and a TRUE
    condition, plus one null-padded row for every unmatched row of a preserved side.

    ``arrival_time(position)`` is the operator time when the row at that position arrived
    (processing time). A pair is then also subject to the rules of time: the earlier row is kept
    only if the operator time at its arrival was below its time plus its side's relative size
    (tests/conformance/README.md section 10.4, step 3), and it expires once the operator time
    passes that sum (sections 10.4 step 2, 10.5). With event-time inputs that are never late both
    always hold, so the definition alone remains."""
    cond = compile_condition(condition, COLUMNS, COLUMNS) if condition else None
    relative = (-lower, upper)
    lefts, rights = rows_of(schedule)
    result = Counter()
    matched_left, matched_right = set(), set()
    for li, left in lefts:
        for ri, right in rights:
            if not (lower <= left[T] - right[T] <= upper and keys_equal(left, right, null_safe)):
                continue
            if cond is not None and cond(left, right) is not True:
                continue
            if arrival_time is not None:
                (first_pos, first, first_side), later_pos = (
                    ((li, left, 0), ri) if li < ri else ((ri, right, 1), li)
                )
                kept_until = first[T] + relative[first_side]
                if not (arrival_time(first_pos) < kept_until and arrival_time(later_pos) <= kept_until):
                    continue
            result[left + right] += 1
            matched_left.add(li)
            matched_right.add(ri)
    nulls = (None,) * len(COLUMNS)
    if join_type.left_outer:
        result.update(left + nulls for li, left in lefts if li not in matched_left)
    if join_type.right_outer:
        result.update(nulls + right for ri, right in rights if ri not in matched_right)
    return result


interval_params = st.tuples(
    st.sampled_from(OUTER_JOINS),
    st.integers(-4, 4), # lower
    st.integers(-4, 4), # upper (lower > upper: the negative-size interval)
    st.sampled_from([0, 1, 3]), # min clean-up interval
    st.sampled_from(INTERVAL_CONDITIONS),
    st.booleans(), # null-safe key equality
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(interval_params, event_time_steps)
def test_event_time_interval_join_equals_its_definition(params, steps):
    join_type, lower, upper, cleanup, condition, null_safe = params
    schedule = event_time_schedule(steps)
    operator = make_interval_join(interval_spec(join_type, lower, upper, cleanup, condition, null_safe, True))
    driver = replay(operator, schedule)
    assert driver.emitted() == interval_reference(join_type, lower, upper, condition, null_safe, schedule)
    assert driver.output.late == []  # an interval join drops nothing


@settings(max_examples=2 * EXAMPLES, deadline=None)
@given(interval_params, processing_time_steps)
def test_processing_time_interval_join_equals_its_definition(params, steps):
    join_type, lower, upper, cleanup, condition, null_safe = params
    schedule = processing_time_schedule(steps)
    operator = make_interval_join(interval_spec(join_type, lower, upper, cleanup, condition, null_safe, False))
    driver = replay(operator, schedule)
    arrival = lambda position: schedule[position][2][T]  # noqa: E731 - the clock a row arrived at
    expected = interval_reference(join_type, lower, upper, condition, null_safe, schedule, arrival)
    assert driver.emitted() == expected
    assert driver.state.keys() == []


@settings(max_examples=EXAMPLES, deadline=None)
@given(interval_params, event_time_steps)
def test_interval_join_state_is_empty_after_the_end_of_input(params, steps):
    join_type, lower, upper, cleanup, condition, null_safe = params
    operator = make_interval_join(interval_spec(join_type, lower, upper, cleanup, condition, null_safe, True))
    driver = replay(operator, event_time_schedule(steps))
    assert driver.state.keys() == []


@settings(max_examples=EXAMPLES, deadline=None)
@given(interval_params, st.booleans(), st.data())
def test_interval_join_gives_the_same_rows_when_a_key_gets_several_records_per_call(params, event_time, data):
    join_type, lower, upper, cleanup, condition, null_safe = params
    if event_time:
        schedule = event_time_schedule(data.draw(event_time_steps))
    else:
        schedule = processing_time_schedule(data.draw(processing_time_steps))
    spec = interval_spec(join_type, lower, upper, cleanup, condition, null_safe, event_time)
    one_by_one = replay(make_interval_join(spec), schedule)
    batched = replay_batched(make_interval_join(spec), schedule)
    assert batched.emitted() == one_by_one.emitted()
    assert batched.state.keys() == []


# -- window joins ------------------------------------------------------------------------------
window_specs = st.one_of(
    st.builds(lambda size, offset: WindowSpec(WindowKind.TUMBLE, size, offset_ms=offset),
              st.integers(1, 6), st.integers(-3, 3)),
    st.builds(lambda slide, size, offset: WindowSpec(WindowKind.HOP, size, slide_ms=slide, offset_ms=offset),
              st.integers(1, 4), st.integers(1, 9), st.integers(-3, 3)),
    st.builds(lambda step, n, offset: WindowSpec(WindowKind.CUMULATE, step * n, step_ms=step, offset_ms=offset),
              st.integers(1, 3), st.integers(1, 4), st.integers(-3, 3)),
)

WINDOWED = COLUMNS + ("window_start", "window_end", "window_time")


def window_spec(join_type, window, condition, null_safe):
    return WindowJoinSpec(
        join_type=join_type,
        left=SIDE,
        right=SIDE,
        window=window,
        left_time=T,
        right_time=T,
        filter_nulls=(not null_safe,),
        condition=compile_condition(condition, WINDOWED, WINDOWED) if condition else None,
    )


def windows_by_definition(window: WindowSpec, t: int) -> list[tuple[int, int]]:
    """Every window [start, end) containing ``t``, enumerated from the window family's definition:
    starts on the offset grid of the slide (TUMBLE: size; CUMULATE: max size), lengths the size
    (TUMBLE, HOP) or every multiple of the step up to the max size (CUMULATE)."""
    grid = {WindowKind.TUMBLE: window.size_ms, WindowKind.HOP: window.slide_ms, WindowKind.CUMULATE: window.size_ms}
    every = grid[window.kind]
    if window.kind is WindowKind.CUMULATE:
        lengths = range(window.step_ms, window.size_ms + 1, window.step_ms)
    else:
        lengths = [window.size_ms]
    found = []
    for start in range(t - 60, t + 1):
        if (start - window.offset_ms) % every:
            continue
        found += [(start, start + n) for n in lengths if start <= t < start + n]
    return found


def window_reference(join_type, window, condition, null_safe, schedule):
    cond = compile_condition(condition, WINDOWED, WINDOWED) if condition else None
    lefts, rights = rows_of(schedule)
    copies = ({}, {})
    for side, rows in ((0, lefts), (1, rights)):
        for _, row in rows:
            for start, end in windows_by_definition(window, row[T]):
                copies[side].setdefault((start, end), []).append(row + (start, end, end - 1))
    result = Counter()
    nulls = (None,) * len(WINDOWED)
    for w in set(copies[0]) | set(copies[1]):
        ls, rs = copies[0].get(w, []), copies[1].get(w, [])
        right_matched = [False] * len(rs)
        for left in ls:
            found = False
            for j, right in enumerate(rs):
                if keys_equal(left, right, null_safe) and (cond is None or cond(left, right) is True):
                    found = True
                    right_matched[j] = True
                    if not join_type.is_semi_anti:
                        result[left + right] += 1
            if join_type is JoinType.SEMI and found or join_type is JoinType.ANTI and not found:
                result[left] += 1
            if join_type.left_outer and not found:
                result[left + nulls] += 1
        if join_type.right_outer:
            result.update(nulls + right for right, m in zip(rs, right_matched) if not m)
    return result


window_params = st.tuples(
    st.sampled_from(ALL_JOINS), window_specs, st.sampled_from(WINDOW_CONDITIONS), st.booleans()
)


@settings(max_examples=EXAMPLES, deadline=None)
@given(window_params, event_time_steps)
def test_window_join_equals_its_definition(params, steps):
    join_type, window, condition, null_safe = params
    schedule = event_time_schedule(steps)
    driver = replay(make_window_join(window_spec(join_type, window, condition, null_safe)), schedule)
    assert driver.emitted() == window_reference(join_type, window, condition, null_safe, schedule)
    assert driver.output.late == []


@settings(max_examples=EXAMPLES, deadline=None)
@given(window_params, event_time_steps)
def test_window_join_state_is_empty_after_the_end_of_input(params, steps):
    join_type, window, condition, null_safe = params
    driver = replay(make_window_join(window_spec(join_type, window, condition, null_safe)),
                    event_time_schedule(steps))
    assert driver.state.keys() == []


@settings(max_examples=EXAMPLES, deadline=None)
@given(window_params, event_time_steps)
def test_window_join_gives_the_same_rows_when_a_key_gets_several_records_per_call(params, steps):
    join_type, window, condition, null_safe = params
    schedule = event_time_schedule(steps)
    spec = window_spec(join_type, window, condition, null_safe)
    one_by_one = replay(make_window_join(spec), schedule)
    batched = replay_batched(make_window_join(spec), schedule)
    assert batched.emitted() == one_by_one.emitted()
    assert batched.state.keys() == []


@settings(max_examples=EXAMPLES, deadline=None)
@given(window_specs, st.integers(-40, 40))
def test_window_assignment_matches_the_definition(window, t):
    assert sorted(window.windows(t)) == sorted(windows_by_definition(window, t))


# -- boundaries of time (examples) -------------------------------------------------------------
def test_a_row_is_matched_until_the_operator_time_passes_its_time_plus_its_relative_size():
    # Processing time, bounds [-2, +2]: the left row of clock 0 is stored until the clock passes 2
    # (clean-up at 0 + 2 + 0 + 1 = 3); two right rows at clock 2 both still find it.
    driver = Driver(make_interval_join(interval_spec(JoinType.INNER, -2, 2, 0, None, False, False)))
    driver.row(0, ("a", None, 0, 0))
    driver.advance_clock(2)
    driver.row(1, ("a", None, 0, 1))
    driver.row(1, ("a", None, 0, 2))
    assert sum(driver.emitted().values()) == 2
    driver.advance_clock(3)
    assert driver.state.for_key(("a",)).get()[0] == []  # the left row has expired
    driver.row(1, ("a", None, 0, 3))
    assert sum(driver.emitted().values()) == 2


def test_a_row_whose_side_has_relative_size_zero_is_never_stored():
    # Processing time, bounds [-2, 0] (relR = 0): a right row can only match left rows that arrived
    # before it, so it is not stored, and a left row of the same clock does not find it.
    driver = Driver(make_interval_join(interval_spec(JoinType.RIGHT, -2, 0, 0, None, False, False)))
    driver.advance_clock(5)
    driver.row(1, ("a", None, 0, 0))
    assert driver.emitted() == Counter({(None, None, None, None, "a", None, 0, 0): 1})  # padded on arrival
    driver.row(0, ("a", None, 0, 1))
    assert sum(driver.emitted().values()) == 1
    driver.row(1, ("a", None, 0, 2))  # but a later right row of the same clock finds the left row
    assert driver.emitted()[("a", None, 0, 1, "a", None, 0, 2)] == 1


# -- late rows (examples) ----------------------------------------------------------------------
def test_a_late_interval_row_still_joins_what_is_stored_and_is_padded_at_once_without_a_match():
    # Bounds [-5, +5], LEFT join; the watermark at 20 is past both late rows' times.
    driver = Driver(make_interval_join(interval_spec(JoinType.LEFT, -5, 5, 0, None, False, True)))
    driver.row(1, ("a", 18, 0, 0))  # stored: 0 < 18 + 5
    driver.advance_watermark(0, 20)
    driver.advance_watermark(1, 20)
    assert driver.emitted() == Counter()
    driver.row(0, ("a", 14, 0, 1))  # behind the watermark: joins the stored right row
    driver.row(0, ("a", 2, 0, 2))  # behind the watermark, nothing in range: padded at once
    driver.row(0, ("b", 3, 0, 3))  # another key, nothing stored: padded at once
    assert driver.emitted() == Counter({
        ("a", 14, 0, 1, "a", 18, 0, 0): 1,
        ("a", 2, 0, 2, None, None, None, None): 1,
        ("b", 3, 0, 3, None, None, None, None): 1,
    })
    assert driver.output.late == []
    driver.advance_watermark(0, INF)
    driver.advance_watermark(1, INF)
    assert driver.state.keys() == []
    assert sum(driver.emitted().values()) == 3  # the late rows were not stored: no second padding


def test_late_window_copies_are_dropped_and_reported_once_per_copy():
    # HOP(size 10, slide 5): a row at 7 is in [0, 10) and [5, 15); with the watermark at 9,
    # [0, 10) has fired (10 - 1 <= 9), so only its copy for [5, 15) is buffered.
    window = WindowSpec(WindowKind.HOP, 10, slide_ms=5)
    driver = Driver(make_window_join(window_spec(JoinType.FULL, window, None, False)))
    driver.row(0, ("a", 6, 0, 0))
    driver.advance_watermark(0, 9)
    driver.advance_watermark(1, 9)
    fired = driver.emitted()
    assert fired == Counter({("a", 6, 0, 0, 0, 10, 9) + (None,) * 7: 1})
    late_right = ("a", 7, 0, 1)
    driver.row(1, late_right)
    assert driver.output.late == [(INSERT, late_right)]
    very_late = ("a", 1, 0, 2)  # [-5, 5) and [0, 10) have both fired: two dropped copies
    driver.row(0, very_late)
    assert driver.output.late == [(INSERT, late_right), (INSERT, very_late), (INSERT, very_late)]
    assert driver.late_by_side == [2, 1]
    driver.advance_watermark(0, INF)
    driver.advance_watermark(1, INF)
    assert driver.emitted() - fired == Counter({("a", 6, 0, 0, 5, 15, 14, "a", 7, 0, 1, 5, 15, 14): 1})
    assert driver.state.keys() == []


def test_a_window_fires_when_the_watermark_reaches_its_end_minus_one():
    driver = Driver(make_window_join(window_spec(JoinType.LEFT, WindowSpec(WindowKind.TUMBLE, 5), None, False)))
    driver.row(0, ("a", 1, 0, 0))
    driver.advance_watermark(0, 3)
    driver.advance_watermark(1, 3)
    assert driver.output.rows == []
    driver.advance_watermark(0, 4)
    driver.advance_watermark(1, 4)
    assert driver.emitted() == Counter({("a", 1, 0, 0, 0, 5, 4) + (None,) * 7: 1})
    driver.row(1, ("a", 4, 0, 1))  # its window [0, 5) has fired: late
    assert driver.late_by_side == [0, 1]


# -- configuration -----------------------------------------------------------------------------
@pytest.mark.parametrize("build", [
    lambda: interval_spec(JoinType.SEMI, -1, 1, 0, None, False, True),
    lambda: IntervalJoinSpec(JoinType.INNER, SIDE, SIDE, -1, 1, left_time=T, right_time=None),
    lambda: IntervalJoinSpec(JoinType.INNER, SIDE, SIDE, -1, 1, T, T, inputs_append_only=(True, False)),
    lambda: WindowJoinSpec(JoinType.INNER, SIDE, SIDE, WindowSpec(WindowKind.TUMBLE, 5), None, None),
    lambda: WindowJoinSpec(JoinType.INNER, SIDE, SIDE, WindowSpec(WindowKind.TUMBLE, 5), T, T,
                           inputs_append_only=(False, True)),
    lambda: WindowSpec(WindowKind.CUMULATE, 10, step_ms=3),
    lambda: WindowSpec(WindowKind.HOP, 10),
    lambda: WindowSpec(WindowKind.TUMBLE, 0),
], ids=["interval-semi", "interval-mixed-time", "interval-changelog-input", "window-processing-time",
        "window-changelog-input", "cumulate-uneven-step", "hop-without-slide", "tumble-empty"])
def test_joins_that_flink_does_not_plan_are_refused(build):
    with pytest.raises(ConfigurationError):
        build()


def test_output_watermark_delay():
    assert interval_spec(JoinType.INNER, -10, 20, 0, None, False, True).output_watermark_delay_ms == 20
    assert interval_spec(JoinType.INNER, -10, -5, 0, None, False, True).output_watermark_delay_ms == 10
    assert interval_spec(JoinType.INNER, 3, 1, 0, None, False, True).output_watermark_delay_ms == 0  # negative size
    assert interval_spec(JoinType.INNER, -10, 20, 0, None, False, False).output_watermark_delay_ms == 0  # proctime
