"""The record writer compiled per schema writes exactly what fastavro writes."""
import io

import fastavro
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.avro import ValueEncoder, compile_record_writer

PRIMITIVES = {
    "boolean": st.booleans(),
    "int": st.integers(-(2**31), 2**31 - 1),
    "long": st.integers(-(2**63), 2**63 - 1),
    "double": st.floats(allow_nan=False),
    "float": st.floats(width=32, allow_nan=False),
    "string": st.text(),
    "bytes": st.binary(),
}
ENUM = {"type": "enum", "name": "Colour", "symbols": ["RED", "GREEN", "BLUE"]}


@st.composite
def schemas_and_rows(draw):
    fields, values = [], []
    for i in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from([*PRIMITIVES, "enum", "null"]))
        avro_type = {**ENUM, "name": f"Colour{i}"} if kind == "enum" else kind
        value = draw(st.sampled_from(ENUM["symbols"]) if kind == "enum" else st.none() if kind == "null"
                     else PRIMITIVES[kind])
        if kind not in ("null", "enum") and draw(st.booleans()):
            avro_type = draw(st.sampled_from([["null", kind], [kind, "null"]]))
            value = draw(st.none() | st.just(value))
        fields.append({"name": f"f{i}", "type": avro_type})
        values.append(value)
    return {"type": "record", "name": "R", "fields": fields}, tuple(values)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas_and_rows())
def test_the_compiled_writer_writes_what_fastavro_writes(schema_and_row):
    schema, row = schema_and_row
    parsed = fastavro.parse_schema(schema)
    expected = io.BytesIO()
    fastavro.schemaless_writer(expected, parsed, {f["name"]: v for f, v in zip(schema["fields"], row)})
    writer = compile_record_writer(schema)
    assert writer is not None
    assert writer(row) == expected.getvalue()
    assert fastavro.schemaless_reader(io.BytesIO(writer(row)), parsed, None) is not None


def test_other_schemas_are_left_to_fastavro_and_wrong_values_get_its_error():
    timestamp = {"type": "long", "logicalType": "timestamp-millis"}
    assert compile_record_writer({"type": "record", "name": "R", "fields": [{"name": "t", "type": timestamp}]}) is None
    assert compile_record_writer({"type": "record", "name": "R", "fields": [{"name": "u", "type": ["int", "string"]}]}) is None
    encoder = ValueEncoder({"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]})
    try:
        encoder.encode(("seven",))
    except ValueError as err:
        assert "cannot encode row as R" in str(err)
    else:
        raise AssertionError("a string is no long")


def test_varints_at_every_length_boundary_are_fastavros():
    schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"}]}
    writer = compile_record_writer(schema)
    edges = [0, 1, 63, 64, 8191, 8192, 1_048_575, 1_048_576, 2**31, 2**62, 2**63 - 1]
    for n in sorted({v for e in edges for v in (e - 1, e, e + 1, -e - 1, -e, -e + 1)
                     if -(2**63) <= v < 2**63}):
        expected = io.BytesIO()
        fastavro.schemaless_writer(expected, schema, {"n": n})
        assert writer((n,)) == expected.getvalue(), n


def test_strings_and_bytes_at_every_length_boundary_are_fastavros():
    """A length below 8192 is looked up in a table, a longer one computed: both as fastavro writes them."""
    schema = {"type": "record", "name": "R", "fields": [{"name": "s", "type": "string"},
                                                        {"name": "b", "type": ["null", "bytes"]},
                                                        {"name": "t", "type": ["string", "null"]}]}
    writer = compile_record_writer(schema)
    for n in (0, 1, 63, 64, 8191, 8192, 8193, 1_048_576):
        for text in ("x" * n, "é" * (n // 2)):  # a length in bytes, not in characters
            row = (text, text.encode()[:n], text)
            expected = io.BytesIO()
            fastavro.schemaless_writer(expected, schema, dict(zip("sbt", row)))
            assert writer(row) == expected.getvalue(), n
