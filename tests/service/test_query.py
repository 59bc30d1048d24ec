"""Unit tests for service.sql: JOIN_SQL -> JoinQuery."""
from __future__ import annotations

import pytest

from operators import compile_condition
from service.sql import JoinQuery, OutputColumn, QueryError, describe, parse_join_sql

ORDER_COLS = ["order_id", "movie_id", "order_time", "currency", "amount", "a", "c", "Name"]
PRICE_COLS = ["order_id", "seat_price", "currency", "rate", "b", "c", "valid_from"]


def parse(sql: str) -> JoinQuery:
    return parse_join_sql(sql, "order_log", ORDER_COLS, "price_log", PRICE_COLS)


def rejects(sql: str, *fragments: str) -> str:
    with pytest.raises(QueryError) as info:
        parse(sql)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


def names(q: JoinQuery) -> list[str]:
    return [c.name for c in q.projection]


# ---------------------------------------------------------------------- regular joins


def test_left_join_example():
    q = parse(
        "SELECT o.order_id, o.movie_id, p.seat_price FROM order_log AS o "
        "LEFT JOIN price_log AS p ON o.order_id = p.order_id"
    )
    assert q == JoinQuery(
        join_type="LEFT",
        temporal=None,
        left_table="order_log",
        left_alias="o",
        right_table="price_log",
        right_alias="p",
        equi_keys=(("order_id", "order_id"),),
        null_safe_keys=(False,),
        condition_sql=None,
        left_time_column=None,
        projection=(
            OutputColumn("order_id", "L", "order_id"),
            OutputColumn("movie_id", "L", "movie_id"),
            OutputColumn("seat_price", "R", "seat_price"),
        ),
    )
    assert QueryError.__mro__[1] is ValueError


@pytest.mark.parametrize(
    "join, expected",
    [
        ("JOIN", "INNER"),
        ("INNER JOIN", "INNER"),
        ("inner join", "INNER"),
        ("LEFT JOIN", "LEFT"),
        ("LEFT OUTER JOIN", "LEFT"),
        ("RIGHT JOIN", "RIGHT"),
        ("right outer join", "RIGHT"),
        ("FULL JOIN", "FULL"),
        ("FULL OUTER JOIN", "FULL"),
    ],
)
def test_join_types(join, expected):
    q = parse(f"select o.a, p.b from order_log o {join} price_log p on o.order_id = p.order_id")
    assert q.join_type == expected
    assert q.temporal is None


def test_aliases_optional_table_names_qualify():
    q = parse(
        "SELECT order_log.a, price_log.b FROM order_log JOIN price_log "
        "ON price_log.order_id = order_log.order_id"
    )
    assert (q.left_alias, q.right_alias) == ("order_log", "price_log")
    assert q.equi_keys == (("order_id", "order_id"),)  # (left, right) whatever the written order


def test_unqualified_columns_resolve_when_unambiguous():
    q = parse("SELECT a, b, seat_price AS price FROM order_log o JOIN price_log p ON movie_id = rate")
    assert q.projection == (
        OutputColumn("a", "L", "a"),
        OutputColumn("b", "R", "b"),
        OutputColumn("price", "R", "seat_price"),
    )
    assert q.equi_keys == (("movie_id", "rate"),)


def test_multiple_keys_in_on_order_and_null_safe():
    q = parse(
        "SELECT o.a FROM order_log o JOIN price_log p "
        "ON p.currency = o.currency AND o.order_id IS NOT DISTINCT FROM p.order_id AND o.a = p.b"
    )
    assert q.equi_keys == (("currency", "currency"), ("order_id", "order_id"), ("a", "b"))
    assert q.null_safe_keys == (False, True, False)
    assert q.condition_sql is None


def test_residual_condition_keeps_precedence():
    q = parse(
        "SELECT o.a FROM order_log o FULL JOIN price_log p "
        "ON o.order_id = p.order_id AND (o.a > p.b + 1 OR p.c LIKE 'x%') AND (o.a - 1) * 2 % 3 <> p.b"
    )
    assert q.equi_keys == (("order_id", "order_id"),)
    assert q.condition_sql == "(l.a > r.b + 1 OR r.c LIKE 'x%') AND (l.a - 1) * 2 % 3 <> r.b"


def test_unparenthesised_or_binds_loosest_so_there_is_no_equi_key():
    # AND binds tighter than OR: this is (key AND a > b + 1) OR c LIKE 'x%'
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log p "
        "ON o.order_id = p.order_id AND o.a > p.b + 1 OR p.c LIKE 'x%'",
        "equi-join condition",
    )


def test_single_or_residual_and_where_merge_for_inner_joins():
    q = parse(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id AND o.a > 1 "
        "WHERE o.currency = p.currency AND (p.b IS NOT NULL OR o.a < 0) AND o.c = 'it''s' OR p.c IN ('u', 'v')"
    )
    # WHERE's top level is OR: one residual conjunct, parenthesised when ANDed to the ON part
    assert q.equi_keys == (("order_id", "order_id"),)
    assert q.condition_sql == (
        "l.a > 1 AND (l.currency = r.currency AND (NOT r.b IS NULL OR l.a < 0) AND l.c = 'it''s' "
        "OR r.c IN ('u', 'v'))"
    )
    q = parse(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id "
        "WHERE o.currency = p.currency AND NOT (o.a BETWEEN 1 AND 2)"
    )
    assert q.equi_keys == (("order_id", "order_id"), ("currency", "currency"))
    assert q.condition_sql == "NOT (l.a BETWEEN 1 AND 2)"


