"""Lookup: the stream rows of a reading task, each with the table rows its lookup key matches.

source -> decode -> **lookup** -> join -> encode -> sink

A lookup join (``PlanKind.LOOKUP``) reads one topic; its right side is a database table
(``database.py``). This step runs in the reading task, right after decode (a ``mapInArrow`` on the
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
looked up is written, before it is used, to ``<CHECKPOINT_LOCATION>/changejoin/lookups/<digest>``,
where the digest is that of the task's input (topic, and per Kafka partition its first and last
offset and record count): a different input never finds it. The file is published atomically
(written aside, then hard-linked to its name: the first attempt to publish wins, and a later one
uses the winner's); a retry or a replay that finds it joins the same rows. The driver deletes the
files of committed micro-batches (:func:`clean_pins`).
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
from .plan import JoinPlan
from .shipping import built

log = logging.getLogger(__name__)

PIN_DIRECTORY = os.path.join("changejoin", "lookups")
_LEFT, PACKED_TAG, _DEAD_LETTER_TAG = int(Tag.LEFT), int(Tag.PACKED), int(Tag.DEAD_LETTER)


def pin_directory(checkpoint_directory: str) -> str:
    """Where the lookups of a checkpoint's micro-batches are pinned."""
    return os.path.join(checkpoint_directory, PIN_DIRECTORY)


class LookupStage:
    """The lookup of one worker process: the plan's key getter and the database client."""

    @classmethod
    def from_config(cls, config: dict) -> "LookupStage":
        return cls(JoinPlan.from_json(config["plan"]), config.get("lookup_password"))

    def __init__(self, plan: JoinPlan, password: str | None):
        from .database import CacheSettings, LookupClient, TableInfo

        lookup = plan.lookup
        self.plan = plan
        indexes = tuple(lookup["left_key"])
        self.key_of = lambda row: tuple(row[i] for i in indexes)
        cache = lookup["cache"]
        self.client = LookupClient(
            lookup["url"], password, TableInfo.from_dict(lookup["table"]), tuple(lookup["key_columns"]),
            batch_size=lookup["batch_size"], query_timeout_s=lookup["query_timeout_s"],
            max_retries=lookup["max_retries"], retry_backoff_s=lookup["retry_backoff_s"],
            cache=CacheSettings(**cache) if cache else None,
        )
        # The table rows as the join sees them: the columns it can read, in the plan's order.
        names = [c["name"] for c in lookup["table"]["columns"]]
        picks = tuple(names.index(c) for c in plan.right.columns)
        self.project = (lambda row: tuple(row[i] for i in picks)) if picks != tuple(range(len(names))) else None

    def answers(self, keys: set, pin: str | None) -> tuple[dict, dict, bool]:
        """(matches by key, invalid keys with their reason, whether a pinned answer was used)."""
        if pin is not None:
            pinned = _read_pin(pin)
            if pinned is not None:
                return pinned[0], pinned[1], True
        result = self.client.lookup(keys)
        rows = result.rows
        if self.project is not None:
            rows = {key: tuple(self.project(r) for r in found) for key, found in rows.items()}
        answer = (rows, dict(result.invalid))
        if pin is not None:
            answer = _publish_pin(pin, answer)
        return answer[0], answer[1], False


def lookup_partition(config: dict, pins: str | None, accumulator=None) -> Callable:
    """The ``mapInArrow`` function of the lookup step; ``config`` is the worker config with its
    secrets (``shipping.py``), ``pins`` the directory of pinned lookups (None: not pinned),
    ``accumulator`` where the task's counts go (``metrics.LookupCounts``)."""

    def run(batches) -> Iterator:
        import pyarrow as pa

        stage = built(LookupStage.from_config, config)
        stage.client.take_stats()  # what a failed attempt before this task left: reported by nobody
        rows = [row for arrow in batches for row in zip(*(arrow.column(i).to_pylist() for i in range(8)))]
        envelopes, entries = _unpacked(rows)
        keys, fingerprint = set(), hashlib.sha256(stage.plan.left.topic.encode())
        for entry in entries:
            if entry[KIND] in ACCUMULATE:
                key = stage.key_of(entry[PAYLOAD])
                if None not in key:
                    keys.add(key)
        for part, first, last, count in _ranges(entries):
            fingerprint.update(b"%d:%d:%d:%d;" % (part, first, last, count))
        found, invalid, reused = ({}, {}, False)
        started = time.perf_counter()
        if keys:
            pin = None if pins is None else os.path.join(pins, fingerprint.hexdigest())
            found, invalid, reused = stage.answers(keys, pin)
        out = list(_answered(stage, envelopes, found, invalid))
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


def _answered(stage: LookupStage, envelopes: list, found: dict, invalid: dict) -> Iterator[tuple]:
    """The envelopes with each row's matches attached; rows of invalid keys as dead letters."""
    key_of, topic = stage.key_of, stage.plan.left.topic

    def answer(entry):
        """The entry with (row, matches), or None when its key is invalid."""
        row, kind = entry[PAYLOAD], entry[KIND]
        if kind not in ACCUMULATE:
            return entry[:PAYLOAD] + ((row, None),) + entry[PAYLOAD + 1:]
        key = key_of(row)
        if key in invalid:
            return None
        return entry[:PAYLOAD] + ((row, found.get(key, ())),) + entry[PAYLOAD + 1:]

    def dead(entry) -> tuple:
        row, kind = entry[PAYLOAD], entry[KIND]
        detail = invalid[key_of(row)]
        letter = deadletters.from_row(Reason.LOOKUP_KEY_INVALID, detail, kind, row, None,
                                      (topic, entry[PART], entry[OFFSET]))
        return (dead_letter_group(entry[PART]), _DEAD_LETTER_TAG, kind, dumps(letter), None, entry[TS], entry[PART],
                entry[OFFSET])

    for e in envelopes:
        tag = e[TAG]
        if tag == _LEFT:
            answered = answer(e)
            if answered is None:
                yield dead(e)
            else:
                yield answered[:PAYLOAD] + (dumps(answered[PAYLOAD]),) + answered[PAYLOAD + 1:]
        elif tag == PACKED_TAG:
            kept = []
            for entry in e[PAYLOAD]:
                answered = answer(entry)
                if answered is None:
                    yield dead(entry)
                else:
                    kept.append(answered)
            if kept:
                yield e[:PAYLOAD] + (dumps(kept),) + e[PAYLOAD + 1:]
        else:
            yield e



# -- pinned lookups ------------------------------------------------------------------------------
def _read_pin(path: str):
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return None


def _publish_pin(path: str, answer: tuple) -> tuple:
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


def clean_pins(directory: str, older_than: float) -> int:
    """Delete the pinned lookups written before ``older_than`` (epoch seconds); returns how many."""
    removed = 0
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    for name in names:
        path = os.path.join(directory, name)
        try:
            if os.stat(path).st_mtime < older_than:
                os.unlink(path)
                removed += 1
        except FileNotFoundError:
            pass
    return removed
