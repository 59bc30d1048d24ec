"""The checkpoint (``CHECKPOINT_LOCATION``): what is under it, what its join state was made for, and
whether this configuration may use it.

:class:`Checkpoint` is the one owner of the location and of everything under it: Spark's offset and
commit logs (read here, never written), ``changejoin-state.json`` (below), the lock of the process
that writes it (:class:`CheckpointLock`) and the directory where a lookup join pins what each
micro-batch looked up (:attr:`Checkpoint.pins`, whose contents are ``lookup.py``'s). No other module
joins a path under the checkpoint: it asks the checkpoint.

Spark stores offsets and state in ``CHECKPOINT_LOCATION`` but nothing about the join: restarted
with another ``JOIN_SQL``, primary key or changelog mode, the service would mix two state layouts
silently (stale rows that keep joining, null-padded rows never retracted). So the facts the state
depends on are kept beside Spark's files, in ``<CHECKPOINT_LOCATION>/changejoin-state.json``, and
checked on every start (:func:`reconcile`):

- an incompatible change is refused with what changed and what to do (a new
  ``CHECKPOINT_LOCATION``, or the previous configuration);
- a compatible evolution of an input's Avro schema (columns added with a default, columns the
  join does not use removed, int -> long and float -> double widening) is accepted: the stored
  rows are upgraded as they are read. Each schema the state has seen is a *generation*
  (``JoinPlan.state_generations``, the column names of both inputs); a key's stored value
  carries the generation it was written in (its framing: ``sparkstate.py``).

Changes that leave the state valid (state TTL, mini-batch, trigger, the SELECT list when no
upsert materializer keeps output rows, ...) are not facts and need nothing.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import uuid

from operators import STATE_FORMAT_VERSION

from .config import local_directory
from .plan import JoinPlan, PlanError

log = logging.getLogger(__name__)

FILE_NAME = "changejoin-state.json"
#: Spark's logs in a checkpoint: the micro-batches planned (their offsets) and those committed.
OFFSETS, COMMITS = "offsets", "commits"
#: Where a lookup join pins what each micro-batch looked up (``lookup.py``), in a local checkpoint.
PINS = os.path.join("changejoin", "lookups")
FORMAT = 1
# Avro promotions whose values read the same in Python: stored rows stay valid.
_WIDENINGS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
              ("float", "double")}


class CheckpointMismatch(PlanError):
    """The checkpoint's state was made for another join."""


def facts(plan: JoinPlan) -> dict:
    """What the join's state depends on (JSON)."""
    sides = []
    for s in plan.sides:
        lookup_table = plan.lookup["table"] if s.side == 1 and plan.lookup else None
        sides.append({
            "topic": s.topic,
            "changelog_mode": s.changelog_mode,
            "normalized": s.normalized,
            "join_key": [s.state_columns[i] for i in s.join_key],
            "primary_key": None if s.primary_key is None else [s.columns[i] for i in s.primary_key],
            "time_column": None if s.time_column is None else s.columns[s.time_column],
            "columns": {name: avro_type for name, avro_type in zip(s.columns, s.avro_types)},
        })
        if s.calc:  # what JOIN_SQL computes before the join: the stored rows hold its results
            sides[-1]["calc"] = {"computed": [[c[0], c[3], c[1]] for c in s.computed],
                                 "filter": s.calc.get("filter_sql"), "kept": s.calc.get("kept")}
        if lookup_table is not None:  # the columns the join reads (only those: planner._read_columns)
            pg_types = {c["name"]: c["pg_type"] for c in lookup_table["columns"]}
            sides[-1]["table"] = lookup_table["table"]
            sides[-1]["pg_types"] = {name: pg_types[name] for name in s.columns}
    materializer = None
    if plan.upsert_materializer:
        materializer = {"output_key": [plan.output_names[i] for i in plan.output_key],
                        "output_schema": plan.output_schema,
                        "sources": [list(source) for source in plan.output_sources]}
        if plan.output and plan.output.get("where_sql"):  # its stored rows are those the WHERE kept
            materializer["where"] = plan.output["where_sql"]
    return {
        "state_format": STATE_FORMAT_VERSION, "kind": plan.kind.value, "join_type": plan.join_type.value,
        "condition": plan.condition_sql, "filter_nulls": list(plan.filter_nulls), "sides": sides,
        "materializer": materializer,
        "interval_ms": None if plan.interval_ms is None else list(plan.interval_ms), "window": plan.window,
        "state_buckets": plan.state_buckets,
        **({"bucket_keys": plan.bucket_keys} if plan.state_buckets else {}),
    }


