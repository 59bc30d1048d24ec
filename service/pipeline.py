"""The Spark Structured Streaming query: source -> decode -> key -> join -> encode -> sink.

Both topics are read by the Python Kafka source (``source.py``), which decodes each record in the
reading task (``decode.py``); the two envelope streams are unioned, grouped by join key and run
through :class:`~service.processor.JoinProcessor` inside ``transformWithState`` on RocksDB state,
checkpointed at ``CHECKPOINT_LOCATION``. Each micro-batch's output is encoded (``encode.py``) and
produced to Kafka (``sink.py``) by the tasks that computed it, with ``DELIVERY=exactly-once`` in one
transaction per task (``transactions.py``); the driver only sees counts. A lookup join reads one
topic, looks its rows up in the reading tasks (``lookup.py``) and joins them in the same join stage.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable

from pyspark.accumulators import AccumulatorParam
from pyspark.sql import functions as F

from . import faults
from .checkpoint import Checkpoint
from .config import Settings
from .envelope import ENVELOPE_SCHEMA, OUTPUT_SCHEMA, Target
from .faults import CrashPoint
from .latency import AGE_MS, AGES, BatchAges, Latencies, wall_clock_ms
from .plan import JoinPlan, PlanKind
from .processor import JoinProcessor, NormalizeProcessor, UpsertProcessor
from .shipping import Delivery, WorkerConfig, built, worker_config, worker_secrets

log = logging.getLogger(__name__)

COUNTS_SCHEMA = "target string, label string, n long"
_TALLY = int(Target.TALLY)


@dataclass
class BatchCounts:
    """What one micro-batch wrote, reported by the producing tasks."""

    batch_id: int
    output: dict[str, int] = field(default_factory=dict)  # by RowKind short string
    dead_letters: dict[str, int] = field(default_factory=dict)  # by reason
    # DELIVERY=exactly-once: the task partitions that committed their transaction, and those that
    # found their share written already (a replay); the seconds of each init and transaction.
    committed: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    init_seconds: list[float] = field(default_factory=list)
    transaction_seconds: list[float] = field(default_factory=list)
    retries: int = 0  # task attempts after the first
    # A lookup join: what the reading tasks asked the database (lookup.lookup_partition's counts).
    lookup: dict = field(default_factory=dict)
    ignored: dict[str, int] = field(default_factory=dict)  # input records with no row change, by reason
    input: dict[str, int] = field(default_factory=dict)  # records the reading tasks read, by side
    # What the skipped shares hold, written by an earlier attempt or run: (target, label) -> n, as
    # output and dead_letters above. Not written again, so not counted again by the metrics.
    replayed: dict[tuple[str, str], int] = field(default_factory=dict)
    # The ages of the records read (latency.py), and their latencies once the output is committed.
    ages: BatchAges = field(default_factory=BatchAges)
    latency: Latencies | None = None

    def add(self, target: str, label: str, n: int) -> None:
        """One row a producing task reported (:func:`produce_partition`)."""
        if target in ("output", "dead_letter"):
            counts = self.output if target == "output" else self.dead_letters
            counts[label] = counts.get(label, 0) + n
        elif target.startswith(REPLAYED):
            key = (target[len(REPLAYED):], label)
            self.replayed[key] = self.replayed.get(key, 0) + n
            if key[0] == "input":  # written before, but read again by this run
                self.input[label] = self.input.get(label, 0) + n
            elif key[0] in (AGES, AGE_MS):  # read again by this run: its latency is this run's
                self.ages.add(key[0], label, n)
        elif target == "transaction":
            (self.committed if label == "committed" else self.skipped).append(n)
        elif target == "init_us":
            self.init_seconds.append(n / 1e6)
        elif target == "transaction_us":
            self.transaction_seconds.append(n / 1e6)
        elif target == "attempt":
            self.retries += 1
        elif target == "skipped":
            self.ignored[label] = self.ignored.get(label, 0) + n
        elif target == "input":
            self.input[label] = self.input.get(label, 0) + n
        elif target in (AGES, AGE_MS):
            self.ages.add(target, label, n)

    @property
    def replayed_records(self) -> int:
        """How many output records and dead letters the skipped shares had written before."""
        return sum(n for (target, _), n in self.replayed.items() if target in ("output", "dead_letter"))


#: The prefix of the targets a skipped share reports its counts under (``replayed:output``...).
REPLAYED = "replayed:"


def produce_partition(config: WorkerConfig, batch_id: int, batch: dict | None = None) -> Callable:
    """The ``mapInArrow`` function that encodes and produces one task's share of a micro-batch;
    ``config`` is the worker config with its secrets (``shipping.py``). With exactly-once delivery
    (``config.delivery``) the share is one transaction (``transactions.py``), and ``batch`` says
    what the driver knows of the micro-batch: ``input``, the digest of its offsets
    (``transactions.input_digest``), and ``replay``, whether it is the first of a run (which may run
    again one that an earlier run planned)."""

    def produce(batches):
        import pyarrow as pa
        from pyspark import TaskContext

        from .encode import encoder as encoder_of

        context = TaskContext.get()
        partition, attempt = context.partitionId(), context.attemptNumber()
        encoder = encoder_of(config)
        counts: dict[tuple[str, str], int] = {}
        report: list[tuple[str, str, int]] = [("attempt", str(partition), attempt)] if attempt else []

        def rows(arrows):
            for arrow in arrows:
                columns = arrow.to_pydict()
                yield from zip(columns["target"], columns["kind"], columns["payload"], columns["okey"])

        if config.delivery is not None:
            _produce_transaction(config.delivery, config.crash, batch_id, partition, attempt, batches, rows, encoder,
                                 counts, report, batch or {})
        else:
            from .sink import KafkaSink

            produce_all = built(KafkaSink.from_config, config).produce_all
            records = encoder.records(rows(batches), batch_id, partition, counts)
            if config.crash is None:
                produce_all(records)
            else:
                faults.produce_halfway(config.crash, batch_id, records, produce_all)
        report += [(t, l, n) for (t, l), n in counts.items()]
        yield pa.RecordBatch.from_pylist(
            [{"target": t, "label": l, "n": n} for t, l, n in report],
            schema=pa.schema([("target", pa.string()), ("label", pa.string()), ("n", pa.int64())]),
        )

    return produce


def _produce_transaction(delivery: Delivery, crash: CrashPoint | None, batch_id, partition, attempt, batches, rows,
                         encoder, counts, report, batch) -> None:
    """One task's share of a micro-batch in one transaction, or nothing if a previous attempt (or
    run) of this micro-batch committed it already. The share is taken whole from the join first, so
    that the join's state advances and no transaction is open while the join computes; a share that
    a replay computes otherwise than the first run wrote stops the service
    (``transactions.written_already``)."""
    from .transactions import ProgressReader, Share, TaskTransaction, written_already

    faults.crash(crash, "before-init", batch_id)
    transaction = TaskTransaction(delivery, partition, batch_id, attempt)
    share = Share()
    try:
        def counted(arrows):
            import pyarrow.compute as pc

            for arrow in arrows:
                if arrow.num_rows:
                    # a tally of records read (envelope.Target.TALLY) is no row of output
                    share.rows += arrow.num_rows - pc.sum(pc.equal(arrow.column("target"), _TALLY)).as_py()
                    yield arrow

        share.extend(encoder.records(rows(counted(batches)), batch_id, partition, counts))
        if not share.rows and not (batch.get("replay") or attempt):
            return  # no output: no transaction (close() waits for the init to end: transactions.py)
        marker = transaction.committed(built(ProgressReader, delivery))
        if written_already(marker, batch_id, partition, batch.get("input"), share, delivery):
            report.extend((REPLAYED + target, label, n) for (target, label), n in counts.items())
            counts.clear()
            report.append(("transaction", "skipped", partition))
        elif share.rows:
            # The marker keeps the counts but not the ages (latency.py): they describe no record written.
            marker_counts = {key: n for key, n in counts.items() if key[0] not in (AGES, AGE_MS)}
            transaction.write(share, marker_counts, batch.get("input"),
                              crash=(lambda point, batch: faults.crash(crash, point, batch)) if crash else None)
            faults.crash(crash, "after-commit", batch_id)
            report += [("transaction", "committed", partition),
                       ("transaction_us", str(partition), int(transaction.transaction_seconds * 1e6))]
        report.append(("init_us", str(partition), int(transaction.init_seconds * 1e6)))
    finally:
        share.close()
        transaction.close()


class _Counts(AccumulatorParam):
    """What a lookup join's reading tasks asked the database, by task partition: counts (numbers)
    and observations (lists) by name, ``{partition: {name: value}}``. Spark merges the updates of
    every successful run of a task, and a stage it runs again (a lost shuffle file) runs its tasks
    again: a partition's later report replaces the earlier one rather than adding to it
    (:func:`lookup_totals` sums the partitions)."""

    def zero(self, value):
        return {}

    def addInPlace(self, total, more):
        total.update(more)
        return total


def lookup_totals(by_partition: dict) -> dict:
    """The sum over task partitions of a micro-batch's lookup counts (:class:`_Counts`)."""
    total: dict = {}
    for counts in by_partition.values():
        for name, value in counts.items():
            total[name] = total.get(name, [] if isinstance(value, list) else 0) + value
    return total


