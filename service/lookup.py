"""Lookup: the stream rows of a reading task, each with the table rows its lookup key matches.

source -> decode -> **lookup** -> join -> encode -> sink

A lookup join (``PlanKind.LOOKUP``) reads one topic; its right side is a database table
(``service/database/``). This step runs in the reading task, right after decode (a ``mapInArrow`` on the
source's rows: the same Spark stage, no shuffle), so that one task asks the database for all its
rows at once: the distinct lookup keys of its accumulate rows (``+I``, ``+U``), in chunks of
``LOOKUP_BATCH_SIZE`` keys per query, all in one snapshot. Retractions are never looked up: the
join stage answers them from what it remembers (``operators/lookup.py``). A key with a NULL never
matches. A key the table's column cannot hold (out of range, not a UUID...) turns its record into a
dead letter (``lookup_key_invalid``).

Each row envelope leaves with its payload ``(row, matches)``: the tuple of matching table rows
(``()``: none), or None for a retraction.

**Pinned lookups.** Every other input of the service is a Kafka offset: a retried task or a
replayed micro-batch computes what the first attempt computed, which at-least-once replays
(dropped by ``(batch, seq)``) and exactly-once (a committed task's replay is skipped while the
join's state is recomputed) rely on. A table can change between two attempts. So what a task
looked up is written, before it is used, to
``<pins>/<micro-batch>/<digest>``, in the checkpoint's pin directory (``checkpoint.Checkpoint.pins``:
``<CHECKPOINT_LOCATION>/changejoin/lookups``), where the digest is that of the
task's input (topic, and per Kafka partition its first and last offset and record count) and of
its lookup key (the stream's and the table's columns): another input or another key never finds
it. The file is published atomically (written aside, then hard-linked to its name: the first
attempt to publish wins, and a later one uses the winner's); a retry or a replay that finds it
joins the same rows. A pin names the columns it holds with their types: a replay joins the
pinned rows by column name, a column read anew is NULL in them when nullable (as in the join's
stored rows), and a column whose type changed beyond what the pinned values are stops the task
with one line saying what to do (:class:`PinMismatch`). The driver deletes the directories of
committed micro-batches (:func:`clean_pins`), by their number, never by file times.

The checkpoint directory must be one volume shared by the driver and every executor, on a file
system with hard links (a local disk, NFS, CephFS; not SMB/Azure Files, s3fs or gcsfuse): the
driver checks the hard links at start and leaves a token there (:func:`prepare_pins`), which
every worker process checks before it pins (:func:`check_volume`).

**Rows the join cannot take.** A table row whose value psycopg cannot load (an 'infinity' date)
or the output's Avro type cannot hold (a numeric NaN) makes its key's rows unjoinable
(``database.LookupResult.bad_rows``): the records of that key become dead letters,
``lookup_row_invalid``, naming the column and the value. On an upsert input, whose records
replace their key's previous version, a record that cannot be joined (its key invalid, or its
rows) also retracts that version: it travels on as its key's tombstone.
"""
from __future__ import annotations

import hashlib
import logging
import os
import pickle
import tempfile
import time
from typing import Callable, Iterator

from operators import ACCUMULATE

from . import deadletters
from .deadletters import Reason
from .envelope import KIND, OFFSET, PART, PAYLOAD, TAG, TS, Tag, dead_letter_group, dumps, loads
from .errors import ChangejoinError
from .plan import JoinPlan
from .shipping import WorkerConfig, built

log = logging.getLogger(__name__)

PIN_FORMAT = 2  # a dict naming its columns (format 1, before: a bare (rows, invalid) tuple)
VOLUME_FILE = "volume"  # in the pin directory: the token of the driver's start (prepare_pins)
BATCH_ID = "streaming.sql.batchId"  # the local property Spark sets on every job of a micro-batch
_LEFT, PACKED_TAG, _DEAD_LETTER_TAG = int(Tag.LEFT), int(Tag.PACKED), int(Tag.DEAD_LETTER)
_DELETE = 3  # RowKind -D
_checked_volumes: set[tuple[str, str]] = set()  # (directory, token) this worker process found shared


class PinVolumeError(RuntimeError, ChangejoinError):
    """The checkpoint directory cannot hold pinned lookups: one line naming CHECKPOINT_LOCATION."""


class PinMismatch(RuntimeError, ChangejoinError):
    """A pin holds columns a replay cannot join: one line saying what changed and what to do."""


