"""The join condition compiler: SQL's answers, with three-valued logic (None = UNKNOWN)."""
import pytest

from operators import compile_condition

LEFT, RIGHT = ("a", "s"), ("b", "t")


@pytest.mark.parametrize(
    "sql, left, right, expected",
    [
        ("r.t LIKE 'x%'", (1, None), (1, "xy"), True),
        ("r.t NOT LIKE 'x%'", (1, None), (1, "xy"), False),
        ("r.t NOT LIKE 'x%'", (1, None), (1, "yx"), True),
        ("r.t NOT LIKE 'x%'", (1, None), (1, None), None),
        ("r.t LIKE 'x!_' ESCAPE '!'", (1, None), (1, "x_"), True),
        ("r.t NOT LIKE 'x!_' ESCAPE '!'", (1, None), (1, "x_"), False),
        ("r.t NOT LIKE 'x!_' ESCAPE '!'", (1, None), (1, "xy"), True),
        ("r.t ILIKE 'AB%'", (1, None), (1, "abc"), True),
        ("r.t NOT ILIKE 'AB%'", (1, None), (1, "abc"), False),
        ("l.a NOT BETWEEN 1 AND 3", (2, None), (1, None), False),
        ("l.a NOT IN (1, 2)", (3, None), (1, None), True),
        ("l.a + 1 > r.b", (None, None), (1, None), None),
        ("NOT (l.a IS NOT DISTINCT FROM r.b)", (None, None), (None, None), False),
    ],
)
def test_condition_answers_as_sql_does(sql, left, right, expected):
    assert compile_condition(sql, LEFT, RIGHT)(left, right) is expected
