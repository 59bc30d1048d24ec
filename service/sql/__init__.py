"""The SQL front end: ``JOIN_SQL`` (a Flink SQL query) into a :class:`JoinQuery`."""
from .joins import describe, parse_join_sql
from .model import IntervalBounds, JoinQuery, OutputColumn, QueryError, WindowTVF, interval_sql

__all__ = ["IntervalBounds", "JoinQuery", "OutputColumn", "QueryError", "WindowTVF", "describe", "interval_sql",
           "parse_join_sql"]