class LookupStage:
    """The lookup of one worker process: the plan's key getter and the database client."""

    @classmethod
    def from_config(cls, config: WorkerConfig) -> "LookupStage":
        return cls(JoinPlan.from_json(config.plan), config.secrets.lookup_password)

    def __init__(self, plan: JoinPlan, password: str | None):
        from .database import CacheSettings, LookupClient, TableInfo

        lookup = plan.lookup
        self.plan = plan
        indexes = tuple(lookup["left_key"])
        self.key_of = lambda row: tuple(row[i] for i in indexes)
        cache = lookup["cache"]
        table = TableInfo.from_dict(lookup["table"])
        # The table rows as the join sees them: the columns its query reads, in the plan's order.
        self.client = LookupClient(
            lookup["url"], password, table, tuple(lookup["key_columns"]),
            batch_size=lookup["batch_size"], query_timeout_s=lookup["query_timeout_s"],
            max_retries=lookup["max_retries"], retry_backoff_s=lookup["retry_backoff_s"],
            cache=CacheSettings(**cache) if cache else None, columns=plan.right.columns,
        )
        pg_types = {c.name: c.pg_type for c in table.columns}
        right = plan.right
        self.columns = tuple((name, avro_type, nullable, pg_types.get(name))
                             for name, avro_type, nullable in zip(right.columns, right.avro_types, right.nullable))
        # What a pin's keys are: the stream's columns and the table's they are looked up in.
        self.key = (tuple(plan.left.state_columns[i] for i in indexes), tuple(lookup["key_columns"]))

    def answers(self, keys: set, pin: str | None) -> tuple[dict, dict, dict, bool]:
        """(matches by key, invalid keys with their reason, keys whose rows cannot be joined with
        theirs, whether a pinned answer was used)."""
        if pin is not None:
            pinned = _read_pin(pin)
            if pinned is not None:
                return (*self._pinned(pinned, pin), True)
        result = self.client.lookup(keys)
        answer = {"format": PIN_FORMAT, "columns": self.columns, "key": self.key, "rows": result.rows,
                  "invalid": dict(result.invalid), "bad_rows": dict(result.bad_rows)}
        if pin is not None:
            published = _publish_pin(pin, answer)
            if published is not answer:
                return (*self._pinned(published, pin), True)
        return answer["rows"], answer["invalid"], answer["bad_rows"], False

    def _pinned(self, pinned, path: str) -> tuple[dict, dict, dict]:
        """A pin's answer in this plan's columns, matched by name (see the module docstring)."""
        batch = os.path.basename(os.path.dirname(path))
        what_to_do = (f"restore it until micro-batch {batch} is committed, or delete {os.path.dirname(path)} (the "
                      "replay then reads the table as it is now, and may join other rows than its first attempt did)")
        if not isinstance(pinned, dict) or pinned.get("format") != PIN_FORMAT or pinned.get("key") != self.key:
            raise PinMismatch(f"{path}: not a pin of this lookup join's (format {PIN_FORMAT}, key {self.key}): "
                              f"{what_to_do}")
        from .checkpoint import compatible

        held = {c[0]: (i, c) for i, c in enumerate(pinned["columns"])}
        picks = []
        for name, avro_type, nullable, pg_type in self.columns:
            if name in held:
                i, (_, was, _, was_pg) = held[name]
                if not compatible(was, avro_type):
                    raise PinMismatch(f"{path}: the lookups pinned for micro-batch {batch} hold column {name} as "
                                      f"{was_pg} (Avro {was}), the join now reads it as {pg_type} (Avro {avro_type}), "
                                      f"which those values are not: a replay cannot join them; {what_to_do}")
                picks.append(i)
            elif nullable:
                picks.append(None)
            else:
                raise PinMismatch(f"{path}: the lookups pinned for micro-batch {batch} were read without column "
                                  f"{name}, which the join now reads and is NOT NULL: a replay cannot join them; "
                                  f"{what_to_do}")
        rows = pinned["rows"]
        if picks != list(range(len(pinned["columns"]))):
            rows = {key: tuple(tuple(None if i is None else r[i] for i in picks) for r in found)
                    for key, found in rows.items()}
        return rows, pinned["invalid"], pinned["bad_rows"]


