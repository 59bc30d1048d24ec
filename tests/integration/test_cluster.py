"""The service on a real Spark standalone cluster on this machine (``spark_cluster.py``): a master,
two workers of one core and 1 GB, executors in JVMs of their own with Python workers of their own.

The service runs as a process (``python -m service run``) with ``SPARK_MASTER=spark://...``, so
its driver is a separate JVM too, and the join runs only on the executors. One run, three phases:

1. A LEFT join with retractions over a few hundred records on two partitions per topic: once
   everything is joined, the output materializes to the expected table (computed without Spark,
   by ``Changelogs``), with no replay at all.
2. More input arrives; while a micro-batch is running (its offsets are in the checkpoint, its
   commit is not) and an executor is running a task (the driver's REST API says so), that
   executor's JVM is killed with SIGKILL. The kill must land mid-task: the driver must report a
   task lost with the executor (``ExecutorLostFailure``). The REST API's view is a moment old, so
   a kill can land just after the task ended; such a kill is done again, on the next busy
   executor once the master has replaced the killed one, until one lands mid-task (at most 5).
   The lost task runs again elsewhere (``spark.task.maxFailures``: a completed stage has a
   failed task), the master starts a replacement, state comes back from the checkpoint, and the
   output (``DELIVERY=exactly-once``: read committed, no record twice) still materializes to the
   expected table.
3. One micro-batch of orders of many new products reaches every bucket from each reading task:
   Spark's task metrics show every join task reading as many rows as the others, within 1.15x.
   Then a graceful stop.

Also shown: the reader schemas travel in the plan. The ``.avsc`` files the service is configured
with are deleted as soon as the driver has built its plan, before any task runs, so an executor
that opened them would fail.

Waits are bounded (a cold driver plus executors on a loaded 2-core machine can take a minute)
and fail with the tails of the service's, master's, workers' and executors' logs.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import time
import urllib.request
from collections import Counter

import pytest

from tests.support.kafka_fixture import consume_all, create_topic
from service.config import load_settings
from devkit.broker_process import free_port
from service.session import QUIET_JVM_LINES
from tests.support.service_harness import (SCHEMAS, SERVICE_JVM_OPTIONS, JoinHarness, drop_replays, read_changelog,
                                           retract_table)
from tests.support.spark_cluster import SparkCluster, socket_ports
from tests.support.service_process import PARTITIONS, Changelogs, ServiceProcess, caught_up, drive, send, service_env

pytestmark = pytest.mark.integration

# Spark's errors about the executor the test kills: its loss, and a request the driver still had
# out to it when its connection closed (seen when the kill lands while the driver asks something).
LOST_EXECUTOR_ERROR = re.compile(r"Lost executor|TransportResponseHandler: Still have \d+ requests? outstanding "
                                 r"when connection from \S+ is closed")

# Spark's network layer on a connection to an executor the test killed ("ERROR TransportClient:
# Failed to send RPC RPC 66... to /127.0.0.1:42650", ...): which message depends on what the driver
# was doing at the kill, so these are matched by the port they name, one of the killed executor's
# sockets (its block manager's, or the connection its client-mode RPC endpoint opened to the
# driver: read from /proc before the kill).
NETWORK_ERROR = re.compile(r" ERROR Transport\w+: ")


def killed_executor_network_error(line: str, killed_ports: set) -> bool:
    return bool(NETWORK_ERROR.search(line)) and any(re.search(rf":{port}\b", line) for port in killed_ports)


START_TIMEOUT_S = 300.0
CATCH_UP_TIMEOUT_S = 300.0
TASKS = 8  # task partitions (SHUFFLE_PARTITIONS), over two executors
BALANCE_KEYS = 4_000  # join keys of the last phase's one micro-batch: every bucket in every reading task


def join_stage_reads(s: "ClusterService", batch: int) -> dict[int, int]:
    """{task partition: shuffle records read} of micro-batch ``batch``'s stateful join stage (the
    stage of its job that reads the shuffle on every task partition), from the driver's REST API
    (Spark's task metrics)."""
    jobs = [j for j in s.api("jobs?status=succeeded") if re.search(rf"\bbatch = {batch}\b", j.get("description", ""))]
    stages = [st for st in s.api("stages?status=complete") if any(st["stageId"] in j["stageIds"] for j in jobs)
              and st["numTasks"] == TASKS and st.get("shuffleReadRecords", 0) > 0]
    assert stages, (f"no join stage of batch {batch} in the driver's REST API; jobs "
                    f"{[(j['jobId'], j.get('description')) for j in s.api('jobs')][-6:]}")
    stage = stages[0]
    tasks = s.api(f"stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=1000")
    return {t["index"]: t["taskMetrics"]["shuffleReadMetrics"]["recordsRead"] for t in tasks
            if t["status"] == "SUCCESS"}

class ClusterService(ServiceProcess):
    """The service process, with the driver's REST API (its UI, on loopback) to see its executors."""

    def __init__(self, name, env, workdir, cluster: SparkCluster, ui_port: int):
        super().__init__(name, env, workdir)
        self.cluster = cluster
        self.ui_port = ui_port
        self.settings_dlq = load_settings(env).dead_letter_topic  # before the schema files are deleted

    def api(self, path: str):
        base = f"http://127.0.0.1:{self.ui_port}/api/v1/applications"
        with urllib.request.urlopen(base, timeout=5) as response:
            app = json.loads(response.read())[0]["id"]
        with urllib.request.urlopen(f"{base}/{app}/{path}", timeout=5) as response:
            return json.loads(response.read())

    def busy_executors(self) -> dict:
        """{executor id: active tasks} of the live executors running tasks now."""
        try:
            executors = self.api("executors")
        except (OSError, IndexError, ValueError):
            return {}
        return {e["id"]: e["activeTasks"] for e in executors if e["id"] != "driver" and e["activeTasks"] > 0}

    def log_tail(self, lines: int = 60) -> str:
        return f"{super().log_tail(lines)}\n{self.cluster.log_tails(25)}"


def test_left_join_on_a_standalone_cluster_survives_a_killed_executor(
        kafka_bootstrap, spark_cluster, tmp_path, new_topic):
    cluster = spark_cluster
    log = Changelogs(seed=4242)
    # Copies of the reader schemas, deleted once the driver has read them (module doc).
    schema_dir = tmp_path / "driver-only"
    schema_dir.mkdir()
    for name in ("orders.avsc", "prices.avsc"):
        shutil.copy(SCHEMAS / name, schema_dir / name)
    ui_port = free_port()
    h = JoinHarness(kafka_bootstrap, None, tmp_path, new_topic, PARTITIONS, **service_env(
        SPARK_MASTER=cluster.url, SHUFFLE_PARTITIONS=str(TASKS),
        # The balance phase's micro-batch reads all its records at once; phase 2 sends input until
        # a kill lands mid-task, a micro-batch per chunk.
        MAX_RECORDS_PER_TRIGGER="100000",
        DELIVERY="exactly-once",  # an executor killed mid-produce: its transaction is aborted, not replayed
        LEFT_SCHEMA_FILE=str(schema_dir / "orders.avsc"), RIGHT_SCHEMA_FILE=str(schema_dir / "prices.avsc"),
        # Loopback only: the driver's RPC and block manager (and its UI, which SPARK_LOCAL_IP binds).
        SPARK_LOCAL_IP="127.0.0.1", SPARK_CONF_spark_driver_host="127.0.0.1",
        SPARK_CONF_spark_driver_bindAddress="127.0.0.1",
        SPARK_CONF_spark_ui_enabled="true", SPARK_CONF_spark_ui_port=str(ui_port),
        SPARK_CONF_spark_executor_memory="1g", SPARK_CONF_spark_executor_cores="1",
        # The executors' JVMs start as the driver's (service_harness.SERVICE_JVM_OPTIONS).
        SPARK_CONF_spark_executor_defaultJavaOptions=SERVICE_JVM_OPTIONS,
    ))
    create_topic(kafka_bootstrap, h.output, PARTITIONS)
    svc = ClusterService("cluster", h.env, tmp_path, cluster, ui_port)
    try:
        # Phase 1: a few hundred records, joined on the cluster.
        send(h, log.chunk(order_ops=120, price_ops=30))
        svc.start()
        drive({svc: lambda s, _: True if "join plan:" in s.log_path.read_text(errors="replace") else None},
              "the driver to build its plan", START_TIMEOUT_S)
        shutil.rmtree(schema_dir)
        drive({svc: caught_up(log.sent)}, "the first input to be joined on the cluster", START_TIMEOUT_S)
        executors_before = cluster.executors()
        assert len(executors_before) == 2, f"expected an executor per worker, found {executors_before}"
        app = [a for a in cluster.state().get("activeapps", []) if a.get("name") == "changejoin"]
        assert app, f"the master runs no changejoin application: {cluster.state().get('activeapps')}"
        changes = read_changelog(kafka_bootstrap, h.output, svc.plan.output_schema)
        kept, replays = drop_replays(changes)
        assert not replays, f"replays without any failure: {Counter(c.batch for c in replays)}"
        assert retract_table(kept) == log.retract_table(), "phase 1: the cluster's join is not the expected table"
        phase1_records = len(changes)

        # Phase 2: more input; an executor running tasks is killed while a micro-batch is running.
        first_new_batch = svc.next_batch()
        phase1_commit = first_new_batch - 1
        for _ in range(2):
            send(h, log.chunk(order_ops=60, price_ops=15))
        killed = {}
        ports_of_killed = {}  # executor id: its sockets' local ports when it was killed
        misses = []  # kills that landed between two tasks of the executor: tried again
        aim = {"state": "aim"}

        def lost_tasks_of(executor: str, text: str):
            """The micro-batches of tasks the driver lost with ``executor``."""
            return [int(b) for b in re.findall(
                r"\[batchId = (\d+)\] Lost task \S+ in stage \S+ \(TID \d+\) \(\S+ executor "
                + re.escape(executor) + r"\): ExecutorLostFailure", text)]

        def kill_mid_task(s: ClusterService, batches):
            """Kill an executor while it runs a task of a phase 2 micro-batch, and make sure the
            kill landed mid-task: the driver must report a task lost with the executor. A kill that
            landed between two tasks (the driver's view of running tasks is a moment old) is done
            again, on another busy executor, once the master has replaced the killed one."""
            text = s.log_path.read_text(errors="replace")
            if aim["state"] == "confirm":
                eid = aim["executor"]
                if not re.search(rf"Lost executor {eid}\b", text):
                    return None  # the driver has not noticed yet
                if lost_tasks_of(eid, text):
                    return eid
                # The driver logs the tasks it lost right after the executor: give it a moment.
                aim.setdefault("noticed", time.monotonic())
                if time.monotonic() - aim["noticed"] < 5:
                    return None
                del aim["noticed"]
                misses.append(eid)
                assert len(misses) < 5, f"5 kills, none mid-task: {misses}\n{s.log_tail()}"
                aim["state"] = "replace"
            if aim["state"] == "replace":
                if len(cluster.executors()) < 2:
                    return None
                aim["state"] = "aim"
            running = s.store.newest_planned()
            running = -1 if running is None else running
            committed = set(s.commits())
            if running < first_new_batch or running in committed:
                if caught_up(log.sent)(s, batches):
                    send(h, log.chunk(order_ops=30, price_ops=8))  # more input, more tasks to aim at
                return None
            busy = s.busy_executors()
            live = {eid: pid for pid, eid in cluster.executors().items()}
            targets = [eid for eid in busy if eid in live]
            if not targets:
                return None
            eid = targets[0]
            ports_of_killed[eid] = socket_ports(live[eid])
            os.kill(live[eid], signal.SIGKILL)
            killed.update(executor=eid, pid=live[eid], batch=running, active_tasks=busy[eid],
                          committed_then=max(committed, default=-1))
            aim.update(state="confirm", executor=eid)
            return None

        drive({svc: kill_mid_task}, "an executor killed while it runs a task", CATCH_UP_TIMEOUT_S)
        drive({svc: caught_up(log.sent)}, "all input to be joined after the executor was killed",
              CATCH_UP_TIMEOUT_S)
        # The master replaced the killed executor: two executors again, one of them new.
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            executors_after = cluster.executors()
            if len(executors_after) == 2 and killed["executor"] not in executors_after.values():
                break
            assert time.monotonic() < deadline, (
                f"no replacement for executor {killed['executor']}: {executors_after}\n{svc.log_tail()}")
            time.sleep(0.5)
        assert killed["batch"] in svc.commits(), f"batch {killed['batch']}, interrupted by the kill, never committed"
        final_commit = svc.commits()[-1]
        killed_ports = {port for ports in ports_of_killed.values() for port in ports}
        assert killed_ports, f"no socket port found for the killed executors {sorted(ports_of_killed)}"
        stages = svc.api("stages?status=complete")

        # Phase 3: balanced tasks. One micro-batch of orders of many new products, read by a
        # task per input partition, reaches every bucket from each: Spark's task metrics show
        # every join task reading as many rows (bucket packs) as the others, within 1.15x.
        base = 10**6
        balance_batch = svc.next_batch()
        h.send_orders([("+I", {"order_id": base + i, "product": f"balance-{i}", "quantity": 1}, i % PARTITIONS)
                       for i in range(BALANCE_KEYS)])
        log.sent["orders"].update(i % PARTITIONS for i in range(BALANCE_KEYS))
        drive({svc: caught_up(log.sent)}, "the balance phase's micro-batch to be joined", START_TIMEOUT_S)
        reads = join_stage_reads(svc, balance_batch)
        assert svc.stop() == 0, f"graceful stop failed; log tail:\n{svc.log_tail()}"
        driver_log = svc.log_path.read_text(errors="replace")
    finally:
        svc.close()
    assert sorted(reads) == list(range(TASKS)), reads
    mean = sum(reads.values()) / TASKS
    assert max(reads.values()) <= 1.15 * mean, f"unbalanced join tasks: {reads}"

    lost_executor = re.findall(rf"Lost executor {killed['executor']}\b", driver_log)
    # "[batchId = B] Lost task 1.0 in stage 21.0 (TID 53) (127.0.0.1 executor 1): ExecutorLostFailure ..."
    lost_tasks = lost_tasks_of(killed["executor"], driver_log)
    missed_tasks = [b for eid in misses for b in lost_tasks_of(eid, driver_log)]
    # Completed stages in which some task failed (and was run again, or the stage would not be complete).
    retried = {f"{s['stageId']}.{s['attemptId']}": (s["numFailedTasks"], s["numCompleteTasks"])
               for s in stages if s["numFailedTasks"] > 0 or s["attemptId"] > 0}
    changes = read_changelog(kafka_bootstrap, h.output, svc.plan.output_schema)
    kept, replays = drop_replays(changes)
    summary = (f"killed executor {killed['executor']} (pid {killed['pid']}, {killed['active_tasks']} tasks running) "
               f"while batch {killed['batch']} was running (last commit then: {killed['committed_then']}), after "
               f"{len(misses)} kills between tasks (executors {misses}); "
               f"executors before {sorted(executors_before.values())}, after {sorted(executors_after.values())}; "
               f"driver log: {len(lost_executor)} 'Lost executor', tasks lost with it in batches {lost_tasks}; "
               f"completed stages with failed tasks (stage.attempt: failed, complete) {retried}; "
               f"{phase1_records} records in phase 1, {len(changes)} in all, {len(replays)} replays "
               f"{dict(Counter(c.batch for c in replays))}")
    print(summary)
    assert lost_executor, f"the driver never reported executor {killed['executor']} lost; {summary}"
    assert lost_tasks, f"no task was lost with the killed executor; {summary}"
    assert not missed_tasks, f"a kill counted as between tasks lost tasks; {summary}"
    # The lost task was run again: a completed stage had a failed task.
    assert retried, f"a task was lost but no completed stage had a failed task; {summary}"
    # Under exactly-once delivery a read_committed reader sees none at all: the retry's producer
    # fenced the lost task's and aborted its open transaction (or found its share committed).
    assert not replays, f"read_committed sees records twice; {summary}"
    assert all(phase1_commit < b <= final_commit for b in lost_tasks), (
        f"the lost tasks were not in phase 2's batches ({phase1_commit + 1}..{final_commit}); {summary}")
    # What the service printed, start to graceful stop: nothing a user cannot act on (the JDK's
    # incubator notice, PySpark's transformWithState prints), no error but the lost executor's.
    noise = [line for line in driver_log.splitlines()
             if any(p.match(line.encode()) for p in QUIET_JVM_LINES)
             or (" ERROR " in line and not LOST_EXECUTOR_ERROR.search(line)
                 and not killed_executor_network_error(line, killed_ports)) or "Traceback" in line]
    lines, context = driver_log.splitlines(), []
    for i, line in enumerate(lines):
        if line in noise:  # what each unexpected line was about
            context += [*lines[i:i + 10], "..."]
    assert not noise, "\n".join(noise) + "\n--- in context:\n" + "\n".join(context[:300])
    assert not consume_all(kafka_bootstrap, svc.settings_dlq), "dead letters"
    expected = log.retract_table() + Counter({(base + i, f"balance-{i}", 1, None): 1 for i in range(BALANCE_KEYS)})
    assert retract_table(kept) == expected, f"not the expected table; {summary}"