def differences(old: dict, new: dict, plan: JoinPlan) -> list[str]:
    """Why state written for ``old`` cannot serve ``new``, one line per change, naming what to fix."""
    problems = []
    if old["state_format"] != new["state_format"]:
        problems.append(f"changejoin stores its state in format v{new['state_format']}, the checkpoint holds "
                        f"v{old['state_format']} (no migration from it exists)")
    was, now = old.get("state_buckets", 0), new["state_buckets"]
    if was != now:
        problems.append(f"STATE_BUCKETS: the checkpoint keeps its state {f'in {was} buckets' if was else 'per key'} "
                        f"(STATE_BUCKETS={was}), not {f'in {now}' if now else 'per key'}; the count is fixed once a "
                        f"checkpoint exists (leave STATE_BUCKETS unset to take the checkpoint's)")
    for key, what in (("kind", "the kind of join"), ("join_type", "the join type"),
                      ("condition", "the join condition"), ("filter_nulls", "= vs IS NOT DISTINCT FROM on the keys"),
                      ("interval_ms", "the interval join's time bounds"), ("window", "the window")):
        if old.get(key) != new.get(key):
            problems.append(f"JOIN_SQL: {what} changed from {old[key]!r} to {new[key]!r}")
    for name, was, now, side_plan in zip(("LEFT", "RIGHT"), old["sides"], new["sides"], plan.sides):
        label = name.lower()
        if was["topic"] != now["topic"]:
            problems.append(f"{name}_TOPIC: {was['topic']!r} -> {now['topic']!r} (the offsets are those of the old topic)")
        if was["changelog_mode"] != now["changelog_mode"]:
            problems.append(f"{name}_CHANGELOG_MODE: {was['changelog_mode']} -> {now['changelog_mode']}")
        if was["primary_key"] != now["primary_key"] and now["changelog_mode"] != "lookup":  # a table's: no state
            problems.append(f"{name}_PRIMARY_KEY: {_names(was['primary_key'])} -> {_names(now['primary_key'])}")
        if was["join_key"] != now["join_key"]:
            problems.append(f"JOIN_SQL: the {label} join key changed from {_names(was['join_key'])} to "
                            f"{_names(now['join_key'])}")
        if was["time_column"] != now["time_column"]:
            problems.append(f"JOIN_SQL / {name}_EVENT_TIME_COLUMN: the {label} time column changed from "
                            f"{was['time_column']!r} to {now['time_column']!r}")
        if was.get("calc") != now.get("calc"):
            problems.append(f"JOIN_SQL: what the {label} input goes through before the join (its subquery, a WHERE "
                            f"on it, a computed equi-key) changed from {_calc_text(was.get('calc'))} to "
                            f"{_calc_text(now.get('calc'))}: the stored {label} rows hold what the old one computed")
        if was["normalized"] != now["normalized"] and not problems:
            problems.append(f"the {label} input is now {'normalized' if now['normalized'] else 'joined directly'}")
        if now["changelog_mode"] == "lookup":
            problems += _table_changes(was, now, side_plan)
        else:
            problems += _schema_changes(name, was["columns"], now["columns"], side_plan)
    problems += _materializer_changes(old["materializer"], new["materializer"], old["sides"], plan)
    return problems


