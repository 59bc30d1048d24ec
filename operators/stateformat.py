"""What each operator keeps per key: the checkpoint format.

The service pickles the value an operator ``put``s for a key into Spark's RocksDB state store
(``service/sparkstate.py``: in which state variables, framed how), so the structures below are
what a checkpoint holds, and a running service must read the values an earlier run wrote. They are builtins only (tuples, lists, dicts, ints, floats, strings, bytes,
None, bools, and the row values Avro decoding gives: ``datetime``, ``Decimal``), never a class of
this project, so unpickling needs no code of ours and renaming a class cannot break a checkpoint.

Any change to a structure below is a new :data:`STATE_FORMAT_VERSION`, with a migration from the
previous one: ``tests/operators/test_state_format.py`` reads state written by the current version (golden
bytes under ``tests/data/state/``) and fails until both are updated.

Rows are tuples in the input's schema order. An *entry* (``layouts.py``) is a list
``[row, copies, associations, written_at]``.

Regular and semi/anti joins (``regular.py``, also under mini-batch folding), per join key::

    (left: dict | [count, latest_written], right: dict | [count, latest_written], ttl_timer: int | None)

  each side a dict of entries keyed by the side's layout: ``0`` (the join key contains the unique
  key: at most one row), the tuple of unique-key values, or the row itself (no unique key: a
  multiset, ``copies`` counts identical rows). ``ttl_timer`` is the registered processing-time
  cleanup timer, or None. A key with no rows and no timer is cleared.

  A side of more than ``split_at`` entries is *split* (``splitside.py``): its entries are in the
  key's map ``"left"`` or ``"right"`` (``KeyState.map``), one map entry per entry, under the same
  entry key, and the value holds ``[count, latest_written]`` in its place (the number of entries
  and the latest written time among them). A split side that empties returns to the value as
  ``{}``. Map keys are stored as :func:`map_key` bytes.

Event-time temporal join (``temporal.py``), per join key::

    (probes: list[(kind, row, time)], versions: dict[time, (kind, row)],
     event_timer: int | None, cleanup_timer: int | None)

  probe rows waiting for the watermark in arrival order, the build side's versions by version
  time (epoch milliseconds), the one registered event-time timer and the idle-state cleanup timer.

Processing-time temporal join, per join key::

    (build_row: tuple | None, cleanup_timer: int | None)

Interval join (``interval.py``), per join key::

    (left_rows: list[[time, row, matched]], right_rows: list[[time, row, matched]],
     left_cleanup: int | None, right_cleanup: int | None)

  stored rows of each side in arrival order with whether they ever matched, and each side's
  pending clean-up time.

Window join (``window.py``), per join key::

    {window_end: [window_start, left_rows: list[row], right_rows: list[row]]}

  the input rows buffered per window until the watermark fires it.

Lookup join (``lookup.py``), per stream-row identity: keyed by primary key::

    (row: tuple, joined: tuple[table row, ...], expiry: int | None)

  the key's current row and the table rows it was joined with (``()``: none); without a primary
  key (the row is its own key), one entry per copy of the row, oldest first::

    (copies: tuple[joined, ...], expiry: int | None)

  ``expiry`` is the state TTL's clean-up time, or None. An append-only stream stores nothing.
  A new structure in version 1: no checkpoint written before held it.

Changelog normalize (``normalize.py``), per message key: the key's last row (a tuple).

Upsert materializer (``upsert.py``), per upsert key: the rows present for the key, oldest first
(a tuple of rows).
"""
from __future__ import annotations

import io
import pickle

STATE_FORMAT_VERSION = 1
"""Version 1 with split sides reads every value version 1 wrote before them unchanged."""


def map_key(key) -> bytes:
    """A map entry's key as stored: its pickle without memoization, so that equal keys are equal
    bytes (a plain pickle writes a back-reference where one object occurs twice in a tuple, and a
    copy where two equal objects do)."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, 5)
    pickler.fast = True
    pickler.dump(key)
    return buffer.getvalue()
