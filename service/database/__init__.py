"""The lookup join's database: a PostgreSQL table read in batches, one snapshot per lookup task.

Flink's JDBC lookup source sends one ``SELECT ... WHERE k = ?`` per left row. Here a Spark task
collects the distinct keys of its rows and asks for them in chunks of ``batch_size``
(``WHERE k = ANY(%s::int4[])``; composite keys ``JOIN unnest(%s::int4[], %s::text[])``): one round
trip per chunk instead of one per row (measured: 1 000 keys in 2.2 ms instead of 42.5 ms on
loopback, and every extra round trip costs a network RTT in production).

* **One snapshot.** All chunks of one ``lookup`` call run in one ``REPEATABLE READ READ ONLY``
  transaction, so a micro-batch's task sees the table as of one instant, as Flink's "FOR
  SYSTEM_TIME AS OF PROCTIME()" promises per row. The explicit array cast keeps psycopg from
  choosing the array type from the Python values.
* **Keys are checked in Python first.** A key the key column cannot hold (``2**40`` for an
  ``integer``, ``'abc'`` for an ``int8``, a NUL in text, a malformed UUID, NaN for a ``numeric``)
  would fail its whole chunk with a ``DataError``; it goes to ``LookupResult.invalid`` with a reason
  naming the column, its type and the value (the service makes it a dead letter) and is never sent.
  The casts name the base type without its modifier (``numeric``, not ``numeric(4,1)``; ``text``,
  not ``varchar(5)``): a cast to the column's own type would round or truncate a key and match the
  wrong rows. What Python cannot know (an enum label, a character the server's encoding lacks) the
  database refuses: the chunk is then **bisected** under savepoints, so the snapshot transaction
  survives, until the offending keys are found; they go to ``invalid`` with the database's message
  and the rest are answered. Data errors are rare, so savepoints are only used after one happened:
  the first data error rolls the call's transaction back and the call is redone with them.
* **Rows go back to keys by a canonical form**, the same for a key and for the key columns of a
  returned row, because the database compares values and Python must too: a Decimal key
  ``1.50`` finds numeric ``1.5`` (``Decimal`` hashes and compares by value), a UUID is its
  lowercase text, a ``timestamp`` without time zone is UTC, a ``char(n)`` ignores trailing
  spaces, a ``real`` is rounded to single precision, a ``citext`` is lowercase, NaN is one value.
  Known limits: a text column with a nondeterministic (case-insensitive ICU) collation matches
  strings that Python does not find equal; such rows are dropped. The ``=`` is resolved through the
  session's search_path, as in any query: an extension type whose operators are not on it (citext
  installed in another schema) is compared with text's case-sensitive ``=``.
* **NULL keys never match** (SQL equality): a key with a None component gets no rows and is not
  sent.
* **Only the columns the join reads** (``columns``): the statement names them, so a column it does
  not read may be dropped, added or retyped at any time. Each result's column types are checked
  against the catalog's (``TableColumn.type_oid``/``typmod``): a read column retyped to a type of
  the same Avro values is taken, another stops the lookup with one line saying what to do.
* **Rows the join cannot take** are their key's, not the key's fault (``LookupResult.bad_rows``,
  naming the table, the column and the value): a date or time psycopg cannot load (``'infinity'``,
  BC, years past 9999, ``24:00``: loaded as ``Unloadable`` instead of failing the statement), a
  value the column's Avro type cannot hold (a ``numeric`` NaN), a NULL in a column that was NOT
  NULL when the join was planned. Such keys are never cached.

The package, one module per job, each importing only those before it: ``errors`` (one-line
messages; the URL without its password and every form of the password: ``service/secrets.py``), ``names`` (table and type identifiers), ``connection``
(opening a connection), ``catalog`` (the table's description and Avro types), ``keys`` (checks and
canonical forms), ``cache`` (the partial cache, stats, results), ``client`` (``LookupClient``).
"""

from ..secrets import redact_url as redact  # a URL as a database error shows it
from .cache import CacheSettings, LookupResult, LookupStats
from .catalog import TableColumn, TableInfo, describe_table
from .client import LookupClient
from .connection import Unloadable
from .errors import DatabaseError

__all__ = [
    "CacheSettings",
    "DatabaseError",
    "LookupClient",
    "LookupResult",
    "LookupStats",
    "TableColumn",
    "TableInfo",
    "Unloadable",
    "describe_table",
    "redact",
]
