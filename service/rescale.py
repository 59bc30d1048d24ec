"""``changejoin rescale --partitions N``: change an existing checkpoint's task count.

A checkpoint's task count (Spark's shuffle partitions, ``SHUFFLE_PARTITIONS``) is fixed at its first
micro-batch: every stateful stage keeps its state in that many partitions. Spark (4.2 on) rewrites
a stopped query's state into another count offline
(``StreamingCheckpointManager.repartition``): every operator's value, map and list state, TTL and
timers, moved by Spark's own hash of each grouping key, and a micro-batch that reads nothing
recorded with the new count. The service's state is in buckets whose grouping keys Spark places on
task ``b mod P`` (``envelope.bucket_group``), so the new count spreads the buckets as evenly as
the old one did; it can be at most the bucket count.

Around Spark's rewrite this does what the service's own files and exactly-once delivery need:
refuses while a service runs on the checkpoint (its lock) or when its last micro-batch was not
committed (a replay must read what its first attempt read, under the count it was planned with);
aborts what the old transactional ids left open; grows the progress topic to a partition per task;
records the count in ``changejoin-state.json``; and removes the pinned lookups, which only a replay
of an uncommitted micro-batch reads.
"""
from __future__ import annotations

import logging
import os
import shutil
import time

from . import checkpoint
from .config import Settings
from .plan import PlanError

log = logging.getLogger(__name__)


class RescaleError(PlanError):
    """The checkpoint cannot be rescaled as asked; the message says why and what to do."""


def rescale(settings: Settings, plan, partitions: int, spark_session=None) -> str:
    """Rescale the checkpoint ``settings`` names to ``partitions`` tasks; returns what was done, one
    line. ``plan``: the join's plan as the planner builds it; ``spark_session``: a callable giving
    the Spark session (by default one started with the service's properties, when first needed)."""
    location = settings.checkpoint_location
    session = spark_session or _lazily(lambda: _spark(settings))
    store = checkpoint.Checkpoint(location, session)
    stored = store.read()
    committed = store.newest_committed()
    if stored is None or committed is None:
        raise RescaleError(f"CHECKPOINT_LOCATION={location} holds no committed micro-batch: a new checkpoint takes "
                           f"SHUFFLE_PARTITIONS={partitions} at its first micro-batch, nothing to rescale")
    buckets = stored["facts"].get("state_buckets", 0)
    if buckets and partitions > buckets:
        raise RescaleError(f"--partitions {partitions}: the checkpoint keeps its state in {buckets} buckets "
                           f"(STATE_BUCKETS), at most one task each: at most --partitions {buckets}")
    lock = store.lock("changejoin rescale")
    try:
        was = store.batch_partitions(committed)
        planned = store.pending_batch()
        if planned is not None:
            # Spark's repartition plans its own micro-batch (offsets, then state, then commit): one
            # stopped half way is finished by the same count, and refused by another.
            interrupted = store.batch_partitions(planned)
            if interrupted == was:
                raise RescaleError(
                    f"CHECKPOINT_LOCATION={location}: micro-batch {planned} was started and not committed (the service "
                    f"stopped in it): run `changejoin run` until it logs 'batch {planned} committed', stop it with "
                    "SIGTERM (it stops after the micro-batch in flight), then rescale")
            if interrupted != partitions:
                raise RescaleError(
                    f"CHECKPOINT_LOCATION={location}: a rescale to {interrupted} task partitions was interrupted: finish "
                    f"it first with `changejoin rescale --partitions {interrupted}`, then rescale to {partitions}")
        elif was == partitions:
            return f"CHECKPOINT_LOCATION={location} has {partitions} task partitions already: nothing to do"
        started = time.monotonic()
        if settings.exactly_once:
            _prepare_delivery(settings, store, was or settings.shuffle_partitions, partitions)
        session()._jsparkSession.streamingCheckpointManager().repartition(location, partitions, True)
        checkpoint.record_task_partitions(store, partitions)
        _remove_pins(store)
        return (f"CHECKPOINT_LOCATION={location}: {was} -> {partitions} task partitions"
                f"{' (an interrupted rescale finished)' if planned is not None else ''}, state rewritten by Spark "
                f"in {time.monotonic() - started:.1f} s; start the service with SHUFFLE_PARTITIONS unset or "
                f"{partitions}")
    finally:
        lock.release()


def _lazily(make):
    """``make``, called once, when first asked for."""
    made = []

    def get():
        if not made:
            made.append(make())
        return made[0]

    return get


def _spark(settings: Settings):
    from .session import spark_session

    return spark_session(settings)


def _prepare_delivery(settings: Settings, store, was: int, partitions: int) -> None:
    """Exactly-once: what every transactional id the checkpoint has used left open is aborted,
    ``<prefix>-0..N-1`` are recorded as the ids in use, and the checkpoint's progress topic has a
    partition per new task (``transactions.py``)."""
    from confluent_kafka.admin import AdminClient, NewPartitions

    from .logs import kafka_logger
    from .sink import admin_props, topic_partitions
    from .transactions import abort_transactional_ids, delivery_config, progress_topic, transactional_id

    prefix = settings.transactional_id_prefix
    current = [transactional_id(prefix, p) for p in range(was)]
    abort_transactional_ids(delivery_config(settings, store.identity()),
                            sorted(set(current) | set(checkpoint.used_transactional_ids(store))), required=current)
    kafka = settings.kafka_properties()
    bootstrap = kafka.pop("bootstrap.servers")
    topic = progress_topic(settings, store)
    have = topic_partitions(bootstrap, kafka, topic) or 0
    if have < partitions:
        try:
            admin = AdminClient({"bootstrap.servers": bootstrap, **admin_props(kafka), "logger": kafka_logger(kafka)})
            admin.create_partitions([NewPartitions(topic, partitions)])[topic].result(timeout=60)
        except Exception as err:  # noqa: BLE001 - e.g. no ALTER on the topic: say what to run instead
            raise RescaleError(
                f"PROGRESS_TOPIC={topic!r} has {have} partitions and {partitions} task partitions need one each; "
                f"adding them failed ({err}): run `kafka-topics.sh --bootstrap-server {bootstrap} --alter --topic "
                f"{topic} --partitions {partitions}`, then rescale again") from err
        log.info("PROGRESS_TOPIC=%s: %d -> %d partitions", topic, have, partitions)
    checkpoint.record_transactional_ids(store, prefix, partitions)


def _remove_pins(store: checkpoint.Checkpoint) -> None:
    """Pinned lookups (``lookup.py``) are read only by the replay of an uncommitted micro-batch, and
    the last one was committed."""
    if store.pins is not None and os.path.isdir(store.pins):
        shutil.rmtree(store.pins)
