"""What the driver ships to Spark's Python workers, and the one way a worker builds from it.

The driver describes everything the steps of a record's path need on a worker in one frozen
:class:`WorkerConfig` (:func:`worker_config`): the plan and the settings of the steps, with the
settings' secrets in a part of their own (:class:`Secrets`, :func:`worker_secrets`) that travels
apart where Spark could show it (the source's options: ``mapper.config`` holds the config without
them, ``mapper.secret`` them, an option whose name Spark redacts) and is never in a ``repr``. The
sink's tasks get it whole in a closure, with exactly-once delivery's part (:class:`Delivery`,
``transactions.py``) and the tests' crash point (``faults.py``). A reader asks for attributes, so a
misspelt name fails where it is read instead of reading None; every part is immutable, hashable and
pickles (cloudpickle ships it by value in the tasks' closures, the source as JSON).

A step's object (a decoder, an encoder, a sink, the join's plan and operator) is built from that
config by the step's own ``from_config`` and kept for the life of the worker process by
:func:`built`, so it is built once per process and config, however many tasks and micro-batches use
it, and never pickled with a task.
"""
from __future__ import annotations

import dataclasses
import gc
import json
import os
import threading
from dataclasses import dataclass, field
from typing import Callable, Hashable, Optional, TypeVar

from .faults import CrashPoint

T = TypeVar("T")

#: Client properties as an immutable value: (name, value) pairs; ``dict(...)`` makes them a dict.
Properties = tuple[tuple[str, str], ...]

_BUILT: dict = {}
_LOCK = threading.Lock()


@dataclass(frozen=True, repr=False)
class Secrets:
    """What workers need that may hold secrets: the registry's credentials, the producer's Kafka
    properties (``KAFKA_CLIENT_*`` may hold SASL credentials; () where the workers produce nothing),
    and a lookup join's database password. Its ``repr`` names which are set, never their values."""

    registry_auth: Optional[str] = None
    kafka: Properties = ()
    lookup_password: Optional[str] = None

    def to_json(self) -> Optional[str]:
        """The set secrets as the source's ``mapper.secret`` option carries them (None: none set)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name)}
        return json.dumps(values) if values else None

    def __repr__(self) -> str:
        held = [f.name for f in dataclasses.fields(self) if getattr(self, f.name)]
        return f"Secrets({', '.join(held) or 'none'}: hidden)"


@dataclass(frozen=True)
class Delivery:
    """What the producing tasks' transactions need with ``DELIVERY=exactly-once``
    (``transactions.py``): the transactional id prefix and the transaction timeout, the progress
    topic, the checkpoint's id for the markers' keys (None where no marker is read or written: the
    start-up abort) and its ``origin`` there (the topic's end offsets by partition when the
    checkpoint began writing markers to it; None: unknown), its task partitions, the Kafka client
    properties of the transactional producers (a secret: not in the ``repr``), and, for the one
    lines that stop the service, the checkpoint's location and the output topic."""

    prefix: str
    progress_topic: str
    timeout_ms: int
    location: str
    output_topic: str
    kafka: Properties = field(default=(), repr=False)
    checkpoint_id: Optional[str] = None
    origin: Optional[tuple[Optional[int], ...]] = None
    partitions: Optional[int] = None


