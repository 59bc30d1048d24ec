"""Input formats, one owner each: how a topic's records become changes of the join's rows.

``FORMATS`` is the registry (name -> :class:`~service.formats.base.Format`), and what asks about a
format asks it: the configuration's accepted values (``config.InputFormat``) and its checks, the
catalog (where each input's reader schema comes from), the planner (changelog modes, source
types, unreadable columns, the envelope's time), ``check-config``'s text, and the decode step,
which runs every format's decoder through one path. The tenants keep the change protocol apart
from the encoding, as RisingWave's ``FORMAT ... ENCODE ...``: ``rowkind`` (a RowKind header over
Avro), and the Debezium protocol (``debezium.py``) over JSON (``debezium-json``) and over
Confluent's Avro (``debezium-avro``), Connect's types shared (``connect.py``).
docs/development.md, "Adding an input format", says how to add one.
"""
from __future__ import annotations

from .base import Decoder, Format, InputSide, ReaderSchemaError, SchemaSource, SchemaSources
from .debezium import SOURCE_TIME, SOURCE_TIME_TYPE
from .debezium_avro import DebeziumAvro
from .debezium_json import DebeziumJson
from .rowkind import RowKindFormat

#: Every input format by name, in the order the documentation lists them; the first is the default.
FORMATS: dict[str, Format] = {f.name: f for f in (RowKindFormat(), DebeziumJson(), DebeziumAvro())}
NAMES: tuple[str, ...] = tuple(FORMATS)
DEFAULT: str = NAMES[0]


def format_of(name: str) -> Format:
    """The format ``*_FORMAT`` names (config.py accepts no other)."""
    return FORMATS[name]


__all__ = ["DEFAULT", "FORMATS", "NAMES", "SOURCE_TIME", "SOURCE_TIME_TYPE", "Decoder", "Format", "InputSide",
           "ReaderSchemaError", "SchemaSource", "SchemaSources", "format_of"]
