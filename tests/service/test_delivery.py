"""Exactly-once delivery without a broker: what a progress marker says about the micro-batch it was
written for, when a replay may skip a share and when it must stop, a share held whole before its
transaction, what the checkpoint remembers of the transactional ids, the counts a replay reports,
and the dependency floor the transactions rely on."""
from __future__ import annotations

import gc
import json
import re
import tomllib
from pathlib import Path

import pytest

from service import checkpoint
from service.metrics import JoinMetrics
from service.pipeline import REPLAYED, BatchCounts, _Counts, lookup_totals
from service.shipping import Delivery
from service.transactions import (DIGEST_TAG, ProgressMismatch, Share, input_digest, spill_bytes_default,
                                  written_already)

ROOT = Path(__file__).resolve().parents[2]
CONFIG = Delivery(prefix="p", progress_topic="p.progress", timeout_ms=60_000, location="/ck", output_topic="out")


def offsets(ends: dict, timestamp: int = 1000, watermark: int = 0, conf: dict | None = None) -> str:
    """An offset-log entry as Spark writes it: version, metadata, one line per source."""
    metadata = {"batchWatermarkMs": watermark, "batchTimestampMs": timestamp, "conf": conf or {"a": "1"}}
    return "\n".join(["v1", json.dumps(metadata), *(json.dumps(e) for e in ends)]) + "\n"


def records(n: int, kind: str = "+I", start: int = 0):
    for i in range(start, start + n):
        yield ("out", None, b"value %d" % i, [("rowkind", kind.encode()), ("changejoin.batch", b"7"),
                                              ("changejoin.seq", b"0:%d" % i)], 0)


