"""left-pk with ten expressions in the select list and a WHERE, against plain left-pk, side by side
(issue 39: the expressions may cost at most 10 % of the input rows per second).

    python -m bench.expressions_bench [--rows 200000] [--keys 10000] [--rounds 3] [--record]

Both variants run bench.ab_bench's way (each round each variant once, in turn, a fresh service
child process on the left-pk topics preloaded once; input rows/s, CPU by process kind, and each
variant's output count and digest, the same in every round): ``plain`` is the scenario's query,
``expressions`` the same join with :data:`SQL`, ten computed columns (arithmetic, string
functions, CASE, CAST, COALESCE, ROUND, MOD) and a WHERE, part of it on the orders (the preserved
input: filtered before the shuffle, in the decoder) and part on the prices (after the join, on
the output changelog). The WHERE keeps every row, so both variants join and write the same rows.
``wide`` writes the
same fourteen output columns as ``expressions`` but each is a plain column of the same Avro type
(no expression, no WHERE): what the wider output costs by itself, apart from the calculation.
``subquery`` is :data:`SQL` with its seven expressions that read only the orders written in an
input subquery of the orders (:data:`SUBQUERY`): the same output, those computed once per input
row before the join, and kept in its state, instead of once per output change.
Other options pass through to bench.ab_bench (``--record`` appends the table to
bench/results/RESULTS.md).
"""
from __future__ import annotations

import sys

from bench import ab_bench

SQL = ("SELECT o.order_id, o.product, o.quantity, p.price, "
       "o.quantity * p.price AS total, UPPER(o.product) AS product_upper, COALESCE(p.currency, 'EUR') AS currency, "
       "CASE WHEN o.quantity > 5 THEN 'bulk' ELSE 'single' END AS size, CAST(o.order_id AS STRING) AS order_text, "
       "CHAR_LENGTH(o.product) AS product_length, ROUND(p.price * 1.2, 2) AS gross, MOD(o.order_id, 7) AS shard, "
       "CONCAT(o.product, '-', CAST(o.quantity AS STRING)) AS label, ABS(o.quantity - 3) AS distance "
       "FROM orders o LEFT JOIN prices p ON o.product = p.product "
       "WHERE o.quantity >= 0 AND (p.price IS NULL OR p.price >= 0)")

#: The output of :data:`SQL`, column for column of the same Avro type, but only columns: no calculation.
WIDE = ("SELECT o.order_id, o.product, o.quantity, p.price, p.price AS total, o.product AS product_upper, "
        "p.currency AS currency, o.product AS size, o.product AS order_text, o.quantity AS product_length, "
        "p.price AS gross, o.quantity AS shard, o.product AS label, o.quantity AS distance "
        "FROM orders o LEFT JOIN prices p ON o.product = p.product")

#: :data:`SQL` with the expressions of the orders' columns alone computed in an input subquery.
SUBQUERY = ("SELECT o.order_id, o.product, o.quantity, p.price, o.quantity * p.price AS total, o.product_upper, "
            "COALESCE(p.currency, 'EUR') AS currency, o.size, o.order_text, o.product_length, "
            "ROUND(p.price * 1.2, 2) AS gross, o.shard, o.label, o.distance "
            "FROM (SELECT order_id, product, quantity, UPPER(product) AS product_upper, "
            "CASE WHEN quantity > 5 THEN 'bulk' ELSE 'single' END AS size, CAST(order_id AS STRING) AS order_text, "
            "CHAR_LENGTH(product) AS product_length, MOD(order_id, 7) AS shard, "
            "CONCAT(product, '-', CAST(quantity AS STRING)) AS label, ABS(quantity - 3) AS distance "
            "FROM orders WHERE quantity >= 0) AS o "
            "LEFT JOIN prices p ON o.product = p.product WHERE p.price IS NULL OR p.price >= 0")


def main() -> None:
    sys.argv = [sys.argv[0], "--scenario", "left-pk", "--variant", "plain:", "--variant", f"wide:JOIN_SQL={WIDE}",
                "--variant", f"expressions:JOIN_SQL={SQL}", "--variant", f"subquery:JOIN_SQL={SUBQUERY}",
                *sys.argv[1:]]
    ab_bench.main()


if __name__ == "__main__":
    main()
