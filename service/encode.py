"""Encode: join output and dead letters -> Kafka records (topic, key, value, headers).

Output values are Avro in the output schema derived from the SELECT list (Confluent wire format
and registered as ``<OUTPUT_TOPIC>-value`` when a registry is configured). The message key is the
Avro record of the ``OUTPUT_KEY`` columns (``<OUTPUT_TOPIC>-key``), or none.

- ``OUTPUT_MODE=retract``: every change is written; its RowKind is in the ``ROWKIND_HEADER`` header.
- ``OUTPUT_MODE=upsert``: ``+I``/``+U`` write the row under its key, ``-D`` writes a tombstone (null
  value) for the key; ``-U`` is dropped when the same join call writes its key again, and is a
  tombstone when the row left its key (see ``OutputEncoder._upsert_kinds``).

Every record carries ``changejoin.batch`` (the micro-batch id) and ``changejoin.seq``
(``<task partition>:<index>``): a micro-batch replayed after a crash writes the same records with
the same headers, which lets consumers drop replays.
"""
from __future__ import annotations

from typing import Iterable, Iterator

from operators import RowKind

from . import deadletters
from .avro import SchemaRegistry, ValueEncoder, output_schema
from .deadletters import Reason
from .envelope import Target, loads, unpack
from .kafka_records import output_framing_bytes, record_bytes
from .latency import count_ages
from .plan import JoinPlan, OutputMode
from .shipping import WorkerConfig, built, registry

BATCH_HEADER = "changejoin.batch"
SEQ_HEADER = "changejoin.seq"
_KIND_SHORT = tuple(RowKind(k).short for k in range(4))  # by RowKind value
_UPDATE_BEFORE, _DELETE = int(RowKind.UPDATE_BEFORE), int(RowKind.DELETE)
_DEAD_LETTER, _PACKED, _TALLY = int(Target.DEAD_LETTER), int(Target.PACKED), int(Target.TALLY)
_SIDES = ("left", "right")