def test_condition_on_same_side_equalities_and_distinct_from():
    q = parse(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id "
        "AND o.a = o.movie_id AND p.b IS DISTINCT FROM o.a AND -o.amount / 2 >= 1.5"
    )
    assert q.equi_keys == (("order_id", "order_id"),)
    assert q.condition_sql == "l.a = l.movie_id AND NOT (r.b IS NOT DISTINCT FROM l.a) AND -l.amount / 2 >= 1.5"


def test_condition_sql_compiles_with_the_operators_condition_compiler():
    condition = pytest.importorskip("operators.condition")
    q = parse(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id "
        "AND (o.a > p.b + 1 OR p.c LIKE 'x%') AND o.Name <> 'it''s'"
    )
    cond = condition.compile_condition(q.condition_sql, ORDER_COLS, PRICE_COLS)
    left = [1, 2, 3, "EUR", 10, 5, "c", "bob"]
    right = [1, 9.5, "EUR", 1.1, 3, "yes", 0]
    assert cond(left, right) is True  # 5 > 3 + 1
    assert cond(left, [1, 9.5, "EUR", 1.1, 4, "xy", 0]) is True  # LIKE 'x%'
    assert cond(left, [1, 9.5, "EUR", 1.1, 4, "no", 0]) is False
    assert cond(left[:-1] + ["it's"], right) is False


def test_keyword_and_odd_column_names_are_quoted_in_condition():
    q = parse_join_sql(
        'SELECT o.`select` FROM t1 o JOIN t2 p ON o.id = p.id AND o."select" > p.`my col`',
        "t1",
        ["id", "select"],
        "t2",
        ["id", "my col"],
    )
    assert q.condition_sql == 'l."select" > r."my col"'
    assert q.projection == (OutputColumn("select", "L", "select"),)


def test_star_expansion_and_aliases():
    q = parse_join_sql(
        "SELECT * FROM l_topic JOIN r_topic ON l_topic.k = r_topic.rk", "l_topic", ["k", "x"], "r_topic", ["rk", "y"]
    )
    assert names(q) == ["k", "x", "rk", "y"]
    q = parse("SELECT p.*, o.a AS order_a FROM order_log AS o JOIN price_log AS p ON o.order_id = p.order_id")
    assert names(q) == PRICE_COLS + ["order_a"]
    assert q.projection[-1] == OutputColumn("order_a", "L", "a")
    q = parse("SELECT o.order_id AS id, o.order_id oid FROM order_log o JOIN price_log p ON o.order_id = p.order_id")
    assert q.projection == (OutputColumn("id", "L", "order_id"), OutputColumn("oid", "L", "order_id"))


def test_case_insensitive_resolution_keeps_user_spelling_for_output():
    q = parse(
        "SELECT O.ORDER_ID, o.name, P.Seat_Price AS Price FROM ORDER_LOG AS o "
        "JOIN Price_Log p ON o.Order_Id = p.ORDER_ID"
    )
    assert q.projection == (
        OutputColumn("ORDER_ID", "L", "order_id"),
        OutputColumn("name", "L", "Name"),
        OutputColumn("Price", "R", "seat_price"),
    )
    assert q.equi_keys == (("order_id", "order_id"),)
    assert (q.left_table, q.right_table) == ("order_log", "price_log")


def test_case_sensitive_match_wins():
    # exact spelling first; output names must differ case-insensitively, hence AS
    q = parse_join_sql(
        "SELECT o.Id AS x, o.ID AS y FROM t1 o JOIN t2 p ON o.id = p.id", "t1", ["Id", "ID", "id"], "t2", ["id"]
    )
    assert [c.column for c in q.projection] == ["Id", "ID"]
    assert q.equi_keys == (("id", "id"),)
    with pytest.raises(QueryError, match="case-insensitively"):
        parse_join_sql("SELECT o.iD FROM t1 o JOIN t2 p ON o.id = p.id", "t1", ["Id", "ID", "id"], "t2", ["id"])


def test_quoted_identifiers_and_dotted_topic_names():
    q = parse_join_sql(
        'SELECT `o`.`k`, "p"."v" FROM `orders.v1` AS o JOIN "prices-v2" AS p ON o.k = p.k',
        "orders.v1",
        ["k"],
        "prices-v2",
        ["k", "v"],
    )
    assert (q.left_table, q.right_table) == ("orders.v1", "prices-v2")
    assert names(q) == ["k", "v"]


def test_trailing_semicolon_and_comments():
    q = parse("SELECT o.a -- the a\nFROM order_log o /* x */ JOIN price_log p ON o.order_id = p.order_id;")
    assert names(q) == ["a"]


# ---------------------------------------------------------------------- temporal joins


