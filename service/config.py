"""The service's whole configuration: environment variables, validated once at start.

Everything else in the service receives a :class:`Settings` (or values taken from it) and never
reads the environment itself. Invalid or missing variables raise :class:`ConfigError`, whose
message names each variable to fix.
"""
from __future__ import annotations

import difflib
import logging
import os
import re
from fractions import Fraction
from typing import Literal, Mapping
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ChangejoinError
from .formats import DEFAULT as DEFAULT_FORMAT
from .formats import NAMES as FORMAT_NAMES
from .formats import SOURCE_TIME, Format, InputSide, SchemaSource, format_of
from .kafka_records import DEFAULT_ROWKIND_HEADER, LIBRDKAFKA_MESSAGE_MAX_BYTES, output_framing_bytes
from .resources import usable_cpus
from .secrets import MIN_SCRUBBED_LENGTH, is_secret_name, redact, redact_text, url_passwords

KAFKA_CLIENT_PREFIX = "KAFKA_CLIENT_"
SPARK_CONF_PREFIX = "SPARK_CONF_"
ENV_PREFIXES = (KAFKA_CLIENT_PREFIX, SPARK_CONF_PREFIX)

# What is never printed or logged, and where a URL carries a password: service/secrets.py.


def local_directory(location: str) -> str | None:
    """The local directory a location (``CHECKPOINT_LOCATION``) names: a plain path or a
    ``file:`` URL; None for any other file system (``s3a://``, ``hdfs://``...)."""
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return parsed.path
    return location if parsed.scheme == "" or len(parsed.scheme) == 1 else None  # a drive letter is no scheme


_TRANSACTIONAL_ID = re.compile(r"^[A-Za-z0-9._-]+$")


class ConfigError(ValueError, ChangejoinError):
    """The environment does not describe a runnable service; the message names the variables."""

    exit_code = 2

    def refusal(self) -> str:
        return f"changejoin: {self}"


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


#: The most shuffle partitions: each is a RocksDB state store per stateful stage, opened by a task
#: of every micro-batch (and, with exactly-once delivery, a transactional id).
MAX_SHUFFLE_PARTITIONS = 10_000
#: The task count of a new checkpoint with SHUFFLE_PARTITIONS unset and a cluster master.
CLUSTER_TASK_PARTITIONS = 8
#: A local master: ``local``, ``local[N]``, ``local[*]``; group 1 its cores (None: ``local``),
#: group 2 its task attempts when it names them (``local[N, F]``).
LOCAL_MASTER = re.compile(r"^local(?:\[\s*(\*|[0-9]+)\s*(?:,\s*([0-9]+)\s*)?\])?$")


def default_task_partitions(master: str) -> int:
    """The task count (``spark.sql.shuffle.partitions``) of a new checkpoint when SHUFFLE_PARTITIONS
    is unset. In local mode, the cores the master runs tasks on (``local[N]``: N, ``local``: 1,
    ``local[*]``: the CPUs this process may use, bounded by its container's CPU quota; the settings
    take at most one task per bucket). Each task of a micro-batch pays fixed costs (its state
    store, its Python workers, its transaction), so more tasks than cores only run in waves: on 2
    cores, 8 tasks took the p99 latency at 2,000 rows/s from 0.76 to 1.07 s, for 1.45x the CPU
    (bench/results/RESULTS.md, 2026-11-29). With a cluster master, whose executors may not have
    registered yet at the start, :data:`CLUSTER_TASK_PARTITIONS`."""
    match = LOCAL_MASTER.match(master.strip())
    if not match:
        return CLUSTER_TASK_PARTITIONS
    cores = match.group(1)
    count = 1 if cores is None else usable_cpus() if cores == "*" else int(cores)
    return max(1, min(count, MAX_SHUFFLE_PARTITIONS))


#: The longest duration any variable takes: 36,500 days (a hundred years; "forever" in practice).
MAX_DURATION_MS = 36_500 * 86_400_000


#: The units a duration takes, as the messages list them.
DURATION_UNITS = "ms, s, m, h or d (sec and min too)"


def parse_duration_ms(text: str) -> int:
    """``"500ms"``, ``"5s"``, ``"2m"``, ``"1h"``, ``"1d"``, ``"1.5s"`` or ``"0"``: a whole number
    of milliseconds up to :data:`MAX_DURATION_MS`. A number without a unit other than 0 is
    refused: ``STATE_TTL=10`` meant as ten seconds, or minutes, would otherwise be 10 ms."""
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"not a duration: a number and a unit, {DURATION_UNITS}, as in 500ms, 5s, 2m, 1h or 7d")
    number, unit = match.groups()
    if unit is None and Fraction(number) != 0:
        raise ValueError(f"a duration needs a unit: {DURATION_UNITS}, as in {number}s or {number}ms; "
                         f"only 0 goes without")
    ms = Fraction(number) * _UNIT_MS[unit.lower() if unit else None]
    if ms.denominator != 1:
        raise ValueError("not a whole number of milliseconds")
    if ms > MAX_DURATION_MS:
        raise ValueError("longer than the longest duration taken, 36500d (100 years)")
    return int(ms)


def _column_list(text: str | None) -> tuple[str, ...] | None:
    if text is None or not text.strip():
        return None
    columns = tuple(c.strip() for c in text.split(","))
    if any(not c for c in columns):
        raise ValueError(f"{text!r} is not a comma-separated list of column names")
    twice = sorted({c for c in columns if sum(other.lower() == c.lower() for other in columns) > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)} listed more than once")
    return columns


# Between the problems the model validator finds (they may contain "; " themselves).
_PROBLEM_SEPARATOR = "\n"

ChangelogMode = Literal["retract", "upsert", "append"]
InputFormat = Literal[FORMAT_NAMES]  # service/formats/
KeyFormat = Literal["auto", "avro", "raw"]  # message keys of upsert inputs, see keys.py
Delivery = Literal["at-least-once", "exactly-once"]
DEFAULT_DELIVERY: Delivery = "exactly-once"  # docs/semantics.md, "Delivery guarantees": why


