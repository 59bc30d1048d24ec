"""The dead letter: one list of reasons, the one docs/semantics.md gives; letters rendered as records."""
import re
from pathlib import Path

from service import deadletters
from service.deadletters import Reason
from service.kafka_records import record_bytes
from service.source import KafkaRecord

SEMANTICS = Path(__file__).resolve().parents[2] / "docs" / "semantics.md"


def test_the_semantics_reference_lists_exactly_the_reasons_the_service_uses():
    text = SEMANTICS.read_text()
    section = text[text.index("Reasons:"):text.index("They are counted per reason")]
    assert set(re.findall(r"`([a-z_]+)`", section)) == {r.value for r in Reason}


def test_a_letter_from_a_record_keeps_its_key_value_and_headers_and_says_why_and_where_from():
    record = KafkaRecord("orders", 2, 41, 1000, b"k", b"\x00bad", [("rowkind", b"+I")])
    key, value, headers = deadletters.render(deadletters.from_record(record, Reason.UNDECODABLE, "not Avro"))
    assert (key, value) == (b"k", b"\x00bad")
    assert headers == [("rowkind", b"+I"), ("reason", b"undecodable"), ("reason.detail", b"not Avro"),
                       ("source.topic", b"orders"), ("source.partition", b"2"), ("source.offset", b"41")]


def test_a_late_row_is_written_as_its_record_when_kept_else_as_its_text():
    record = KafkaRecord("orders", 0, 7, 1000, None, b"v", [])
    key, value, headers = deadletters.render(deadletters.late_row(0, (1, "EUR"), deadletters.original(record)))
    assert (key, value) == (None, b"v") and dict(headers)["reason"] == b"late"
    assert dict(headers)["source.offset"] == b"7"

    key, value, headers = deadletters.render(deadletters.late_row(3, (1, "EUR"), None))
    assert (key, value) == (None, None)
    assert headers[:3] == [("row", b"(1, 'EUR')"), ("rowkind", b"-D"), ("reason", b"late")]
    assert "source.topic" not in dict(headers)


def test_a_long_detail_is_cut_to_a_header_size():
    headers = deadletters.reason_headers(Reason.TOO_LARGE, "x" * 5000)
    assert len(dict(headers)["reason.detail"]) == 1000


def test_a_letter_too_large_for_the_producer_drops_its_value_then_key_then_original_headers():
    headers = [("rowkind", b"+I"), ("trace", b"t" * 300)] + deadletters.reason_headers(Reason.UNDECODABLE, "bad")
    small = deadletters.fit(b"k", b"v" * 100, headers, 10_000)
    assert small == (b"k", b"v" * 100, headers)

    key, value, kept = deadletters.fit(b"k" * 100, b"v" * 9_500, headers, 10_000)
    assert (key, value) == (b"k" * 100, None) and kept[:-1] == headers
    assert kept[-1] == ("dropped", b"value (9500 bytes)")
    assert record_bytes(key, value, kept) <= 10_000

    headers[1] = ("trace", b"t" * 1_950)
    key, value, kept = deadletters.fit(b"k" * 2_000, b"v" * 9_000, headers, 2_000)
    assert (key, value) == (None, None)
    assert [name for name, _ in kept] == ["reason", "reason.detail", "dropped"]
    assert kept[-1][1] == b"value (9000 bytes), key (2000 bytes), 2 headers (1952 bytes)"
    assert record_bytes(key, value, kept) <= 2_000
