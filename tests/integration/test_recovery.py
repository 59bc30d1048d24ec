"""Crash recovery and broker outages, with the service in its own process (``python -m service run``).

* Crashes: the service is killed with SIGKILL (its whole process group: the Python driver, Spark's
  JVM and its Python workers) at chosen moments of a stream, and restarted on the same checkpoint;
  more input arrives between restarts. The output must materialize to the table of an
  uninterrupted run of the same input: in retract mode after dropping replayed records as a
  consumer would (a record whose (``changejoin.batch``, ``changejoin.seq``) was seen already is a
  replay), in upsert mode as it is.
* Broker outage: a TCP proxy between the service and a dedicated local broker cuts every
  connection and refuses new ones for a while; the service must ride it out and finish the join.

The moments are chosen by watching the output topic and the checkpoint's ``commits/`` directory,
never by timing: "in the middle of writing micro-batch B" is "the output topic holds records of
batch B and ``commits/B`` does not exist yet".

Cost: every service start is a new Spark driver (tens of seconds before its first micro-batch),
so the crash test runs its retract and upsert services side by side (three runs each), and the
uninterrupted reference runs in-process on a thread meanwhile.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

from kafka_fixture import create_topic
from service.config import load_settings
from devkit.broker_process import free_port
from devkit.kafka_broker import KafkaBroker
from service.catalog import plan_for
from service_harness import (
    ORDERS,
    JoinHarness,
    avro,
    dead_letters,
    drop_replays,
    order,
    price,
    read_changelog,
    retract_table,
    start_service_process,
    upsert_table,
)
from tcp_proxy import TcpProxy

pytestmark = pytest.mark.integration

PARTITIONS = 2
JOIN_SQL = (
    "SELECT o.order_id, o.product, o.quantity, p.price FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"
)
PRODUCTS = ("book", "pen", "ink", "paper", "glue", "tape")
# Generous bounds for conditions that normally hold within seconds (a Spark start under load
# can take a minute); they only decide how long a broken run takes to fail.
START_TIMEOUT_S = 300.0
CATCH_UP_TIMEOUT_S = 300.0


def service_env(**env: str) -> Dict[str, str]:
    """The service's settings, besides JoinHarness's (topics, schemas, checkpoint, broker)."""
    return {
        "JOIN_SQL": JOIN_SQL,
        "SPARK_MASTER": "local[2]",
        "SHUFFLE_PARTITIONS": "2",
        "MAX_RECORDS_PER_TRIGGER": "12",  # several micro-batches per chunk of input
        "SPARK_CONF_spark_ui_enabled": "false",
        "LOG_LEVEL": "INFO",
        "DELIVERY": "at-least-once",  # these tests are of replays a consumer drops; exactly-once: test_exactly_once*
        **env,
    }


# --------------------------------------------------------------------------------------------
# Input: valid changelogs, and the tables they end in
# --------------------------------------------------------------------------------------------


class Changelogs:
    """Random but reproducible retract changelogs of orders and prices, produced chunk by chunk,
    and the join of the tables they end in (the expected result, computed without Spark).
    Changes carry their partition: an order's by its id, a price's by its product, so each
    row's changes stay in order in one partition, as with a keyed producer."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.orders: Dict[int, dict] = {}
        self.prices: Dict[str, dict] = {}
        self.next_id = 1
        self.sent = {"orders": Counter(), "prices": Counter()}  # records per partition

    def chunk(self, order_ops: int, price_ops: int, poison: bool = False):
        """The next changes; with ``poison``, also one bad order record of each kind the service
        must dead-letter (and :data:`POISON_REASONS` says which reasons they get)."""
        rng, orders, prices = self.rng, [], []
        for _ in range(price_ops):
            product = rng.choice(PRODUCTS)
            part = PRODUCTS.index(product) % PARTITIONS
            old = self.prices.get(product)
            new = price(product, round(rng.uniform(0.5, 30.0), 2))
            if old is None:
                prices.append(("+I", new, part))
                self.prices[product] = new
            elif rng.random() < 0.75:
                prices += [("-U", old, part), ("+U", new, part)]
                self.prices[product] = new
            else:
                prices.append(("-D", old, part))
                del self.prices[product]
        for _ in range(order_ops):
            roll = rng.random()
            if roll < 0.4 or not self.orders:
                new = order(self.next_id, rng.choice(PRODUCTS), rng.randint(1, 9))
                orders.append(("+I", new, new["order_id"] % PARTITIONS))
                self.orders[self.next_id] = new
                self.next_id += 1
                continue
            order_id = rng.choice(sorted(self.orders))
            old, part = self.orders[order_id], order_id % PARTITIONS
            if roll < 0.85:  # an update; half of them move the order to another join key
                product = rng.choice(PRODUCTS) if rng.random() < 0.5 else old["product"]
                new = order(order_id, product, rng.randint(1, 9))
                orders += [("-U", old, part), ("+U", new, part)]
                self.orders[order_id] = new
            else:
                orders.append(("-D", old, part))
                del self.orders[order_id]
        if poison:
            orders += [
                ("+I", b"\x00not avro", 0),  # undecodable
                (None, avro(ORDERS, order(10**6, "book", 1)), 1),  # missing_rowkind
                ("+X", avro(ORDERS, order(10**6, "book", 1)), 0),  # unknown_rowkind
                ("+I", b"\x01" + b"x" * 999_898, 1),  # undecodable, and its dead letter too large whole
            ]
        self.sent["orders"].update(part for *_, part in orders)
        self.sent["prices"].update(part for *_, part in prices)
        return orders, prices

    POISON_REASONS = Counter({"undecodable": 2, "missing_rowkind": 1, "unknown_rowkind": 1})

    def _rows(self):
        for order_id, o in sorted(self.orders.items()):
            p = self.prices.get(o["product"])
            yield (order_id, o["product"], o["quantity"], None if p is None else p["price"])

    def retract_table(self) -> Counter:
        return Counter(self._rows())

    def upsert_rows(self) -> list:
        return sorted(self._rows())


