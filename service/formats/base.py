"""What an input format is: the questions the configuration, the catalog, the planner, ``check-config``
and the decode step ask a format, answered once per format (``service/formats/__init__.py`` lists them).

A format is a **change protocol** (how a record says what changed: a RowKind header, a Debezium
envelope's ``op``) over an **encoding** (the bytes: Avro by a schema file or a registry, JSON), as
RisingWave's ``FORMAT ... ENCODE ...`` and Flink's format factories keep them. Each tenant declares:

- its name (the value of ``LEFT_FORMAT`` / ``RIGHT_FORMAT``) and the changelog modes it accepts;
- where its reader schema comes from (:class:`SchemaSource`) and how it is found
  (:meth:`Format.reader_schema`, given the I/O of the driver's catalog as a :class:`SchemaSources`);
- the source types its columns carry (:meth:`Format.source_types`), the columns it cannot read;
- a decoder (:meth:`Format.decoder`) whose ``record_changes(record)`` turns a record into changes, a
  skipped record (why), or raises ``DeadLetterError``; the decode step applies the shared rules
  (required columns, event time, JOIN_SQL's input calc, grouping) to every change, whatever its format.

Nothing here reads the configuration, the plan or a server: a format receives values (a side of
the plan, an :class:`InputSide`, the catalog's sources) and answers.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from ..errors import ChangejoinError


class SchemaSource(Enum):
    """Where an input's reader schema comes from."""

    FILE = "file"  # *_SCHEMA_FILE
    REGISTRY = "registry"  # the Schema Registry's latest schema of <topic>-value
    MESSAGES = "messages"  # the schema the topic's newest message embeds


class ReaderSchemaError(ValueError, ChangejoinError):
    """An input's reader schema could not be found: the message is the one line the user reads
    (naming the variable to fix); the catalog raises it as a ``PlanError``."""


@dataclass(frozen=True)
class InputSide:
    """An input as its format needs it to find the reader schema."""

    side: str  # "LEFT" or "RIGHT"
    topic: str
    schema_file: str | None
    record_name: str = ""  # the Avro record name of a schema the format derives (``plan.record_name``)

    @property
    def schema_file_var(self) -> str:
        return f"{self.side}_SCHEMA_FILE"

    @property
    def format_var(self) -> str:
        return f"{self.side}_FORMAT"


class SchemaSources(Protocol):
    """The driver's I/O a format may ask for its reader schema (``service/catalog.py``); each
    raises the server's or the file's error as it comes."""

    def schema_file(self, path: str) -> dict: ...

    def latest(self, subject: str) -> Any: ...

    def newest_values(self, topic: str) -> list[bytes]: ...


class Decoder(Protocol):
    """One input's records -> changes, on the workers (``service/decode.py``)."""

    def record_changes(self, record) -> tuple[list[tuple[int, tuple | None]], str | None]:
        """(changes, why skipped): the record's changes as (RowKind value, row) (a row None: a
        delete known by its message key alone), or none and why the record is skipped; raises
        ``DeadLetterError`` for a record the format cannot read."""
        ...

    def message_key(self, record, row: tuple | None) -> bytes:
        """The key an upsert input's change is normalized under (its primary key)."""
        ...


class Format:
    """An input format; the tenants subclass it (``rowkind.py``, ``debezium_json.py``,
    ``debezium_avro.py``)."""

    name: str
    #: The change protocol, as check-config and errors name it ("RowKind", "Debezium").
    protocol: str
    #: The ``*_CHANGELOG_MODE`` values it reads.
    changelog_modes: tuple[str, ...] = ("retract", "upsert", "append")
    #: Where its reader schema may come from, a schema file first when one is given.
    schema_sources: tuple[SchemaSource, ...]
    #: Whether it reads message keys (an upsert input's tombstones, ``*_KEY_FORMAT``).
    message_keys: bool = False
    #: Whether the change kinds travel in each message (a changelog unless declared append), so
    #: that ``*_CHANGELOG_MODE`` unset follows the primary key (:meth:`changelog_mode`).
    changes_in_messages: bool = False
    #: The column of the envelope's time (``*_EVENT_TIME_COLUMN`` may name it), None without one.
    envelope_time: str | None = None
    #: The Avro type of the envelope's time column.
    envelope_time_type: dict | None = None

    def schema_source(self, schema_file: str | None) -> SchemaSource:
        """Where this input's reader schema comes from, ``*_SCHEMA_FILE`` given or not."""
        if schema_file and SchemaSource.FILE in self.schema_sources:
            return SchemaSource.FILE
        return next(s for s in self.schema_sources if s is not SchemaSource.FILE)

    def config_problems(self, side: InputSide, registry_url: str | None) -> list[str]:
        """What the configuration of an input of this format lacks or sets in vain."""
        return []

    def reader_schema(self, side: InputSide, sources: SchemaSources) -> dict:
        """The input's reader schema (an Avro record of its row); raises ReaderSchemaError."""
        raise NotImplementedError

    def source_types(self, schema: dict) -> dict[str, str] | None:
        """Each column's type name in the source (how its values are encoded), if the format has them."""
        return None

    def unreadable_columns(self, schema: dict) -> dict[str, str]:
        """Columns of the reader schema the format does not read, with why."""
        return {}

    def changelog_mode(self, declared: str, given: bool, primary_key) -> str:
        """The input's changelog mode: ``*_CHANGELOG_MODE`` (``declared``, ``given`` when set)."""
        return declared

    def explain(self, side) -> str:
        """How check-config says a side of the plan is read."""
        return side.changelog_mode

    def decoder(self, side, registry, rowkind_header: str) -> Decoder:
        """The decoder of one side of the plan (``plan.SidePlan``), on a worker."""
        raise NotImplementedError


def schema_file(side: InputSide, sources: SchemaSources) -> dict:
    """The reader schema ``*_SCHEMA_FILE`` holds."""
    try:
        return sources.schema_file(side.schema_file)
    except Exception as err:  # noqa: BLE001 - the file's or the parser's error, in one line
        raise ReaderSchemaError(f"{side.schema_file_var}: {err}") from None
