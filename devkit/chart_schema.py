"""The Helm chart's schema of the service's settings, generated from ``service.config.Settings``.

``helm/changejoin/values.schema.json`` validates every value of the chart; its ``config`` object
holds one key per variable of the service (``config.leftTopic`` -> ``LEFT_TOPIC``, the chart's
``changejoin.env`` turns a key into its variable). Those keys' types, bounds and accepted values
are the service's own, so they are written from ``Settings`` rather than by hand:

- a ``Literal`` field is an ``enum`` of its values, after ``""`` (unset: the service's default);
- an ``int`` field is an integer (``null``: unset) with the field's ``ge``/``gt``/``le``/``lt``;
- a duration (a field ``..._ms`` whose variable does not end in ``_MS``) is a string with a unit;
- a ``bool`` is a boolean (``null``: unset), anything else a string;
- :data:`CHART_ONLY` adds what the chart asks beyond the service, each with its reason.

The rest of the schema (the chart's own values, ``config``'s ``required`` and ``allOf``) stays
written by hand in the file; only ``properties.config.properties`` is rewritten.

    python -m devkit.chart_schema           # rewrite the file
    python -m devkit.chart_schema --check   # exit 1 if the file is stale (tests/deploy/test_chart_schema.py)

A variable without a chart key is set by the chart from another value (:data:`SET_ELSEWHERE`).
"""
from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from pathlib import Path

import annotated_types

SCHEMA = Path(__file__).resolve().parents[1] / "helm" / "changejoin" / "values.schema.json"

#: Variables the chart sets from its other values, never from a ``config`` key: where from.
SET_ELSEWHERE = {
    "CHECKPOINT_LOCATION": "checkpoint.uri, else checkpoint.mountPath (the volume the chart mounts)",
    "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "schemaRegistry.basicAuth (a Secret: never in a ConfigMap)",
    "RIGHT_LOOKUP_PASSWORD": "lookup.password (a Secret: never in a ConfigMap)",
}

DURATION_PATTERN = r"^(|0|[0-9]+(\.[0-9]+)?(ms|s|sec|m|min|h|d))$"
DURATION_NOTE = "A duration with its unit: 500ms, 10s, 5m, 1h, 7d (a number alone only for 0)."

def _transaction_timeout_floor() -> int:
    """The least KAFKA_TRANSACTION_TIMEOUT_MS the service takes (its model's check, not a bound of
    the field): twice the margin it keeps below the timeout for the producer's messages."""
    from service.sink import MESSAGE_TIMEOUT_MARGIN_MS

    return 2 * MESSAGE_TIMEOUT_MARGIN_MS


#: What the chart's schema says of a key beyond the service's field: a note for its description,
#: and the chart's own constraints (each with why the chart asks more than the service).
CHART_ONLY: dict[str, dict] = {
    "kafkaBootstrapServers": {"note": "(required)"},
    "leftTopic": {"note": "(required)"},
    "rightTopic": {"note": "(required unless rightLookupUrl; refused with it)"},
    "outputTopic": {"note": "(required)"},
    "joinSql": {"note": "(required)"},
    # a URL the pod reaches over HTTP(S)
    "schemaRegistryUrl": {"pattern": "^(|https?://.+)$"},
    # the chart mounts schema files at an absolute path (schemas.mountPath)
    "leftSchemaFile": {"note": "(absolute path)", "pattern": "^(|/.*)$"},
    "rightSchemaFile": {"note": "(absolute path)", "pattern": "^(|/.*)$"},
    "sparkMaster": {"note": "(local mode only)"},
    "sparkUiEnabled": {"note": ": serve Spark's web UI (null: the service default, off)"},
    "delivery": {"note": ": at-least-once, or exactly-once for read_committed consumers (Kafka transactions)"},
    # the characters of a Kafka transactional id (the service checks the same with its own message)
    "kafkaTransactionalIdPrefix": {"note": "(exactly-once)", "pattern": "^[A-Za-z0-9._-]*$"},
    # the service's own check (Settings): twice the margin kept below it for the producer's message timeout
    "kafkaTransactionTimeoutMs": {"note": "(exactly-once)", "minimum": _transaction_timeout_floor},
    "progressTopic": {"note": "(exactly-once)"},
    # a password goes to lookup.password (a Secret), never into the ConfigMap with the URL
    "rightLookupUrl": {"note": ": a lookup join's PostgreSQL database, postgresql://user@host:5432/database "
                               "(no password in it: lookup.password)",
                       "pattern": "^(|postgres(ql)?://([^/?#@]*@)?[^/?#@]+/[^/?#].*)$"},
    "rightLookupTable": {"note": ": the table in the database (lookup join); empty: rightTable"},
    "lookupBatchSize": {"note": ": distinct keys per query (lookup join)"},
    "lookupQueryTimeout": {"note": "(lookup join)"},
    "lookupMaxRetries": {"note": "(lookup join)"},
    "lookupRetryBackoff": {"note": "(lookup join)"},
    "lookupCache": {"note": ": none or partial (lookup join)"},
    "lookupCacheMaxRows": {"note": "(lookupCache partial)"},
    "lookupCacheExpireAfterWrite": {"note": "(lookupCache partial)"},
    "lookupCacheExpireAfterAccess": {"note": "(lookupCache partial)"},
    "lookupCacheMissingKey": {"note": "(lookupCache partial)"},
    # the pod runs as a non-root user, who cannot bind a port below 1024
    "metricsPort": {"note": "; also the Service and probe port", "minimum": 1024, "required": True},
    "livenessTimeout": {"note": ": /healthz fails after this long without progress or idle report (0: never)"},
    "stateBuckets": {"note": ": the checkpoint's fixed number of state buckets (0: none); rescale.partitions "
                             "stays at most this"},
}


