"""Flink's types: how an expression's type is derived (the DECIMAL rules of LogicalTypeMerging, the
common type of CASE branches) and how columns map to and from Avro."""
import pytest

from expressions import types as T
from expressions.types import from_avro, parse_type


def dec(p, s):
    return T.decimal(p, s)


@pytest.mark.parametrize("rule, a, b, expected", [
    # LogicalTypeMerging's own cases (Flink's LogicalTypeMergingTest)
    (T.decimal_divide, dec(32, 8), dec(38, 8), (38, 6)),
    (T.decimal_divide, dec(30, 20), dec(30, 20), (38, 8)),
    (T.decimal_multiply, dec(30, 10), dec(30, 10), (38, 6)),
    (T.decimal_multiply, dec(30, 20), dec(30, 20), (38, 17)),
    (T.decimal_multiply, dec(38, 2), dec(38, 3), (38, 5)),
    (T.decimal_modulo, dec(30, 10), dec(30, 10), (30, 10)),
    # what Flink 2.3 derived for DECIMAL(10, 2) columns (the probes of the differential test)
    (T.decimal_divide, dec(10, 2), T.INT, (21, 13)),
    (T.decimal_multiply, dec(10, 2), dec(10, 2), (21, 4)),
    (T.decimal_add, dec(10, 2), T.INT, (13, 2)),
    (T.decimal_add, dec(10, 2), dec(2, 1), (11, 2)),
    (T.decimal_multiply, dec(10, 2), dec(2, 1), (13, 3)),
    (T.decimal_multiply, dec(38, 10), dec(38, 10), (38, 6)),
])
def test_decimal_arithmetic_types_follow_flink(rule, a, b, expected):
    assert rule(a, b) == expected


def test_round_keeps_the_integral_digits_and_one_more():
    assert T.decimal_round(10, 2, 1) == (10, 1)
    assert T.decimal_round(38, 2, 1) == (38, 1)
    assert T.decimal_round(10, 2, -1) == (9, 0)
    assert T.decimal_round(10, 2, 5) == (10, 2)


@pytest.mark.parametrize("types, expected", [
    (["DECIMAL(10, 2)", "DECIMAL(4, 3) NOT NULL"], "DECIMAL(11, 3)"),
    (["DECIMAL(2, 1) NOT NULL", "INT NOT NULL"], "DECIMAL(11, 1) NOT NULL"),
    (["INT", "BIGINT"], "BIGINT"),
    (["DECIMAL(10, 2)", "DOUBLE"], "DOUBLE"),
    (["CHAR(1) NOT NULL", "CHAR(3) NOT NULL"], "VARCHAR(3) NOT NULL"),  # no padding, as Flink
    (["CHAR(3) NOT NULL", "CHAR(3) NOT NULL"], "CHAR(3) NOT NULL"),
    (["STRING", "NULL"], "STRING"),
    (["TIMESTAMP(3)", "TIMESTAMP(6) NOT NULL"], "TIMESTAMP(6)"),
])
def test_the_common_type_of_branches(types, expected):
    assert str(T.common_type([parse_type(t) for t in types])) == expected


def test_types_with_nothing_in_common():
    assert T.common_type([T.STRING, T.INT]) is None
    assert not T.comparable(T.STRING, T.INT) and T.comparable(T.INT, dec(10, 2))


@pytest.mark.parametrize("avro, nullable, expected", [
    ("int", False, "INT NOT NULL"),
    ("long", True, "BIGINT"),
    ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}, False, "DECIMAL(10, 2) NOT NULL"),
    ({"type": "long", "logicalType": "timestamp-millis"}, True, "TIMESTAMP(3)"),
    ({"type": "long", "logicalType": "timestamp-micros"}, True, "TIMESTAMP(6)"),
    ({"type": "int", "logicalType": "date"}, False, "DATE NOT NULL"),
    ("string", True, "STRING"),
    (["null", "double"], True, "DOUBLE"),
])
def test_avro_columns_are_read_as_flinks_avro_format_reads_them(avro, nullable, expected):
    assert str(from_avro(avro, nullable)) == expected


def test_a_type_flink_has_no_scalar_for_is_other_and_keeps_its_avro():
    enum = {"type": "enum", "name": "E", "symbols": ["A"]}
    t = from_avro(enum, False)
    assert t.root == "OTHER" and t.avro() == enum and parse_type(str(t)) == t


@pytest.mark.parametrize("text, avro", [
    ("DECIMAL(12, 3)", {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 3}),
    ("TIMESTAMP(3)", {"type": "long", "logicalType": "timestamp-millis"}),
    ("TIMESTAMP(6)", {"type": "long", "logicalType": "timestamp-micros"}),
    ("DATE", {"type": "int", "logicalType": "date"}),
    ("CHAR(32) NOT NULL", "string"), ("BIGINT", "long"), ("INT", "int"), ("DOUBLE", "double"), ("BOOLEAN", "boolean"),
])
def test_derived_types_are_written_as_flinks_avro_format_writes_them(text, avro):
    assert parse_type(text).avro() == avro


def test_types_read_back_as_written():
    for text in ("DECIMAL(38, 10) NOT NULL", "STRING", "VARCHAR(5)", "TIMESTAMP(0) NOT NULL", "BYTES", "INTERVAL SECOND(3)"):
        assert str(parse_type(text)) == text