def test_event_time_temporal_join():
    q = parse(
        "SELECT o.*, r.rate FROM order_log AS o LEFT JOIN price_log FOR SYSTEM_TIME AS OF o.order_time AS r "
        "ON o.currency = r.currency"
    )
    assert q.join_type == "LEFT"
    assert q.temporal == "event_time"
    assert q.left_time_column == "order_time"
    assert q.right_alias == "r"
    assert q.equi_keys == (("currency", "currency"),)
    assert names(q) == ORDER_COLS + ["rate"]


def test_event_time_temporal_join_inner_unqualified_time_column():
    q = parse(
        "SELECT o.a FROM order_log o JOIN price_log FOR SYSTEM_TIME AS OF order_time r ON o.currency = r.currency"
    )
    assert (q.join_type, q.temporal, q.left_time_column) == ("INNER", "event_time", "order_time")


@pytest.mark.parametrize("as_of", ["PROCTIME()", "proctime()", "o.proctime", "o.proc_time"])
def test_processing_time_temporal_join(as_of):
    q = parse(
        f"SELECT o.a, r.rate FROM order_log AS o JOIN price_log FOR SYSTEM_TIME AS OF {as_of} AS r "
        "ON o.currency = r.currency AND r.rate > 0"
    )
    assert q.temporal == "processing_time"
    assert q.left_time_column is None
    assert q.join_type == "INNER"
    assert q.condition_sql == "r.rate > 0"


def test_real_proctime_column_is_event_time():
    q = parse_join_sql(
        "SELECT o.k FROM a o JOIN b FOR SYSTEM_TIME AS OF o.proctime AS r ON o.k = r.k", "a", ["k", "proctime"], "b", ["k"]
    )
    assert (q.temporal, q.left_time_column) == ("event_time", "proctime")


def test_right_temporal_join_rejected():
    rejects(
        "SELECT o.a FROM order_log o RIGHT JOIN price_log FOR SYSTEM_TIME AS OF o.order_time AS r "
        "ON o.currency = r.currency",
        "RIGHT temporal",
        "INNER or LEFT",
    )
    rejects(
        "SELECT o.a FROM order_log o FULL JOIN price_log FOR SYSTEM_TIME AS OF PROCTIME() AS r "
        "ON o.currency = r.currency",
        "FULL temporal",
    )


def test_time_column_must_be_on_the_left():
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log FOR SYSTEM_TIME AS OF r.valid_from AS r "
        "ON o.currency = r.currency",
        "must be a column of the left table",
        "r.valid_from",
    )
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log FOR SYSTEM_TIME AS OF o.nope AS r ON o.currency = r.currency",
        "unknown column 'nope'",
    )
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log FOR SYSTEM_TIME AS OF o.order_time + 1 AS r "
        "ON o.currency = r.currency",
        "unsupported time expression",
    )


def test_temporal_join_needs_an_equi_key_and_right_side_version():
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log FOR SYSTEM_TIME AS OF o.order_time AS r ON o.a > r.b",
        "temporal join has no equi-join condition",
        "primary key",
    )
    rejects(
        "SELECT o.a FROM order_log FOR SYSTEM_TIME AS OF PROCTIME() AS o JOIN price_log r ON o.a = r.b",
        "only supported on the right",
    )


# ---------------------------------------------------------------------- semi / anti joins


def test_semi_join_in():
    q = parse("SELECT o.order_id, o.a FROM order_log AS o WHERE o.order_id IN (SELECT p.order_id FROM price_log AS p)")
    assert (q.join_type, q.right_alias) == ("SEMI", "p")
    assert q.equi_keys == (("order_id", "order_id"),)
    assert q.null_safe_keys == (False,)
    assert q.condition_sql is None
    assert names(q) == ["order_id", "a"]


def test_anti_join_not_in_with_subquery_where():
    q = parse(
        "SELECT * FROM order_log o WHERE o.movie_id NOT IN "
        "(SELECT p.rate FROM price_log p WHERE p.currency = o.currency AND p.b > 3)"
    )
    assert q.join_type == "ANTI"
    assert q.equi_keys == (("movie_id", "rate"), ("currency", "currency"))
    assert q.condition_sql == "r.b > 3"
    assert names(q) == ORDER_COLS  # * is the left table only


def test_multi_column_in():
    q = parse(
        "SELECT o.a FROM order_log o WHERE (o.order_id, o.currency) IN (SELECT p.order_id, p.currency FROM price_log p)"
    )
    assert q.equi_keys == (("order_id", "order_id"), ("currency", "currency"))
    rejects(
        "SELECT o.a FROM order_log o WHERE (o.order_id, o.currency) IN (SELECT p.order_id FROM price_log p)",
        "same number",
    )


def test_exists_and_not_exists():
    q = parse(
        "SELECT o.* FROM order_log o WHERE EXISTS "
        "(SELECT 1 FROM price_log p WHERE p.order_id = o.order_id AND o.currency IS NOT DISTINCT FROM p.currency "
        "AND p.b > o.a)"
    )
    assert q.join_type == "SEMI"
    assert q.equi_keys == (("order_id", "order_id"), ("currency", "currency"))
    assert q.null_safe_keys == (False, True)
    assert q.condition_sql == "r.b > l.a"
    q = parse("SELECT a FROM order_log WHERE NOT EXISTS (SELECT * FROM price_log WHERE price_log.b = order_log.a)")
    assert q.join_type == "ANTI"
    assert q.equi_keys == (("a", "b"),)
    assert (q.left_alias, q.right_alias) == ("order_log", "price_log")


