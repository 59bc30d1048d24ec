"""Encode: join output and dead letters -> Kafka records (topic, key, value, headers).

Output values are Avro in the output schema derived from the SELECT list (Confluent wire format
and registered as ``<OUTPUT_TOPIC>-value`` when a registry is configured). The message key is the
Avro record of the ``OUTPUT_KEY`` columns (``<OUTPUT_TOPIC>-key``), or none.

- ``OUTPUT_MODE=retract``: every change is written; its RowKind is in the ``ROWKIND_HEADER`` header.
- ``OUTPUT_MODE=upsert``: ``-U`` is dropped, ``+I``/``+U`` write the row under its key, ``-D`` writes
  a tombstone (null value) for the key.

Every record carries ``changejoin.batch`` (the micro-batch id) and ``changejoin.seq``
(``<task partition>:<index>``): a micro-batch replayed after a crash writes the same records with
the same headers, which lets consumers drop replays.
"""
from __future__ import annotations

import pickle
from typing import Iterator

from operators import RowKind

from .avro import SchemaRegistry, ValueEncoder, output_schema
from .decode import TOO_LARGE
from .plan import JoinPlan

BATCH_HEADER = "changejoin.batch"
SEQ_HEADER = "changejoin.seq"
_KIND_BYTES = {k: k.short.encode() for k in RowKind}


class OutputEncoder:
    def __init__(self, plan: JoinPlan, output_topic: str, dlq_topic: str, mode: str, rowkind_header: str,
                 max_record_bytes: int, registry: SchemaRegistry | None, output_partitions: int = 1):
        self.topic = output_topic
        self.partitions = max(1, output_partitions)
        self.dlq_topic = dlq_topic
        self.upsert = mode == "upsert"
        self.header = rowkind_header
        self.max_bytes = max_record_bytes
        self.values = ValueEncoder(plan.output_schema, registry, f"{output_topic}-value" if registry else None)
        self.key_columns = plan.output_key
        self.keys = None
        if plan.output_key:
            # Built from the inputs' column types (self-contained), not from the output schema's
            # fields, where a named type used twice is only referenced by name after its first use.
            fields = []
            for i in plan.output_key:
                side, index = plan.projection[i]
                sp = plan.sides[side]
                fields.append((plan.output_names[i], sp.avro_types[index], sp.nullable[index]))
            key_schema = output_schema(plan.output_schema["name"] + "_key", fields)
            self.keys = ValueEncoder(key_schema, registry, f"{output_topic}-key" if registry else None)

    def output(self, kind: int, payload: bytes, batch: bytes, seq: bytes, task: int = 0) -> Iterator[tuple]:
        """Kafka records for one output change: (topic, key, value, headers, partition).

        Without a message key the partition is chosen from the producing task: all output of a
        join key comes from one task, so it lands, in order, in one partition."""
        kind = RowKind(kind)
        row = pickle.loads(payload)
        key = self.keys.encode(tuple(row[i] for i in self.key_columns)) if self.keys else None
        headers = [(BATCH_HEADER, batch), (SEQ_HEADER, seq)]
        if self.upsert:
            if kind is RowKind.UPDATE_BEFORE:
                return
            if kind is RowKind.DELETE:
                yield (self.topic, key, None, headers, None)
                return
        else:
            headers.insert(0, (self.header, _KIND_BYTES[kind]))
        value = self.values.encode(row)
        if len(value) + (len(key) if key else 0) > self.max_bytes:
            detail = f"{kind.short} output record of {len(value)} bytes exceeds MAX_OUTPUT_RECORD_BYTES={self.max_bytes}"
            yield (self.dlq_topic, key, None, headers + _reason(TOO_LARGE, detail, self.topic, None, None))
            return
        yield (self.topic, key, value, headers, None if key is not None else task % self.partitions)

    def dead_letter(self, payload: bytes, batch: bytes, seq: bytes) -> tuple:
        """The dead-letter record: the original key, value and headers plus why and where from."""
        letter = pickle.loads(payload)
        if "row" in letter:  # a late probe row found by the join: no raw bytes kept, write the row
            value = None
            headers = [("row", repr(letter["row"]).encode()), ("rowkind", RowKind(letter["kind"]).short.encode())]
            key = None
            origin = (letter.get("topic"), letter.get("partition"), letter.get("offset"))
        else:
            key, value, headers = letter["key"], letter["value"], list(letter["headers"])
            origin = (letter["topic"], letter["partition"], letter["offset"])
        headers += _reason(letter["reason"], letter.get("detail", ""), *origin)
        headers += [(BATCH_HEADER, batch), (SEQ_HEADER, seq)]
        return (self.dlq_topic, key, value, headers)


def _reason(reason: str, detail: str, topic, partition, offset) -> list[tuple[str, bytes]]:
    headers = [("reason", reason.encode()), ("reason.detail", detail.encode()[:1000])]
    if topic is not None:
        headers.append(("source.topic", str(topic).encode()))
    if partition is not None:
        headers.append(("source.partition", str(partition).encode()))
    if offset is not None:
        headers.append(("source.offset", str(offset).encode()))
    return headers