def send(h: JoinHarness, chunk) -> None:
    orders, prices = chunk
    h.send_orders(orders)
    h.send_prices(prices)


# --------------------------------------------------------------------------------------------
# Output: decode, drop replays, materialize
# --------------------------------------------------------------------------------------------

# --------------------------------------------------------------------------------------------
# The service as a process
# --------------------------------------------------------------------------------------------


def _group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process of process group ``pgid`` remains."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()  # after "pid (comm) ": state ppid pgrp ...
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def wait_until(predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class OutputWatcher:
    """Follows the output topic as it is written: the micro-batch ids of new records."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Consumer, TopicPartition

        self._consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "tests-unused", "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "fetch.wait.max.ms": 10, "isolation.level": "read_uncommitted",
            "log_level": 0,  # quiet while the broker is unreachable (outage test); it only paces the test
        })
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])

    def poll(self, timeout: float = 0.02) -> List[int]:
        batches = []
        for msg in self._consumer.consume(1000, timeout):
            if msg.error() is None:
                batches.append(int(dict(msg.headers() or [])["changejoin.batch"]))
        return batches

    def close(self) -> None:
        self._consumer.close()


class ServiceProcess:
    """``python -m service run`` in its own process group, on a checkpoint that outlives it."""

    def __init__(self, name: str, env: Dict[str, str], workdir: Path):
        self.name = name
        self.env = env
        self.checkpoint = Path(env["CHECKPOINT_LOCATION"])
        self.log_path = workdir / f"{name}.log"
        self.plan = plan_for(load_settings(env))
        self.watcher = OutputWatcher(env["KAFKA_BOOTSTRAP_SERVERS"], env["OUTPUT_TOPIC"])
        self.proc: Optional[subprocess.Popen] = None
        self.runs = 0

    def start(self) -> None:
        self.runs += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== run {self.runs} =====\n".encode())
            log.flush()
            self.proc = start_service_process(self.env, log)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL to the whole process group, as a crash of its machine or container would do;
        returns once none of its processes is left."""
        pgid = self.proc.pid
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=60)
        wait_until(lambda: not _group_alive(pgid), 60, f"the processes of the killed service {self.name} to end")

    def stop(self, timeout: float = 180.0) -> int:
        """SIGTERM to the service (a graceful stop); returns its exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
            # Spark's JVM exits once the driver is gone; let it finish before cleanup() kills it.
            wait_until(lambda: not _group_alive(self.proc.pid), 60, f"the processes of {self.name} to end")
            return code
        finally:
            self.cleanup()

    def cleanup(self) -> None:
        """Nothing of this service may outlive the test."""
        if self.proc is not None and _group_alive(self.proc.pid):
            self.kill()

    def commits(self) -> List[int]:
        directory = self.checkpoint / "commits"
        if not directory.is_dir():
            return []
        return sorted(int(n) for n in os.listdir(directory) if n.isdigit())

    def next_batch(self) -> int:
        """The id of the first micro-batch of a run started now."""
        commits = self.commits()
        return commits[-1] + 1 if commits else 0

    def committed_offsets(self) -> Optional[List[dict]]:
        """The source offsets (left, right) up to which the last committed micro-batch read."""
        commits = self.commits()
        if not commits:
            return None
        lines = (self.checkpoint / "offsets" / str(commits[-1])).read_text().splitlines()
        return [json.loads(line) for line in lines[2:]]  # "v1", batch metadata, one line per source

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        try:
            self.cleanup()
        finally:
            self.watcher.close()


# Conditions on a running service: called with the service and the micro-batch ids of the output
# records seen since the last call; return a value (not None) once the moment has come.


def writing_uncommitted_batch(min_batch: int):
    """In the middle of writing a micro-batch >= min_batch: its output has started to appear and
    it is not committed. Returns the batch id."""

    def condition(svc: ServiceProcess, batches: List[int]):
        fresh = [b for b in batches if b >= min_batch]
        if fresh:
            committed = set(svc.commits())
            for b in fresh:
                if b not in committed:
                    return b
        return None

    return condition


def committed(min_batch: int):
    """A micro-batch >= min_batch has just been committed. Returns its id."""

    def condition(svc: ServiceProcess, batches: List[int]):
        commits = svc.commits()
        return commits[-1] if commits and commits[-1] >= min_batch else None

    return condition


def caught_up(sent: Dict[str, Counter]):
    """The last committed micro-batch read every record sent to both inputs."""

    def condition(svc: ServiceProcess, batches: List[int]):
        offsets = svc.committed_offsets()
        if offsets is None:
            return None
        for read, side in zip(offsets, ("orders", "prices")):
            if any(int(read.get(str(p), 0)) < n for p, n in sent[side].items()):
                return None
        return True

    return condition


def drive(conditions: Dict[ServiceProcess, Callable], what: str, timeout: float,
          action: Optional[Callable[[ServiceProcess], None]] = None) -> Dict[ServiceProcess, object]:
    """Watch the services until each one's condition holds, applying ``action`` (e.g. kill) to a
    service the moment its condition holds. A service that exits meanwhile fails the test."""
    pending, results = dict(conditions), {}
    deadline = time.monotonic() + timeout
    while pending:
        for svc, condition in list(pending.items()):
            batches = svc.watcher.poll()
            if not svc.alive():
                pytest.fail(f"{svc.name} exited with code {svc.proc.returncode} while waiting for {what}; "
                            f"log tail:\n{svc.log_tail()}")
            result = condition(svc, batches)
            if result is not None:
                if action is not None:
                    action(svc)
                results[svc] = result
                del pending[svc]
        if pending and time.monotonic() > deadline:
            names = ", ".join(s.name for s in pending)
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} ({names}); log tail of "
                        f"{next(iter(pending)).name}:\n{next(iter(pending)).log_tail()}")
    return results


# --------------------------------------------------------------------------------------------
# Crash recovery
# --------------------------------------------------------------------------------------------


def references(kafka_bootstrap, spark, tmp_path, new_topic, chunks) -> Callable[[], tuple]:
    """The uninterrupted runs (the reference): the same input, all at once, in-process (JoinHarness)
    on fresh topics, retract and upsert output; returns what runs them (on a thread, meanwhile)
    and gives their tables."""
    harnesses = []
    for mode, env in (("retract", {}), ("upsert", {"OUTPUT_MODE": "upsert", "OUTPUT_KEY": "order_id"})):
        ref = JoinHarness(kafka_bootstrap, spark, tmp_path / f"reference-{mode}", new_topic, PARTITIONS,
                          **service_env(MAX_RECORDS_PER_TRIGGER="100000", **env))
        for chunk in chunks:
            send(ref, chunk)
        harnesses.append(ref)

    def run() -> tuple:
        retract_ref, upsert_ref = harnesses
        retract_ref.run()
        upsert_ref.run()
        return retract_ref.retract_table(), upsert_ref.upsert_table()

    return run


def test_sigkill_at_several_points_then_restart_materializes_like_an_uninterrupted_run(
        kafka_bootstrap, spark, tmp_path, new_topic):
    log = Changelogs(seed=20251121)
    chunks = [log.chunk(order_ops=20, price_ops=6, poison=True) for _ in range(3)]

    run_references = references(kafka_bootstrap, spark, tmp_path, new_topic, chunks)

    # One pair of input topics, read by two services: retract output and upsert output.
    h = JoinHarness(kafka_bootstrap, None, tmp_path / "retract", new_topic, PARTITIONS, **service_env())
    create_topic(kafka_bootstrap, h.output, PARTITIONS)
    upsert_env = {**h.env, "OUTPUT_TOPIC": new_topic(PARTITIONS), "OUTPUT_MODE": "upsert", "OUTPUT_KEY": "order_id",
                  "CHECKPOINT_LOCATION": str(tmp_path / "upsert" / "checkpoint")}
    services = [ServiceProcess("retract", h.env, tmp_path), ServiceProcess("upsert", upsert_env, tmp_path)]
    # kills[svc]: (moment, batch, whether that batch's output had started to appear and it was not committed)
    kills: Dict[ServiceProcess, list] = {svc: [] for svc in services}

    def start_all():
        for svc in services:
            svc.start()

    def kill_while_writing(moment: str, skip: int):
        mins = {svc: svc.next_batch() + skip for svc in services}
        start_all()
        hit = drive({svc: writing_uncommitted_batch(mins[svc]) for svc in services},
                    f"output of an uncommitted micro-batch ({moment})", START_TIMEOUT_S, action=ServiceProcess.kill)
        for svc, batch in hit.items():
            kills[svc].append((moment, batch, batch not in svc.commits()))

    with ThreadPoolExecutor(1) as pool:
        reference_run = pool.submit(run_references)
        try:
            # 1. Killed as soon as the first output appears (while batch 0 is being written).
            send(h, chunks[0])
            kill_while_writing("first output", skip=0)
            # 2. More input; killed mid-way, while the third micro-batch of the run is being
            #    written (the first one replays what run 1 left uncommitted).
            send(h, chunks[1])
            kill_while_writing("mid-way", skip=2)
            # 3. The last input arrives while the service runs; killed between micro-batches, once
            #    everything is joined and committed.
            mins = {svc: svc.next_batch() for svc in services}
            start_all()
            drive({svc: committed(mins[svc]) for svc in services}, "the first commit of the last run", START_TIMEOUT_S)
            send(h, chunks[2])
            done = drive({svc: caught_up(log.sent) for svc in services}, "all input to be joined",
                         CATCH_UP_TIMEOUT_S, action=ServiceProcess.kill)
            for svc in done:
                kills[svc].append(("between batches, idle", svc.commits()[-1], False))
        finally:
            for svc in services:
                svc.close()
        reference = dict(zip(("retract", "upsert"), reference_run.result(timeout=CATCH_UP_TIMEOUT_S)))
    assert reference["retract"] == log.retract_table(), "the uninterrupted run is not the join of the final inputs"
    assert sorted(reference["upsert"].values()) == log.upsert_rows()

    retract, upsert = services
    summary = []
    for svc in services:
        changes = read_changelog(kafka_bootstrap, svc.env["OUTPUT_TOPIC"], svc.plan.output_schema)
        kept, replays = drop_replays(changes)
        replayed_batches = Counter(c.batch for c in replays)
        summary.append(f"{svc.name}: {len(changes)} records, {len(replays)} replays {dict(replayed_batches)}, "
                       f"kills {kills[svc]}")
        # Every kill in the middle of writing a batch must be followed by that batch's replay.
        mid_batch = [batch for _, batch, uncommitted in kills[svc] if uncommitted]
        assert mid_batch, f"{svc.name}: no kill landed while a batch was being written ({kills[svc]})"
        for batch in mid_batch:
            assert replayed_batches[batch] > 0, (
                f"{svc.name}: killed while writing batch {batch}, which was not replayed ({summary[-1]})")
        # Every poison record is in the dead-letter topic exactly once, replays dropped, whatever the kills.
        letters, _ = drop_replays(dead_letters(kafka_bootstrap, load_settings(svc.env).dead_letter_topic))
        assert Counter(c.kind for c in letters) == Counter({r: n * len(chunks) for r, n in Changelogs.POISON_REASONS.items()})
        assert len({(c.headers["source.partition"], c.headers["source.offset"]) for c in letters}) == len(letters)
        assert sum(b"value (999899 bytes)" in c.headers.get("dropped", b"") for c in letters) == len(chunks)
        if svc is retract:
            assert retract_table(kept) == reference["retract"], summary[-1]
        else:
            assert upsert_table(changes) == reference["upsert"], summary[-1]
    print("\n".join(summary))


# --------------------------------------------------------------------------------------------
# Broker outage
# --------------------------------------------------------------------------------------------


@pytest.fixture
def proxied_broker(tmp_path):
    """A dedicated KRaft broker reachable only through a TcpProxy (its metadata sends clients to
    the proxy); yields the proxy."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        pytest.skip("the outage test needs its own local broker behind a proxy, and "
                    "KAFKA_BOOTSTRAP_SERVERS points the tests at an external broker")
    broker_port = free_port()
    proxy = TcpProxy(("127.0.0.1", broker_port)).start()
    broker = KafkaBroker(port=broker_port, advertised=proxy.address, data_dir=str(tmp_path / "kafka"))
    try:
        broker.start()
        yield proxy
    finally:
        broker.close()
        proxy.stop()