def _materializer_changes(was: dict | None, now: dict | None, old_sides: list, plan: JoinPlan) -> list[str]:
    """Why the upsert materializer's stored output rows cannot be upgraded to the new output.

    They can when the output key is the same and every column the output gained is an input column
    added with a default (checked with the input's schema changes), whose value in a stored row is
    then known: the default where its side is in the row, NULL where the side was null-padded, which
    needs a non-nullable column of that side in the previous output to tell (``JoinPlan.output_upgrade``)."""
    refused = ["OUTPUT_MODE / OUTPUT_KEY / JOIN_SQL: the upsert materializer's state holds rows of the previous "
               "output (or there was none), which no longer match the output"]
    if was == now:
        return []
    if was is None or now is None or was["output_key"] != now["output_key"] or was.get("where") != now.get("where"):
        return refused
    if "sources" not in was:  # facts of an earlier changejoin: the same output, or nothing known
        return [] if was["output_schema"] == now["output_schema"] else refused
    problems = []
    old = {(source[0], source[1]) for source in was["sources"]}
    for side, column, _ in now["sources"]:
        if (side, column) in old:
            continue
        if side == "expr":
            problems.append(f"JOIN_SQL: the output gained the expression {column}; the upsert materializer's stored "
                            "output rows have no value for it")
            continue
        label = ("left", "right")[side]
        if column in old_sides[side]["columns"]:
            problems.append(f"JOIN_SQL: the output gained {column!r}, a column the {label} input already had; the "
                            "upsert materializer's stored output rows have no value for it")
        elif side in plan.null_padded_sides and not any(s[0] == side and not s[2] for s in was["sources"]):
            problems.append(f"JOIN_SQL: the output gained {column!r} of the {label} input, which the join pads with "
                            f"NULLs, and no non-nullable {label} column in the previous output tells a stored padded "
                            "row from a real one (the upsert materializer could not give it its default or NULL)")
    return problems


def _calc_text(calc: dict | None) -> str:
    if not calc:
        return "nothing"
    parts = [f"{name} = {sql}" for name, sql, _ in calc.get("computed", ())]
    if calc.get("filter"):
        parts.append(f"WHERE {calc['filter']}")
    if calc.get("kept") is not None:
        parts.append(f"keeping {', '.join(calc['kept']) or 'no column'}")
    return "(" + "; ".join(parts) + ")"


def _schema_changes(name: str, was: dict, now: dict, side_plan) -> list[str]:
    where = (f"{name}_SCHEMA_FILE or the registry's {side_plan.topic}-value")
    defaults = {f["name"] for f in side_plan.reader_schema.get("fields", ()) if "default" in f}
    problems = []
    for column, avro_type in now.items():
        if column not in was:
            if column not in defaults:
                problems.append(f"{where}: column {column!r} was added without a default, so stored rows have no "
                                "value for it")
        elif not compatible(was[column], avro_type):
            problems.append(f"{where}: column {column!r} changed type from {json.dumps(was[column])} to "
                            f"{json.dumps(avro_type)}")
    return problems


def _table_changes(was: dict, now: dict, side_plan) -> list[str]:
    """Why the rows a lookup join stored cannot serve the columns it reads now: a column it reads
    now and did not before that is NOT NULL (stored rows have no value for it; a nullable one is
    NULL in them), or a column whose type changed to one its stored values are not values of. The
    table's other columns are not facts (``facts``): they may change at will."""
    where = f"the lookup table {now.get('table', side_plan.table)}"
    old_types, new_types = was.get("pg_types", {}), now.get("pg_types", {})
    nullable = dict(zip(side_plan.columns, side_plan.nullable))
    problems = []
    for column, avro_type in now["columns"].items():
        shown = new_types.get(column, json.dumps(avro_type))
        if column not in was["columns"]:
            if not nullable.get(column, True):
                problems.append(f"{where}: JOIN_SQL now reads column {column!r} ({shown} NOT NULL), which the join's "
                                "stored rows were read without, so they have no value for it")
        elif not compatible(was["columns"][column], avro_type):
            before = old_types.get(column, json.dumps(was["columns"][column]))
            if _split(was["columns"][column])[1] == _split(avro_type)[1]:  # only its NULLs
                problems.append(f"{where}: column {column!r} was made NOT NULL, but the join's stored rows may "
                                "hold NULL in it")
                continue
            problems.append(f"{where}: column {column!r} changed type from {before} to {shown} (Avro "
                            f"{json.dumps(was['columns'][column])} -> {json.dumps(avro_type)}), which the join's "
                            "stored rows are not values of")
    return problems