def test_subquery_unqualified_columns_prefer_the_subquery_table():
    # `order_id` inside the subquery is price_log's (SQL scoping): p.order_id = p.order_id has no key
    rejects(
        "SELECT o.a FROM order_log o WHERE EXISTS (SELECT 1 FROM price_log p WHERE order_id = order_id)",
        "semi join has no equi-join condition",
    )
    q = parse("SELECT a FROM order_log o WHERE EXISTS (SELECT 1 FROM price_log p WHERE b = a)")
    assert q.equi_keys == (("a", "b"),)


def test_semi_join_extra_where_merges_and_anti_join_extra_where_filters_the_left_input():
    q = parse(
        "SELECT o.a FROM order_log o WHERE o.a > 0 AND o.order_id IN (SELECT p.order_id FROM price_log p WHERE p.b < 5)"
    )
    assert q.condition_sql == "r.b < 5 AND l.a > 0" and q.inputs == (None, None)
    q = parse("SELECT o.a FROM order_log o WHERE o.a > 0 AND NOT EXISTS (SELECT 1 FROM price_log p WHERE p.b = o.a)")
    assert q.join_type == "ANTI" and q.inputs[0].filter_sql == "o.a > 0" and q.condition_sql is None


def test_semi_join_selects_only_left_columns():
    rejects(
        "SELECT o.a, p.b FROM order_log o WHERE EXISTS (SELECT 1 FROM price_log p WHERE p.b = o.a)",
        "only left-table columns",
        "p.b",
    )
    rejects(
        "SELECT p.* FROM order_log o WHERE EXISTS (SELECT 1 FROM price_log p WHERE p.b = o.a)",
        "only left-table columns",
    )


def test_semi_join_shapes_rejected():
    rejects("SELECT o.a FROM order_log o", "only one table", "EXISTS")
    rejects("SELECT o.a FROM order_log o WHERE o.a > 1", "only one table")
    rejects(
        "SELECT o.a FROM order_log o WHERE o.a IN (SELECT p.b FROM price_log p) "
        "AND EXISTS (SELECT 1 FROM price_log q WHERE q.b = o.a)",
        "only one",
    )
    rejects("SELECT o.a FROM order_log o WHERE o.a IN (SELECT o2.a FROM order_log o2)", "configured left table")
    rejects("SELECT o.a FROM order_log o WHERE o.a IN (SELECT p.b FROM price_log p GROUP BY p.b)", "GROUP BY")
    rejects("SELECT o.a FROM order_log o WHERE o.a IN (SELECT p.b + 1 FROM price_log p)", "needs the inputs' column types")
    rejects("SELECT o.a FROM order_log o WHERE o.a IN (SELECT o.a FROM price_log p)", "right table")
    rejects(
        "SELECT o.a FROM order_log o WHERE EXISTS (SELECT count(*) FROM price_log p WHERE p.b = o.a)",
        "EXISTS subquery may select only",
    )
    rejects("SELECT o.a FROM order_log o LEFT SEMI JOIN price_log p ON o.a = p.b", "EXISTS")


# ---------------------------------------------------------------------- rejections


def test_unknown_column():
    message = rejects(
        "SELECT o.nope FROM order_log o JOIN price_log p ON o.order_id = p.order_id",
        "unknown column 'nope'",
        "order_log",
    )
    assert ", ".join(ORDER_COLS) in message
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.nope",
        "unknown column 'nope'",
        "price_log",
        ", ".join(PRICE_COLS),
    )
    rejects("SELECT zzz FROM order_log o JOIN price_log p ON o.order_id = p.order_id", "unknown column 'zzz'")


def test_ambiguous_and_wrong_qualifiers():
    rejects("SELECT c FROM order_log o JOIN price_log p ON o.order_id = p.order_id", "ambiguous", "o.c or p.c")
    rejects(
        "SELECT order_log.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id",
        "aliased as 'o'",
    )
    rejects("SELECT x.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id", "unknown table or alias 'x'")
    rejects("SELECT o.a FROM order_log o JOIN price_log o ON o.order_id = o.order_id", "different aliases")


def test_unknown_table():
    rejects(
        "SELECT o.a FROM orders o JOIN price_log p ON o.order_id = p.order_id",
        "unknown table 'orders'",
        "'order_log'",
        "'price_log'",
    )
    rejects(
        "SELECT o.a FROM order_log o JOIN prices p ON o.order_id = p.order_id",
        "unknown table 'prices'",
    )
    rejects(
        "SELECT o.a FROM price_log o JOIN order_log p ON o.order_id = p.order_id",
        "is the configured right table",
        "must be in FROM",
    )


def test_no_equi_key():
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.a > p.b",
        "no equi-join condition",
        "Flink has the same restriction",
    )
    # parsed for its form only (no column types), an equality of expressions is no key
    rejects("SELECT o.a FROM order_log o JOIN price_log p ON o.a + 1 = p.b", "no equi-join condition")
    rejects("SELECT o.a FROM order_log o JOIN price_log p", "no ON condition")