def lookup_partition(config: WorkerConfig, pins: str | None, accumulator=None, token: str | None = None) -> Callable:
    """The ``mapInArrow`` function of the lookup step; ``config`` is the worker config with its
    secrets (``shipping.py``), ``pins`` the directory of pinned lookups (None: not pinned) and
    ``token`` what the driver left in it (:func:`prepare_pins`), ``accumulator`` where the
    task's counts go (``metrics.LookupCounts``)."""

    def run(batches) -> Iterator:
        import pyarrow as pa

        stage = built(LookupStage.from_config, config)
        stage.client.take_stats()  # what a failed attempt before this task left: reported by nobody
        rows = [row for arrow in batches for row in zip(*(arrow.column(i).to_pylist() for i in range(8)))]
        envelopes, entries = _unpacked(rows)
        keys, fingerprint = set(), hashlib.sha256(stage.plan.left.topic.encode())
        fingerprint.update(repr(stage.key).encode())
        for entry in entries:
            if entry[KIND] in ACCUMULATE:
                key = stage.key_of(entry[PAYLOAD])
                if None not in key:
                    keys.add(key)
        for part, first, last, count in _ranges(entries):
            fingerprint.update(b"%d:%d:%d:%d;" % (part, first, last, count))
        found, invalid, bad, reused = ({}, {}, {}, False)
        started = time.perf_counter()
        if keys:
            pin = None
            if pins is not None:
                check_volume(pins, token)
                pin = os.path.join(pins, str(_batch_id()), fingerprint.hexdigest())
            found, invalid, bad, reused = stage.answers(keys, pin)
        out = list(_answered(stage, envelopes, found, invalid, bad))
        if accumulator is not None:
            from pyspark import TaskContext

            stats = stage.client.take_stats()
            # By task partition: a stage run again reports a partition again (pipeline._Counts).
            accumulator.add({TaskContext.get().partitionId(): {
                "queries": stats.queries, "keys": stats.keys, "rows": stats.rows,
                "cache_hit": stats.cache_hits, "cache_miss": stats.cache_misses,
                "cache_evicted": stats.cache_evictions, "retries": stats.retries,
                "pinned_reuse": int(reused), "invalid_keys": len(invalid),
                **{f"error:{kind}": n for kind, n in stats.errors.items()},
                "query_seconds": list(stats.query_seconds),
                "task_seconds": [time.perf_counter() - started] if keys else []}})
        if out:
            yield pa.RecordBatch.from_pylist(
                [dict(zip(_FIELDS, envelope)) for envelope in out], schema=_arrow_schema())

    return run


def _batch_id() -> int:
    """The micro-batch this task computes (Spark's local property of the micro-batch's jobs)."""
    from pyspark import TaskContext

    context = TaskContext.get()
    batch = context.getLocalProperty(BATCH_ID) if context is not None else None
    if batch is None:
        raise RuntimeError(f"a lookup task ran outside a micro-batch (no Spark local property {BATCH_ID})")
    return int(batch)


_FIELDS = ("jk", "tag", "kind", "payload", "event_time", "ts", "part", "offset")


def _arrow_schema():
    import pyarrow as pa

    return pa.schema([("jk", pa.binary()), ("tag", pa.int8()), ("kind", pa.int8()), ("payload", pa.binary()),
                      ("event_time", pa.timestamp("us", tz="UTC")), ("ts", pa.int64()), ("part", pa.int32()),
                      ("offset", pa.int64())])


def _unpacked(rows: list) -> tuple[list, list]:
    """The task's envelopes with their payloads unpickled (a packed one's: its entries), and every
    row entry among them, in order."""
    envelopes, entries = [], []
    for r in rows:
        tag = r[TAG]
        if tag == _LEFT:
            e = r[:PAYLOAD] + (loads(r[PAYLOAD]),) + r[PAYLOAD + 1:]
            envelopes.append(e)
            entries.append(e)
        elif tag == PACKED_TAG:
            packed = loads(r[PAYLOAD])
            envelopes.append(r[:PAYLOAD] + (packed,) + r[PAYLOAD + 1:])
            entries += packed
        else:  # dead letters pass
            envelopes.append(r)
    return envelopes, entries


def _ranges(entries: list) -> list[tuple[int, int, int, int]]:
    """Per Kafka partition: (partition, first offset, last offset, records), sorted."""
    seen: dict[int, list] = {}
    for e in entries:
        r = seen.get(e[PART])
        if r is None:
            seen[e[PART]] = [e[OFFSET], e[OFFSET], 1]
        else:
            r[0], r[1], r[2] = min(r[0], e[OFFSET]), max(r[1], e[OFFSET]), r[2] + 1
    return sorted((part, *r) for part, r in seen.items())