def compatible(old, new) -> bool:
    """Stored values of Avro type ``old`` are values of type ``new``: the same type, a primitive
    widened (int -> long...), or made nullable."""
    if old == new:
        return True
    (old_nullable, old_base), (new_nullable, new_base) = _split(old), _split(new)
    if old_nullable and not new_nullable:
        return False
    return old_base == new_base or (old_base, new_base) in _WIDENINGS


def _split(avro_type) -> tuple[bool, object]:
    """(nullable, the non-null type: a primitive's name, else its JSON)."""
    nullable = False
    if isinstance(avro_type, list):
        branches = [b for b in avro_type if b != "null"]
        nullable = len(branches) < len(avro_type)
        if len(branches) != 1:
            return nullable, json.dumps(branches, sort_keys=True)
        avro_type = branches[0]
    if isinstance(avro_type, dict) and set(avro_type) == {"type"}:
        avro_type = avro_type["type"]
    return nullable, avro_type if isinstance(avro_type, str) else json.dumps(avro_type, sort_keys=True)


def _names(columns) -> str:
    return "none" if not columns else "(" + ", ".join(columns) + ")"


def _columns(plan: JoinPlan) -> list[list[str]]:
    return [list(s.columns) for s in plan.sides]


def reconcile(plan: JoinPlan, location: str, store=None, buckets_set: bool = False) -> JoinPlan:
    """Check ``plan`` against the facts stored in the checkpoint at ``location`` and record them:
    returns the plan with its state generations, or raises :class:`CheckpointMismatch`.

    The state's buckets are fixed once a checkpoint exists: unless ``STATE_BUCKETS`` was set
    (``buckets_set``), the plan takes the checkpoint's (0 for a checkpoint written before buckets)."""
    store = store or Checkpoint(location)
    stored = store.read()
    plan = _checkpoint_buckets(plan, stored, store, buckets_set, location)
    current = facts(plan)
    sources = [list(source) for source in plan.output_sources] if plan.upsert_materializer else None
    if stored is None:
        generations = [_columns(plan)]
        outputs = [sources] if sources else []
        if store.has_state():
            log.warning("CHECKPOINT_LOCATION=%s holds state but no %s (written by an earlier changejoin): "
                        "taking it to be state of this join", location, FILE_NAME)
    else:
        problems = differences(stored["facts"], current, plan)
        if problems:
            raise CheckpointMismatch(_refusal(location, problems))
        generations = [list(map(list, g)) for g in stored["generations"]]
        if generations[-1] != _columns(plan):
            generations.append(_columns(plan))
            log.warning("CHECKPOINT_LOCATION=%s: the input schemas evolved (state generation %d); stored rows are "
                        "upgraded as they are read", location, len(generations) - 1)
        was = stored["facts"].get("materializer")
        outputs = stored.get("output_generations") or ([was["sources"]] if was and "sources" in was else [])
        if sources and (not outputs or outputs[-1] != sources):
            outputs.append(sources)
            if len(outputs) > 1:
                log.warning("CHECKPOINT_LOCATION=%s: the output gained columns (output generation %d); the upsert "
                            "materializer's stored rows are upgraded as they are read", location, len(outputs) - 1)
    # The checkpoint's identity (exactly-once delivery's progress markers name it): kept for its life.
    identity = (stored or {}).get("id") or uuid.uuid4().hex
    # What else the file holds (exactly-once delivery's record: DELIVERY below; the task count) stays as it is.
    store.write({**(stored or {}), "format": FORMAT, "facts": current, "generations": generations,
                 "output_generations": outputs, "id": identity})
    return dataclasses.replace(plan, state_generations=tuple(tuple(tuple(c) for c in g) for g in generations),
                               output_generations=tuple(tuple(tuple(source) for source in g) for g in outputs))


