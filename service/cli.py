"""``changejoin`` (and ``python -m service``): run | demo | check-config | schema | abort-transactions."""
from __future__ import annotations

import argparse
import json
import logging
import sys

from .config import ConfigError, load_settings, redact, unused_settings

log = logging.getLogger("service.cli")


def _configure_logging(level: str = "INFO", fmt: str = "text", secrets=()) -> None:
    """Logging to stderr; every line goes through :class:`logs.RedactingFormatter`, which hides URL
    user info and the given secret values wherever they appear."""
    from .logs import formatter

    handler = logging.StreamHandler()
    handler.setFormatter(formatter(fmt, secrets))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)


def _settings_and_plan():
    from .planner import build_plan

    settings = load_settings()
    return settings, build_plan(settings)


def cmd_run(args) -> int:
    settings = load_settings()
    _configure_logging(settings.log_level, settings.log_format, settings.secret_values())
    from .app import Service, log_fatal
    from .plan import PlanError
    from .planner import build_plan

    try:
        plan = build_plan(settings)
    except PlanError:
        raise  # a configuration error: main() names the variable and exits with 2
    except Exception as err:  # noqa: BLE001 - e.g. the registry cannot be reached: one clear line
        log_fatal(err)
        return 1
    for warning in unused_settings(settings, plan):
        log.warning("%s", warning)
    try:
        return Service(settings, plan).run_forever()
    except Exception as err:  # noqa: BLE001 - run_forever logs its own failures; anything else, one clear line
        log_fatal(err)
        return 1


def cmd_check_config(args) -> int:
    settings, plan = _settings_and_plan()
    print("configuration:")
    for name, value in sorted(settings.redacted().items()):
        print(f"  {name}={value}")
    from .session import spark_properties

    print("spark properties:")  # the service's own and SPARK_CONF_'s, as Spark gets them
    for key, value in sorted(spark_properties(settings).items()):
        print(f"  {key}={redact(key, value)}")
    print("plan:")
    from .planner import explain

    for line in explain(plan).splitlines():
        print(f"  {line}")
    from . import checkpoint

    print("checkpoint:")
    print(f"  {checkpoint.describe(plan, settings.checkpoint_location, settings.state_buckets is not None)}")
    print("delivery:")
    for line in _delivery(settings):
        print(f"  {line}")
    print("build:")
    print(f"  {build_description()}")
    print("output schema:")
    print(json.dumps(plan.output_schema, indent=2))
    warnings = unused_settings(settings, plan)
    if warnings:
        print("warnings:")
        for warning in warnings:
            print(f"  {warning}")
            print(f"changejoin: warning: {warning}", file=sys.stderr)
    return 0


def _task_partitions(settings) -> int:
    from . import checkpoint

    return checkpoint.CheckpointFile(settings.checkpoint_location).task_partitions(settings.shuffle_partitions)


def _delivery(settings) -> list[str]:
    if not settings.exactly_once:
        return ["at-least-once: a micro-batch replayed after a crash is written again, with the same "
                "changejoin.batch and changejoin.seq headers"]
    from . import checkpoint
    from .transactions import progress_topic

    n = _task_partitions(settings)
    topic = progress_topic(settings, checkpoint.CheckpointFile(settings.checkpoint_location))
    return [f"exactly-once for read_committed consumers of {settings.output_topic} and {settings.dead_letter_topic}: "
            f"a Kafka transaction per producing task and micro-batch",
            f"transactional ids {settings.transactional_id_prefix}-0 .. {settings.transactional_id_prefix}-{n - 1} "
            f"(KAFKA_TRANSACTION_TIMEOUT_MS={settings.kafka_transaction_timeout_ms})",
            f"progress markers in {topic} (compacted, at least {n} partitions)"]


def compiled_modules() -> list[str]:
    """The modules of ``expressions``, ``operators`` and ``service`` that run as compiled extensions
    (a wheel holds those setup.py compiles; Python imports an extension before the ``.py`` beside it)."""
    import importlib.machinery
    from pathlib import Path

    import expressions
    import operators

    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    return sorted(f"{package.__name__}.{path.name.partition('.')[0]}"
                  for package in (expressions, operators, sys.modules[__package__])
                  for path in Path(package.__path__[0]).iterdir() if path.name.endswith(suffixes))


def build_description() -> str:
    compiled = compiled_modules()
    if not compiled:
        return ("pure Python: no module compiled (an editable install, a wheel built with "
                "CHANGEJOIN_PURE_PYTHON=1 or without a C compiler)")
    return f"{len(compiled)} modules compiled by Cython from their sources: {', '.join(compiled)}"


def cmd_abort_transactions(args) -> int:
    """Abort what a stopped exactly-once deployment left open (its read_committed consumers wait at
    the last stable offset until then, or until the transaction timeout)."""
    settings = load_settings()
    _configure_logging(settings.log_level, settings.log_format, settings.secret_values())
    if not settings.exactly_once:
        print("changejoin: DELIVERY is not exactly-once: there are no transactions to abort", file=sys.stderr)
        return 2
    from . import checkpoint
    from .shipping import worker_secrets
    from .transactions import abort_transactional_ids, delivery_config, transactional_id

    n = _task_partitions(settings)
    current = [transactional_id(settings.transactional_id_prefix, p) for p in range(n)]
    store = checkpoint.CheckpointFile(settings.checkpoint_location)
    older = [tid for tid in (checkpoint.used_transactional_ids(store) if store._local else ()) if tid not in current]
    seconds = abort_transactional_ids({"delivery": delivery_config(settings), **worker_secrets(settings)},
                                      current + older, required=current)
    also = f" and {', '.join(older)}, which the checkpoint used before" if older else ""
    print(f"transactional ids {settings.transactional_id_prefix}-0 .. -{n - 1}{also}: nothing left open "
          f"({seconds:.2f} s)")
    return 0


def cmd_schema(args) -> int:
    _, plan = _settings_and_plan()
    print(json.dumps(plan.output_schema, indent=2))
    return 0


def cmd_demo(args) -> int:
    _configure_logging("WARNING")
    from .demo import run_demo

    return run_demo(lookup=args.lookup)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="changejoin", description="Kafka-to-Kafka changelog joins on Spark")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="run the join service (configured by environment variables)").set_defaults(fn=cmd_run)
    demo = sub.add_parser("demo", help="start an embedded broker, join a sample changelog, print it")
    demo.add_argument("--lookup", action="store_true", help="the lookup join: the prices in a PostgreSQL table "
                      "(a throwaway server from the machine's packages)")
    demo.set_defaults(fn=cmd_demo)
    sub.add_parser("check-config", help="validate the environment and print the plan").set_defaults(fn=cmd_check_config)
    sub.add_parser("schema", help="print the output Avro schema").set_defaults(fn=cmd_schema)
    sub.add_parser("abort-transactions", help="DELIVERY=exactly-once: abort the transactions a stopped service "
                   "left open").set_defaults(fn=cmd_abort_transactions)
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as err:
        print(f"changejoin: {err}", file=sys.stderr)
        return 2
    except ValueError as err:  # PlanError, QueryError: the message names the variable to fix
        from .plan import PlanError

        if isinstance(err, PlanError):
            print(f"changejoin: invalid configuration:\n  {err}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