class Settings(BaseModel):
    """One field per environment variable; the alias is the variable's name."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid")

    kafka_bootstrap_servers: str = Field(alias="KAFKA_BOOTSTRAP_SERVERS", min_length=1)
    kafka_client: dict[str, str] = Field(default_factory=dict, exclude=True)
    schema_registry_url: str | None = Field(None, alias="SCHEMA_REGISTRY_URL")
    schema_registry_basic_auth_user_info: str | None = Field(None, alias="SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO", repr=False)
    left_topic: str = Field(alias="LEFT_TOPIC", min_length=1)
    right_topic: str | None = Field(None, alias="RIGHT_TOPIC", min_length=1)  # required unless RIGHT_LOOKUP_URL
    output_topic: str = Field(alias="OUTPUT_TOPIC", min_length=1)
    dlq_topic: str | None = Field(None, alias="DLQ_TOPIC")
    left_table: str | None = Field(None, alias="LEFT_TABLE")
    right_table: str | None = Field(None, alias="RIGHT_TABLE")
    left_schema_file: str | None = Field(None, alias="LEFT_SCHEMA_FILE")
    right_schema_file: str | None = Field(None, alias="RIGHT_SCHEMA_FILE")
    left_primary_key: tuple[str, ...] | None = Field(None, alias="LEFT_PRIMARY_KEY")
    right_primary_key: tuple[str, ...] | None = Field(None, alias="RIGHT_PRIMARY_KEY")
    left_changelog_mode: ChangelogMode = Field("retract", alias="LEFT_CHANGELOG_MODE")
    right_changelog_mode: ChangelogMode = Field("retract", alias="RIGHT_CHANGELOG_MODE")
    left_format: InputFormat = Field(DEFAULT_FORMAT, alias="LEFT_FORMAT")
    right_format: InputFormat = Field(DEFAULT_FORMAT, alias="RIGHT_FORMAT")
    left_key_format: KeyFormat = Field("auto", alias="LEFT_KEY_FORMAT")
    right_key_format: KeyFormat = Field("auto", alias="RIGHT_KEY_FORMAT")
    rowkind_header: str = Field(DEFAULT_ROWKIND_HEADER, alias="ROWKIND_HEADER", min_length=1)
    join_sql: str = Field(alias="JOIN_SQL", min_length=1)
    left_event_time_column: str | None = Field(None, alias="LEFT_EVENT_TIME_COLUMN")
    right_event_time_column: str | None = Field(None, alias="RIGHT_EVENT_TIME_COLUMN")
    left_watermark_delay_ms: int = Field(0, alias="LEFT_WATERMARK_DELAY", ge=0)
    right_watermark_delay_ms: int = Field(0, alias="RIGHT_WATERMARK_DELAY", ge=0)
    idle_timeout_ms: int | None = Field(None, alias="IDLE_TIMEOUT", gt=0)
    state_ttl_ms: int | None = Field(None, alias="STATE_TTL", gt=0)
    left_state_ttl_ms: int | None = Field(None, alias="LEFT_STATE_TTL", gt=0)
    right_state_ttl_ms: int | None = Field(None, alias="RIGHT_STATE_TTL", gt=0)
    mini_batch_size: int | None = Field(None, alias="MINI_BATCH_SIZE", ge=1)
    output_mode: Literal["retract", "upsert"] = Field("retract", alias="OUTPUT_MODE")
    output_key: tuple[str, ...] | None = Field(None, alias="OUTPUT_KEY")
    # None: the producer's message.max.bytes less the room for headers and framing (set after validation).
    max_output_record_bytes: int | None = Field(None, alias="MAX_OUTPUT_RECORD_BYTES", gt=0)
    checkpoint_location: str = Field("checkpoints", alias="CHECKPOINT_LOCATION", min_length=1)
    spark_master: str = Field("local[*]", alias="SPARK_MASTER", min_length=1)
    spark_conf: dict[str, str] = Field(default_factory=dict, exclude=True)  # as set; all Spark gets: session.py
    spark_ui_enabled: bool = Field(False, alias="SPARK_UI_ENABLED")
    # Unset: the task count of a new checkpoint is default_task_partitions(SPARK_MASTER) (below).
    shuffle_partitions: int = Field(CLUSTER_TASK_PARTITIONS, alias="SHUFFLE_PARTITIONS", ge=1,
                                    le=MAX_SHUFFLE_PARTITIONS)
    # None: the checkpoint's count, or plan.DEFAULT_STATE_BUCKETS for a new checkpoint (checkpoint.py)
    state_buckets: int | None = Field(None, alias="STATE_BUCKETS", ge=0, le=1 << 20)
    trigger_interval_ms: int = Field(500, alias="TRIGGER_INTERVAL", ge=0)  # bench/results/RESULTS.md, latency
    max_records_per_trigger: int | None = Field(100_000, alias="MAX_RECORDS_PER_TRIGGER", ge=1)
    # Output delivery (docs/semantics.md, "Delivery guarantees"; transactions.py).
    delivery: Delivery = Field(DEFAULT_DELIVERY, alias="DELIVERY")
    kafka_transactional_id_prefix: str | None = Field(None, alias="KAFKA_TRANSACTIONAL_ID_PREFIX", min_length=1,
                                                      max_length=200)
    kafka_transaction_timeout_ms: int = Field(120_000, alias="KAFKA_TRANSACTION_TIMEOUT_MS", ge=1_000,
                                              le=2_147_483_647)
    progress_topic: str | None = Field(None, alias="PROGRESS_TOPIC")
    # The lookup join: the right side is a PostgreSQL table (docs/configuration.md, "Lookup join").
    right_lookup_url: str | None = Field(None, alias="RIGHT_LOOKUP_URL", min_length=1)
    right_lookup_password: str | None = Field(None, alias="RIGHT_LOOKUP_PASSWORD", repr=False)
    right_lookup_table: str | None = Field(None, alias="RIGHT_LOOKUP_TABLE", min_length=1)
    lookup_batch_size: int = Field(1000, alias="LOOKUP_BATCH_SIZE", ge=1, le=100_000)
    lookup_query_timeout_ms: int = Field(30_000, alias="LOOKUP_QUERY_TIMEOUT", ge=1)
    lookup_max_retries: int = Field(8, alias="LOOKUP_MAX_RETRIES", ge=0, le=100)
    lookup_retry_backoff_ms: int = Field(500, alias="LOOKUP_RETRY_BACKOFF", ge=1)
    lookup_cache: Literal["none", "partial"] = Field("none", alias="LOOKUP_CACHE")
    lookup_cache_max_rows: int = Field(100_000, alias="LOOKUP_CACHE_MAX_ROWS", ge=1)
    lookup_cache_expire_after_write_ms: int | None = Field(None, alias="LOOKUP_CACHE_EXPIRE_AFTER_WRITE", gt=0)
    lookup_cache_expire_after_access_ms: int | None = Field(None, alias="LOOKUP_CACHE_EXPIRE_AFTER_ACCESS", gt=0)
    lookup_cache_missing_key: bool = Field(True, alias="LOOKUP_CACHE_MISSING_KEY")
    starting_offsets: Literal["earliest", "latest"] = Field("earliest", alias="STARTING_OFFSETS")
    fail_on_data_loss: bool = Field(True, alias="FAIL_ON_DATA_LOSS")
    metrics_port: int = Field(9108, alias="METRICS_PORT", ge=0, le=65535)
    ready_max_trigger_intervals: int = Field(10, alias="READY_MAX_TRIGGER_INTERVALS", ge=1)
    liveness_timeout_ms: int = Field(1_800_000, alias="LIVENESS_TIMEOUT", ge=0)
    # How long the servers the configuration names may take to answer at start (contact.py).
    connect_timeout_ms: int = Field(60_000, alias="CONNECT_TIMEOUT", gt=0)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", alias="LOG_LEVEL")
    log_format: Literal["text", "json"] = Field("text", alias="LOG_FORMAT")
    # A class-data-sharing archive of Spark's JVM, written at a graceful stop, mapped by later starts
    # (classarchive.py).
    spark_class_archive_dir: str | None = Field(None, alias="SPARK_CLASS_ARCHIVE_DIR", min_length=1)

    @field_validator(
        "left_watermark_delay_ms", "right_watermark_delay_ms", "idle_timeout_ms", "state_ttl_ms",
        "left_state_ttl_ms", "right_state_ttl_ms", "trigger_interval_ms", "liveness_timeout_ms",
        "lookup_query_timeout_ms", "lookup_retry_backoff_ms", "lookup_cache_expire_after_write_ms",
        "lookup_cache_expire_after_access_ms", "connect_timeout_ms", mode="before",
    )
    @classmethod
    def _duration(cls, value):
        return parse_duration_ms(value) if isinstance(value, str) else value

    @field_validator("left_primary_key", "right_primary_key", "output_key", mode="before")
    @classmethod
    def _columns(cls, value):
        return _column_list(value) if isinstance(value, str) else value

    @field_validator("log_level", "log_format", "output_mode", "left_changelog_mode", "right_changelog_mode",
                     "left_key_format", "right_key_format", "starting_offsets", "delivery", "lookup_cache",
                     "left_format", "right_format",
                     mode="before")
    @classmethod
    def _case(cls, value):
        if not isinstance(value, str):
            return value
        return value.strip().upper() if value.strip().upper() in ("DEBUG", "INFO", "WARNING", "ERROR") else value.strip().lower()

    @model_validator(mode="after")
    def _consistent(self):
        problems = []
        if self.lookup:
            problems += self._lookup_problems()
            if not self.schema_registry_url and not self.left_schema_file:
                problems.append("SCHEMA_REGISTRY_URL: set it, or set LEFT_SCHEMA_FILE (plain Avro bodies); the right "
                                "side is the table RIGHT_LOOKUP_URL names")
        else:
            missing = [side for side in ("left", "right") if _registry_or_file(
                format_of(getattr(self, f"{side}_format")), getattr(self, f"{side}_schema_file"))]
            if not self.schema_registry_url and missing:
                files = " and ".join(f"{side.upper()}_SCHEMA_FILE" for side in missing)
                problems.append(f"SCHEMA_REGISTRY_URL: set it, or set {files} (plain Avro bodies)")
            problems += self._not_lookup_problems()
        problems += self._format_problems()
        problems += self._registry_problems()
        for var, path in (("LEFT_SCHEMA_FILE", self.left_schema_file), ("RIGHT_SCHEMA_FILE", self.right_schema_file)):
            if path and not os.path.isfile(path):
                problems.append(f"{var}: no such file {path!r}")
        for side in ("left", "right"):
            # a Debezium side too: upsert is its default only with a primary key (Format.changelog_mode)
            if getattr(self, f"{side}_changelog_mode") == "upsert" and not getattr(self, f"{side}_primary_key"):
                problems.append(f"{side.upper()}_PRIMARY_KEY: required when {side.upper()}_CHANGELOG_MODE=upsert")
        if self.output_mode == "upsert" and not self.output_key:
            problems.append("OUTPUT_KEY: required when OUTPUT_MODE=upsert (the output columns forming the upsert key)")
        problems += self._topic_problems()
        problems += _kafka_client_problems(self.kafka_client)
        problems += self._record_size_problems()
        problems += self._spark_problems()
        problems += self._delivery_problems()
        if problems:
            raise ValueError(_PROBLEM_SEPARATOR.join(problems))
        # Derived defaults, fixed here so that everything downstream reads plain values.
        if not self.shuffle_partitions_set:
            from .plan import DEFAULT_STATE_BUCKETS  # a new checkpoint's buckets, unless STATE_BUCKETS

            buckets = DEFAULT_STATE_BUCKETS if self.state_buckets is None else self.state_buckets
            cores = default_task_partitions(self.spark_master)
            object.__setattr__(self, "shuffle_partitions", min(cores, buckets) if buckets else cores)
        if self.max_output_record_bytes is None:
            object.__setattr__(self, "max_output_record_bytes", self.producer_message_max_bytes - self.record_framing_bytes)
        return self

    def _topic_problems(self) -> list[str]:
        from .sink import validate_topic_name

        problems = []
        dlq_var = "DLQ_TOPIC" if self.dlq_topic else f"DLQ_TOPIC (default {self.dead_letter_topic!r})"
        if self.right_topic is None and not self.lookup:
            problems.append("RIGHT_TOPIC: required (or RIGHT_LOOKUP_URL, to look the right side up in a database table)")
        topics = (("LEFT_TOPIC", self.left_topic), ("RIGHT_TOPIC", self.right_topic or ""),
                  ("OUTPUT_TOPIC", self.output_topic), (dlq_var, self.dead_letter_topic))
        if self.lookup:
            topics = (topics[0],) + topics[2:]
        if self.exactly_once:
            progress_var = "PROGRESS_TOPIC" if self.progress_topic else f"PROGRESS_TOPIC (default {self.progress_topic_name!r})"
            topics += ((progress_var, self.progress_topic_name),)
        for var, topic in topics:
            try:
                validate_topic_name(topic)
            except ValueError as err:
                problems.append(f"{var}: {err}")
        if self.left_topic == self.right_topic:
            problems.append("RIGHT_TOPIC: must differ from LEFT_TOPIC")
        # Each later topic must differ from every earlier one: the join never writes what it reads,
        # and dead letters never mix with the output.
        inputs = 1 if self.lookup else 2
        for i, (var, topic) in enumerate(topics[inputs:], start=inputs):
            for other_var, other in topics[:i]:
                if topic == other:
                    problems.append(f"{var}: {topic!r} is also {other_var.split(' ')[0]}; it must be a topic of its own")
        return problems

    def _format_problems(self) -> list[str]:
        """What each input's format (service/formats/) asks of the configuration: a Debezium topic
        carries its change kinds in its envelopes (and may carry its event time)."""
        problems = []
        for side in ("left", "right"):
            fmt = format_of(getattr(self, f"{side}_format"))
            var = f"{side.upper()}_FORMAT"
            mode = getattr(self, f"{side}_changelog_mode")
            if f"{side}_changelog_mode" in self.model_fields_set and mode not in fmt.changelog_modes:
                problems.append(f"{side.upper()}_CHANGELOG_MODE: {var}={fmt.name} reads "
                                f"{' or '.join(fmt.changelog_modes)} topics, not {mode}")
            if fmt.envelope_time is None:
                if getattr(self, f"{side}_event_time_column") == SOURCE_TIME and not (side == "right" and self.lookup):
                    problems.append(f"{side.upper()}_EVENT_TIME_COLUMN: {SOURCE_TIME} is a Debezium envelope's; "
                                    f"{var}={fmt.name} has none: name a column of the row")
            problems += fmt.config_problems(InputSide(side.upper(), getattr(self, f"{side}_topic") or "",
                                                      getattr(self, f"{side}_schema_file")), self.schema_registry_url)
            if side == "right" and self.lookup and fmt.name != DEFAULT_FORMAT:
                problems.append(f"{var}: the right side of a lookup join is a database table; unset it")
        return problems

    def _lookup_problems(self) -> list[str]:
        """A lookup join's database and its options (RIGHT_LOOKUP_URL is set)."""
        problems = []
        parsed = urlparse(self.right_lookup_url.strip())
        if parsed.scheme not in ("postgresql", "postgres") or not parsed.hostname or not parsed.path.strip("/"):
            problems.append(f"RIGHT_LOOKUP_URL: expected postgresql://user@host:5432/database, got "
                            f"{redact_text(self.right_lookup_url)!r}")
        for var, value in (("RIGHT_TOPIC", self.right_topic), ("RIGHT_SCHEMA_FILE", self.right_schema_file),
                           ("RIGHT_CHANGELOG_MODE", "right_changelog_mode" in self.model_fields_set),
                           ("RIGHT_PRIMARY_KEY", self.right_primary_key),
                           ("RIGHT_EVENT_TIME_COLUMN", self.right_event_time_column),
                           ("RIGHT_STATE_TTL", self.right_state_ttl_ms)):
            if value:
                problems.append(f"{var}: not used by a lookup join (RIGHT_LOOKUP_URL is set: the right side is a "
                                "database table, read as each micro-batch runs); unset it")
        if local_directory(self.checkpoint_location) is None:
            problems.append(f"CHECKPOINT_LOCATION: a lookup join pins what each micro-batch looked up under the "
                            f"checkpoint, so that a replay joins the same rows: it must be a local directory (on a "
                            f"cluster, one volume the driver and every executor mount at the same path, with hard "
                            f"links), not {redact_text(self.checkpoint_location)!r}")
        if not (self.right_table or self.right_lookup_table):
            problems.append("RIGHT_TABLE: required with RIGHT_LOOKUP_URL (the name JOIN_SQL gives the table; "
                            "RIGHT_LOOKUP_TABLE, the table in the database, defaults to it)")
        if self.lookup_cache == "none":
            for var in ("LOOKUP_CACHE_MAX_ROWS", "LOOKUP_CACHE_EXPIRE_AFTER_WRITE", "LOOKUP_CACHE_EXPIRE_AFTER_ACCESS",
                        "LOOKUP_CACHE_MISSING_KEY"):
                if _field_of(var) in self.model_fields_set:
                    problems.append(f"{var}: applies to LOOKUP_CACHE=partial only (LOOKUP_CACHE is none)")
        if self.lookup_cache_expire_after_write_ms and self.lookup_cache_expire_after_write_ms < 1000:
            problems.append("LOOKUP_CACHE_EXPIRE_AFTER_WRITE: whole seconds, at least 1s")
        return problems

    def _not_lookup_problems(self) -> list[str]:
        """The lookup join's variables, set without RIGHT_LOOKUP_URL."""
        return [f"{info.alias}: applies to a lookup join only; set RIGHT_LOOKUP_URL, or unset {info.alias}"
                for name, info in type(self).model_fields.items()
                if info.alias and (info.alias.startswith("LOOKUP_") or info.alias.startswith("RIGHT_LOOKUP_"))
                and name in self.model_fields_set]

    @property
    def lookup(self) -> bool:
        """The right side is a database table (a lookup join)."""
        return self.right_lookup_url is not None

    @property
    def producer_message_max_bytes(self) -> int:
        """librdkafka's message.max.bytes for the sink's producer (its default unless KAFKA_CLIENT_ sets it)."""
        value = self.kafka_client.get("message.max.bytes")
        try:
            return int(value) if value is not None else LIBRDKAFKA_MESSAGE_MAX_BYTES
        except ValueError:
            return LIBRDKAFKA_MESSAGE_MAX_BYTES  # reported by the librdkafka check

    @property
    def record_framing_bytes(self) -> int:
        """What librdkafka and the broker count for one output record besides its key and value, at most."""
        return output_framing_bytes(self.rowkind_header)

    def _record_size_problems(self) -> list[str]:
        if self.max_output_record_bytes is None:
            return []
        limit = self.producer_message_max_bytes - self.record_framing_bytes
        if self.max_output_record_bytes > limit:
            source = ("KAFKA_CLIENT_MESSAGE_MAX_BYTES" if "message.max.bytes" in self.kafka_client
                      else "librdkafka's default message.max.bytes")
            return [f"MAX_OUTPUT_RECORD_BYTES: {self.max_output_record_bytes} leaves no room for the record's "
                    f"headers and framing ({self.record_framing_bytes} bytes) within {source}="
                    f"{self.producer_message_max_bytes}: at most {limit}, or raise KAFKA_CLIENT_MESSAGE_MAX_BYTES"]
        return []

    def _registry_problems(self) -> list[str]:
        problems = []
        url = self.schema_registry_url
        if url is not None:
            parsed = urlparse(url.strip())
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                problems.append(f"SCHEMA_REGISTRY_URL: expected http://host:port or https://host:port, got "
                                f"{redact_text(url)!r}")
        user_info = self.schema_registry_basic_auth_user_info
        if user_info is not None and ":" not in user_info:
            problems.append("SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO: expected '<user>:<password>' (no ':' in the value)")
        return problems

    def _delivery_problems(self) -> list[str]:
        """What exactly-once output needs (transactions.py): bounded micro-batches, a transaction
        timeout the producer accepts, the transactional ids to itself."""
        from .sink import MESSAGE_TIMEOUT_MARGIN_MS

        problems = []
        for key in self.kafka_client:
            if key.startswith("transactional.") or key == "transaction.timeout.ms":
                var = KAFKA_CLIENT_PREFIX + key.upper().replace(".", "_")
                problems.append(f"{var}: the service sets it per task with DELIVERY=exactly-once; use "
                                f"KAFKA_TRANSACTIONAL_ID_PREFIX and KAFKA_TRANSACTION_TIMEOUT_MS")
        if not self.exactly_once:
            return problems
        if not self.max_records_per_trigger:
            problems.append("MAX_RECORDS_PER_TRIGGER: required with DELIVERY=exactly-once, so that one micro-batch's "
                            "share of a task fits in one transaction")
        if self.kafka_transaction_timeout_ms < 2 * MESSAGE_TIMEOUT_MARGIN_MS:
            problems.append(f"KAFKA_TRANSACTION_TIMEOUT_MS: at least {2 * MESSAGE_TIMEOUT_MARGIN_MS} with "
                            f"DELIVERY=exactly-once (a record's delivery timeout stays "
                            f"{MESSAGE_TIMEOUT_MARGIN_MS} ms below it), got {self.kafka_transaction_timeout_ms}")
        if self.kafka_transactional_id_prefix is not None and not _TRANSACTIONAL_ID.match(self.kafka_transactional_id_prefix):
            problems.append(f"KAFKA_TRANSACTIONAL_ID_PREFIX: use the characters [A-Za-z0-9._-] "
                            f"(got {self.kafka_transactional_id_prefix!r})")
        speculation = self.spark_conf.get("spark.speculation", "false").strip().lower()
        if speculation == "true":
            problems.append("SPARK_CONF_spark_speculation: must stay false with DELIVERY=exactly-once (a speculative "
                            "copy of a producing task only fences the other one)")
        return problems

    def _spark_problems(self) -> list[str]:
        problems = []
        for key in self.spark_conf:
            if not key.startswith("spark."):
                var = SPARK_CONF_PREFIX + key.replace(".", "_")
                hint = f"; did you mean {SPARK_CONF_PREFIX}{key.replace('.', '_').lower()}?" if key.lower().startswith("spark.") else ""
                problems.append(f"{var}: Spark properties start with 'spark.' (got {key!r}){hint}")
        partitions = self.spark_conf.get("spark.sql.shuffle.partitions")
        if partitions is not None:
            var = SPARK_CONF_PREFIX + "spark_sql_shuffle_partitions"
            if not partitions.strip().isdigit() or not 1 <= int(partitions) <= MAX_SHUFFLE_PARTITIONS:
                problems.append(f"{var}: a whole number from 1 to {MAX_SHUFFLE_PARTITIONS} (got {partitions!r}); "
                                f"better, set SHUFFLE_PARTITIONS")
            elif "shuffle_partitions" in self.model_fields_set and int(partitions) != self.shuffle_partitions:
                problems.append(f"{var}: contradicts SHUFFLE_PARTITIONS={self.shuffle_partitions}; set only "
                                f"SHUFFLE_PARTITIONS")
            else:
                object.__setattr__(self, "shuffle_partitions", int(partitions))
        provider = self.spark_conf.get("spark.sql.streaming.stateStore.providerClass")
        if provider is not None and provider.strip().rsplit(".", 1)[-1] != "RocksDBStateStoreProvider":
            problems.append("SPARK_CONF_spark_sql_streaming_stateStore_providerClass: the join's state API "
                            "(transformWithState) needs Spark's RocksDBStateStoreProvider (the service's default); "
                            f"got {provider.strip()!r}. Unset it")
        ui = self.spark_conf.get("spark.ui.enabled")
        if (ui is not None and "spark_ui_enabled" in self.model_fields_set
                and ui.strip().lower() != str(self.spark_ui_enabled).lower()):
            problems.append("SPARK_CONF_spark_ui_enabled: contradicts SPARK_UI_ENABLED; set only SPARK_UI_ENABLED")
        return problems

    # -- derived values --------------------------------------------------------------------------
    @property
    def dead_letter_topic(self) -> str:
        return self.dlq_topic or f"{self.output_topic}.dlq"

    @property
    def exactly_once(self) -> bool:
        return self.delivery == "exactly-once"

    @property
    def progress_topic_name(self) -> str:
        """Where each task partition's transactions record the micro-batches they wrote (exactly-once):
        a deployment's own by default (its transactional id prefix's). A checkpoint keeps the topic it
        began with (``transactions.progress_topic``)."""
        return self.progress_topic or f"{self.transactional_id_prefix}.progress"

    @property
    def transactional_id_prefix(self) -> str:
        """``<prefix>-<task partition>`` are the producers' transactional ids (exactly-once)."""
        return self.kafka_transactional_id_prefix or f"changejoin-{self.output_topic}"

    @property
    def left_table_name(self) -> str:
        return self.left_table or self.left_topic

    @property
    def right_table_name(self) -> str:
        if self.lookup and not self.right_table:
            return self.right_lookup_table.rsplit(".", 1)[-1].strip('"')
        return self.right_table or self.right_topic

    @property
    def lookup_table_name(self) -> str:
        """The lookup join's table in the database (RIGHT_LOOKUP_TABLE, default RIGHT_TABLE)."""
        return self.right_lookup_table or self.right_table

    @property
    def left_ttl_ms(self) -> int | None:
        return self.left_state_ttl_ms or self.state_ttl_ms

    @property
    def right_ttl_ms(self) -> int | None:
        return self.right_state_ttl_ms or self.state_ttl_ms

    @property
    def shuffle_partitions_set(self) -> bool:
        """Whether ``SHUFFLE_PARTITIONS`` (or ``SPARK_CONF_spark_sql_shuffle_partitions``) was set."""
        return "shuffle_partitions" in self.model_fields_set or "spark.sql.shuffle.partitions" in self.spark_conf

    def kafka_properties(self) -> dict[str, str]:
        """librdkafka properties: bootstrap servers plus every ``KAFKA_CLIENT_*`` variable."""
        return {"bootstrap.servers": self.kafka_bootstrap_servers, **self.kafka_client}

    def consumer_properties(self) -> dict[str, str]:
        """The ``KAFKA_CLIENT_*`` properties a consumer uses: those librdkafka says are a
        producer's (``acks``, ``linger.ms``...) are left out, rather than logged as ignored by
        every consumer the source creates."""
        return {k: v for k, v in self.kafka_client.items() if not is_producer_property(k, v)}

    def redacted(self) -> dict[str, object]:
        """The settings as variables, with secret values hidden (:func:`redact`), for logs and
        ``check-config``."""
        shown: dict[str, object] = {}
        for name, info in type(self).model_fields.items():
            if info.alias is None:
                continue
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, tuple):  # column lists, as they are written
                value = ",".join(value)
            shown[info.alias] = redact(info.alias, value)
        for key, value in self.kafka_client.items():
            shown[KAFKA_CLIENT_PREFIX + key.upper().replace(".", "_")] = redact(key, value)
        for key, value in self.spark_conf.items():
            shown[SPARK_CONF_PREFIX + key.replace(".", "_")] = redact(key, value)
        return shown

    def secret_values(self) -> list[str]:
        """Every secret value in the settings, for scrubbing free text such as log lines."""
        values = [self.schema_registry_basic_auth_user_info or ""]
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if info.alias and isinstance(value, str):
                if is_secret_name(info.alias):
                    values.append(value)
                values += url_passwords(value)
        for props in (self.kafka_client, self.spark_conf):
            for key, value in props.items():
                if is_secret_name(key):
                    values.append(value)
                values += url_passwords(value)
        return [v for v in values if len(v) >= MIN_SCRUBBED_LENGTH]

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(self.redacted().items()))
        return f"Settings({shown})"

    __str__ = __repr__