def _checkpoint_buckets(plan: JoinPlan, stored: dict | None, store, buckets_set: bool, location: str) -> JoinPlan:
    """The plan with the checkpoint's state buckets, where it has state and STATE_BUCKETS is unset,
    and always with its bucket keys (those of a checkpoint that recorded none are the first layout's)."""
    if stored is not None:
        plan = dataclasses.replace(plan, bucket_keys=stored["facts"].get("bucket_keys", 1))
    if buckets_set or (stored is None and not store.has_state()):
        return plan
    was = 0 if stored is None else stored["facts"].get("state_buckets", 0)  # 0: written before buckets
    if was != plan.state_buckets:
        log.info("CHECKPOINT_LOCATION=%s keeps its state %s: STATE_BUCKETS=%d", location,
                 f"in {was} buckets" if was else "per key", was)
        plan = dataclasses.replace(plan, state_buckets=was)
    return plan


def check(plan: JoinPlan, location: str, buckets_set: bool = False) -> None:
    """Raise :class:`CheckpointMismatch` where a local checkpoint's state was made for another join,
    without writing anything (``run`` says so before it waits for any server; :func:`reconcile`
    checks every checkpoint, remote ones included, when the service starts)."""
    store = Checkpoint(location)
    stored = store.read() if store._local else None
    if stored is None:
        return
    problems = differences(stored["facts"], facts(_checkpoint_buckets(plan, stored, store, buckets_set, location)), plan)
    if problems:
        raise CheckpointMismatch(_refusal(location, problems))


def _refusal(location: str, problems: list[str]) -> str:
    return (f"CHECKPOINT_LOCATION={location}: its join state was made for another join:\n    - "
            + "\n    - ".join(problems)
            + "\n  That state cannot serve this configuration. Start from a new CHECKPOINT_LOCATION (the join "
            "then reads its inputs again from STARTING_OFFSETS), or restore the previous configuration.")


def describe(plan: JoinPlan, location: str, buckets_set: bool = False) -> str:
    """``check-config``'s word on the checkpoint (read without Spark: local locations only)."""
    store = Checkpoint(location)
    if not store._local:
        return f"{location}: checked when the service starts"
    stored = store.read()
    planned = plan.state_buckets
    plan = _checkpoint_buckets(plan, stored, store, buckets_set, location)
    kept = "" if plan.state_buckets == planned else \
        f" (its state {f'in {plan.state_buckets} buckets' if plan.state_buckets else 'per key'}: STATE_BUCKETS={plan.state_buckets})"
    if stored is None:
        return f"{location}: {'state of an earlier changejoin, taken as this join' if store.has_state() else 'new'}{kept}"
    problems = differences(stored["facts"], facts(plan), plan)
    if problems:
        return f"{location}: INCOMPATIBLE, the service will refuse to start:\n    - " + "\n    - ".join(problems)
    evolved = stored["generations"][-1] != _columns(plan) or len(stored["generations"]) > 1
    return f"{location}: compatible{' (input schemas evolved: stored rows are upgraded as read)' if evolved else ''}{kept}"


# -- exactly-once delivery's record ------------------------------------------------------------------
#: The key of ``changejoin-state.json`` under which exactly-once delivery keeps what it must remember for
#: the checkpoint's life (``transactions.py``): every transactional id prefix and task count its
#: producers have used (``"transactional_ids"``: [[prefix, partitions], ...], so that a start aborts
#: what any of them left open), the progress topic its markers are in (``"progress_topic"``), and that
#: topic's end offsets when the checkpoint began writing to it (``"progress_origin"``: no marker of
#: the checkpoint lies below them, which bounds the marker scan; None where unknown).
DELIVERY = "delivery"


