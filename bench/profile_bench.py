"""Where changejoin's CPU goes: one pipeline_bench run profiled in the JVM and in Python.

    python -m bench.profile_bench [--scenario left-pk] [--rows 200000] [--keys 10000]
                                  [--no-py-spy] [--out DIR]

Between the query's start and the end of ``process_available()`` (Spark already up):

- **JVM, by thread**: CPU seconds of every thread of the Spark JVM (``/proc/<pid>/task``), grouped
  by what the thread is (task threads, the writer threads feeding Python workers, GC, JIT, ...);
- **JVM, by code**: Java Flight Recorder (``jcmd JFR.start settings=profile``, the JVM started with
  ``-XX:+DebugNonSafepoints``): ``jdk.ExecutionSample`` (threads running Java code) grouped by
  the first frame of interest on each stack (Arrow, the state server, RocksDB, shuffle, ...),
  and the top self-time methods;
- **Python**: ``py-spy record --subprocesses`` over the driver and every Python worker (if py-spy
  is installed: ``pip install py-spy``; give its path with ``PY_SPY``), samples grouped by step.

Writes the JFR recording, py-spy's folded stacks and a ``summary.json`` to ``--out``; prints
the tables.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from bench.harness.changejoin import run_changejoin
from bench.harness.data import load
from bench.harness.processes import proc_stat, process_tree, processes
from devkit.kafka_broker import KafkaBroker
from service.session import LOG4J_CONFIG


# -- JVM threads ---------------------------------------------------------------------------------
THREAD_GROUPS = [  # (group, prefixes of /proc comm, which the kernel cuts to 15 characters)
    ("task threads (Executor task launch worker)", ("Executor task",)),
    ("writers to Python workers", ("stdout writer f", "writer for pyth", "Writer Monitor ", "Worker Monitor ")),
    ("GC", ("GC Thread", "G1 ", "VM Thread", "GC ")),
    ("JIT compiler", ("C2 CompilerThre", "C1 CompilerThre")),
    ("RocksDB background", ("rocksdb:",)),
    ("stream execution (driver)", ("stream execution",)),
    ("shuffle / netty / block manager", ("shuffle-", "rpc-", "netty", "dispatcher-", "block-manager", "map-output")),
]


def jvm_threads(pid: int) -> dict[int, tuple[str, float]]:
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        stat = proc_stat(f"/proc/{pid}/task/{tid}/stat")
        if stat is not None:
            out[int(tid)] = (stat[1], stat[2])
    return out


def thread_group(comm: str) -> str:
    for group, prefixes in THREAD_GROUPS:
        if comm.startswith(prefixes):
            return group
    return "other JVM threads"


def thread_cpu(before: dict, after: dict) -> tuple[dict[str, float], dict[str, float]]:
    groups: collections.Counter = collections.Counter()
    names: collections.Counter = collections.Counter()
    for tid, (comm, cpu) in after.items():
        used = cpu - before.get(tid, (comm, 0.0))[1]
        groups[thread_group(comm)] += used
        names[comm] += used
    return dict(groups), dict(names)


# -- JFR -----------------------------------------------------------------------------------------
# Each Java execution sample is charged to the first frame (from the top of the stack) whose
# class matches one of these, in this order; the stack's leaf otherwise.
JFR_CATEGORIES = [
    ("Arrow: Python worker IO (read/write Arrow batches)", (
        "org.apache.spark.sql.execution.python.ArrowPythonRunner", "org.apache.spark.sql.execution.python.PythonArrowInput",
        "org.apache.spark.sql.execution.python.PythonArrowOutput", "org.apache.spark.sql.execution.python.BasicPythonArrowInput",
        "org.apache.spark.sql.execution.python.BasicPythonArrowOutput",
        "org.apache.spark.sql.execution.arrow.", "org.apache.spark.sql.vectorized.ArrowColumnVector",
        "org.apache.arrow.")),
    ("transformWithState state server (state API calls from Python)", (
        "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer",
        "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPandasStateServer",
        "org.apache.spark.sql.execution.python.TransformWithStateInPySparkStateServer",
        "org.apache.spark.sql.execution.python.TransformWithStateInPandasStateServer",
        "org.apache.spark.sql.execution.streaming.StatefulProcessorHandleImpl",
        "org.apache.spark.sql.execution.streaming.state.StatefulProcessorHandleImpl",
        "org.apache.spark.sql.execution.streaming.ValueStateImpl",
        "org.apache.spark.sql.execution.streaming.state.ValueStateImpl",
        "com.google.protobuf.", "org.apache.spark.sql.execution.streaming.state.StateMessage")),
    ("RocksDB state store", ("org.rocksdb.", "org.apache.spark.sql.execution.streaming.state.RocksDB")),
    ("state store (other)", ("org.apache.spark.sql.execution.streaming.state.",)),
    ("Python data source read (rows from the source's workers)", (
        "org.apache.spark.sql.execution.python.PythonStreamingSourceRunner",
        "org.apache.spark.sql.execution.datasources.v2.python.", "org.apache.spark.sql.execution.python.MapInBatchEvaluatorFactory",
        "org.apache.spark.sql.execution.python.PythonDataSource", "org.apache.spark.sql.execution.python.UserDefinedPythonDataSource")),
    ("shuffle write/read, sort", (
        "org.apache.spark.shuffle.", "org.apache.spark.util.collection.", "org.apache.spark.storage.",
        "org.apache.spark.sql.execution.UnsafeExternalRowSorter", "org.apache.spark.sql.execution.SortExec",
        "org.apache.spark.util.collection.unsafe.sort.", "org.apache.spark.io.", "net.jpountz.", "com.github.luben.zstd.",
        "org.apache.spark.serializer.")),
    ("generated code / row conversion", (
        "org.apache.spark.sql.catalyst.expressions.GeneratedClass", "org.apache.spark.sql.catalyst.expressions.",
        "org.apache.spark.sql.catalyst.", "org.apache.spark.unsafe.")),
    ("codegen compile (Janino)", ("org.codehaus.janino.", "org.codehaus.commons.")),
    ("Python runner (socket, worker protocol)", ("org.apache.spark.api.python.", "org.apache.spark.sql.execution.python.")),
    ("query planning / streaming driver", (
        "org.apache.spark.sql.execution.streaming.", "org.apache.spark.sql.execution.", "org.apache.spark.sql.",
        "org.apache.spark.scheduler.", "org.apache.spark.rpc.", "org.apache.spark.")),
    ("JDK: IO/NIO", ("sun.nio.", "java.io.", "java.nio.", "sun.net.", "java.net.")),
    ("JDK other", ("java.", "jdk.", "sun.", "scala.")),
]


def jfr_category(frames: list[str]) -> str:
    for name, prefixes in JFR_CATEGORIES:
        for frame in frames:
            if frame.startswith(prefixes):
                return name
    return "other: " + (frames[0].rsplit(".", 2)[0] if frames else "?")


def jfr_samples(recording: Path, event: str) -> list[tuple[str, list[str]]]:
    """(thread name, frames top first as 'class.method') of every ``event`` in ``recording``."""
    text = subprocess.run(["jfr", "print", "--json", "--stack-depth", "64", "--events", event, str(recording)],
                          check=True, capture_output=True, text=True).stdout
    out = []
    for e in json.loads(text)["recording"]["events"]:
        values = e["values"]
        thread = (values.get("sampledThread") or {}).get("javaName") or "?"
        trace = values.get("stackTrace") or {}
        frames = [f"{f['method']['type']['name']}.{f['method']['name']}" for f in trace.get("frames") or []]
        out.append((thread, frames))
    return out


def jfr_tables(recording: Path) -> dict:
    samples = jfr_samples(recording, "jdk.ExecutionSample")
    by_category: collections.Counter = collections.Counter()
    by_leaf: collections.Counter = collections.Counter()
    by_thread: collections.Counter = collections.Counter()
    by_category_thread: collections.Counter = collections.Counter()
    for thread, frames in samples:
        category = jfr_category(frames)
        by_category[category] += 1
        by_leaf[frames[0] if frames else "?"] += 1
        short = thread_kind(thread)
        by_thread[short] += 1
        by_category_thread[(short, category)] += 1
    native = jfr_samples(recording, "jdk.NativeMethodSample")
    native_leaf: collections.Counter = collections.Counter(frames[0] if frames else "?" for _, frames in native)
    return {"execution_samples": len(samples), "by_category": dict(by_category.most_common()),
            "by_leaf": dict(by_leaf.most_common(40)), "by_thread": dict(by_thread.most_common()),
            "by_thread_category": {f"{t} | {c}": n for (t, c), n in by_category_thread.most_common(30)},
            "native_samples": len(native), "native_leaf": dict(native_leaf.most_common(15))}


def thread_kind(name: str) -> str:
    for prefix in ("Executor task launch worker", "stdout writer for", "writer for python", "stream execution thread",
                   "Worker Monitor", "dispatcher-", "shuffle-", "rpc-"):
        if name.startswith(prefix):
            return prefix.strip()
    return name


# -- py-spy --------------------------------------------------------------------------------------
PY_CATEGORIES = [  # (step, substrings of a frame "function (file:line)"); the first match from the leaf
    ("decode: fastavro read", ("fastavro/_read", "schemaless_reader")),
    ("encode: Avro write", ("service/avro/", "fastavro/_write")),
    ("produce (confluent-kafka)", ("service/sink.py",)),
    ("encode: records, headers", ("service/encode.py", "service/kafka_records.py", "service/deadletters.py")),
    ("join: operators", ("operators/",)),
    ("join: state API (get/update/timers: socket to the JVM)", (
        "stateful_processor_api_client.py", "stateful_processor.py", "pyspark/sql/streaming/value_state_client",
        "pyspark/sql/streaming/list_state_client", "pyspark/sql/streaming/map_state_client")),
    ("join: envelope pickle / order records", ("service/envelope.py", "ordered_records", "(pickle)")),
    ("join: processor adapter", ("service/processor.py",)),
    ("decode: keying, envelope", ("service/decode.py", "service/keys.py")),
    ("source: librdkafka consume, records", ("service/source.py",)),
    ("Arrow <-> Python (PySpark serializers)", ("pyspark/sql/pandas/serializers.py", "pyspark/sql/pandas/conversion",
                                                "pyspark/sql/pandas/types.py", "pyarrow/", "pyspark/sql/conversion.py")),
    ("transformWithState driver loop (PySpark)", ("transform_with_state", "pyspark/sql/streaming/", "stateful_processor_util")),
    ("PySpark worker / serializers other", ("pyspark/",)),
]


def py_category(frames: list[str]) -> str:
    for frame in reversed(frames):  # leaf last in py-spy's folded stacks
        for name, needles in PY_CATEGORIES:
            if any(n in frame for n in needles):
                return name
    return "other"


def process_kind(process: str) -> str:
    command = process.partition(":")[2].strip('"')
    if "pyspark.daemon" in command:
        return "worker: " + command.rsplit(" ", 1)[-1]
    if "profile_bench" in command:
        return "driver (the benchmark process)"
    return command[:60]


def pyspy_tables(folded: Path) -> dict:
    by_category: collections.Counter = collections.Counter()
    by_process: collections.Counter = collections.Counter()
    by_leaf: collections.Counter = collections.Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        total += n
        processes = [f for f in frames if f.startswith("process ")]
        frames = [f for f in frames if not f.startswith("process ")]
        by_process[process_kind(processes[-1] if processes else "?")] += n
        by_category[py_category(frames)] += n
        by_leaf[frames[-1][:120] if frames else "(process only)"] += n
    return {"samples": total, "by_category": dict(by_category.most_common()), "by_process": dict(by_process.most_common()),
            "by_leaf": dict(by_leaf.most_common(30))}


# -- the run -------------------------------------------------------------------------------------
def spark_jvm_pid() -> int:
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if ppid == os.getpid() and b"org.apache.spark.deploy.SparkSubmit" in cmdline:
            return int(name)
    raise RuntimeError("no Spark JVM under this process")


def table(title: str, counts: dict, unit: str, total: float | None = None, per_row: float | None = None) -> str:
    total = total if total is not None else sum(counts.values())
    lines = [f"\n{title}", f"| {unit} | share |" + (" µs per input row |" if per_row else ""), "|---|---|" + ("---|" if per_row else "")]
    for key, value in sorted(counts.items(), key=lambda kv: -kv[1]):
        share = value / total if total else 0
        row = f"| {key} | {value:,.1f} ({share:.0%}) |" if isinstance(value, float) else f"| {key} | {value:,} ({share:.0%}) |"
        if per_row:
            row += f" {share * per_row:.1f} |"
        lines.append(row)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", choices=["left-pk", "inner-nopk"], default="left-pk")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--max-per-trigger", type=int, default=100_000)
    parser.add_argument("--shuffle-partitions", type=int, default=2)
    parser.add_argument("--no-py-spy", action="store_true")
    parser.add_argument("--no-jfr", action="store_true")
    parser.add_argument("--py-spy-rate", type=int, default=50)
    parser.add_argument("--out", default=None)
    parser.add_argument("--env", action="append", default=[], help="extra service variable NAME=VALUE")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="cj-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    py_spy = os.environ.get("PY_SPY") or shutil.which("py-spy")
    extra = dict(e.split("=", 1) for e in args.env)
    java_opts = (f"-Dlog4j.configurationFile=file:{LOG4J_CONFIG} -Dlog4j2.configurationFile=file:{LOG4J_CONFIG} "
                 "-XX:+UnlockDiagnosticVMOptions -XX:+DebugNonSafepoints")
    extra.setdefault("SPARK_CONF_spark_driver_extraJavaOptions", java_opts)
    state: dict = {}

    def on_start():
        pid = state["jvm"] = spark_jvm_pid()
        if not args.no_jfr:
            subprocess.run(["jcmd", str(pid), "JFR.start", "name=cj", "settings=profile"], check=True, capture_output=True)
        if py_spy and not args.no_py_spy:
            state["py-spy"] = subprocess.Popen(
                [py_spy, "record", "--subprocesses", "--nonblocking", "--format", "raw", "--rate", str(args.py_spy_rate),
                 "-o", str(out / "python.folded"), "--pid", str(os.getpid())],
                stdout=subprocess.DEVNULL, stderr=open(out / "py-spy.log", "w"))
        state["threads"] = jvm_threads(pid)
        state["proc"] = process_cpu()

    def on_end():
        state["threads_after"] = jvm_threads(state["jvm"])
        state["proc_after"] = process_cpu()
        if not args.no_jfr:
            subprocess.run(["jcmd", str(state["jvm"]), "JFR.stop", "name=cj", f"filename={out / 'jvm.jfr'}"],
                           check=True, capture_output=True)
        spy = state.get("py-spy")
        if spy:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)

    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    with contextlib.nullcontext(external) if external else KafkaBroker(heap="1g") as bootstrap:
        load(bootstrap, args.scenario, args.rows, args.keys)
        result = run_changejoin(bootstrap, args.scenario, args.rows, args.max_per_trigger,
                                args.shuffle_partitions, on_start=on_start, on_end=on_end, extra=extra)
    rows = 2 * args.rows
    groups, names = thread_cpu(state["threads"], state["threads_after"])
    jvm_cpu = sum(groups.values())
    procs = {k: state["proc_after"].get(k, 0) - state["proc"].get(k, 0) for k in state["proc_after"]}
    summary = {"scenario": args.scenario, "rows": rows, "elapsed": result["elapsed"], "jvm_threads": groups,
               "jvm_thread_names": dict(sorted(names.items(), key=lambda kv: -kv[1])[:25]), "processes": procs}
    print(f"{args.scenario}: {rows:,} input rows in {result['elapsed']:.1f} s = {rows / result['elapsed']:,.0f} rows/s; "
          f"CPU s by process kind: { {k: round(v, 1) for k, v in procs.items()} }")
    print(table(f"JVM CPU by thread ({jvm_cpu:.1f} s = {jvm_cpu / rows * 1e6:.0f} µs per input row)", 
                {k: round(v, 1) for k, v in groups.items()}, "threads: CPU s", per_row=jvm_cpu / rows * 1e6))
    if not args.no_jfr:
        jfr = summary["jfr"] = jfr_tables(out / "jvm.jfr")
        print(table(f"JFR execution samples by category ({jfr['execution_samples']:,} samples; µs scaled to the JVM's CPU)",
                    jfr["by_category"], "category: samples", per_row=jvm_cpu / rows * 1e6))
        print(table("JFR execution samples by thread", jfr["by_thread"], "thread: samples"))
        print(table("JFR top (thread | category)", jfr["by_thread_category"], "thread | category: samples"))
        print(table("JFR top self methods", jfr["by_leaf"], "method: samples"))
        print(table("JFR native method samples (leaf; includes threads waiting in native code)", jfr["native_leaf"], "method: samples"))
    if (out / "python.folded").exists():
        py = summary["python"] = pyspy_tables(out / "python.folded")
        python_cpu = procs.get("python", 0.0)
        print(table(f"Python samples by step ({py['samples']:,} samples; µs scaled to the Python processes' CPU, "
                    f"{python_cpu:.1f} s)", py["by_category"], "step: samples", per_row=python_cpu / rows * 1e6))
        print(table("Python samples by process", py["by_process"], "process: samples"))
        print(table("Python top leaf frames", py["by_leaf"], "frame: samples"))
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\nrecordings and summary in {out}")


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def process_cpu() -> dict[str, float]:
    """CPU seconds of this process's tree by kind (jvm, python) plus the broker's."""
    stats = processes()
    tree = process_tree(stats, os.getpid())
    out: collections.Counter = collections.Counter()
    for pid in tree:
        _, comm, cpu, _ = stats[pid]
        if comm == "java":
            cmdline = _cmdline(pid)
            out["broker" if b"kafka" in cmdline.lower() and b"SparkSubmit" not in cmdline else "jvm"] += cpu
        elif comm.startswith("python") or pid == os.getpid():
            out["python"] += cpu
        elif comm == "py-spy":
            out["py-spy"] += cpu
        else:
            out["other"] += cpu
    return dict(out)


if __name__ == "__main__":
    main()