_ACKS_ALL = ("all", "-1")
_SECURITY_PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")


def _registry_or_file(fmt: Format, schema_file: str | None) -> bool:
    """Whether an input's reader schema is the registry's for want of a schema file."""
    return SchemaSource.FILE in fmt.schema_sources and fmt.schema_source(schema_file) is SchemaSource.REGISTRY


def _field_of(alias: str) -> str:
    """The Settings field of an environment variable."""
    return next(name for name, info in Settings.model_fields.items() if info.alias == alias)


def _kafka_client_problems(props: Mapping[str, str]) -> list[str]:
    """KAFKA_CLIENT_* properties checked before anything connects: the ones the sink's guarantees
    depend on, then every property's name and value, by librdkafka itself."""
    var = {key: KAFKA_CLIENT_PREFIX + key.upper().replace(".", "_") for key in props}
    problems = []
    for key in ("acks", "request.required.acks"):  # librdkafka's name and its alias
        if key in props and str(props[key]).strip().lower() not in _ACKS_ALL:
            problems.append(f"{var[key]}: the sink needs acks=all (or -1): every output record on every "
                            f"in-sync replica before its micro-batch commits (got {props[key]!r})")
    if "enable.idempotence" in props and str(props["enable.idempotence"]).strip().lower() != "true":
        problems.append(f"{var['enable.idempotence']}: the sink needs an idempotent producer, so that retries "
                        f"neither duplicate nor reorder records (got {props['enable.idempotence']!r})")
    if "bootstrap.servers" in props:
        problems.append(f"{var['bootstrap.servers']}: set KAFKA_BOOTSTRAP_SERVERS instead")
    if "security.protocol" in props and props["security.protocol"].strip().lower() not in _SECURITY_PROTOCOLS:
        problems.append(f"{var['security.protocol']}: one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL "
                        f"(got {props['security.protocol']!r})")
    for key, value in props.items():
        if key in ("bootstrap.servers", "security.protocol"):
            continue
        error = librdkafka_property_error(key, value)
        if error:
            problems.append(f"{var[key]}: {error}")
    return problems


