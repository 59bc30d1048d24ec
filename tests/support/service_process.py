"""The service in its own process (``python -m service run``), for the tests that kill, stop and restart
it: ``ServiceProcess`` (a process group on a checkpoint that outlives it), ``Changelogs`` (random but
reproducible retract changelogs of orders and prices, and the join of the tables they end in),
``drive`` and the conditions it waits for (``writing_uncommitted_batch``, ``committed``,
``caught_up``): moments chosen by watching the output topic and the checkpoint's ``commits/``
directory, never by timing.

Used by tests/integration/test_crashes.py (the crash matrix) and the tests that kill or stop a
service (graceful stop, cluster, Debezium input); test_rescale.py uses its ``Changelogs``.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

from service.catalog import plan_for
from service.checkpoint import Checkpoint
from service.config import load_settings
from tests.support.service_harness import ORDERS, JoinHarness, avro, next_batch, order, price, start_service_process

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
        "DELIVERY": "at-least-once",  # replays a consumer drops; tests of exactly-once ask for it
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
# The service as a process
# --------------------------------------------------------------------------------------------


def group_pids(pgid: int) -> List[int]:
    """The live (non-zombie) processes of process group ``pgid``."""
    pids = []
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
            pids.append(int(entry))
    return pids


def group_alive(pgid: int) -> bool:
    """Whether a live (non-zombie) process of process group ``pgid`` remains."""
    return bool(group_pids(pgid))


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


class WatchedService:
    """A service on a checkpoint that outlives it, its output topic followed: what :func:`drive`
    and its conditions ask of a service, in its own process or in the test's."""

    def __init__(self, name: str, env: Dict[str, str]):
        self.name = name
        self.env = env
        self.checkpoint = Path(env["CHECKPOINT_LOCATION"])
        self.store = Checkpoint(str(self.checkpoint))  # Spark's logs in it, read as the service reads them
        self.watcher = OutputWatcher(env["KAFKA_BOOTSTRAP_SERVERS"], env["OUTPUT_TOPIC"])

    def alive(self) -> bool:
        raise NotImplementedError

    def ended(self) -> str:
        """How it ended, once it is not alive."""
        raise NotImplementedError

    def log_tail(self, lines: int = 60) -> str:
        raise NotImplementedError

    def commits(self) -> List[int]:
        return self.store.committed()

    def next_batch(self) -> int:
        """The id of the first micro-batch of a run started now."""
        return next_batch(self.checkpoint)

    def committed_offsets(self) -> Optional[List[dict]]:
        """The source offsets (left, right) up to which the last committed micro-batch read."""
        newest = self.store.newest_committed()
        if newest is None:
            return None
        lines = self.store.batch_offsets(newest).splitlines()
        return [json.loads(line) for line in lines[2:]]  # "v1", batch metadata, one line per source


class ServiceProcess(WatchedService):
    """``python -m service run`` in its own process group, on a checkpoint that outlives it."""

    def __init__(self, name: str, env: Dict[str, str], workdir: Path):
        super().__init__(name, env)
        self.log_path = workdir / f"{name}.log"
        self.plan = plan_for(load_settings(env))
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

    def ended(self) -> str:
        return f"exited with code {self.proc.returncode}"

    def kill(self) -> None:
        """SIGKILL to the whole process group, as a crash of its machine or container would do;
        returns once none of its processes is left."""
        pgid = self.proc.pid
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=60)
        wait_until(lambda: not group_alive(pgid), 60, f"the processes of the killed service {self.name} to end")

    def stop(self, timeout: float = 180.0) -> int:
        """SIGTERM to the service (a graceful stop); returns its exit code."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
            # Spark's JVM exits once the driver is gone; let it finish before cleanup() kills it.
            wait_until(lambda: not group_alive(self.proc.pid), 60, f"the processes of {self.name} to end")
            return code
        finally:
            self.cleanup()

    def cleanup(self) -> None:
        """Nothing of this service may outlive the test."""
        if self.proc is not None and group_alive(self.proc.pid):
            self.kill()

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


class InProcessService(WatchedService):
    """The service in the test's process and on its Spark (``JoinHarness.start``), watched as a
    :class:`ServiceProcess` is: a run ends when its query fails or the test stops it."""

    def __init__(self, name: str, harness: JoinHarness):
        super().__init__(name, harness.env)
        self.harness = harness

    @property
    def service(self):
        return self.harness.service

    def start(self) -> None:
        self.harness.start()

    def alive(self) -> bool:
        return self.service is not None and self.service.query.isActive

    def ended(self) -> str:
        return f"stopped: {self.service.query.exception()}"

    def log_tail(self, lines: int = 60) -> str:
        error = self.service.query.exception() if self.service is not None else None
        return "\n".join(str(error).splitlines()[-lines:]) if error else "(the query has not failed)"

    def close(self) -> None:
        try:
            if self.alive():
                self.service.stop()
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


def drive(conditions: Dict[WatchedService, Callable], what: str, timeout: float,
          action: Optional[Callable[[WatchedService], None]] = None) -> Dict[WatchedService, object]:
    """Watch the services until each one's condition holds, applying ``action`` (e.g. kill) to a
    service the moment its condition holds. A service that exits meanwhile fails the test."""
    pending, results = dict(conditions), {}
    deadline = time.monotonic() + timeout
    while pending:
        for svc, condition in list(pending.items()):
            batches = svc.watcher.poll()
            if not svc.alive():
                pytest.fail(f"{svc.name} {svc.ended()} while waiting for {what}; log tail:\n{svc.log_tail()}")
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