def delivery_record(store: "Checkpoint") -> dict:
    """Exactly-once delivery's record of the checkpoint (:data:`DELIVERY`), {} if it has none."""
    return dict((store.read() or {}).get(DELIVERY) or {})


def write_delivery_record(store: "Checkpoint", **values) -> dict:
    """Set ``values`` in the checkpoint's delivery record (the rest of the file as it is)."""
    stored = store.read() or {}
    record = {**(stored.get(DELIVERY) or {}), **values}
    store.write({**stored, DELIVERY: record})
    return record


def used_transactional_ids(store: "Checkpoint") -> list[str]:
    """Every transactional id the checkpoint's producers have used (``<prefix>-<task partition>``
    of every prefix and task count recorded by :func:`record_transactional_ids`), sorted."""
    from .transactions import transactional_id

    ids = {transactional_id(prefix, p) for prefix, partitions in delivery_record(store).get("transactional_ids", ())
           for p in range(int(partitions))}
    return sorted(ids)


def record_transactional_ids(store: "Checkpoint", prefix: str, partitions: int) -> None:
    """Remember that the checkpoint's producers use ``<prefix>-0`` .. ``<prefix>-<partitions - 1>``
    (before they first do): every later start aborts what any of them left open, whatever the prefix
    and task count are then. A ``changejoin rescale`` to N task partitions aborts
    :func:`used_transactional_ids` and records the prefix with N."""
    used = [list(entry) for entry in delivery_record(store).get("transactional_ids", ())]
    covered = any(p == prefix and int(n) >= partitions for p, n in used)
    if not covered:
        used = [entry for entry in used if entry[0] != prefix or int(entry[1]) > partitions] + [[prefix, int(partitions)]]
        write_delivery_record(store, transactional_ids=used)