def _quiet_logger():
    """Where the checking clients' own log lines go (e.g. "no bootstrap.servers"): nowhere."""
    import logging

    quiet = logging.getLogger("changejoin.config.librdkafka")
    if not quiet.handlers:
        quiet.addHandler(logging.NullHandler())
        quiet.propagate = False
    return quiet


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def is_producer_property(key: str, value: str) -> bool:
    """librdkafka's word on whether a property is a producer's only: a consumer set up with it
    warns that it will ignore it (CONFWARN). Asked of a consumer that connects nowhere."""
    from confluent_kafka import Consumer

    collect = _Collect()
    probe = logging.getLogger("changejoin.config.consumer-probe")
    probe.propagate = False
    probe.addHandler(collect)
    try:
        consumer = Consumer({"group.id": "changejoin-probe", key: value, "logger": probe})
        consumer.poll(0)  # delivers the client's queued log lines to the logger
        consumer.close()
    except Exception:  # noqa: BLE001 - an invalid property is refused elsewhere (librdkafka_property_error)
        return False
    finally:
        probe.removeHandler(collect)
    return any("is a producer property" in m for m in collect.messages)


def librdkafka_property_error(key: str, value: str) -> str | None:
    """librdkafka's own objection to one client property (unknown name, invalid value), or None.

    librdkafka checks each property as it is set, before it creates a client; the check runs on a
    producer with no bootstrap servers (so nothing connects) and without security.protocol (so no
    TLS or SASL setup runs, which would read certificate files and credentials that may only exist
    where the service runs). An error raised while creating the client, after every property was
    accepted, is not about the property and is ignored."""
    from confluent_kafka import KafkaException, Producer

    try:
        Producer({key: value, "logger": _quiet_logger()})
    except KafkaException as err:
        message = err.args[0].str() if err.args and hasattr(err.args[0], "str") else str(err)
        if message.startswith("Failed to create"):
            return None
        return message.strip().replace(" for configuration property", " for").rstrip(":")
    except (TypeError, ValueError) as err:
        return str(err)
    return None


