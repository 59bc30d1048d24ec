"""What the driver ships to Spark's Python workers, and the one way a worker builds from it.

The driver describes everything the steps of a record's path need on a worker in one JSON-able
dict (:func:`worker_config`): the plan and the settings of the steps, never the settings' secrets,
which travel apart (:func:`worker_secrets`) in places Spark does not show (a source option whose
name Spark redacts, a closure). A step's object (a decoder, an encoder, a sink, the join's plan
and operator) is built from that dict by the step's own ``from_config`` and kept for the life of
the worker process by :func:`built`, so it is built once per process and config, however many
tasks and micro-batches use it, and never pickled with a task.
"""
from __future__ import annotations

import gc
import json
import os
import threading
from typing import Callable, TypeVar

T = TypeVar("T")

_BUILT: dict = {}
_LOCK = threading.Lock()


def worker_config(settings, plan, output_partitions: int = 1) -> dict:
    """Everything the workers' steps need, secrets excepted (see :func:`worker_secrets`)."""
    return {
        "plan": plan.to_json(),
        "rowkind_header": settings.rowkind_header,
        "registry_url": settings.schema_registry_url,
        "output_topic": settings.output_topic,
        "dlq_topic": settings.dead_letter_topic,
        "output_mode": settings.output_mode,
        "max_record_bytes": settings.max_output_record_bytes,
        "message_max_bytes": settings.producer_message_max_bytes,
        "output_partitions": output_partitions,
    }


def worker_secrets(settings, kafka: bool = True) -> dict:
    """What workers need that may hold secrets: the registry's credentials, with ``kafka`` the
    producer's properties (``KAFKA_CLIENT_*`` may hold SASL credentials), and a lookup join's
    database password (RIGHT_LOOKUP_PASSWORD, or the one RIGHT_LOOKUP_URL carries)."""
    secrets = {}
    if settings.schema_registry_basic_auth_user_info:
        secrets["registry_auth"] = settings.schema_registry_basic_auth_user_info
    if kafka:
        secrets["kafka"] = settings.kafka_properties()
    if settings.lookup:
        from .secrets import url_password

        # the plan's URL has none
        password = settings.right_lookup_password or url_password(settings.right_lookup_url)
        if password:
            secrets["lookup_password"] = password
    return secrets


def built(build: Callable[[dict], T], config: dict) -> T:
    """``build(config)``, once per worker process and distinct config."""
    key = (build.__module__, build.__qualname__, json.dumps(config, sort_keys=True))
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


def registry(config: dict):
    """The Schema Registry client of a worker config, or None without a registry."""
    if not config.get("registry_url"):
        return None
    from .avro import SchemaRegistry

    return SchemaRegistry(config["registry_url"], config.get("registry_auth"))
