"""The lookup step without Spark or a database: which rows are looked up, what travels on, and
the pinned answers a retry or a replay reuses."""
from __future__ import annotations

import errno
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
        rows = {k: tuple(r for r in self.table if r[0] == k[0]) for k in keys if k[0] not in ("bad", "nan")}
        return SimpleNamespace(rows=rows, invalid={k: "column product (text): not valid" for k in keys if k[0] == "bad"},
                               bad_rows={k: "table products, column price (numeric(10,2)): Decimal('NaN') is not..."
                                         for k in keys if k[0] == "nan"})


#: The columns a stage reads: (name, Avro type, nullable, PostgreSQL type).
COLUMNS = (("product", "string", False, "text"), ("name", ["null", "string"], True, "text"))


def stage(table, mode="retract", columns=COLUMNS):
    s = lookup.LookupStage.__new__(lookup.LookupStage)
    s.plan = SimpleNamespace(left=SimpleNamespace(topic="orders", changelog_mode=mode))
    s.key_of = lambda row: (row[1],)
    s.client = FakeClient(table)
    s.columns = columns
    s.key = (("product",), ("product",))
    return s


TABLE = [("p1", "apple"), ("p1", "apple-2"), ("p2", "pear")]


def test_accumulate_rows_get_their_matches_retractions_none_and_invalid_keys_become_dead_letters():
    s = stage(TABLE)
    rows = [envelope(I, (1, "p1"), 0), envelope(UB, (2, "p2"), 1), envelope(UA, (2, "p9"), 2),
            envelope(I, (3, "bad"), 3), envelope(I, (4, None), 4)]
    envelopes, entries = lookup._unpacked(rows)
    keys = {s.key_of(e[3]) for e in entries if e[2] in (I, UA) and None not in s.key_of(e[3])}
    found, invalid, bad, reused = s.answers(keys, None)
    out = list(lookup._answered(s, envelopes, found, invalid, bad))
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
    found, invalid, bad, _ = s.answers({("p2",), ("bad",)}, None)
    out = list(lookup._answered(s, envelopes, found, invalid, bad))
    assert [o[1] for o in out] == [int(Tag.DEAD_LETTER), int(Tag.PACKED)]
    kept = loads(out[1][3])
    assert [(e[2], e[3]) for e in kept] == [(I, ((1, "p2"), (("p2", "pear"),))), (D, ((1, "p2"), None))]


def test_the_first_answer_published_is_the_one_every_attempt_uses(tmp_path):
    pin = str(tmp_path / "lookups" / "7" / "digest")
    first = stage(TABLE)
    assert first.answers({("p1",)}, pin)[3] is False
    changed = stage([("p1", "renamed")])  # the table changed before a retry or a replay
    found, _, _, reused = changed.answers({("p1",)}, pin)
    assert reused and found == {("p1",): (("p1", "apple"), ("p1", "apple-2"))} and changed.client.asked == []
    # two attempts racing: the one that publishes second uses the first one's answer
    racer = stage([("p1", "other")])
    os.unlink(pin)
    asked = racer.client.lookup

    def lookup_while_another_attempt_publishes(keys):
        lookup._publish_pin(pin, {"format": 2, "columns": COLUMNS, "key": first.key,
                                  "rows": {("p1",): (("p1", "x"),)}, "invalid": {}, "bad_rows": {}})
        return asked(keys)

    racer.client.lookup = lookup_while_another_attempt_publishes
    found, _, _, reused = racer.answers({("p1",)}, pin)
    assert reused and found == {("p1",): (("p1", "x"),)} and racer.client.asked == [{("p1",)}]
    assert os.listdir(tmp_path / "lookups" / "7") == ["digest"]  # no temporary file left


def test_a_pin_names_its_columns_and_a_replay_joins_them_by_name(tmp_path):
    """The columns a replay reads are taken from a pin by name: reordered, a nullable one read
    anew is NULL (as in the join's stored rows); one read anew that is NOT NULL, or one whose type
    changed to other values, stops the task with one line saying what to do."""
    pin = str(tmp_path / "lookups" / "7" / "digest")
    stage(TABLE).answers({("p1",)}, pin)
    price = ("price", ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}], True,
             "numeric(10,2)")
    wider = stage([], columns=(COLUMNS[1], price, COLUMNS[0]))
    found, _, _, reused = wider.answers({("p1",)}, pin)
    assert reused and found == {("p1",): (("apple", None, "p1"), ("apple-2", None, "p1"))} and wider.client.asked == []
    strict = stage([], columns=COLUMNS + (("tier", "string", False, "text"),))
    with pytest.raises(lookup.PinMismatch) as stopped:
        strict.answers({("p1",)}, pin)
    assert str(stopped.value) == (
        f"{pin}: the lookups pinned for micro-batch 7 were read without column tier, which the join now reads and is "
        f"NOT NULL: a replay cannot join them; restore it until micro-batch 7 is committed, or delete "
        f"{tmp_path / 'lookups' / '7'} (the replay then reads the table as it is now, and may join other rows than "
        "its first attempt did)")
    retyped = stage([], columns=(COLUMNS[0], ("name", ["null", "int"], True, "integer")))
    with pytest.raises(lookup.PinMismatch, match="hold column name as text .*, the join now reads it as integer"):
        retyped.answers({("p1",)}, pin)
    widened = stage([], columns=(COLUMNS[0], ("name", ["null", "string"], True, "character varying(50)")))
    assert widened.answers({("p1",)}, pin)[0] == {("p1",): (("p1", "apple"), ("p1", "apple-2"))}