def test_aggregate_and_expressions_in_select():
    rejects("SELECT COUNT(*) FROM order_log o JOIN price_log p ON o.order_id = p.order_id", "aggregate", "COUNT(*)")
    rejects(
        "SELECT SUM(p.rate) AS s FROM order_log o JOIN price_log p ON o.order_id = p.order_id", "aggregate", "SUM"
    )
    # expressions need the column types (parse() gives none; test_expressions_in_queries.py has them)
    rejects("SELECT o.a + 1 AS x FROM order_log o JOIN price_log p ON o.order_id = p.order_id", "types")
    rejects("SELECT DISTINCT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id", "DISTINCT")


def test_three_tables():
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id JOIN other x ON x.a = o.a",
        "3 tables",
        "exactly two",
    )
    rejects("SELECT o.a FROM order_log o, price_log p WHERE o.order_id = p.order_id", "cross joins")


def test_duplicate_output_names():
    rejects(
        "SELECT o.a, p.b AS a FROM order_log o JOIN price_log p ON o.order_id = p.order_id",
        "duplicate output column name 'a'",
        "AS",
    )
    rejects("SELECT * FROM order_log o JOIN price_log p ON o.order_id = p.order_id", "duplicate", "'order_id'")
    rejects(
        "SELECT o.a, o.a AS A FROM order_log o JOIN price_log p ON o.order_id = p.order_id", "duplicate"
    )


def test_group_by_and_other_clauses():
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id GROUP BY o.a",
        "GROUP BY",
        "Supported queries",
    )
    for clause in ("ORDER BY o.a", "LIMIT 10"):
        rejects(f"SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id {clause}", clause.split()[0])
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id GROUP BY o.a HAVING COUNT(*) > 1",
        "not supported",
    )


def test_where_on_an_outer_join_filters_its_preserved_input():
    q = parse("SELECT o.a FROM order_log o LEFT JOIN price_log p ON o.order_id = p.order_id WHERE o.a > 1")
    assert q.join_type == "LEFT" and q.inputs[0].filter_sql == "o.a > 1" and q.where_sql is None


def test_subqueries_elsewhere_rejected():
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id "
        "AND o.a IN (SELECT p2.b FROM price_log p2)",
        "subquery",
    )
    rejects("SELECT o.a FROM (SELECT * FROM order_log) o JOIN price_log p ON o.order_id = p.order_id", "types")
    rejects(
        "WITH x AS (SELECT * FROM order_log) SELECT x.a FROM x JOIN price_log p ON x.order_id = p.order_id", "WITH"
    )


def test_unsupported_condition_syntax():
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id AND UPPPER(p.c) = 'X'",
        "UPPPER", "not support", "nearest supported function is UPPER",
    )
    rejects(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id AND p.c > NOW()",
        "not deterministic", "retraction",
    )


def test_every_condition_the_query_accepts_compiles_including_ilike():
    q = parse(
        "SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id "
        "AND p.c ILIKE 'ab%' AND p.c NOT ILIKE 'a!_%' ESCAPE '!' AND o.a IS DISTINCT FROM p.b"
    )
    cond = compile_condition(q.condition_sql, ORDER_COLS, PRICE_COLS)
    row = dict.fromkeys(PRICE_COLS)
    order = dict.fromkeys(ORDER_COLS)
    order.update(a=1)
    row.update(c="ABC", b=2)
    assert cond(tuple(order.values()), tuple(row.values())) is True
    row.update(c="xbc")
    assert cond(tuple(order.values()), tuple(row.values())) is False


def test_not_sql_or_wrong_statement():
    rejects("", "empty")
    rejects("SELECT FROM WHERE", "not valid SQL")
    rejects("SELECT 'abc FROM order_log", "not valid SQL")
    rejects("INSERT INTO out SELECT o.a FROM order_log o JOIN price_log p ON o.order_id = p.order_id", "INSERT")
    rejects("SELECT o.a FROM order_log o JOIN price_log p ON o.a = p.b; SELECT 1", "single SELECT")
    rejects("SELECT o.a FROM order_log o JOIN price_log p USING (order_id)", "USING")
    rejects("SELECT o.a FROM order_log o NATURAL JOIN price_log p", "NATURAL")


# ---------------------------------------------------------------------- describe


def test_describe():
    q = parse(
        "SELECT o.order_id, p.seat_price AS price FROM order_log o LEFT JOIN price_log p "
        "ON o.order_id = p.order_id AND o.currency IS NOT DISTINCT FROM p.currency AND p.b > 1"
    )
    assert describe(q) == (
        "LEFT OUTER JOIN: l = order_log, r = price_log; "
        "keys l.order_id = r.order_id AND l.currency IS NOT DISTINCT FROM r.currency; "
        "condition r.b > 1; output (2) l.order_id, r.seat_price AS price"
    )
    q = parse(
        "SELECT o.a FROM order_log AS o JOIN price_log FOR SYSTEM_TIME AS OF o.order_time AS r "
        "ON o.currency = r.currency"
    )
    assert describe(q).startswith("event-time temporal INNER JOIN (FOR SYSTEM_TIME AS OF l.order_time)")
    q = parse("SELECT o.a FROM order_log o WHERE NOT EXISTS (SELECT 1 FROM price_log p WHERE p.b = o.a)")
    assert describe(q).startswith("LEFT ANTI JOIN")


