"""Flink SQL's scalar expressions in Python: types, functions, and their compilation.

The SQL front end (``service/sql/``) and the untyped condition compiler of the tests translate
SQL into *typed nodes* (``parse.py``, which loads sqlglot); a plan carries those nodes (plain
JSON), and each worker compiles them once into plain Python functions (``codegen.py``) that call
``runtime.py``, Flink 2.3's semantics of each function. Nothing here imports Spark, Kafka or the
service: the operators (a join's extra condition) and the service (projections, filters, computed
keys) both use it.

    types.py      Flink's types: derivation rules, Avro in and out
    runtime.py    what compiled expressions call per row (Flink's semantics; compiled by Cython)
    functions.py  every function and operator: its type derivation and the Python it compiles to
    codegen.py    typed nodes -> one Python function per place, compiled once per plan
    dialect.py    Flink's grammar over sqlglot (loads sqlglot)
    parse.py      SQL expressions -> typed nodes, refusing what is not supported (loads sqlglot)
"""
from .codegen import CompileError, compile_condition, compile_projection
from .runtime import ExpressionError
from .types import SqlType, from_avro, parse_type

__all__ = ["CompileError", "ExpressionError", "SqlType", "compile_condition", "compile_projection", "from_avro",
           "parse_type"]
