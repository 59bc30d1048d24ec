"""Flink SQL's grammar as sqlglot reads it: the dialect every SQL text of changejoin is parsed in.

sqlglot has no Flink dialect. :class:`FlinkSQL` is its Spark grammar with Flink's rules where they
differ for what changejoin reads:

- lexical: string literals in single quotes only (``''`` escapes a quote; a backslash is not
  special), identifiers in back quotes or double quotes;
- ``TABLE <name>`` as an argument of the window table functions (``TUMBLE(TABLE orders, ...)``);
- types as Flink has them: ``TIMESTAMP`` is without time zone, ``CHAR(n)`` / ``VARCHAR(n)`` keep
  their length, ``BYTES`` is ``VARBINARY``, and ``CAST`` is a cast that fails (``TRY_CAST`` the
  one that gives NULL);
- function calls are read by name, as written (sqlglot's Spark grammar rewrites many into its own
  functions, with Spark's semantics: ``DATE_FORMAT``'s pattern, ``REGEXP_EXTRACT``'s default
  group, ``LTRIM``'s arguments...); ``expressions.parse`` gives each its Flink meaning.

Importing this module loads sqlglot: the driver's SQL front end and the condition compiler of the
tests use it; the workers never do.
"""
from __future__ import annotations

from sqlglot import parser as _parser
from sqlglot.dialects.spark import Spark
from sqlglot.tokens import TokenType


class FlinkSQL(Spark):
    """Spark's grammar with Flink's rules (see the module docstring)."""

    class Tokenizer(Spark.Tokenizer):
        QUOTES = ["'"]
        IDENTIFIERS = ["`", '"']
        STRING_ESCAPES = ["'"]
        KEYWORDS = {**Spark.Tokenizer.KEYWORDS, "TIMESTAMP": TokenType.TIMESTAMP, "BYTES": TokenType.VARBINARY}

    class Parser(Spark.Parser):
        STRICT_CAST = True
        # Calls by name (Anonymous): parse.py gives each its Flink meaning. Only the functions with
        # a syntax of their own (CAST, TRIM, SUBSTRING ... FROM, POSITION ... IN, EXTRACT, FLOOR /
        # CEIL ... TO) keep their parsers.
        FUNCTIONS: dict = {}
        FUNCTION_PARSERS = {name: fn for name, fn in Spark.Parser.FUNCTION_PARSERS.items()
                            if name in ("CAST", "TRY_CAST", "TRIM", "SUBSTRING", "SUBSTR", "POSITION", "EXTRACT",
                                        "FLOOR", "CEIL")}

        def _parse_lambda(self, alias: bool = False):
            # TUMBLE(TABLE orders, ...): a function argument that is a table, which Spark's grammar
            # does not know. TABLE(...) (a call) is left to the usual rules.
            if (self._curr is not None and self._curr.token_type == TokenType.TABLE
                    and self._next is not None and self._next.token_type != TokenType.L_PAREN):
                self._advance()
                return self._parse_table_parts()
            return super()._parse_lambda(alias)

        def _parse_types(self, check_func: bool = False, schema: bool = False, allow_identifiers: bool = True,
                         with_collation: bool = False):
            # Hive's grammar drops a CHAR / VARCHAR length in a CAST (Spark ignores it); Flink does not.
            return _parser.Parser._parse_types(self, check_func=check_func, schema=schema,
                                                 allow_identifiers=allow_identifiers, with_collation=with_collation)


DIALECT = FlinkSQL()
