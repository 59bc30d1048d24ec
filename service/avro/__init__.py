"""Avro values in and out: plain Avro bodies or Confluent wire format with a Schema Registry.

Everything here is picklable, because decoders and encoders are built on the driver and shipped
to Spark's Python workers: HTTP sessions and parsed schemas are rebuilt lazily after unpickling.

Hot paths use ``fastavro.schemaless_reader``/``schemaless_writer`` with schemas parsed once;
a decoded record dict becomes a tuple through ``operator.itemgetter`` (one C call per record).

Timestamps: ``timestamp-millis``/``timestamp-micros`` decode to timezone-aware UTC datetimes
(fastavro's default) and encode from aware datetimes exactly. A naive datetime is taken as local
wall-clock time, as Python's ``datetime.timestamp()``, fastavro and PySpark all do;
``to_epoch_millis`` follows the same rule.

The package, one module per job, each importing only those before it: ``schemas`` (errors,
columns, type families, schema files, defaults, event times, the output schema), ``registry``
(Confluent's wire format and the Schema Registry client), ``values`` (decoding: ``ValueDecoder``),
``writer`` (encoding: the compiled record writer and ``ValueEncoder``).
"""

from .registry import SchemaRegistry, SchemaRegistryError, connection_failure
from .schemas import (
    Column,
    DecodeError,
    SchemaError,
    field_defaults,
    load_schema_file,
    output_schema,
    record_columns,
    to_epoch_millis,
    type_family,
)
from .values import ValueDecoder, schema_id_of
from .writer import ValueEncoder, compile_record_writer

__all__ = [
    "Column",
    "DecodeError",
    "SchemaError",
    "SchemaRegistry",
    "SchemaRegistryError",
    "ValueDecoder",
    "ValueEncoder",
    "compile_record_writer",
    "connection_failure",
    "field_defaults",
    "load_schema_file",
    "output_schema",
    "record_columns",
    "schema_id_of",
    "to_epoch_millis",
    "type_family",
]