def chart_key(variable: str) -> str:
    """``LEFT_TOPIC`` -> ``leftTopic``: the inverse of the chart's ``snakecase | upper``."""
    first, *rest = variable.lower().split("_")
    return first + "".join(word.capitalize() for word in rest)


def _bounds(metadata) -> dict:
    out = {}
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            out["minimum"] = m.ge
        elif isinstance(m, annotated_types.Gt):
            out["minimum"] = m.gt + 1  # integers
        elif isinstance(m, annotated_types.Le):
            out["maximum"] = m.le
        elif isinstance(m, annotated_types.Lt):
            out["maximum"] = m.lt - 1
        elif isinstance(m, annotated_types.MaxLen):
            out["maxLength"] = m.max_length
    return out


def _without_none(annotation):
    """``int | None`` -> ``int`` (unset is the chart's ``null`` or ``""`` for every key)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 else annotation
    return annotation


def property_of(name: str, field) -> dict:
    """The chart's schema of one ``Settings`` field, keyed by its variable ``field.alias``."""
    variable = field.alias
    key = chart_key(variable)
    extra = CHART_ONLY.get(key, {})
    annotation = _without_none(field.annotation)
    duration = name.endswith("_ms") and not variable.endswith("_MS")
    bounds = _bounds(field.metadata)
    description = variable
    if typing.get_origin(annotation) is typing.Literal:
        prop = {"type": "string", "enum": ["", *typing.get_args(annotation)]}
    elif duration:
        prop = {"type": "string", "pattern": DURATION_PATTERN}
    elif annotation is bool:
        prop = {"type": ["boolean", "null"]}
    elif annotation is int:
        prop = {"type": "integer" if extra.get("required") else ["integer", "null"]}
        prop.update({k: v for k, v in bounds.items() if k in ("minimum", "maximum")})
    else:
        prop = {"type": "string"}
        if "maxLength" in bounds:
            prop["maxLength"] = bounds["maxLength"]
    for constraint in ("minimum", "maximum", "pattern"):
        if constraint in extra:
            prop[constraint] = extra[constraint]() if callable(extra[constraint]) else extra[constraint]
    note = extra.get("note", "")
    description += (note if note.startswith((":", ";")) else f" {note}") if note else ""
    description += "." + (f" {DURATION_NOTE}" if duration else "")
    return {"type": prop.pop("type"), "description": description, **prop}


def config_properties(settings=None) -> dict[str, dict]:
    """Every ``config`` key of the chart, in the order of ``Settings``' fields."""
    if settings is None:
        from service.config import Settings as settings
    return {chart_key(field.alias): property_of(name, field) for name, field in settings.model_fields.items()
            if field.alias and field.alias not in SET_ELSEWHERE}


def render(text: str, settings=None) -> str:
    """The schema file ``text`` with its ``config`` keys written from ``Settings``."""
    schema = json.loads(text)
    schema["properties"]["config"]["properties"] = config_properties(settings)
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devkit.chart_schema", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the file is stale (exit 1)")
    args = parser.parse_args(argv)
    text = SCHEMA.read_text()
    generated = render(text)
    if args.check:
        if generated != text:
            print(f"{SCHEMA}: stale: run python -m devkit.chart_schema", file=sys.stderr)
            return 1
        return 0
    if generated != text:
        SCHEMA.write_text(generated)
        print(f"{SCHEMA}: rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())