class Checkpoint:
    """A checkpoint: a local directory, or a location on any file system Spark's Hadoop client
    reaches (``s3a://``, ``hdfs://``, ``gs://``...), read through the running JVM. It holds
    ``changejoin-state.json`` (:meth:`read`, :meth:`write`, :meth:`identity`), and Spark's logs, of
    which it reads the newest micro-batches and their offsets; a local one also the pinned lookups
    (:attr:`pins`)."""

    def __init__(self, location: str, spark=None):
        """``spark``: a callable giving the Spark session, asked only for a non-local location."""
        self.location = location
        self._session = spark
        directory = local_directory(location)
        #: The local directory of the location, or None on another file system.
        self.directory = directory
        self._local = directory is not None
        self._dir = directory or location

    @property
    def local(self) -> bool:
        """A local directory (a plain path or a ``file:`` URL)."""
        return self._local

    @property
    def readable(self) -> bool:
        """Whether its files can be read: a local one always, another with the Spark session."""
        return self._local or self._session is not None

    @property
    def pins(self) -> str | None:
        """The directory of a lookup join's pinned lookups (``lookup.py``), absolute: the driver and
        the executors name it alike; None for a checkpoint that is not local (the configuration
        refuses a lookup join there)."""
        return os.path.join(os.path.abspath(self.directory), PINS) if self._local else None

    def lock(self, what: str) -> "CheckpointLock":
        """The checkpoint's lock, taken for ``what`` (:class:`CheckpointLock`)."""
        return CheckpointLock(self.location).acquire(what)

    @property
    def _spark(self):
        if self._session is None:
            raise PlanError(f"CHECKPOINT_LOCATION={self.location}: reading it needs the Spark session")
        return self._session()

    def _hadoop(self):
        jvm = self._spark._jvm
        path = jvm.org.apache.hadoop.fs.Path(self.location.rstrip("/") + "/" + FILE_NAME)
        return path, path.getFileSystem(self._spark._jsc.hadoopConfiguration())

    def read(self) -> dict | None:
        if self._local:
            path = os.path.join(self._dir, FILE_NAME)
            if not os.path.exists(path):
                return None
            with open(path) as f:
                return json.load(f)
        path, fs = self._hadoop()
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            reader = self._spark._jvm.java.io.BufferedReader(self._spark._jvm.java.io.InputStreamReader(stream, "UTF-8"))
            return json.loads("\n".join(iter(reader.readLine, None)))
        finally:
            stream.close()

    def identity(self) -> str | None:
        """The id :func:`reconcile` gave this checkpoint (None before it ran)."""
        return (self.read() or {}).get("id")

    def shuffle_partitions(self) -> int | None:
        """The shuffle partitions Spark fixed for this checkpoint (``spark.sql.shuffle.partitions``
        in the newest ``offsets/<batch>`` file's metadata line; Spark uses it over the session's on
        every restart), or None before the first micro-batch."""
        newest = self.newest_planned()
        return None if newest is None else self.batch_partitions(newest)

    def batch_partitions(self, batch_id: int) -> int | None:
        """The shuffle partitions micro-batch ``batch_id`` was planned with, or None."""
        from .session import SHUFFLE_PARTITIONS

        entry = self.batch_offsets(batch_id)
        for line in (entry or "").splitlines()[1:2]:
            value = json.loads(line).get("conf", {}).get(SHUFFLE_PARTITIONS)
            return int(value) if value is not None else None
        return None

    def task_partitions(self, configured: int) -> int:
        """The partitions of the query's last stage, whose tasks produce the output: the
        checkpoint's shuffle partitions, else ``configured`` (``SHUFFLE_PARTITIONS``, for a new
        checkpoint, or one on a remote file system read without Spark, as ``check-config`` does)."""
        if not self._local and self._session is None:
            return configured
        return self.shuffle_partitions() or configured

    def newest_planned(self) -> int | None:
        """The newest micro-batch Spark planned (its offset log), or None."""
        return self._newest_batch(OFFSETS)

    def newest_committed(self) -> int | None:
        """The newest micro-batch Spark committed (its commit log), or None."""
        return self._newest_batch(COMMITS)

    def committed(self) -> list[int]:
        """The micro-batches Spark committed, as far as its commit log keeps them, in order."""
        return self._batches(COMMITS)

    def _newest_batch(self, log: str) -> int | None:
        """The newest micro-batch id in Spark's ``offsets`` (planned) or ``commits`` (done) log, or None."""
        batches = self._batches(log)
        return batches[-1] if batches else None

    def _batches(self, log: str) -> list[int]:
        """The micro-batch ids in Spark's ``offsets`` (planned) or ``commits`` (done) log, in order."""
        if self._local:
            directory = os.path.join(self._dir, log)
            names = [n for n in os.listdir(directory) if n.isdigit()] if os.path.isdir(directory) else []
            return sorted(map(int, names))
        jvm = self._spark._jvm
        path = jvm.org.apache.hadoop.fs.Path(self.location.rstrip("/") + "/" + log)
        fs = path.getFileSystem(self._spark._jsc.hadoopConfiguration())
        if not fs.exists(path):
            return []
        return sorted(int(n) for n in (status.getPath().getName() for status in fs.listStatus(path)) if n.isdigit())

    def pending_batch(self) -> int | None:
        """The micro-batch Spark will run again at the next start (planned, not committed), or None."""
        planned, done = self.newest_planned(), self.newest_committed()
        return planned if planned is not None and (done is None or planned > done) else None

    def batch_offsets(self, batch_id: int) -> str | None:
        """Spark's offset-log entry of micro-batch ``batch_id`` (``offsets/<batch_id>``: a version
        line, the batch's metadata, then each source's end offsets), or None if there is none."""
        if batch_id < 0:
            return None
        if self._local:
            path = os.path.join(self._dir, OFFSETS, str(batch_id))
            if not os.path.exists(path):
                return None
            with open(path) as f:
                return f.read()
        jvm = self._spark._jvm
        path = jvm.org.apache.hadoop.fs.Path(self.location.rstrip("/") + f"/{OFFSETS}/{batch_id}")
        fs = path.getFileSystem(self._spark._jsc.hadoopConfiguration())
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))
            return "\n".join(iter(reader.readLine, None))
        finally:
            stream.close()

    def has_state(self) -> bool:
        """Spark has committed at least one micro-batch here."""
        if self._local:
            commits = os.path.join(self._dir, COMMITS)
            return os.path.isdir(commits) and any(not n.startswith(".") for n in os.listdir(commits))
        jvm = self._spark._jvm
        path = jvm.org.apache.hadoop.fs.Path(self.location.rstrip("/") + "/" + COMMITS)
        fs = path.getFileSystem(self._spark._jsc.hadoopConfiguration())
        return fs.exists(path) and len(fs.listStatus(path)) > 0

    def write(self, content: dict) -> None:
        text = json.dumps(content, indent=1, sort_keys=True)
        if self._local:
            os.makedirs(self._dir, exist_ok=True)
            path = os.path.join(self._dir, FILE_NAME)
            with open(path + ".tmp", "w") as f:
                f.write(text)
            os.replace(path + ".tmp", path)
            return
        path, fs = self._hadoop()
        stream = fs.create(path, True)
        try:
            stream.write(text.encode())
        finally:
            stream.close()


