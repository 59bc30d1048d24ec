"""The SQL front end: ``JOIN_SQL`` (a Flink SQL query) into a :class:`JoinQuery`.

It runs on the driver only (``service.planner`` calls it); the plan the workers receive carries
its result, never the front end. One module per construct, each importing only those above it::

    model.py      what the front end produces: JoinQuery, OutputColumn, IntervalBounds, WindowTVF,
                  QueryError, interval_sql (plain data, no SQL)
    dialect.py    the Flink dialect over sqlglot, the supported-subset texts and condition nodes,
                  reading the statement, its clauses and INTERVAL literals
    resolve.py    scopes: the two inputs (_Side), column resolution and residual conditions
                  (_Resolver), binding FROM / JOIN tables, the select list
    intervals.py  an interval join's time bounds
    windows.py    window table functions (TUMBLE, HOP, CUMULATE)
    joins.py      the entry point parse_join_sql and the joins built from the pieces above:
                  regular, temporal (FOR SYSTEM_TIME AS OF), semi/anti (IN / EXISTS); describe.
                  Its docstring is the reference of the supported subset and of the decisions
                  on ambiguous points.

The lookup join (next: ``FOR SYSTEM_TIME AS OF PROCTIME()`` against a database table) will add its
own module, which joins.py calls as it calls intervals.py and windows.py.
"""
from .joins import describe, parse_join_sql
from .model import IntervalBounds, JoinQuery, OutputColumn, QueryError, WindowTVF, interval_sql

__all__ = ["IntervalBounds", "JoinQuery", "OutputColumn", "QueryError", "WindowTVF", "describe", "interval_sql",
           "parse_join_sql"]
