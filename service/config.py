"""The service's whole configuration: environment variables, validated once at start.

Everything else in the service receives a :class:`Settings` (or values taken from it) and never
reads the environment itself. Invalid or missing variables raise :class:`ConfigError`, whose
message names each variable to fix.
"""
from __future__ import annotations

import os
import re
from typing import Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

KAFKA_CLIENT_PREFIX = "KAFKA_CLIENT_"
SPARK_CONF_PREFIX = "SPARK_CONF_"
ENV_PREFIXES = (KAFKA_CLIENT_PREFIX, SPARK_CONF_PREFIX)

# librdkafka properties whose values are never printed or logged.
SECRET_PROPERTIES = re.compile(r"(password|secret|key\.pem|token|jaas|credentials)", re.IGNORECASE)


class ConfigError(ValueError):
    """The environment does not describe a runnable service; the message names the variables."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {None: 1, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``"500ms"``, ``"5s"``, ``"2m"``, ``"1h"``, ``"1d"`` or a plain number of milliseconds."""
    match = _DURATION.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a duration (examples: 500ms, 5s, 2m, 1h, 1d, or milliseconds)")
    number, unit = match.groups()
    return int(float(number) * _UNIT_MS[unit.lower() if unit else None])


def _column_list(text: str | None) -> tuple[str, ...] | None:
    if text is None or not text.strip():
        return None
    columns = tuple(c.strip() for c in text.split(","))
    if any(not c for c in columns):
        raise ValueError(f"{text!r} is not a comma-separated list of column names")
    return columns


ChangelogMode = Literal["retract", "upsert", "append"]
KeyFormat = Literal["auto", "avro", "raw"]  # message keys of upsert inputs, see keys.py