def test_pins_are_cleaned_by_micro_batch_not_by_file_time(tmp_path):
    """Micro-batch N runs once N-1 is committed: the pins of the micro-batches before it go, those
    of N stay whatever their files' times (an NFS server's clock may lag the driver's)."""
    a = lookup._ranges([entry(I, (1, "p1"), 5, part=1), entry(I, (1, "p1"), 3, part=1), entry(I, (1, "p1"), 9)])
    assert a == [(0, 9, 9, 1), (1, 3, 5, 2)]
    directory = tmp_path / "pins"
    for batch in (3, 4, 5):
        (directory / str(batch)).mkdir(parents=True)
        (directory / str(batch) / "digest").write_bytes(b"x")
    os.utime(directory / "5" / "digest", (1000, 1000))  # written "long ago" by a lagging clock
    (directory / "0123abcd").write_bytes(b"x")  # a pin of an earlier changejoin (no micro-batch directory)
    (directory / "volume").write_text("token")
    assert lookup.clean_pins(str(directory), below=5) == 2
    assert sorted(os.listdir(directory)) == ["5", "volume"] and os.listdir(directory / "5") == ["digest"]
    assert lookup.clean_pins(str(tmp_path / "missing"), below=5) == 0


def test_the_checkpoint_volume_needs_hard_links_and_must_be_the_drivers(tmp_path, monkeypatch):
    directory = str(tmp_path / "cp" / "changejoin" / "lookups")
    token = lookup.prepare_pins(directory, str(tmp_path / "cp"))
    lookup.check_volume(directory, token)  # the driver's directory: fine
    assert sorted(os.listdir(directory)) == ["volume"]
    with pytest.raises(lookup.PinVolumeError) as refused:
        lookup.check_volume(str(tmp_path / "elsewhere"), token)  # an executor's own disk
    assert "does not see the driver's checkpoint directory" in str(refused.value)
    assert "mount at the same path" in str(refused.value) and "is missing" in str(refused.value)
    with pytest.raises(lookup.PinVolumeError, match="holds the token of another start"):
        lookup.check_volume(directory, "an earlier start's token")

    def no_links(src, dst):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    with pytest.raises(lookup.PinVolumeError) as refused:
        lookup.prepare_pins(directory, "/mnt/azure/cp")
    assert str(refused.value).startswith("CHECKPOINT_LOCATION=/mnt/azure/cp: its file system has no hard links "
                                         "(Operation not permitted)")
    assert sorted(os.listdir(directory)) == ["volume"]  # no probe left behind


def test_a_record_that_cannot_be_joined_is_a_dead_letter_and_on_an_upsert_input_retracts_its_key():
    """A key the column cannot hold, or whose table rows the join cannot take (an 'infinity'
    date, a numeric NaN), makes its record a dead letter naming why. On an upsert input the
    record replaced its key's previous version: it also travels on as the key's tombstone, so the
    join retracts what that version joined (and not leave it live)."""
    from operators import JoinType
    from operators.lookup import Identity, LookupJoin, LookupJoinSpec
    from operators.testing import LocalRunner

    rows = [envelope(UA, (1, "p1"), 0), envelope(UA, (1, "bad"), 1), envelope(UA, (2, "p2"), 2),
            envelope(UA, (2, "nan"), 3)]
    for mode in ("retract", "upsert"):
        s = stage(TABLE, mode=mode)
        envelopes, entries = lookup._unpacked(rows)
        found, invalid, bad, _ = s.answers({("p1",), ("bad",), ("p2",), ("nan",)}, None)
        out = list(lookup._answered(s, envelopes, found, invalid, bad))
        letters = [loads(o[3]) for o in out if o[1] == int(Tag.DEAD_LETTER)]
        assert [(letter["reason"], letter["source"]) for letter in letters] == [
            ("lookup_key_invalid", ("orders", 0, 1)), ("lookup_row_invalid", ("orders", 0, 3))]
        assert letters[1]["detail"].startswith("table products, column price (numeric(10,2)): Decimal('NaN')")
        joined = [(o[2], loads(o[3])) for o in out if o[1] != int(Tag.DEAD_LETTER)]
        if mode == "retract":
            assert joined == [(UA, ((1, "p1"), found[("p1",)])), (UA, ((2, "p2"), found[("p2",)]))]
            continue
        assert joined == [(UA, ((1, "p1"), found[("p1",)])), (D, (None, None)),
                          (UA, ((2, "p2"), found[("p2",)])), (D, (None, None))]
        join = LookupJoin(LookupJoinSpec(JoinType.LEFT, 2, 2, Identity.KEY, upsert=True))
        runner = LocalRunner(join, key=lambda record: "order 1")
        runner.process([(0, kind, payload) for kind, payload in joined[:2]])
        assert [(kind, row) for kind, row in runner.drain()[0]] == [
            (I, (1, "p1", "p1", "apple")), (I, (1, "p1", "p1", "apple-2")),
            (D, (1, "p1", "p1", "apple")), (D, (1, "p1", "p1", "apple-2"))]


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