# ---------------------------------------------------------------------- interval joins

SHIP_COLS = ["ship_id", "order_id", "carrier", "ship_time"]
TIMED_COLS = ["order_id", "currency", "amount", "order_time"]


def parse_ship(sql: str, time_columns=(None, None)) -> JoinQuery:
    return parse_join_sql(sql, "orders", TIMED_COLS, "shipments", SHIP_COLS, time_columns)


def rejects_ship(sql: str, *fragments: str, time_columns=(None, None)) -> str:
    with pytest.raises(QueryError) as info:
        parse_ship(sql, time_columns)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, message
    return message


INTERVAL_SELECT = "SELECT o.order_id, s.ship_id FROM orders o {join} shipments s ON o.order_id = s.order_id AND "


@pytest.mark.parametrize(
    "bound, lower_ms, upper_ms",
    [
        # r.t + lower <= l.t <= r.t + upper; a strict bound is the inclusive one 1 ms inside
        ("s.ship_time BETWEEN o.order_time - INTERVAL '10' MINUTE AND o.order_time + INTERVAL '1' HOUR",
         -3_600_000, 600_000),
        ("s.ship_time >= o.order_time - INTERVAL '10' MINUTE AND s.ship_time <= o.order_time + INTERVAL '1' HOUR",
         -3_600_000, 600_000),
        ("s.ship_time > o.order_time - INTERVAL '10' MINUTE AND s.ship_time < o.order_time + INTERVAL '1' HOUR",
         -3_599_999, 599_999),
        ("o.order_time BETWEEN s.ship_time - INTERVAL '5' SECOND AND s.ship_time + INTERVAL '2' SECONDS", -5000, 2000),
        ("o.order_time >= s.ship_time AND o.order_time < s.ship_time + INTERVAL '1.5' SECOND", 0, 1499),
        ("s.ship_time - INTERVAL '1' DAY <= o.order_time AND INTERVAL '250' MILLISECOND + s.ship_time >= o.order_time",
         -86_400_000, 250),
    ],
)
def test_interval_join_bounds(bound, lower_ms, upper_ms):
    q = parse_ship(INTERVAL_SELECT.format(join="LEFT JOIN") + bound)
    assert q.join_type == "LEFT" and q.temporal is None and q.window is None
    assert (q.interval.lower_ms, q.interval.upper_ms) == (lower_ms, upper_ms)
    assert (q.interval.left_time_column, q.interval.right_time_column) == ("order_time", "ship_time")
    assert q.equi_keys == (("order_id", "order_id"),) and q.condition_sql is None
    assert q.interval.sql == bound


@pytest.mark.parametrize("join, expected", [("JOIN", "INNER"), ("LEFT JOIN", "LEFT"), ("RIGHT OUTER JOIN", "RIGHT"),
                                            ("FULL JOIN", "FULL")])
def test_interval_join_types_and_extra_condition(join, expected):
    q = parse_ship(INTERVAL_SELECT.format(join=join)
                   + "s.ship_time BETWEEN o.order_time AND o.order_time + INTERVAL '1' HOUR AND s.carrier <> 'none'")
    assert q.join_type == expected and q.interval is not None
    assert q.condition_sql == "r.carrier <> 'none'"


def test_interval_bounds_without_interval_need_the_configured_time_columns():
    sql = INTERVAL_SELECT.format(join="JOIN") + "s.ship_time >= o.order_time AND s.ship_time <= o.order_time"
    # Unconfigured, a plain comparison of two columns is part of the extra condition (a regular join).
    assert parse_ship(sql).interval is None
    q = parse_ship(sql, ("order_time", "ship_time"))
    assert (q.interval.lower_ms, q.interval.upper_ms) == (0, 0)
    # One bound with an INTERVAL makes its two columns the time columns of the other bounds.
    q = parse_ship(INTERVAL_SELECT.format(join="JOIN")
                   + "s.ship_time >= o.order_time AND s.ship_time < o.order_time + INTERVAL '4' HOUR")
    assert (q.interval.lower_ms, q.interval.upper_ms) == (-14_399_999, 0)


def test_processing_time_interval_join_uses_the_proctime_pseudo_column():
    q = parse_ship(INTERVAL_SELECT.format(join="FULL JOIN")
                   + "s.proctime BETWEEN o.proctime - INTERVAL '10' SECOND AND o.proctime + INTERVAL '5' SECOND")
    assert q.interval.processing_time
    assert (q.interval.lower_ms, q.interval.upper_ms) == (-5000, 10_000)
    assert describe(q).startswith("processing-time interval FULL OUTER JOIN (s.proctime BETWEEN")