class Settings(BaseModel):
    """One field per environment variable; the alias is the variable's name."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid")

    kafka_bootstrap_servers: str = Field(alias="KAFKA_BOOTSTRAP_SERVERS", min_length=1)
    kafka_client: dict[str, str] = Field(default_factory=dict, exclude=True)
    schema_registry_url: str | None = Field(None, alias="SCHEMA_REGISTRY_URL")
    schema_registry_basic_auth_user_info: str | None = Field(None, alias="SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO", repr=False)
    left_topic: str = Field(alias="LEFT_TOPIC", min_length=1)
    right_topic: str = Field(alias="RIGHT_TOPIC", min_length=1)
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
    left_key_format: KeyFormat = Field("auto", alias="LEFT_KEY_FORMAT")
    right_key_format: KeyFormat = Field("auto", alias="RIGHT_KEY_FORMAT")
    rowkind_header: str = Field("rowkind", alias="ROWKIND_HEADER", min_length=1)
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
    max_output_record_bytes: int = Field(1_000_000, alias="MAX_OUTPUT_RECORD_BYTES", gt=0)
    checkpoint_location: str = Field("checkpoints", alias="CHECKPOINT_LOCATION", min_length=1)
    spark_master: str = Field("local[*]", alias="SPARK_MASTER", min_length=1)
    spark_conf: dict[str, str] = Field(default_factory=dict, exclude=True)
    shuffle_partitions: int = Field(8, alias="SHUFFLE_PARTITIONS", ge=1)
    trigger_interval_ms: int = Field(1000, alias="TRIGGER_INTERVAL", ge=0)
    max_records_per_trigger: int | None = Field(100_000, alias="MAX_RECORDS_PER_TRIGGER", ge=1)
    starting_offsets: Literal["earliest", "latest"] = Field("earliest", alias="STARTING_OFFSETS")
    metrics_port: int = Field(9108, alias="METRICS_PORT", ge=0, le=65535)
    ready_max_trigger_intervals: int = Field(10, alias="READY_MAX_TRIGGER_INTERVALS", ge=1)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", alias="LOG_LEVEL")
    log_format: Literal["text", "json"] = Field("text", alias="LOG_FORMAT")

    @field_validator(
        "left_watermark_delay_ms", "right_watermark_delay_ms", "idle_timeout_ms", "state_ttl_ms",
        "left_state_ttl_ms", "right_state_ttl_ms", "trigger_interval_ms", mode="before",
    )
    @classmethod
    def _duration(cls, value):
        return parse_duration_ms(value) if isinstance(value, str) else value

    @field_validator("left_primary_key", "right_primary_key", "output_key", mode="before")
    @classmethod
    def _columns(cls, value):
        return _column_list(value) if isinstance(value, str) else value

    @field_validator("log_level", "log_format", "output_mode", "left_changelog_mode", "right_changelog_mode",
                     "left_key_format", "right_key_format", "starting_offsets", mode="before")
    @classmethod
    def _case(cls, value):
        if not isinstance(value, str):
            return value
        return value.strip().upper() if value.strip().upper() in ("DEBUG", "INFO", "WARNING", "ERROR") else value.strip().lower()

    @model_validator(mode="after")
    def _consistent(self):
        problems = []
        if not self.schema_registry_url and not (self.left_schema_file and self.right_schema_file):
            problems.append(
                "SCHEMA_REGISTRY_URL: set it, or set both LEFT_SCHEMA_FILE and RIGHT_SCHEMA_FILE (plain Avro bodies)"
            )
        for var, path in (("LEFT_SCHEMA_FILE", self.left_schema_file), ("RIGHT_SCHEMA_FILE", self.right_schema_file)):
            if path and not os.path.isfile(path):
                problems.append(f"{var}: no such file {path!r}")
        for side in ("left", "right"):
            if getattr(self, f"{side}_changelog_mode") == "upsert" and not getattr(self, f"{side}_primary_key"):
                problems.append(f"{side.upper()}_PRIMARY_KEY: required when {side.upper()}_CHANGELOG_MODE=upsert")
        if self.output_mode == "upsert" and not self.output_key:
            problems.append("OUTPUT_KEY: required when OUTPUT_MODE=upsert (the output columns forming the upsert key)")
        topics = {"LEFT_TOPIC": self.left_topic, "RIGHT_TOPIC": self.right_topic}
        for var, topic in topics.items():
            if topic in (self.output_topic, self.dead_letter_topic):
                problems.append(f"{var}: {topic!r} is also the output or dead-letter topic")
        if self.left_topic == self.right_topic:
            problems.append("RIGHT_TOPIC: must differ from LEFT_TOPIC")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    # -- derived values --------------------------------------------------------------------------
    @property
    def dead_letter_topic(self) -> str:
        return self.dlq_topic or f"{self.output_topic}.dlq"

    @property
    def left_table_name(self) -> str:
        return self.left_table or self.left_topic

    @property
    def right_table_name(self) -> str:
        return self.right_table or self.right_topic

    @property
    def left_ttl_ms(self) -> int | None:
        return self.left_state_ttl_ms or self.state_ttl_ms

    @property
    def right_ttl_ms(self) -> int | None:
        return self.right_state_ttl_ms or self.state_ttl_ms

    def kafka_properties(self) -> dict[str, str]:
        """librdkafka properties: bootstrap servers plus every ``KAFKA_CLIENT_*`` variable."""
        return {"bootstrap.servers": self.kafka_bootstrap_servers, **self.kafka_client}

    def redacted(self) -> dict[str, object]:
        """The settings as variables, with secret values hidden, for logs and ``check-config``."""
        shown: dict[str, object] = {}
        for name, info in type(self).model_fields.items():
            if info.alias is None:
                continue
            value = getattr(self, name)
            if value is None:
                continue
            secret = "AUTH" in info.alias
            if isinstance(value, tuple):  # column lists, as they are written
                value = ",".join(value)
            shown[info.alias] = "*****" if secret else value
        for key, value in self.kafka_client.items():
            shown[KAFKA_CLIENT_PREFIX + key.upper().replace(".", "_")] = "*****" if SECRET_PROPERTIES.search(key) else value
        for key, value in self.spark_conf.items():
            shown[SPARK_CONF_PREFIX + key.replace(".", "_")] = value
        return shown


def env_var_names() -> set[str]:
    """Every exact variable name the service reads (prefixed families: :data:`ENV_PREFIXES`)."""
    return {info.alias for info in Settings.model_fields.values() if info.alias}


def required_env_var_names() -> set[str]:
    return {info.alias for info in Settings.model_fields.values() if info.alias and info.is_required()}


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the configuration from ``environ`` (default: the process environment)."""
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
        if k.startswith(SPARK_CONF_PREFIX) and len(k) > len(SPARK_CONF_PREFIX)
    }
    try:
        return Settings.model_validate(values)
    except ValidationError as err:
        raise ConfigError(_explain(err)) from None


def _explain(err: ValidationError) -> str:
    lines = []
    for problem in err.errors():
        where = problem["loc"][0] if problem["loc"] else None
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "missing":
            message = "required but not set"
        if where:
            shown = problem.get("input")
            suffix = f" (got {shown!r})" if isinstance(shown, (str, int)) and problem["type"] != "missing" else ""
            lines.append(f"{where}: {message}{suffix}")
        else:
            lines.extend(message.split("; "))
    return "invalid configuration:\n  " + "\n  ".join(lines)