# -- the environment ------------------------------------------------------------------------------
# Variables with one of the service's prefixes that belong to the platform, not to changejoin: the
# Spark and Kafka launch scripts (spark-env.sh, kafka-run-class.sh), the Spark and Python images, and
# Spark on Kubernetes (what the driver sets on executor pods). They are never read, and never refused.
FOREIGN_ENV_VARS = frozenset({
    # Spark: installation, launch scripts and spark-env.sh
    "SPARK_HOME", "SPARK_CONF_DIR", "SPARK_CONF_FILE", "SPARK_LOCAL_DIRS", "SPARK_LOCAL_IP",
    "SPARK_LOCAL_HOSTNAME", "SPARK_PUBLIC_DNS", "SPARK_LOG_DIR", "SPARK_LOG_MAX_FILES", "SPARK_PID_DIR",
    "SPARK_IDENT_STRING", "SPARK_NICENESS", "SPARK_NO_DAEMONIZE", "SPARK_USER", "SPARK_SUBMIT_OPTS",
    "SPARK_DIST_CLASSPATH", "SPARK_CLASSPATH", "SPARK_EXTRA_CLASSPATH", "SPARK_MOUNTED_CLASSPATH",
    "SPARK_SCALA_VERSION", "SPARK_ENV_LOADED", "SPARK_PRINT_LAUNCH_COMMAND", "SPARK_PREPEND_CLASSES",
    "SPARK_TESTING", "SPARK_PREFER_IPV6", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED",
    "SPARK_VERSION", "SPARK_TGZ_URL", "SPARK_TGZ_ASC_URL", "SPARK_UID",
    "SPARK_DRIVER_MEMORY", "SPARK_EXECUTOR_MEMORY", "SPARK_EXECUTOR_CORES", "SPARK_EXECUTOR_INSTANCES",
    "SPARK_DAEMON_MEMORY", "SPARK_DAEMON_JAVA_OPTS", "SPARK_DAEMON_CLASSPATH", "SPARK_HISTORY_OPTS",
    "SPARK_SHUFFLE_OPTS", "SPARK_MASTER_HOST", "SPARK_MASTER_PORT", "SPARK_MASTER_WEBUI_PORT",
    "SPARK_MASTER_OPTS", "SPARK_WORKER_CORES", "SPARK_WORKER_MEMORY", "SPARK_WORKER_PORT",
    "SPARK_WORKER_WEBUI_PORT", "SPARK_WORKER_DIR", "SPARK_WORKER_OPTS",
    # PySpark: what it reads, and what SparkContext sets in its own process (inherited by children)
    "SPARK_AUTH_SOCKET_TIMEOUT", "SPARK_BUFFER_SIZE", "SPARK_REUSE_WORKER", "SPARK_SIMPLIFIED_TRACEBACK",
    "SPARK_HIDE_TRACEBACK", "SPARK_TRACEBACK_WITH_LOCALS", "SPARK_PYTHON_RUNTIME", "SPARK_EXECUTOR_URI",
    "SPARK_ANSI_SQL_MODE", "SPARK_API_MODE", "SPARK_PIPELINED_UDF", "SPARK_PIPELINED_UDF_QUEUE_DEPTH",
    "SPARK_LOCAL_CONNECT_DISCOVERY", "SPARK_LOCAL_CONNECT_REUSE", "SPARK_GENERATE_GOLDEN_FILES",
    "SPARK_ENV_SH", "SPARK_JARS_DIR", "SPARK_BEELINE_OPTS",
    # Spark on Kubernetes: the driver's and executors' pod environment
    "SPARK_K8S_CMD", "SPARK_DRIVER_BIND_ADDRESS", "SPARK_DRIVER_URL", "SPARK_EXECUTOR_ID",
    "SPARK_EXECUTOR_POD_IP", "SPARK_EXECUTOR_POD_NAME", "SPARK_EXECUTOR_DIRS", "SPARK_APPLICATION_ID",
    "SPARK_RESOURCE_PROFILE_ID",
    # Kafka's launch scripts (kafka-run-class.sh)
    "KAFKA_HOME", "KAFKA_HEAP_OPTS", "KAFKA_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_LOG4J_OPTS",
    "KAFKA_JMX_OPTS", "KAFKA_GC_LOG_OPTS", "KAFKA_DEBUG", "LOG_DIR",
})
# Spark on Kubernetes passes JVM options to executors as SPARK_JAVA_OPT_0, _1, ...; PySpark's Spark
# Connect client reads SPARK_CONNECT_* (mode, token, log level, ...).
_FOREIGN_PATTERN = re.compile(r"^(SPARK_JAVA_OPT_\d+|SPARK_CONNECT_[A-Z0-9_]+)$")
# Kubernetes service links (a Service "kafka" in the namespace gives KAFKA_SERVICE_HOST,
# KAFKA_PORT=tcp://..., KAFKA_PORT_9092_TCP_ADDR, ...), unless the pod sets enableServiceLinks: false.
_SERVICE_LINK = re.compile(r"^[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)$")
_SERVICE_LINK_PORT = re.compile(r"^(tcp|udp|sctp)://[^\s]+:\d+$")