def _answered(stage: LookupStage, envelopes: list, found: dict, invalid: dict, bad: dict) -> Iterator[tuple]:
    """The envelopes with each row's matches attached. A row whose key is invalid, or whose key's
    rows cannot be joined, is a dead letter; on an upsert input it also goes on as its key's
    tombstone, retracting the key's previous version (its row replaced by one that cannot join)."""
    key_of, topic = stage.key_of, stage.plan.left.topic
    upsert = stage.plan.left.changelog_mode == "upsert"

    def answer(entry):
        """The entry with (row, matches), or None when it cannot be joined."""
        row, kind = entry[PAYLOAD], entry[KIND]
        if kind not in ACCUMULATE:
            return entry[:PAYLOAD] + ((row, None),) + entry[PAYLOAD + 1:]
        key = key_of(row)
        if key in invalid or key in bad:
            return None
        return entry[:PAYLOAD] + ((row, found.get(key, ())),) + entry[PAYLOAD + 1:]

    def dead(entry) -> tuple:
        row, kind = entry[PAYLOAD], entry[KIND]
        key = key_of(row)
        reason, detail = ((Reason.LOOKUP_KEY_INVALID, invalid[key]) if key in invalid
                          else (Reason.LOOKUP_ROW_INVALID, bad[key]))
        letter = deadletters.from_row(reason, detail, kind, row, None, (topic, entry[PART], entry[OFFSET]))
        return (dead_letter_group(entry[PART]), _DEAD_LETTER_TAG, kind, dumps(letter), None, entry[TS], entry[PART],
                entry[OFFSET])

    def tombstone(entry) -> tuple:
        return entry[:KIND] + (_DELETE, (None, None)) + entry[PAYLOAD + 1:]

    for e in envelopes:
        tag = e[TAG]
        if tag == _LEFT:
            answered = answer(e)
            if answered is None:
                yield dead(e)
                if upsert:
                    answered = tombstone(e)
            if answered is not None:
                yield answered[:PAYLOAD] + (dumps(answered[PAYLOAD]),) + answered[PAYLOAD + 1:]
        elif tag == PACKED_TAG:
            kept = []
            for entry in e[PAYLOAD]:
                answered = answer(entry)
                if answered is None:
                    yield dead(entry)
                    if upsert:
                        kept.append(tombstone(entry))
                else:
                    kept.append(answered)
            if kept:
                yield e[:PAYLOAD] + (dumps(kept),) + e[PAYLOAD + 1:]
        else:
            yield e


# -- pinned lookups ------------------------------------------------------------------------------
def prepare_pins(directory: str, location: str) -> str:
    """On the driver, at start: make the pin directory, check that its file system has hard links
    (raises PinVolumeError naming CHECKPOINT_LOCATION) and leave a new token in it for
    :func:`check_volume`; returns the token."""
    import uuid

    os.makedirs(directory, exist_ok=True)
    probe = os.path.join(directory, f".probe-{uuid.uuid4().hex}")
    try:
        with open(probe, "wb"):
            pass
        try:
            os.link(probe, probe + "-link")
        except OSError as err:
            raise PinVolumeError(
                f"CHECKPOINT_LOCATION={location}: its file system has no hard links ({err.strerror or err}), with "
                "which a lookup join publishes what each task looked up, first attempt first; put the checkpoint on "
                "a local disk or a volume that has them (NFS, CephFS; not SMB/Azure Files, s3fs, gcsfuse)") from None
        os.unlink(probe + "-link")
    finally:
        if os.path.exists(probe):
            os.unlink(probe)
    token = uuid.uuid4().hex
    temporary = os.path.join(directory, f".{VOLUME_FILE}-{token}")
    with open(temporary, "w") as f:
        f.write(token)
    os.replace(temporary, os.path.join(directory, VOLUME_FILE))
    return token


def check_volume(directory: str, token: str | None) -> None:
    """In a worker, before it pins: the pin directory is the driver's (it holds the token of the
    driver's start), else PinVolumeError: an executor that pinned on a disk of its own would leave
    pins the driver never deletes, and a retry on another executor would not find them. Once per
    worker process and token."""
    if token is None or (directory, token) in _checked_volumes:
        return
    try:
        with open(os.path.join(directory, VOLUME_FILE)) as f:
            found = f.read()
    except FileNotFoundError:
        found = None
    if found != token:
        import socket

        raise PinVolumeError(
            f"CHECKPOINT_LOCATION: the executor on {socket.gethostname()} does not see the driver's checkpoint "
            f"directory ({os.path.join(directory, VOLUME_FILE)} "
            f"{'is missing' if found is None else 'holds the token of another start'}): a lookup join pins what each task looked up there, so the checkpoint must be one volume that the "
            "driver and every executor mount at the same path (ReadWriteMany)")
    _checked_volumes.add((directory, token))


def _read_pin(path: str):
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None


def _publish_pin(path: str, answer) -> object:
    """Publish ``answer`` at ``path`` unless another attempt did first; returns the published one."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=".pin-")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(answer, f, protocol=5)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return _read_pin(path)
        return answer
    finally:
        os.unlink(temporary)


def clean_pins(directory: str, below: int) -> int:
    """Delete the pins of the micro-batches before ``below`` (committed: Spark runs micro-batch N
    once N-1 is), and any pin of an earlier changejoin (files at the top); returns how many
    micro-batches' directories went."""
    import shutil

    removed = 0
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    for name in names:
        path = os.path.join(directory, name)
        if name.isdigit():
            if int(name) < below:
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
        elif name != VOLUME_FILE and not name.startswith(".") and os.path.isfile(path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    return removed