class JoinPipeline:
    """Builds and starts the streaming query for one plan."""

    def __init__(self, settings: Settings, plan: JoinPlan, spark,
                 on_batch: Callable[[BatchCounts], None] | None = None, output_partitions: int = 1,
                 delivery: Delivery | None = None, stop_file: str | None = None,
                 checkpoint: Checkpoint | None = None, crash: CrashPoint | None = None):
        """``delivery``: with exactly-once output, what the producing tasks' transactions need
        (``transactions.py``: prefix, progress topic, checkpoint id, timeout). ``stop_file``: while
        it exists, the sources plan no new input (a graceful stop: ``app.Service.stop``).
        ``checkpoint``: the query's (``CHECKPOINT_LOCATION``'s, read with this session by default).
        ``crash``: the tests' crash point (``faults.py``)."""
        self.settings = settings
        self.crash = crash
        self.checkpoint = checkpoint or Checkpoint(settings.checkpoint_location, lambda: self.spark)
        self.stop_file = stop_file
        self.delivery = delivery
        self.output_partitions = output_partitions
        self.plan = plan
        self.spark = spark
        self.on_batch = on_batch
        self._first_batch = True
        self._offsets: tuple = (None, None)  # (batch id, its offset-log entry), read last
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
            .option("mapper.config", worker_config(s, self.plan).for_side(side).to_json())
        )
        secrets = worker_secrets(s, kafka=False).to_json()
        if secrets:
            # Not in mapper.config: Spark hides the values of options named like secrets only.
            reader = reader.option("mapper.secret", secrets)
        if s.max_records_per_trigger:
            reader = reader.option("maxRecordsPerTrigger", str(s.max_records_per_trigger))
        if self.stop_file:
            reader = reader.option("stopFile", self.stop_file)
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
        if self.plan.kind is PlanKind.LOOKUP:
            envelopes = self._looked_up()
        else:
            envelopes = self._read(0).unionByName(self._read(1))
        # The upsert materializer stage groups the join's changes by output key: the join emits them
        # one per row then; otherwise each key's changes travel packed to the sink (JoinProcessor).
        joined = envelopes.groupBy("jk").transformWithState(
            JoinProcessor(self.plan.to_json()), OUTPUT_SCHEMA, "Append", self.plan.time_mode.value
        )
        if self.plan.upsert_materializer:
            joined = joined.groupBy("okey").transformWithState(UpsertProcessor(self.plan.to_json()), OUTPUT_SCHEMA, "Append", "None")
        return joined

    def _looked_up(self):
        """A lookup join's input: one topic, each reading task's rows with what the table holds for
        them (``lookup.py``), grouped by the rows' identity (``jk``) for the join stage, whose state
        remembers what each row joined."""
        from .lookup import lookup_partition, prepare_pins

        config = worker_config(self.settings, self.plan, secrets=worker_secrets(self.settings, kafka=False))
        self._lookups = self.spark.sparkContext.accumulator({}, _Counts())
        token = None if self._pins is None else prepare_pins(self._pins, self.checkpoint.location)
        return self._read(0).mapInArrow(lookup_partition(config, self._pins, self._lookups, token), ENVELOPE_SCHEMA)

    @property
    def _pins(self) -> str | None:
        """Where a lookup join's reading tasks pin what they looked up (``lookup.py``)."""
        return self.checkpoint.pins

    def _lookup_batch(self, counts: BatchCounts) -> None:
        """The micro-batch's lookup counts; the pins of the micro-batches before it go (committed)."""
        from .lookup import clean_pins

        counts.lookup = lookup_totals(self._lookups.value)
        self._lookups.value = {}
        if self._pins is not None:
            clean_pins(self._pins, below=counts.batch_id)

    def _write_batch(self, batch_df, batch_id: int) -> None:
        counts = BatchCounts(batch_id)
        batch = self._delivery_batch(batch_id) if self.delivery else None
        rows = (batch_df.select("target", "kind", "payload", "okey")
                .mapInArrow(produce_partition(self._sink_config, batch_id, batch), COUNTS_SCHEMA).collect())
        # Every task has committed its share (or had every record acknowledged): the records
        # of the micro-batch have their output, and their end-to-end latency (latency.py).
        committed_ms = wall_clock_ms()
        for row in rows:
            counts.add(row.target, row.label, row.n)
        counts.latency = counts.ages.latencies(committed_ms)
        if self.plan.kind is PlanKind.LOOKUP:
            self._lookup_batch(counts)
        faults.crash(self._sink_config.crash, "before-batch-commit", batch_id)
        log.debug("batch %d written: output %s, dead letters %s", batch_id, counts.output, counts.dead_letters)
        if self.on_batch:
            self.on_batch(counts)

    def _delivery_batch(self, batch_id: int) -> dict:
        """Exactly-once: what the producing tasks must know of micro-batch ``batch_id`` (the digest of
        its offsets; whether it is the first of this run). The first micro-batch of a run may be one
        an earlier run planned and wrote in part: before it writes anything, every task partition's
        newest marker is checked against it (``transactions.check_progress``)."""
        from .transactions import check_progress, input_digest

        store = self.checkpoint
        previous = self._offsets[1] if self._offsets[0] == batch_id - 1 else store.batch_offsets(batch_id - 1)
        self._offsets = (batch_id, store.batch_offsets(batch_id))  # the next micro-batch's start
        digest = input_digest(previous, self._offsets[1])
        replay = self._first_batch
        if replay:
            check_progress(self.delivery, batch_id, digest, self.delivery.partitions)
            self._first_batch = False
        return {"input": digest, "replay": replay}

    def start(self):
        self._sink_config = worker_config(self.settings, self.plan, self.output_partitions,
                                          secrets=worker_secrets(self.settings), delivery=self.delivery,
                                          crash=self.crash)
        writer = (
            self.dataframe().writeStream.queryName("changejoin")
            .foreachBatch(self._write_batch)
            .option("checkpointLocation", self.checkpoint.location)
        )
        if self.settings.trigger_interval_ms:
            writer = writer.trigger(processingTime=f"{self.settings.trigger_interval_ms} milliseconds")
        return writer.start()