def env_var_names() -> set[str]:
    """Every exact variable name the service reads (prefixed families: :data:`ENV_PREFIXES`)."""
    return {info.alias for info in Settings.model_fields.values() if info.alias}


def required_env_var_names() -> set[str]:
    return {info.alias for info in Settings.model_fields.values() if info.alias and info.is_required()}


def own_prefixes() -> tuple[str, ...]:
    """The first word of each variable the service reads (LEFT_, STATE_, KAFKA_, SPARK_, ...): an
    unknown variable starting with one of them is taken for a misspelt one."""
    return tuple(sorted({name.split("_", 1)[0] + "_" for name in env_var_names()}))


def is_foreign_env_var(name: str, value: str = "") -> bool:
    """A variable with one of the service's prefixes that the platform sets (:data:`FOREIGN_ENV_VARS`)."""
    if name in FOREIGN_ENV_VARS or _FOREIGN_PATTERN.match(name) or _SERVICE_LINK.match(name):
        return True
    return name.endswith("_PORT") and bool(_SERVICE_LINK_PORT.match(value.strip()))


def unknown_env_vars(environ: Mapping[str, str]) -> list[str]:
    """One problem per variable that looks like the service's but is none of its variables,
    naming the closest variable it has."""
    names = env_var_names()
    prefixes = own_prefixes()
    candidates = sorted(names) + [KAFKA_CLIENT_PREFIX + "<PROPERTY>", SPARK_CONF_PREFIX + "<key>"]
    problems = []
    for name, value in sorted(environ.items()):
        if name in names or not name.startswith(prefixes) or is_foreign_env_var(name, value):
            continue
        if name.startswith(ENV_PREFIXES) and len(name) > max(len(p) for p in ENV_PREFIXES if name.startswith(p)):
            continue
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else " (see docs/configuration.md)"
        problems.append(f"{name}: not a changejoin variable{hint}")
    return problems


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the configuration from ``environ`` (default: the process environment).

    Every problem is reported at once: misspelt variables, then invalid values."""
    environ = os.environ if environ is None else environ
    names = env_var_names()
    values: dict[str, object] = {k: v for k, v in environ.items() if k in names and v != ""}
    values["kafka_client"] = {
        k[len(KAFKA_CLIENT_PREFIX):].lower().replace("_", "."): v
        for k, v in environ.items()
        if k.startswith(KAFKA_CLIENT_PREFIX) and len(k) > len(KAFKA_CLIENT_PREFIX)
    }
    values["spark_conf"] = {
        k[len(SPARK_CONF_PREFIX):].replace("_", "."): v
        for k, v in environ.items()
        if k.startswith(SPARK_CONF_PREFIX) and len(k) > len(SPARK_CONF_PREFIX) and not is_foreign_env_var(k, v)
    }
    lines = unknown_env_vars(environ)
    try:
        settings = Settings.model_validate(values)
    except ValidationError as err:
        lines += _explain(err)
    if lines:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(lines))
    return settings


def _explain(err: ValidationError) -> list[str]:
    lines = []
    for problem in err.errors():
        where = problem["loc"][0] if problem["loc"] else None
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "missing":
            message = "required but not set"
        if where:
            shown = problem.get("input")
            suffix = (f" (got {redact(str(where), shown)!r})"
                      if isinstance(shown, (str, int)) and problem["type"] != "missing" else "")
            lines.append(f"{where}: {message}{suffix}")
        else:
            lines.extend(message.split(_PROBLEM_SEPARATOR))
    return lines


# -- what the plan does not use ---------------------------------------------------------------------
def unused_settings(settings: Settings, plan) -> list[str]:
    """Warnings for variables that are set but that the plan (``plan.JoinPlan``) does not read, and
    for values that are legal but surprising.
    Combinations the plan cannot run at all are errors of ``plan.build_plan`` instead."""
    kind = plan.kind
    given = {Settings.model_fields[name].alias for name in settings.model_fields_set if Settings.model_fields[name].alias}
    warnings = []

    def warn(var: str, why: str) -> None:
        if var in given:
            warnings.append(f"{var} is set but not used: {why}")

    if kind == "regular":
        why = "it applies to event-time temporal joins (FOR SYSTEM_TIME AS OF <left>.<time column>) only"
        for var in ("RIGHT_EVENT_TIME_COLUMN", "LEFT_WATERMARK_DELAY", "RIGHT_WATERMARK_DELAY", "IDLE_TIMEOUT"):
            warn(var, f"JOIN_SQL is a regular join; {why}")
    elif kind == "temporal_processing_time":
        for var in ("LEFT_WATERMARK_DELAY", "RIGHT_WATERMARK_DELAY", "IDLE_TIMEOUT"):
            warn(var, "a processing-time temporal join has no watermarks")
    if kind == "lookup":
        if plan.left.changelog_mode == "append":
            for var in ("LEFT_STATE_TTL", "STATE_TTL"):
                warn(var, "a lookup join over an append-only input keeps no state")
    elif kind != "regular":
        for var in ("LEFT_STATE_TTL", "RIGHT_STATE_TTL"):
            warn(var, "per-side TTLs apply to regular joins; a temporal join's state retention is STATE_TTL")
    for side in (plan.left, plan.right):
        name = "LEFT" if side.side == 0 else "RIGHT"
        nullable = [side.columns[i] for i in (side.primary_key or ()) if side.nullable[i]]
        if nullable and side.changelog_mode == "upsert":
            warnings.append(f"{name}_PRIMARY_KEY: {', '.join(nullable)} may be NULL in the {name.lower()} input's "
                            f"schema; a record whose key is NULL goes to the dead-letter topic "
                            f"(null_in_required_column). Flink requires primary key columns NOT NULL")
    if not settings.exactly_once:
        for var in ("KAFKA_TRANSACTIONAL_ID_PREFIX", "KAFKA_TRANSACTION_TIMEOUT_MS", "PROGRESS_TOPIC"):
            warn(var, f"it applies to DELIVERY=exactly-once only (DELIVERY={settings.delivery})")
    for side in (plan.left, plan.right):
        var = f"{'LEFT' if side.side == 0 else 'RIGHT'}_KEY_FORMAT"
        if not format_of(side.format).message_keys:
            warn(var, f"a {side.format} input is keyed by the primary key in its envelopes, not by its message keys")
        elif not side.direct_upsert:
            warn(var, "message keys are read only for the tombstones of an upsert input whose join key is "
                      "its primary key, in a regular join")
    return warnings