def test_the_confluent_kafka_floor_has_producer_close():
    """transactions._close relies on Producer.close() (confluent-kafka 2.13.0) to abort the
    transaction a failed task leaves open; on an older release it does not exist."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (floor,) = [re.search(r">=\s*([\d.]+)", d).group(1) for d in dependencies if d.startswith("confluent-kafka")]
    assert tuple(int(part) for part in floor.split(".")) >= (2, 13), floor


def test_the_input_digest_names_the_offsets_and_timing_of_a_micro_batch():
    before, entry = offsets([{"0": 10, "1": 4}, {"0": 3}]), offsets([{"0": 20, "1": 9}, {"0": 3}])
    digest = input_digest(before, entry)
    assert digest == input_digest(before, entry.replace("\n", "\r\n"))  # the same entry, read back
    assert digest == input_digest(before, offsets([{"0": 20, "1": 9}, {"0": 3}], conf={"b": "2"}))
    assert digest != input_digest(before, offsets([{"0": 25, "1": 9}, {"0": 3}]))  # planned again, further
    assert digest != input_digest(offsets([{"0": 12, "1": 4}, {"0": 3}]), entry)  # another start
    assert digest != input_digest(before, offsets([{"0": 20, "1": 9}, {"0": 3}], timestamp=2000))
    assert digest != input_digest(before, offsets([{"0": 20, "1": 9}, {"0": 3}], watermark=5))
    assert input_digest(None, entry) != digest  # the first micro-batch has no entry before it


def test_a_shares_digest_is_of_its_records_in_order_and_not_of_a_dead_letters_reason_text():
    digest = Share.of(records(3)).digest()
    assert Share.of(records(3)).digest() == digest
    assert Share.of(records(3, kind="-D")).digest() != digest  # the RowKind travels in a header
    assert Share.of(list(records(3))[::-1]).digest() != digest
    assert Share.of(records(2)).digest() != digest
    letter = [("out.dlq", b"k", b"v", [("reason", b"join_error"), ("reason.detail", b"at 0x7f01")], None)]
    again = [("out.dlq", b"k", b"v", [("reason", b"join_error"), ("reason.detail", b"at 0x7f02")], None)]
    other = [("out.dlq", b"k", b"v", [("reason", b"late"), ("reason.detail", b"at 0x7f01")], None)]
    assert Share.of(letter).digest() == Share.of(again).digest() != Share.of(other).digest()
    assert Share.of([("out", None, b"", [], 0)]).digest() != Share.of([("out", None, None, [], 0)]).digest()
    assert Share.of([("out", None, b"", [], 0)]).digest() != Share.of([("out", None, b"", [], 1)]).digest()
    # a value that happens to hold the header's name is digested whole
    assert Share.of([("out", None, b"reason.detail 1", [], 0)]).digest() != \
        Share.of([("out", None, b"reason.detail 2", [], 0)]).digest()


def test_a_replay_after_an_upgrade_reads_the_digest_an_earlier_changejoin_wrote_in_its_marker():
    """Markers written before the digest's tag hold blake2b digests (the values below are those
    changejoin c2e6306 computed for these records): a replay across the upgrade still matches them."""
    assert Share.of(records(3)).matches("a334b4de399d26c7e3f359c3f89999b0")
    assert not Share.of(records(3, kind="-D")).matches("a334b4de399d26c7e3f359c3f89999b0")
    letter = [("out.dlq", b"k", b"v", [("reason", b"join_error"), ("reason.detail", b"at 0x7f02")], None)]
    assert Share.of(letter).matches("a2d1ed377663102b95c125a93419e7fa")
    share = Share.of(records(3))
    assert share.digest().startswith(DIGEST_TAG) and share.matches(share.digest())
    assert not Share.of(records(4)).matches(share.digest())


def test_a_held_share_is_bytes_that_the_garbage_collector_does_not_walk():
    """Records held as tuples and lists would be walked by every collection while the join runs."""
    gc.collect()
    before = len(gc.get_objects())
    share = Share.of(records(20_000))
    assert share.records == 20_000 and not share.spilled
    assert len(gc.get_objects()) - before < 100
    assert list(share) == list(records(20_000))


def test_a_tasks_memory_bound_follows_the_memory_it_may_use():
    assert spill_bytes_default(4 << 30) == 256 << 20  # a pod of 4 GiB
    assert spill_bytes_default(512 << 20) == 64 << 20 and spill_bytes_default(64 << 30) == 1 << 30
    assert Share().spill_bytes == spill_bytes_default()


def test_a_share_past_its_memory_bound_spills_to_disk_and_reads_back_in_order():
    share = Share.of(records(5000), spill_bytes=10_000)
    try:
        assert share.spilled and share.records == 5000
        assert list(share) == list(records(5000))
        assert list(share) == list(records(5000))  # read again: the transaction may not be the first reader
        assert share.digest() == Share.of(records(5000)).digest()
    finally:
        share.close()
    small = Share.of(records(5))
    assert not small.spilled and list(small) == list(records(5))


def marker(batch: int, share: Share | None = None, input_hash: str | None = "in", **extra) -> dict:
    return {"batch": batch, "partition": 0, "attempt": 0, "records": share.records if share else 0, "counts": [],
            "input": input_hash, "output": share.digest() if share else None, **extra}


def test_a_replay_skips_a_share_only_if_its_marker_was_written_for_the_same_input_and_records():
    share = Share.of(records(3))
    assert written_already(None, 7, 0, "in", share, CONFIG) is False
    assert written_already(marker(6, Share.of(records(9))), 7, 0, "in", share, CONFIG) is False
    assert written_already(marker(7, Share.of(records(3))), 7, 0, "in", share, CONFIG) is True
    # A marker of an earlier changejoin carries neither digest: taken at its word, as before.
    assert written_already({"batch": 7, "partition": 0, "records": 3, "counts": []}, 7, 0, "in", share, CONFIG)


def test_a_marker_of_other_offsets_or_of_a_later_micro_batch_stops_with_one_line():
    share = Share.of(records(3))
    with pytest.raises(ProgressMismatch) as other:
        written_already(marker(7, share, input_hash="planned before"), 7, 0, "in", share, CONFIG)
    assert "CHECKPOINT_LOCATION=/ck: micro-batch 7 was written by task partition 0 for other input offsets" in \
        str(other.value) and "\n" not in str(other.value)
    with pytest.raises(ProgressMismatch) as behind:
        written_already(marker(9, share), 7, 0, "in", share, CONFIG)
    assert "CHECKPOINT_LOCATION=/ck is behind its output: micro-batch 7 is next here, but task partition 0 already " \
           "wrote micro-batch 9 to out (its marker is in PROGRESS_TOPIC=p.progress)" in str(behind.value)


def test_a_replay_that_computed_other_records_stops_rather_than_skip():
    """The input changed between the first run and the replay (compacted, its log start moved):
    skipping would keep the first run's output while the state advances on what the replay read."""
    first, replay = Share.of(records(4)), Share.of(records(2))
    with pytest.raises(ProgressMismatch, match="the replay of micro-batch 7 computed other records for task "
                                               r"partition 0 than its first run wrote to out \(4 records then, 2 now\)"):
        written_already(marker(7, first), 7, 0, "in", replay, CONFIG)
    with pytest.raises(ProgressMismatch, match=r"\(4 records then, 0 now\)"):  # a replay with no output at all
        written_already(marker(7, first), 7, 0, "in", Share(), CONFIG)