class OutputEncoder:
    def __init__(self, plan: JoinPlan, output_topic: str, dlq_topic: str, mode: str, rowkind_header: str,
                 max_record_bytes: int, registry: SchemaRegistry | None, output_partitions: int = 1,
                 message_max_bytes: int = 1_000_000):
        self.topic = output_topic
        self.partitions = max(1, output_partitions)
        self.dlq_topic = dlq_topic
        self.upsert = mode == OutputMode.UPSERT
        self.header = rowkind_header
        self._kind_headers = tuple((rowkind_header, short.encode()) for short in _KIND_SHORT)
        self.max_bytes = max_record_bytes
        self.message_max_bytes = message_max_bytes  # the producer's limit, headers and framing included
        # The limits as config.py validates them: a key and value within max_record_bytes fit the
        # producer's limit with any headers the encoder writes, so only the value's size is checked.
        self._framing_fits = max_record_bytes + output_framing_bytes(rowkind_header) <= message_max_bytes
        self.values = ValueEncoder(plan.output_schema, registry, f"{output_topic}-value" if registry else None)
        self.key_columns = plan.output_key
        self.keys = None
        if plan.output_key:
            # Built from the inputs' column types (self-contained), not from the output schema's
            # fields, where a named type used twice is only referenced by name after its first use.
            fields = []
            # A column of a side the outer join pads is nullable in the key as in the value
            # (plan.output_column_type says so).
            for i in plan.output_key:
                avro_type, nullable = plan.output_column_type(i)
                fields.append((plan.output_names[i], avro_type, nullable))
            key_schema = output_schema(plan.output_schema["name"] + "_key", fields)
            self.keys = ValueEncoder(key_schema, registry, f"{output_topic}-key" if registry else None)

    @classmethod
    def from_config(cls, config: WorkerConfig) -> "OutputEncoder":
        """The encoder of a worker config (``shipping.py``), built once per worker process by :func:`encoder`."""
        return cls(JoinPlan.from_json(config.plan), config.output_topic, config.dlq_topic,
                   config.output_mode, config.rowkind_header, config.max_record_bytes, registry(config),
                   config.output_partitions, config.message_max_bytes)

    def records(self, rows: Iterable[tuple], batch_id: int, task: int, counts: dict) -> Iterator[tuple]:
        """Kafka records for one task's share of a micro-batch, in order.

        ``rows`` are the join's (target, kind, payload, okey) rows (``envelope.OUTPUT_SCHEMA``); a
        PACKED row stands for its changes, in order, and its ``okey`` is their route
        (``envelope.output_route``): without a message key they go to partition ``route % P``. Every change and dead letter takes the
        next ``changejoin.seq`` index of the task, also a change that writes nothing (``-U`` in
        upsert mode), so a replay numbers its records the same way. ``counts`` gets, per
        ``("output", RowKind)`` or ``("dead_letter", reason)``, how many records were written, per
        ``("skipped", reason)`` how many input records carried no row change, and per
        ``("input", side)`` how many records of the input the reading tasks read, and their ages
        (``latency.count_ages``)."""
        batch = (BATCH_HEADER, str(batch_id).encode())
        seq_format = b"%d:%%d" % task  # changejoin.seq: b"<task>:<index>"
        topic = self.topic
        by_kind = [0, 0, 0, 0]
        index = 0
        # Retract mode without a message key is the common case and one output change is this
        # loop's whole work: it writes the record itself and leaves the rest to output().
        plain = not self.upsert and self.keys is None and self._framing_fits
        kind_headers, limit, write = self._kind_headers, self.max_bytes, None
        partitions = self.partitions
        for target, kind, payload, route in rows:
            if target == _TALLY:  # records a reading task read: counted, not written
                tally = loads(payload)
                label = ("input", _SIDES[kind])
                counts[label] = counts.get(label, 0) + tally[0]
                count_ages(counts, tally)  # their ages, for the end-to-end latency
                continue
            if target == _DEAD_LETTER:
                letter = loads(payload)
                if letter.get("skipped"):  # an input record with no row change: counted, not written
                    label = ("skipped", letter["reason"])
                    counts[label] = counts.get(label, 0) + 1
                    continue
                record = self.dead_letter(letter, batch[1], seq_format % index)
                index += 1
                _count_dead_letter(counts, record)
                yield record
                continue
            changes = unpack(payload) if target == _PACKED else ((kind, loads(payload)),)
            partition = int.from_bytes(route, "big") % partitions if route else task % partitions
            if plain:
                if write is None:  # at the first change: a registry is asked for the schema id only then
                    write = self.values.writer()
                for kind, row in changes:
                    seq = (SEQ_HEADER, seq_format % index)
                    index += 1
                    value = write(row)
                    if len(value) <= limit:
                        by_kind[kind] += 1
                        yield (topic, None, value, [kind_headers[kind], batch, seq], partition)
                        continue
                    record = self.output(kind, row, batch, seq, partition)  # too large: a dead letter
                    _count_dead_letter(counts, record)
                    yield record
                continue
            if self.upsert:
                changes = self._upsert_kinds(list(changes))
            for kind, row in changes:
                record = self.output(kind, row, batch, (SEQ_HEADER, seq_format % index), partition)
                index += 1
                if record is None:
                    continue
                if record[0] is topic:
                    by_kind[kind] += 1
                else:
                    _count_dead_letter(counts, record)
                yield record
        for kind, n in enumerate(by_kind):
            if n:
                label = ("output", _KIND_SHORT[kind])
                counts[label] = counts.get(label, 0) + n

    def _upsert_kinds(self, changes: list) -> list:
        """Upsert mode: a ``-U`` is dropped when a later change of the same call writes its key
        again (the usual ``-U``/``+U`` of an updated row); otherwise the row leaves its key (say an
        order that moves to another product, with the product in ``OUTPUT_KEY``) and the ``-U``
        is written as the key's tombstone, so the old key does not keep a stale row."""
        key_of = self._key_values
        rewritten = set()
        kinds = [0] * len(changes)
        for i in range(len(changes) - 1, -1, -1):
            kind, row = changes[i]
            key = key_of(row)
            if kind == _UPDATE_BEFORE:
                kind = _UPDATE_BEFORE if key in rewritten else _DELETE
            rewritten.add(key)
            kinds[i] = kind
        return [(kind, row) for kind, (_, row) in zip(kinds, changes)]

    def _key_values(self, row: tuple) -> tuple:
        return tuple(row[i] for i in self.key_columns)

    def output(self, kind: int, row: tuple, batch: tuple, seq: tuple, partition: int = 0) -> tuple | None:
        """The Kafka record for one output change, (topic, key, value, headers, partition), or None
        for a change that is not written (``-U`` in upsert mode). ``batch`` and ``seq`` are the
        ``changejoin.batch`` and ``changejoin.seq`` headers.

        Without a message key it goes to ``partition``, the route of its join key
        (:meth:`records`): all changes of a row land, in order, in one partition."""
        if self.upsert:
            if kind == _UPDATE_BEFORE:
                return None
            headers = [batch, seq]
        else:
            headers = [self._kind_headers[kind], batch, seq]
        key = self.keys.encode(tuple(row[i] for i in self.key_columns)) if self.keys else None
        if self.upsert and kind == _DELETE:
            return (self.topic, key, None, headers, None)
        value = self.values.encode(row)
        size = len(value) + (len(key) if key else 0)
        if size > self.max_bytes or (not self._framing_fits and record_bytes(key, value, headers) > self.message_max_bytes):
            detail = (f"{_KIND_SHORT[kind]} output record of {len(value)} bytes exceeds "
                      f"MAX_OUTPUT_RECORD_BYTES={self.max_bytes}" if size > self.max_bytes else
                      f"{_KIND_SHORT[kind]} output record of {len(value)} bytes with its key and headers exceeds "
                      f"the producer's message.max.bytes={self.message_max_bytes}")
            letter_headers = headers + deadletters.reason_headers(Reason.TOO_LARGE, detail, self.topic)
            return (self.dlq_topic, *deadletters.fit(key, None, letter_headers, self.message_max_bytes))
        return (self.topic, key, value, headers, None if key is not None else partition)

    def dead_letter(self, letter: dict, batch: bytes, seq: bytes) -> tuple:
        """The dead-letter record: the original key, value and headers plus why and where from."""
        key, value, headers = deadletters.render(letter)
        headers += [(BATCH_HEADER, batch), (SEQ_HEADER, seq)]
        return (self.dlq_topic, *deadletters.fit(key, value, headers, self.message_max_bytes))


def _count_dead_letter(counts: dict, record: tuple) -> None:
    label = ("dead_letter", dict(record[3])["reason"].decode())
    counts[label] = counts.get(label, 0) + 1


def encoder(config: WorkerConfig) -> OutputEncoder:
    """The worker's encoder for a worker config (with its secrets), built once per process."""
    return built(OutputEncoder.from_config, config)