@pytest.mark.parametrize(
    "bound, fragments",
    [
        ("s.ship_time >= o.order_time - INTERVAL '1' MINUTE",
         ("bound left order_time - right ship_time from above only", "one lower and one upper bound", "BETWEEN")),
        ("s.ship_time >= o.order_time - INTERVAL '1' MINUTE AND s.ship_time >= o.order_time - INTERVAL '2' MINUTE "
         "AND s.ship_time <= o.order_time", ("from above more than once",)),
        ("s.ship_time BETWEEN PROCTIME() - INTERVAL '1' SECOND AND PROCTIME()", ("PROCTIME()", "a.proctime")),
        ("s.proctime BETWEEN o.order_time AND o.order_time + INTERVAL '1' SECOND", ("same time domain",)),
        ("s.ship_time BETWEEN o.order_time AND o.order_time + INTERVAL '1' WEEK", ("unsupported interval", "DAY")),
        ("s.ship_time BETWEEN o.order_time AND o.order_time + INTERVAL '0.5' MILLISECOND", ("whole number",)),
        ("s.ship_time BETWEEN o.order_time AND o.order_time + INTERVAL '1' SECOND "
         "AND s.ship_id BETWEEN o.amount AND o.amount + INTERVAL '1' SECOND", ("more than one time column",)),
    ],
)
def test_interval_bound_rejections(bound, fragments):
    rejects_ship(INTERVAL_SELECT.format(join="JOIN") + bound, *fragments)


def test_interval_join_needs_an_equi_key():
    rejects_ship("SELECT o.order_id FROM orders o JOIN shipments s ON s.ship_time BETWEEN o.order_time "
                 "AND o.order_time + INTERVAL '1' HOUR", "the interval join has no equi-join condition")


# ---------------------------------------------------------------------- window joins

def tvf(function: str, table: str, column: str, *sizes: str) -> str:
    args = ", ".join(f"INTERVAL {s}" for s in sizes)
    return f"TABLE({function}(TABLE {table}, DESCRIPTOR({column}), {args}))"


WINDOW_ON = "ON o.order_id = s.order_id AND o.window_start = s.window_start AND o.window_end = s.window_end"


@pytest.mark.parametrize(
    "function, sizes, expected",
    [
        ("TUMBLE", ("'5' MINUTE",), dict(size_ms=300_000, slide_ms=None, step_ms=None, offset_ms=0)),
        ("TUMBLE", ("'5' MINUTES", "'1' MINUTE"), dict(size_ms=300_000, slide_ms=None, step_ms=None, offset_ms=60_000)),
        ("HOP", ("'5' MINUTE", "'10' MINUTE"), dict(size_ms=600_000, slide_ms=300_000, step_ms=None, offset_ms=0)),
        ("CUMULATE", ("'1' MINUTE", "'5' MINUTE", "'30' SECOND"),
         dict(size_ms=300_000, slide_ms=None, step_ms=60_000, offset_ms=30_000)),
    ],
)
def test_window_join_forms(function, sizes, expected):
    q = parse_ship(f"SELECT o.order_id, o.window_start, s.window_end AS ship_window_end, s.ship_id "
                   f"FROM {tvf(function, 'orders', 'order_time', *sizes)} o "
                   f"FULL JOIN {tvf(function, 'shipments', 'ship_time', *sizes)} AS s {WINDOW_ON}")
    assert q.join_type == "FULL" and q.interval is None and q.temporal is None
    w = q.window
    assert w.kind == function and (w.left_time_column, w.right_time_column) == ("order_time", "ship_time")
    assert dict(size_ms=w.size_ms, slide_ms=w.slide_ms, step_ms=w.step_ms, offset_ms=w.offset_ms) == expected
    assert q.equi_keys == (("order_id", "order_id"),)  # the window equalities are not join keys
    assert q.projection == (OutputColumn("order_id", "L", "order_id"), OutputColumn("window_start", "L", "window_start"),
                            OutputColumn("ship_window_end", "R", "window_end"), OutputColumn("ship_id", "R", "ship_id"))


def test_window_join_sides_may_be_wrapped_in_select_star_and_star_has_the_window_columns():
    q = parse_ship(f"SELECT L.* FROM (SELECT * FROM {tvf('TUMBLE', 'orders', 'order_time', chr(39) + '5' + chr(39) + ' SECOND')}) L "
                   f"JOIN (SELECT * FROM {tvf('TUMBLE', 'shipments', 'ship_time', chr(39) + '5' + chr(39) + ' SECOND')}) R "
                   "ON L.order_id = R.order_id AND L.window_end = R.window_end AND L.window_start = R.window_start "
                   "AND R.window_time >= L.window_start")
    assert names(q) == TIMED_COLS + ["window_start", "window_end", "window_time"]
    assert q.condition_sql == "r.window_time >= l.window_start"


