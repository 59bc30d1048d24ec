"""After a kill -9: how soon the service, started again at once on its checkpoint, writes new
output; and how soon a first start writes any.

    python -m bench.kill_restart_bench [--rate 2000] [--keys 10000] [--kills 2] [--run 20]
                                       [--rounds 1] [--variant NAME:VAR=VALUE,,VAR=VALUE ...]
                                       [--checkout NAME=DIR ...] [--record] [--log PATH]

One broker; left-pk with both inputs' producer clocks selected (the latency runs' query). The
service runs as a pod runs it (``python -m service run``, a process group of its own, the default
trigger, task count and delivery: exactly-once), while this process produces ``--rate`` input rows/s
throughout. A ``read_committed`` consumer notes when each output record reaches it. Each run, on
topics and a checkpoint of its own: a first start; a graceful stop (SIGTERM) and a start again;
then ``--kills`` times, after ``--run`` s, its whole process group killed with SIGKILL, as a lost
node would be, and started again at once on the same checkpoint; a graceful stop at the end.
``--variant`` runs each start sequence once per variant and round, alternating who goes first;
``--checkout NAME=DIR`` runs variant NAME's service from another checkout (``git worktree add
--detach DIR REV``, its ``.cache`` a link to this one's): code before and after, side by side.

Printed per start: the seconds from the process's spawn to the first output record a consumer
receives after it (the figure issue 40 bounds at 15 s after a kill), and when the service's log
(``LOG_FORMAT=json``) dates its steps: the join plan, the transactional ids initialized (which
aborts what the killed run left open), Spark started (in the background meanwhile), and its
first committed micro-batch.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .harness import ROOT
from .harness.changejoin import parse_variant, service_environment
from .harness.data import changelogs
from .harness.latency import TIMED_ENV, Paced, latency_sql, latency_units

#: The service's log lines that date a start's steps: (step, what the message starts with).
STEPS = (("plan", "join plan:"), ("transactions", "exactly-once delivery:"), ("spark", "Spark started in"),
         ("first commit", "batch "))


class Arrivals:
    """A ``read_committed`` consumer of the output topic, from its start: the wall-clock time each
    record reached it."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        from confluent_kafka import Consumer, TopicPartition

        self.times: list[float] = []
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kill-restart-{time.time_ns()}",
                                   "enable.auto.commit": False, "isolation.level": "read_committed",
                                   "fetch.wait.max.ms": 10})
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            for message in self._consumer.consume(10_000, 0.05):
                if message.error() is None:
                    self.times.append(time.time())

    def first_after(self, since: float, timeout_s: float) -> float | None:
        """The arrival time of the first record that came after ``since``; None within ``timeout_s``."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            later = [t for t in self.times[-100_000:] if t > since]
            if later:
                return later[0]
            time.sleep(0.02)
        return None

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._consumer.close()


def until(units, stop: threading.Event):
    """``units`` until ``stop`` is set."""
    for unit in units:
        if stop.is_set():
            return
        yield unit


def steps(log: str, spawned: float) -> dict[str, float]:
    """Seconds from the spawn to each of :data:`STEPS`, as the service's log (text) dates them."""
    found: dict[str, float] = {}
    for line in log.splitlines():
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        message = entry.get("message", "")
        for step, prefix in STEPS:
            if step not in found and message.startswith(prefix) and (step != "first commit" or " committed" in message):
                at = dt.datetime.fromisoformat(entry["time"]).timestamp()
                found[step] = round(at - spawned, 2)
    return found


def spawn(env: dict, log_path: Path, checkout: Path = ROOT) -> tuple[subprocess.Popen, float]:
    with open(log_path, "ab") as log:
        spawned = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "service", "run"], env=env, stdout=log,
                                stderr=subprocess.STDOUT, cwd=checkout, start_new_session=True)
    return proc, spawned


