"""The lookup step without Spark or a database: which rows are looked up, what travels on, and
the pinned answers a retry or a replay reuses."""
from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from service import lookup
from service.envelope import Tag, dumps, join_key_group, loads, packed_envelope

I, UB, UA, D = 0, 1, 2, 3


def entry(kind, row, offset, part=0):
    return (join_key_group((row[0],)), int(Tag.LEFT), kind, row, None, 1000 + offset, part, offset)


def envelope(kind, row, offset, part=0):
    e = entry(kind, row, offset, part)
    return e[:3] + (dumps(row),) + e[4:]


class FakeClient:
    def __init__(self, table):
        self.table, self.asked = table, []

    def lookup(self, keys):
        self.asked.append(set(keys))
        rows = {k: tuple(r for r in self.table if r[0] == k[0]) for k in keys if k[0] != "bad"}
        return SimpleNamespace(rows=rows, invalid={k: "column product (text): not valid" for k in keys if k[0] == "bad"})


def stage(table):
    s = lookup.LookupStage.__new__(lookup.LookupStage)
    s.plan = SimpleNamespace(left=SimpleNamespace(topic="orders"))
    s.key_of = lambda row: (row[1],)
    s.client = FakeClient(table)
    s.project = None
    return s


TABLE = [("p1", "apple"), ("p1", "apple-2"), ("p2", "pear")]


def test_accumulate_rows_get_their_matches_retractions_none_and_invalid_keys_become_dead_letters():
    s = stage(TABLE)
    rows = [envelope(I, (1, "p1"), 0), envelope(UB, (2, "p2"), 1), envelope(UA, (2, "p9"), 2),
            envelope(I, (3, "bad"), 3), envelope(I, (4, None), 4)]
    envelopes, entries = lookup._unpacked(rows)
    keys = {s.key_of(e[3]) for e in entries if e[2] in (I, UA) and None not in s.key_of(e[3])}
    found, invalid, reused = s.answers(keys, None)
    out = list(lookup._answered(s, envelopes, found, invalid))
    assert s.client.asked == [{("p1",), ("p9",), ("bad",)}]  # distinct keys of accumulate rows, no NULL, no -U
    payloads = [loads(o[3]) for o in out]
    assert payloads[0] == ((1, "p1"), (("p1", "apple"), ("p1", "apple-2")))
    assert payloads[1] == ((2, "p2"), None)  # a retraction is answered by the join's state
    assert payloads[2] == ((2, "p9"), ())
    assert out[3][1] == int(Tag.DEAD_LETTER) and payloads[3]["reason"] == "lookup_key_invalid"
    assert payloads[3]["source"] == ("orders", 0, 3) and payloads[3]["row"] == (3, "bad")
    assert payloads[4] == ((4, None), ())  # a NULL key matches nothing
    assert not reused


def test_packed_envelopes_keep_their_entries_in_order():
    s = stage(TABLE)
    packed = packed_envelope(5, [entry(I, (1, "p2"), 0), entry(I, (2, "bad"), 1), entry(D, (1, "p2"), 2)])
    envelopes, entries = lookup._unpacked([packed])
    assert len(entries) == 3
    found, invalid, _ = s.answers({("p2",), ("bad",)}, None)
    out = list(lookup._answered(s, envelopes, found, invalid))
    assert [o[1] for o in out] == [int(Tag.DEAD_LETTER), int(Tag.PACKED)]
    kept = loads(out[1][3])
    assert [(e[2], e[3]) for e in kept] == [(I, ((1, "p2"), (("p2", "pear"),))), (D, ((1, "p2"), None))]


def test_the_first_answer_published_is_the_one_every_attempt_uses(tmp_path):
    pin = str(tmp_path / "lookups" / "digest")
    first = stage(TABLE)
    assert first.answers({("p1",)}, pin)[2] is False
    changed = stage([("p1", "renamed")])  # the table changed before a retry or a replay
    found, _, reused = changed.answers({("p1",)}, pin)
    assert reused and found == {("p1",): (("p1", "apple"), ("p1", "apple-2"))} and changed.client.asked == []
    # two attempts racing: the one that publishes second uses the first one's answer
    loser = lookup._publish_pin(pin, ({("p1",): (("p1", "other"),)}, {}))
    assert loser[0] == {("p1",): (("p1", "apple"), ("p1", "apple-2"))}
    assert [n for n in os.listdir(tmp_path / "lookups")] == ["digest"]  # no temporary file left


def test_the_digest_is_of_the_input_offsets_and_old_pins_are_cleaned(tmp_path):
    a = lookup._ranges([entry(I, (1, "p1"), 5, part=1), entry(I, (1, "p1"), 3, part=1), entry(I, (1, "p1"), 9)])
    assert a == [(0, 9, 9, 1), (1, 3, 5, 2)]
    directory = tmp_path / "pins"
    directory.mkdir()
    (directory / "old").write_bytes(b"x")
    os.utime(directory / "old", (1000, 1000))
    (directory / "new").write_bytes(b"x")
    assert lookup.clean_pins(str(directory), older_than=2000) == 1
    assert os.listdir(directory) == ["new"]
    assert lookup.clean_pins(str(tmp_path / "missing"), older_than=2000) == 0


class CountingClient(FakeClient):
    """A client that counts what it asked, as ``database.LookupClient``; ``fail`` makes a lookup
    fail after its retries, as a database that stays down does."""

    def __init__(self, table):
        super().__init__(table)
        from service.database import LookupStats

        self.stats, self.fail = LookupStats(), False

    def lookup(self, keys):
        self.stats.queries += 1
        if self.fail:
            self.stats.retries += 3
            self.stats.errors["connection"] = self.stats.errors.get("connection", 0) + 4
            raise ConnectionError("the database is down")
        return super().lookup(keys)

    def take_stats(self):
        from service.database import LookupStats

        stats, self.stats = self.stats, LookupStats()
        return stats


def test_a_failed_attempts_lookup_counts_do_not_reach_the_next_tasks_report(monkeypatch):
    """A task that fails leaves its retries and errors in the worker's client; the next task that
    runs in that worker must report only its own (and a stage run again reports a partition once:
    ``pipeline._Counts``)."""
    import pyarrow as pa
    import pyspark

    s = stage(TABLE)
    s.client = CountingClient(TABLE)
    monkeypatch.setattr(lookup, "built", lambda build, config: s)
    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: SimpleNamespace(partitionId=lambda: 3)))
    reports = []
    accumulator = SimpleNamespace(add=reports.append)
    run = lookup.lookup_partition({}, None, accumulator)
    batch = pa.RecordBatch.from_pylist([dict(zip(lookup._FIELDS, envelope(I, (1, "p1"), 0)))],
                                       schema=lookup._arrow_schema())
    s.client.fail = True
    with pytest.raises(ConnectionError):
        list(run([batch]))
    s.client.fail = False
    list(run([batch]))
    (report,) = reports
    assert list(report) == [3]  # by task partition
    assert report[3]["queries"] == 1 and report[3]["retries"] == 0
    assert not any(name.startswith("error:") for name in report[3])