@pytest.mark.parametrize(
    "predicate, join_type",
    [
        ("o.order_id IN (SELECT s.order_id FROM {right} s WHERE o.window_start = s.window_start "
         "AND o.window_end = s.window_end)", "SEMI"),
        ("NOT EXISTS (SELECT * FROM {right} s WHERE o.order_id = s.order_id AND o.window_start = s.window_start "
         "AND o.window_end = s.window_end)", "ANTI"),
        ("(o.order_id, o.window_start, o.window_end) IN (SELECT s.order_id, s.window_start, s.window_end "
         "FROM {right} s)", "SEMI"),
    ],
)
def test_window_semi_and_anti_joins(predicate, join_type):
    right = tvf("HOP", "shipments", "ship_time", "'5' MINUTE", "'10' MINUTE")
    q = parse_ship(f"SELECT o.order_id, o.window_start FROM {tvf('HOP', 'orders', 'order_time', chr(39) + '5' + chr(39) + ' MINUTE', chr(39) + '10' + chr(39) + ' MINUTE')} o "
                   "WHERE " + predicate.format(right=right))
    assert q.join_type == join_type and q.window.kind == "HOP"
    assert q.equi_keys == (("order_id", "order_id"),)
    assert describe(q).startswith(f"window LEFT {join_type} JOIN (HOP(TABLE orders, DESCRIPTOR(order_time), "
                                  "INTERVAL '5' MINUTE, INTERVAL '10' MINUTE)")


@pytest.mark.parametrize(
    "sql, fragments",
    [
        # the window equalities are required
        ("SELECT o.order_id FROM {tl} o JOIN {tr} s ON o.order_id = s.order_id AND o.window_start = s.window_start",
         ("missing: window_end", "Supported queries")),
        ("SELECT o.order_id FROM {tl} o JOIN {tr} s ON o.order_id = s.order_id AND o.window_start = s.window_end "
         "AND o.window_end = s.window_end", ("window columns can only be equal to the same window column",)),
        # both sides windowed, with the same window
        ("SELECT o.order_id FROM {tl} o JOIN shipments s ON o.order_id = s.order_id",
         ("window table function on both inputs", "Supported queries")),
        ("SELECT o.order_id FROM {tl} o JOIN " + tvf("TUMBLE", "shipments", "ship_time", "'6' MINUTE")
         + " s ON o.order_id = s.order_id AND o.window_start = s.window_start AND o.window_end = s.window_end",
         ("same window",)),
        ("SELECT o.order_id FROM {tl} o WHERE o.order_id IN (SELECT s.order_id FROM shipments s)",
         ("window table function on both inputs",)),
        # forms that are not window table functions as supported
        ("SELECT o.order_id FROM TABLE(SESSION(TABLE orders, DESCRIPTOR(order_time), INTERVAL '5' MINUTE)) o "
         "JOIN {tr} s ON o.order_id = s.order_id", ("Supported queries", "TUMBLE")),
        ("SELECT o.order_id FROM TABLE(TUMBLE(DATA => TABLE orders, TIMECOL => DESCRIPTOR(order_time), "
         "SIZE => INTERVAL '5' MINUTE)) o JOIN {tr} s ON o.order_id = s.order_id", ("Supported queries", "CUMULATE")),
        ("SELECT o.order_id FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(order_time))) o JOIN {tr} s "
         "ON o.order_id = s.order_id", ("TUMBLE takes 3 or 4 arguments",)),
        ("SELECT o.order_id FROM TABLE(TUMBLE(TABLE orders, order_time, INTERVAL '5' MINUTE)) o JOIN {tr} s "
         "ON o.order_id = s.order_id", ("DESCRIPTOR(<time column>)",)),
        ("SELECT o.order_id FROM TABLE(TUMBLE(TABLE orders, DESCRIPTOR(nope), INTERVAL '5' MINUTE)) o JOIN {tr} s "
         "ON o.order_id = s.order_id", ("unknown column 'nope'",)),
        ("SELECT o.order_id FROM TABLE(CUMULATE(TABLE orders, DESCRIPTOR(order_time), INTERVAL '2' MINUTE, "
         "INTERVAL '5' MINUTE)) o JOIN TABLE(CUMULATE(TABLE shipments, DESCRIPTOR(ship_time), INTERVAL '2' MINUTE, "
         "INTERVAL '5' MINUTE)) s " + WINDOW_ON, ("integral multiple",)),
        ("SELECT o.order_id FROM (SELECT order_id FROM {tl}) o JOIN {tr} s ON o.order_id = s.order_id",
         ("(SELECT * FROM TABLE(...)) <alias>",)),
        ("SELECT * FROM {tl} o JOIN {tr} s " + WINDOW_ON, ("duplicate output column name",)),
    ],
)
def test_window_join_rejections(sql, fragments):
    tl = tvf("TUMBLE", "orders", "order_time", "'5' MINUTE")
    tr = tvf("TUMBLE", "shipments", "ship_time", "'5' MINUTE")
    rejects_ship(sql.format(tl=tl, tr=tr), *fragments)


def test_a_table_with_a_window_column_cannot_be_windowed():
    with pytest.raises(QueryError, match="has a column named window_end"):
        parse_join_sql(f"SELECT o.k FROM {tvf('TUMBLE', 'a', 't', chr(39) + '1' + chr(39) + ' SECOND')} o "
                       f"JOIN {tvf('TUMBLE', 'b', 't', chr(39) + '1' + chr(39) + ' SECOND')} s "
                       "ON o.k = s.k AND o.window_start = s.window_start AND o.window_end = s.window_end",
                       "a", ["k", "t", "window_end"], "b", ["k", "t"])