def group_gone(pgid: int, timeout_s: float = 60) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    raise RuntimeError(f"the killed service's processes (group {pgid}) are still there after {timeout_s} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=2000, help="input rows/s, both sides")
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--kills", type=int, default=2, help="restarts after a kill -9, per run")
    parser.add_argument("--run", type=float, default=20, help="seconds each start runs after its first output")
    parser.add_argument("--rounds", type=int, default=1, help="runs of every variant, alternating who goes first")
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME:VAR=VALUE,,VAR=VALUE (default: the service's defaults alone)")
    parser.add_argument("--checkout", action="append", default=[], metavar="NAME=DIR",
                        help="run variant NAME's service from the checkout DIR")
    parser.add_argument("--record", action="store_true", help="append the table to bench/results/RESULTS.md")
    parser.add_argument("--log", help="keep the service's log of the last run at this path")
    args = parser.parse_args()
    variants = [parse_variant(v) for v in args.variant] or [("default", {})]
    checkouts = {name: Path(directory).resolve() for name, _, directory in (c.partition("=") for c in args.checkout)}
    unknown = set(checkouts) - {name for name, _ in variants}
    if unknown or not all(d.is_dir() for d in checkouts.values()):
        raise SystemExit(f"--checkout takes NAME=DIR for a --variant NAME and an existing DIR: {args.checkout}")

    from devkit.kafka_broker import KafkaBroker

    starts: list[dict] = []
    with KafkaBroker(heap="1g") as bootstrap, tempfile.TemporaryDirectory() as work:
        for rnd in range(args.rounds):
            for name, extra in (variants if rnd % 2 == 0 else variants[::-1]):
                for figures in run(args, bootstrap, Path(work) / f"{rnd}-{name}", extra, checkouts.get(name, ROOT)):
                    starts.append({"variant": name, "round": rnd, **figures})
                    print(json.dumps(starts[-1]), flush=True)
    table = render(args, starts)
    print(table)
    if args.record:
        from .harness.report import record_round

        record_round("kill-restart", "kill -9 and restart: the first output after a start", table,
                     lambda png: plot(starts, png), "seconds from the spawn to each step, per start")


def run(args, bootstrap: str, work: Path, extra: dict, checkout: Path = ROOT) -> list[dict]:
    """One run on topics of its own, the service from ``checkout``: a first start, a restart after
    SIGTERM (its graceful stop), then ``--kills`` restarts after a kill -9; each start's figures."""
    from confluent_kafka.admin import AdminClient, NewTopic

    work.mkdir(parents=True)
    tag = f"kill-{time.time_ns() % 10**9}"
    orders_topic, prices_topic, out = f"{tag}-orders", f"{tag}-prices", f"{tag}-out"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 2) for t in (orders_topic, prices_topic, out)]).values():
        future.result(30)
    env = {**os.environ, "PYTHONPATH": str(checkout), "LOG_FORMAT": "json", **service_environment(
        bootstrap, "left-pk", None, None, str(work / "checkpoint"), out, orders_topic=orders_topic,
        prices_topic=prices_topic, sql=latency_sql("left-pk"), extra={**TIMED_ENV, "TRIGGER_INTERVAL": None, **extra})}
    env.pop("SPARK_CONF_spark_sql_streaming_numRecentProgressUpdates", None)
    # Enough input for every start, produced at the rate throughout.
    seconds = (args.kills + 2) * (args.run + 60) + 60
    orders, prices = changelogs(int(args.rate / 2 * seconds) + 1, args.keys, "left-pk", seed=17)
    units = latency_units("left-pk", "changejoin", orders, prices, orders_topic, prices_topic)
    stop = threading.Event()
    producer = threading.Thread(target=Paced(bootstrap).run, args=(until(units, stop), args.rate), daemon=True)
    arrivals = Arrivals(bootstrap, out, 2)
    log_path = work / "service.log"
    proc, starts, after = None, [], "a first start"
    try:
        producer.start()
        for start in range(args.kills + 2):
            mark = log_path.stat().st_size if log_path.exists() else 0
            proc, spawned = spawn(env, log_path, checkout)
            first = arrivals.first_after(spawned, 300)
            if first is None:
                raise RuntimeError(f"no output within 300 s of start {start}; see the log:\n"
                                   f"{log_path.read_text(errors='replace')[mark:][-5000:]}")
            time.sleep(args.run)  # the log has dated the first commit by then (the output comes before it)
            starts.append({"start": start, "after": after, "first_output_s": round(first - spawned, 2),
                           **steps_since(log_path, mark, spawned)})
            if start == 0 or start == args.kills + 1:
                proc.send_signal(signal.SIGTERM)  # a graceful stop (it writes the class archive, if asked)
                proc.wait(180)
                after = "a SIGTERM"
            else:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(60)
                after = "a kill -9"
            group_gone(proc.pid)
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        stop.set()
        producer.join(90)
        arrivals.close()
        if args.log and log_path.exists():
            Path(args.log).write_bytes(log_path.read_bytes())
    return starts


def steps_since(log_path: Path, mark: int, spawned: float) -> dict[str, float]:
    """:func:`steps` of the log written since byte ``mark`` (this start's)."""
    with open(log_path, "rb") as log:
        log.seek(mark)
        return steps(log.read().decode(errors="replace"), spawned)


def render(args, starts: list[dict]) -> str:
    lines = [f"`python -m bench.kill_restart_bench --rate {args.rate:g} --keys {args.keys} --kills {args.kills} "
             f"--run {args.run:g} --rounds {args.rounds}" + "".join(f" --variant {v}" for v in args.variant)
             + "".join(f" --checkout {c}" for c in args.checkout) + "`", "",
             "| variant | round | start | after | first output s (spawn to a consumer) | join plan s "
             "| transactional ids initialized s | Spark started s | first micro-batch committed s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in starts:
        lines.append(f"| {s['variant']} | {s['round']} | {s['start']} | {s['after']} | {s['first_output_s']:.2f} | "
                     f"{s.get('plan', '-')} | {s.get('transactions', '-')} | {s.get('spark', '-')} | "
                     f"{s.get('first commit', '-')} |")
    lines.append("")
    for name in dict.fromkeys(s["variant"] for s in starts):
        for after in ("a first start", "a SIGTERM", "a kill -9"):
            values = [s["first_output_s"] for s in starts if s["variant"] == name and s["after"] == after]
            if values:
                lines.append(f"- {name}, first output after {after}: min {min(values):.2f} s, median "
                             f"{statistics.median(values):.2f} s, max {max(values):.2f} s ({len(values)} starts)")
    return "\n".join(lines)


def plot(starts: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.6 * len(starts) + 1.5))
    labels = [f"{s['variant']} {s['round']}.{s['start']}: {s['after']}" for s in starts]
    for row, s in enumerate(starts):
        ax.barh(row, s["first_output_s"], color="#9ecae1")
        for (step, _), marker in zip(STEPS, "o^Ds"):
            if step in s:
                ax.plot(s[step], row, marker, color="black")
    ax.plot([], [], "o", color="black", label="join plan")
    ax.plot([], [], "^", color="black", label="transactional ids initialized")
    ax.plot([], [], "D", color="black", label="Spark started")
    ax.plot([], [], "s", color="black", label="first micro-batch committed")
    ax.axvline(15, color="red", linestyle="--", label="15 s")
    ax.set_yticks(range(len(starts)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the spawn (bar: the first output a read_committed consumer receives)")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)


if __name__ == "__main__":
    main()