def task_partitions(store: "Checkpoint", configured: int, explicit: bool, buckets: int) -> int:
    """The query's task partitions: the checkpoint's (fixed at its first micro-batch), else
    ``SHUFFLE_PARTITIONS``. Refused: ``SHUFFLE_PARTITIONS`` set to another count than an existing
    checkpoint's (``changejoin rescale`` changes it), and more tasks than buckets (the rest would
    hold nothing)."""
    have = store.shuffle_partitions()
    if have is not None and explicit and configured != have:
        raise CheckpointMismatch(
            f"SHUFFLE_PARTITIONS={configured}: CHECKPOINT_LOCATION={store.location} runs {have} task partitions; "
            f"to change them, stop the service and run `changejoin rescale --partitions {configured}`, or leave "
            "SHUFFLE_PARTITIONS unset")
    partitions = have or configured
    if buckets and partitions > buckets:
        raise CheckpointMismatch(f"SHUFFLE_PARTITIONS={partitions}: more tasks than the state's {buckets} buckets "
                                 f"(STATE_BUCKETS), {partitions - buckets} of them would hold nothing: at most {buckets}")
    return partitions


def record_task_partitions(store: "Checkpoint", partitions: int) -> None:
    """Note the checkpoint's task count in ``changejoin-state.json`` (Spark's offset log holds the
    count it runs on; this copy is for people and tools reading the file)."""
    stored = store.read()
    if stored is not None and stored.get("task_partitions") != partitions:
        store.write({**stored, "task_partitions": partitions})


class CheckpointInUse(PlanError):
    """Another process holds the checkpoint (a service running on it, or a rescale)."""


class CheckpointLock:
    """Held by a process that writes the checkpoint (``changejoin run``, ``changejoin rescale``)
    for as long as it runs: an exclusive ``flock`` on ``<CHECKPOINT_LOCATION>/changejoin.lock``,
    which the system releases when the process ends, ``kill -9`` included. A checkpoint on another
    file system (``s3a://``...) cannot be locked: nothing is checked there."""

    NAME = "changejoin.lock"

    def __init__(self, location: str):
        self.location = location
        self._dir = local_directory(location)
        self._file = None

    def acquire(self, what: str) -> "CheckpointLock":
        """Take the lock, or raise :class:`CheckpointInUse` naming who holds it; ``what`` is written
        in the file for the next one to read."""
        if self._dir is None:
            return self
        import fcntl

        os.makedirs(self._dir, exist_ok=True)
        handle = open(os.path.join(self._dir, self.NAME), "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise CheckpointInUse(f"CHECKPOINT_LOCATION={self.location} is in use by {holder}: stop it first "
                                  "(one process at a time writes a checkpoint)") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{what} (pid {os.getpid()} on {_host()})")
        handle.flush()
        self._file = handle
        return self

    def release(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _host() -> str:
    import socket

    return socket.gethostname()