def test_the_checkpoint_remembers_every_transactional_id_its_producers_used(tmp_path):
    store = checkpoint.Checkpoint(str(tmp_path / "ck"))
    assert checkpoint.used_transactional_ids(store) == []
    checkpoint.record_transactional_ids(store, "a", 2)
    checkpoint.record_transactional_ids(store, "a", 2)
    assert checkpoint.used_transactional_ids(store) == ["a-0", "a-1"]
    checkpoint.record_transactional_ids(store, "a", 4)  # rescaled up
    checkpoint.record_transactional_ids(store, "a", 3)  # and down: a-3 stays remembered
    checkpoint.record_transactional_ids(store, "b", 1)  # another prefix
    assert checkpoint.used_transactional_ids(store) == ["a-0", "a-1", "a-2", "a-3", "b-0"]


def test_a_skipped_share_is_reported_apart_and_not_counted_again_by_the_metrics():
    counts = BatchCounts(3)
    for target, label, n in [("output", "+I", 2), (REPLAYED + "output", "+I", 5), (REPLAYED + "dead_letter", "late", 1),
                             (REPLAYED + "skipped", "debezium_tombstone", 4), ("transaction", "skipped", 1)]:
        counts.add(target, label, n)
    assert counts.output == {"+I": 2} and counts.dead_letters == {} and counts.ignored == {}
    assert counts.replayed == {("output", "+I"): 5, ("dead_letter", "late"): 1, ("skipped", "debezium_tombstone"): 4}
    assert counts.replayed_records == 6 and counts.skipped == [1]
    metrics = JoinMetrics(10.0)
    metrics.observe_batch(counts)
    registry = metrics.registry
    assert registry.get_sample_value("changejoin_output_records_total", {"kind": "+I"}) == 2
    assert registry.get_sample_value("changejoin_dead_letter_records_total", {"reason": "late"}) in (None, 0)
    assert registry.get_sample_value("changejoin_kafka_transactions_total", {"outcome": "replay_skipped"}) == 1


def test_lookup_counts_reported_again_by_a_stage_run_again_count_once():
    param = _Counts()
    total = param.zero({})
    for update in ({0: {"queries": 2, "query_seconds": [0.1]}}, {1: {"queries": 1, "query_seconds": [0.2]}},
                   {0: {"queries": 2, "query_seconds": [0.1]}}):  # partition 0's task ran again
        total = param.addInPlace(total, update)
    assert lookup_totals(total) == {"queries": 3, "query_seconds": [0.1, 0.2]}
