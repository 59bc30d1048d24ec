"""DELIVERY=exactly-once under SIGKILL at every named point of a micro-batch (``service/faults.py``),
with the service in its own process (``python -m service run``), retract and upsert output side by
side, restarted on the same checkpoint after each kill with more input in between.

What must hold, read as a consumer with ``read_committed``: no output or dead-letter record twice
(each (``changejoin.batch``, ``changejoin.seq``) once), the retract changelog applies as a multiset
that never goes below zero, and both outputs equal an uninterrupted run's table. Read with
``read_uncommitted``, the log holds the aborted attempts: the kills did land inside transactions.
"""
from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Dict

import pytest

from kafka_fixture import consume_all, create_topic
from service import faults
from service.config import load_settings
from service_harness import JoinHarness, dead_letters, drop_replays, read_changelog, retract_table, upsert_table
from test_recovery import (
    CATCH_UP_TIMEOUT_S,
    PARTITIONS,
    START_TIMEOUT_S,
    Changelogs,
    ServiceProcess,
    _group_alive,
    caught_up,
    drive,
    references,
    send,
    service_env,
    wait_until,
)

pytestmark = pytest.mark.integration

EXACTLY_ONCE = {"DELIVERY": "exactly-once", "MAX_RECORDS_PER_TRIGGER": "40"}
#: The point each run is killed at (retract, upsert): every point once, and each output mode killed
#: inside an open transaction and after a commit its micro-batch did not record. A service start
#: costs ~30 s of a 2-core machine: three crashing runs each, not five.
RUNS = [("mid-produce", "before-commit"), ("after-commit", "before-batch-commit"), ("before-init", "mid-produce")]
assert {p for run in RUNS for p in run} == set(faults.POINTS)


def crash_at(points: Dict[ServiceProcess, str]) -> Dict[ServiceProcess, int]:
    """Start each service asking it to kill itself at its point of its first micro-batch; wait
    until it has. Returns each one's exit code (SIGKILL: -9)."""
    services = list(points)
    for svc, point in points.items():
        svc.env = {**svc.base_env, faults.ENV: f"{point}@{svc.next_batch()}"}
        svc.start()
    codes = {}
    deadline = time.monotonic() + START_TIMEOUT_S
    while len(codes) < len(services):
        for svc in services:
            svc.watcher.poll()
            if svc not in codes and not svc.alive():
                codes[svc] = svc.proc.returncode
                wait_until(lambda: not _group_alive(svc.proc.pid), 60, f"the processes of {svc.name} to end")
        if time.monotonic() > deadline:
            pending = [s for s in services if s not in codes]
            pytest.fail(f"{pending[0].name} did not reach {points[pending[0]]} within {START_TIMEOUT_S:.0f}s; log tail:\n"
                        f"{pending[0].log_tail()}")
        time.sleep(0.05)
    return codes


def test_killed_at_every_point_of_a_micro_batch_read_committed_sees_each_record_once(
        kafka_bootstrap, spark, tmp_path, new_topic):
    log = Changelogs(seed=20261126)
    chunks = [log.chunk(order_ops=16, price_ops=5, poison=i < 2) for i in range(len(RUNS) + 1)]

    run_references = references(kafka_bootstrap, spark, tmp_path, new_topic, chunks)

    h = JoinHarness(kafka_bootstrap, None, tmp_path / "retract", new_topic, PARTITIONS, **service_env(**EXACTLY_ONCE))
    create_topic(kafka_bootstrap, h.output, PARTITIONS)
    upsert_env = {**h.env, "OUTPUT_TOPIC": new_topic(PARTITIONS), "OUTPUT_MODE": "upsert", "OUTPUT_KEY": "order_id",
                  "CHECKPOINT_LOCATION": str(tmp_path / "upsert" / "checkpoint")}
    services = [ServiceProcess("retract", h.env, tmp_path), ServiceProcess("upsert", upsert_env, tmp_path)]
    for svc in services:
        svc.base_env = dict(svc.env)
    kills = []

    with ThreadPoolExecutor(1) as pool:
        reference_run = pool.submit(run_references)
        try:
            for chunk, run in zip(chunks, RUNS):
                send(h, chunk)
                codes = crash_at(dict(zip(services, run)))
                assert set(codes.values()) == {-9}, f"{run}: exit codes {[(s.name, c) for s, c in codes.items()]}"
                kills.append({s.name: (point, s.next_batch()) for s, point in zip(services, run)})
            # The last run: no crash; the last input; everything joined and committed.
            for svc in services:
                svc.env = dict(svc.base_env)
                svc.start()
            send(h, chunks[-1])
            drive({svc: caught_up(log.sent) for svc in services}, "all input to be joined", CATCH_UP_TIMEOUT_S)
            for svc in services:
                assert svc.stop() == 0, svc.log_tail()
        finally:
            for svc in services:
                svc.close()
        reference = dict(zip(("retract", "upsert"), reference_run.result(timeout=CATCH_UP_TIMEOUT_S)))
    assert reference["retract"] == log.retract_table(), "the uninterrupted run is not the join of the final inputs"

    summary = []
    for svc in services:
        topic = svc.env["OUTPUT_TOPIC"]
        changes = read_changelog(kafka_bootstrap, topic, svc.plan.output_schema)
        _, replays = drop_replays(changes)
        assert replays == [], f"{svc.name}: read_committed sees records twice: {replays[:5]} (kills {kills})"
        letters_topic = load_settings(svc.env).dead_letter_topic
        letters = dead_letters(kafka_bootstrap, letters_topic)
        written = sum(len(consume_all(kafka_bootstrap, t, isolation="read_uncommitted")) for t in (topic, letters_topic))
        summary.append(f"{svc.name}: {len(changes)} output and {len(letters)} dead-letter records committed, "
                       f"{written} written")
        # Killed inside a transaction: its aborted records are in the log, which only read_uncommitted
        # shows (without transactions they would be duplicates above). They are output records or
        # dead letters, whichever the killed task's share held (with few records, a share can hold
        # dead letters only).
        assert written > len(changes) + len(letters), summary[-1]
        # Killed after a commit that Spark did not record: the replay found it and wrote nothing again.
        assert "written before, not again" in svc.log_path.read_text(errors="replace"), summary[-1]
        assert drop_replays(letters)[1] == []
        assert Counter(c.kind for c in letters) == Counter({r: n * 2 for r, n in Changelogs.POISON_REASONS.items()})
        if svc.name == "retract":
            assert retract_table(changes) == reference["retract"], summary[-1]  # never below zero, too
        else:
            assert upsert_table(changes) == reference["upsert"], summary[-1]
    print("\n".join(summary), kills)