@dataclass(frozen=True)
class WorkerConfig:
    """Everything the workers' steps need (see the module docstring). ``plan`` is the join's plan
    as JSON (``JoinPlan.to_json``: each step builds its own from it, once per worker process);
    ``side`` is set for an input's reading tasks (``decode.py``) only."""

    plan: str
    rowkind_header: str
    registry_url: Optional[str]
    output_topic: str
    dlq_topic: str
    output_mode: str
    max_record_bytes: int
    message_max_bytes: int
    output_partitions: int = 1
    side: Optional[int] = None
    secrets: Secrets = Secrets()
    delivery: Optional[Delivery] = None
    crash: Optional[CrashPoint] = None

    #: What the source's ``mapper.config`` option does not carry: the secrets travel in
    #: ``mapper.secret``, and a reading task neither produces (delivery) nor crashes on purpose.
    _NOT_IN_JSON = ("secrets", "delivery", "crash")

    def to_json(self) -> str:
        """The config as the source's ``mapper.config`` option carries it (see :meth:`from_json_dict`)."""
        if self.delivery is not None or self.crash is not None:
            raise ValueError("a worker config with a delivery or a crash point travels in a closure, not as JSON")
        return json.dumps({f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                           if f.name not in self._NOT_IN_JSON})

    @classmethod
    def from_json_dict(cls, config: dict) -> "WorkerConfig":
        """The config the source's mapper receives: :meth:`to_json`'s, with :meth:`Secrets.to_json`'s
        merged into it (``source.load_mapper``). An unknown name raises TypeError."""
        secret = {f.name for f in dataclasses.fields(Secrets)}
        values = {name: value for name, value in config.items() if name in secret}
        if "kafka" in values:
            values["kafka"] = tuple((name, value) for name, value in values["kafka"])
        return cls(**{name: value for name, value in config.items() if name not in secret},
                   secrets=Secrets(**values))

    def for_side(self, side: int) -> "WorkerConfig":
        """The config of an input's reading tasks."""
        return dataclasses.replace(self, side=side)


def worker_config(settings, plan, output_partitions: int = 1, *, secrets: Optional[Secrets] = None,
                  delivery: Optional[Delivery] = None, crash: Optional[CrashPoint] = None) -> WorkerConfig:
    """Everything the workers' steps need; the secrets only when given (see :func:`worker_secrets`)."""
    return WorkerConfig(
        plan=plan.to_json(),
        rowkind_header=settings.rowkind_header,
        registry_url=settings.schema_registry_url,
        output_topic=settings.output_topic,
        dlq_topic=settings.dead_letter_topic,
        output_mode=settings.output_mode,
        max_record_bytes=settings.max_output_record_bytes,
        message_max_bytes=settings.producer_message_max_bytes,
        output_partitions=output_partitions,
        secrets=secrets or Secrets(),
        delivery=delivery,
        crash=crash,
    )


def worker_secrets(settings, kafka: bool = True) -> Secrets:
    """What workers need that may hold secrets: the registry's credentials, with ``kafka`` the
    producer's properties (``KAFKA_CLIENT_*`` may hold SASL credentials), and a lookup join's
    database password (RIGHT_LOOKUP_PASSWORD, or the one RIGHT_LOOKUP_URL carries)."""
    password = None
    if settings.lookup:
        from .secrets import url_password

        # the plan's URL has none
        password = settings.right_lookup_password or url_password(settings.right_lookup_url)
    return Secrets(registry_auth=settings.schema_registry_basic_auth_user_info or None,
                   kafka=tuple(settings.kafka_properties().items()) if kafka else (),
                   lookup_password=password or None)


def built(build: Callable[[Hashable], T], config: Hashable) -> T:
    """``build(config)``, once per worker process and distinct config (a :class:`WorkerConfig`,
    a part of one, or the plan's JSON)."""
    key = (build.__module__, build.__qualname__, config)
    value = _BUILT.get(key)
    if value is None:
        with _LOCK:
            value = _BUILT.get(key)
            if value is None:
                value = _BUILT[key] = build(config)
                settle()
    return value


def settle() -> None:
    """In a Spark Python worker, after it built something to keep: a full collection, then every
    object alive (the modules imported, what was built) moved out of the garbage collector's
    generations, so that its later collections walk only what tasks allocate. A worker holding a
    large heap in the collector's oldest generation pays for walking it at every full collection
    (the bulk benchmark: 5% of the workers' CPU, RESULTS.md). The driver's objects are left alone."""
    if os.environ.get("SPARK_PYTHON_RUNTIME") != "PYTHON_WORKER":
        return
    gc.collect()
    gc.freeze()


def registry(config: WorkerConfig):
    """The Schema Registry client of a worker config, or None without a registry."""
    if not config.registry_url:
        return None
    from .avro import SchemaRegistry

    return SchemaRegistry(config.registry_url, config.secrets.registry_auth)
