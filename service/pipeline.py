"""The Spark Structured Streaming query: source -> decode -> key -> join -> encode -> sink.

Both topics are read by the Python Kafka source (``source.py``), which decodes each record in the
reading task (``decode.py``); the two envelope streams are unioned, grouped by join key and run
through :class:`~service.processor.JoinProcessor` inside ``transformWithState`` on RocksDB state,
checkpointed at ``CHECKPOINT_LOCATION``. Each micro-batch's output is encoded (``encode.py``) and
produced to Kafka (``sink.py``) by the tasks that computed it; the driver only sees counts.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Callable

from pyspark.sql import functions as F

from .config import Settings
from .envelope import ENVELOPE_SCHEMA, OUTPUT_SCHEMA
from .plan import JoinPlan
from .processor import JoinProcessor, NormalizeProcessor, UpsertProcessor
from .shipping import built, worker_config, worker_secrets

log = logging.getLogger(__name__)

COUNTS_SCHEMA = "target string, label string, n long"


@dataclass
class BatchCounts:
    """What one micro-batch wrote, reported by the producing tasks."""

    batch_id: int
    output: dict[str, int] = field(default_factory=dict)  # by RowKind short string
    dead_letters: dict[str, int] = field(default_factory=dict)  # by reason


def produce_partition(config: dict, batch_id: int) -> Callable:
    """The ``mapInArrow`` function that encodes and produces one task's share of a micro-batch;
    ``config`` is the worker config with its secrets (``shipping.py``)."""

    def produce(batches):
        import pyarrow as pa
        from pyspark import TaskContext

        from .encode import encoder as encoder_of
        from .sink import KafkaSink

        encoder, sink = encoder_of(config), built(KafkaSink.from_config, config)
        counts: dict[tuple[str, str], int] = {}

        def rows():
            for arrow in batches:
                columns = arrow.to_pydict()
                yield from zip(columns["target"], columns["kind"], columns["payload"])

        sink.produce_all(encoder.records(rows(), batch_id, TaskContext.get().partitionId(), counts))
        yield pa.RecordBatch.from_pylist(
            [{"target": t, "label": l, "n": n} for (t, l), n in counts.items()],
            schema=pa.schema([("target", pa.string()), ("label", pa.string()), ("n", pa.int64())]),
        )

    return produce


class JoinPipeline:
    """Builds and starts the streaming query for one plan."""

    def __init__(self, settings: Settings, plan: JoinPlan, spark,
                 on_batch: Callable[[BatchCounts], None] | None = None, output_partitions: int = 1):
        self.settings = settings
        self.output_partitions = output_partitions
        self.plan = plan
        self.spark = spark
        self.on_batch = on_batch
        from .source import register

        register(spark)

    def _read(self, side: int):
        s, sp = self.settings, self.plan.sides[side]
        reader = (
            self.spark.readStream.format("changejoin_kafka")
            .option("bootstrap.servers", s.kafka_bootstrap_servers)
            .option("topic", sp.topic)
            .option("startingOffsets", s.starting_offsets)
            .option("failOnDataLoss", str(s.fail_on_data_loss).lower())
            .option("mapper", "service.decode:mapper")
            .option("mapper.config", json.dumps({**worker_config(s, self.plan), "side": side}))
        )
        secrets = worker_secrets(s, kafka=False)
        if secrets:
            # Not in mapper.config: Spark hides the values of options named like secrets only.
            reader = reader.option("mapper.secret", json.dumps(secrets))
        if s.max_records_per_trigger:
            reader = reader.option("maxRecordsPerTrigger", str(s.max_records_per_trigger))
        if self.plan.is_event_time and s.idle_timeout_ms:
            # An idle input sends heartbeats (decode.py) so that it stops holding the watermark back.
            reader = reader.option("idleTimeoutMs", str(s.idle_timeout_ms))
        for key, value in s.consumer_properties().items():
            reader = reader.option(f"kafka.{key}", value)
        df = reader.load()
        if sp.normalized:
            df = df.groupBy("jk").transformWithState(
                NormalizeProcessor(self.plan.to_json(), side), ENVELOPE_SCHEMA, "Append", "None"
            )
        if self.plan.is_event_time:
            df = df.withWatermark("event_time", f"{sp.watermark_delay_ms} milliseconds")
            # Re-derive the column: Spark keeps tracking the watermark, but no longer silently drops
            # rows behind it before the join; the join decides what is late and dead-letters it.
            df = df.withColumn("event_time", F.col("event_time").cast("long").cast("timestamp"))
        return df

    def dataframe(self):
        left, right = self._read(0), self._read(1)
        envelopes = left.unionByName(right)
        # The upsert materializer stage groups the join's changes by output key: the join emits them
        # one per row then; otherwise each key's changes travel packed to the sink (JoinProcessor).
        joined = envelopes.groupBy("jk").transformWithState(
            JoinProcessor(self.plan.to_json()), OUTPUT_SCHEMA, "Append", self.plan.time_mode.value
        )
        if self.plan.upsert_materializer:
            joined = joined.groupBy("okey").transformWithState(UpsertProcessor(self.plan.to_json()), OUTPUT_SCHEMA, "Append", "None")
        return joined

    def _write_batch(self, batch_df, batch_id: int) -> None:
        counts = BatchCounts(batch_id)
        rows = (batch_df.select("target", "kind", "payload")
                .mapInArrow(produce_partition(self._sink_config, batch_id), COUNTS_SCHEMA).collect())
        for row in rows:
            target = counts.output if row.target == "output" else counts.dead_letters
            target[row.label] = target.get(row.label, 0) + row.n
        log.debug("batch %d written: output %s, dead letters %s", batch_id, counts.output, counts.dead_letters)
        if self.on_batch:
            self.on_batch(counts)

    def start(self):
        self._sink_config = {**worker_config(self.settings, self.plan, self.output_partitions),
                             **worker_secrets(self.settings)}
        writer = (
            self.dataframe().writeStream.queryName("changejoin")
            .foreachBatch(self._write_batch)
            .option("checkpointLocation", self.settings.checkpoint_location)
        )
        if self.settings.trigger_interval_ms:
            writer = writer.trigger(processingTime=f"{self.settings.trigger_interval_ms} milliseconds")
        return writer.start()