def test_service_rides_out_a_broker_outage(proxied_broker, tmp_path):
    proxy = proxied_broker
    bootstrap = proxy.address
    names = iter(range(100))

    def new_topic(partitions: int = 1, create: bool = True) -> str:
        name = f"outage-{next(names)}"
        return create_topic(bootstrap, name, partitions) if create else name

    log = Changelogs(seed=7)
    h = JoinHarness(bootstrap, None, tmp_path, new_topic, PARTITIONS, **service_env())
    create_topic(bootstrap, h.output, PARTITIONS)
    svc = ServiceProcess("outage", h.env, tmp_path)
    try:
        send(h, log.chunk(order_ops=24, price_ops=6))
        svc.start()
        # The outage starts while a micro-batch is being written (its reads are done, its writes not).
        batch = drive({svc: writing_uncommitted_batch(1)}, "output of an uncommitted batch", START_TIMEOUT_S)[svc]
        cut = proxy.cut()
        assert cut > 0, "the service had no connection to cut"
        outage_end = time.monotonic() + 10.0  # the outage lasts 10 s by design
        while time.monotonic() < outage_end:
            assert svc.alive(), f"the service died during the outage; log tail:\n{svc.log_tail()}"
            time.sleep(0.2)
        assert proxy.refused > 0, "the service did not try to reconnect during the outage"
        proxy.restore()
        assert svc.alive(), f"the service died during the outage; log tail:\n{svc.log_tail()}"
        send(h, log.chunk(order_ops=12, price_ops=4))
        drive({svc: caught_up(log.sent)}, "all input to be joined after the outage", CATCH_UP_TIMEOUT_S)
        assert batch in svc.commits(), f"batch {batch}, interrupted by the outage, was never committed"
        assert svc.alive()
        assert svc.stop() == 0, f"graceful stop failed; log tail:\n{svc.log_tail()}"
    finally:
        svc.close()
    changes = read_changelog(bootstrap, h.output, svc.plan.output_schema)
    kept, replays = drop_replays(changes)
    print(f"outage: cut {cut} connections, refused {proxy.refused}; {len(changes)} records, "
          f"{len(replays)} duplicates {Counter(c.batch for c in replays)}")
    assert retract_table(kept) == log.retract_table()
    assert svc.runs == 1