def test_two_deployments_on_one_output_topic_killed_at_random_each_see_their_records_once(
        kafka_bootstrap, tmp_path, new_topic):
    """Two deployments, each with its own KAFKA_TRANSACTIONAL_ID_PREFIX (as the docs ask) and the
    default PROGRESS_TOPIC, write one output topic. One is killed inside a transaction and stays
    down; the other is killed after its tasks committed a micro-batch and comes back while that
    transaction is still open. Reading progress markers read_committed ends at the first open
    transaction: had they shared a progress topic, the restarted one would not have seen its own
    marker behind the other's open one and would have written the micro-batch again. Then both are
    killed at points chosen at random, and restarted."""
    import random

    rng = random.Random(20261128)
    output = new_topic(PARTITIONS)
    logs, services = {}, []
    for name, first_id in (("a", 1), ("b", 500_000)):
        log = Changelogs(seed=rng.randrange(1 << 30))
        log.next_id = first_id  # the deployments' orders never share an id: the output tells them apart
        h = JoinHarness(kafka_bootstrap, None, tmp_path / name, new_topic, PARTITIONS,
                        **service_env(**EXACTLY_ONCE, OUTPUT_TOPIC=output, KAFKA_TRANSACTIONAL_ID_PREFIX=f"deploy-{name}",
                                      KAFKA_TRANSACTION_TIMEOUT_MS="600000"))
        svc = ServiceProcess(name, h.env, tmp_path)
        svc.base_env, svc.harness = dict(svc.env), h
        logs[svc], services = log, services + [svc]
    a, b = services

    def more_input():
        for svc in services:
            send(svc.harness, logs[svc].chunk(order_ops=16, price_ops=5))

    kills = []
    try:
        more_input()
        # a: killed with its transaction open (its markers sent, not committed); it stays down.
        assert crash_at({a: "before-commit"}) == {a: -9}
        # b: its tasks commit a micro-batch, and it is killed before Spark records it as done.
        assert crash_at({b: "before-batch-commit"}) == {b: -9}
        kills.append({"a": "before-commit", "b": "before-batch-commit"})
        # b comes back, while a's transaction is open: it replays that micro-batch.
        b.env = dict(b.base_env)
        b.start()
        drive({b: caught_up(logs[b].sent)}, "b to join its input", CATCH_UP_TIMEOUT_S)
        assert b.stop() == 0, b.log_tail()
        assert "written before, not again" in b.log_path.read_text(errors="replace")
        # Both killed at random points, together.
        more_input()
        points = {svc: rng.choice(faults.POINTS) for svc in services}
        kills.append({svc.name: point for svc, point in points.items()})
        assert set(crash_at(points).values()) == {-9}, kills
        # The last input; both run to the end.
        more_input()
        for svc in services:
            svc.env = dict(svc.base_env)
            svc.start()
        drive({svc: caught_up(logs[svc].sent) for svc in services}, "all input to be joined", CATCH_UP_TIMEOUT_S)
        for svc in services:
            assert svc.stop() == 0, svc.log_tail()
    finally:
        for svc in services:
            svc.close()

    changes = read_changelog(kafka_bootstrap, output, a.plan.output_schema)
    written = len(consume_all(kafka_bootstrap, output, isolation="read_uncommitted"))
    assert written > len(changes), "no kill landed inside a transaction: this proves nothing"
    for svc, mine in ((a, lambda c: c.row[0] < 500_000), (b, lambda c: c.row[0] >= 500_000)):
        own = [c for c in changes if mine(c)]
        _, replays = drop_replays(own)
        assert replays == [], f"{svc.name}: read_committed sees records twice: {replays[:5]} (kills {kills})"
        assert retract_table(own) == logs[svc].retract_table(), f"{svc.name} (kills {kills})"
    assert {load_settings(svc.env).progress_topic_name for svc in services} == \
        {"deploy-a.progress", "deploy-b.progress"}
    print(f"{len(changes)} output records committed, {written} written; kills {kills}")
