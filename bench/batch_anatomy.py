"""Where a micro-batch's time goes, from Spark's event log: per micro-batch, the trigger's phases
(its progress's ``durationMs``), its job's stages, and in each stage the tasks' waits and work.

Run the service with ``SPARK_CONF_spark_eventLog_enabled=true`` and
``SPARK_CONF_spark_eventLog_dir=file:///DIR`` (the latency sweep takes them as ``--service-env``),
then::

    python -m bench.batch_anatomy DIR [--progress progress.json] [--skip 20]

It prints the medians over the micro-batches with input (after ``--skip`` warm-up batches): for
each stage, its wall time from submission to completion, its tasks' launch delay, deserialization,
run time and CPU, and the SQL metrics Spark times inside the tasks (the state store's commit, the
Python runners' time...), summed per stage; then the share of the job's wall time that no task of
it was running. ``--progress`` is the query's progress (``CHANGEJOIN_BENCH_PROGRESS`` of the
latency child) for the trigger's own phases.
"""
from __future__ import annotations

import argparse
import io
import json
import statistics
from collections import defaultdict
from pathlib import Path

BATCH_KEY = "streaming.sql.batchId"


def events(directory: Path):
    """Every event of every event log file under ``directory`` (plain or zstd, a rolling log's parts
    in order)."""
    files = sorted(p for p in directory.rglob("*") if p.is_file() and (
        p.name.startswith("events_") or p.name.startswith(("local-", "app-", "application_"))))
    for path in files:
        raw = path.open("rb")
        if path.suffix == ".zstd":
            import zstandard
            raw = zstandard.ZstdDecompressor().stream_reader(raw, read_across_frames=True)
        for line in io.TextIOWrapper(raw, encoding="utf-8", errors="replace"):
            line = line.strip()
            if line:
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:  # a log still being written ends mid-line
                    return


def read_jobs(directory: Path) -> dict[int, dict]:
    """Micro-batch id -> {"start", "end", "stages": {stage id: {"submitted", "completed", "name",
    "tasks": [task dicts]}}}, for jobs that carry a batch id (a micro-batch's jobs)."""
    batches: dict[int, dict] = {}
    stage_batch: dict[int, int] = {}
    for e in events(directory):
        kind = e.get("Event")
        if kind == "SparkListenerJobStart":
            batch = (e.get("Properties") or {}).get(BATCH_KEY)
            if batch is None:
                continue
            b = batches.setdefault(int(batch), {"start": e["Submission Time"], "end": None, "stages": {}})
            b["start"] = min(b["start"], e["Submission Time"])
            for stage in e.get("Stage Infos", []):
                stage_batch[stage["Stage ID"]] = int(batch)
                b["stages"].setdefault(stage["Stage ID"], {"name": stage["Stage Name"], "tasks": [],
                                                           "submitted": None, "completed": None})
        elif kind in ("SparkListenerStageSubmitted", "SparkListenerStageCompleted"):
            info = e["Stage Info"]
            batch = stage_batch.get(info["Stage ID"])
            if batch is None:
                continue
            stage = batches[batch]["stages"][info["Stage ID"]]
            stage["submitted"] = info.get("Submission Time") or stage["submitted"]
            stage["completed"] = info.get("Completion Time") or stage["completed"]
            if kind == "SparkListenerStageCompleted" and info.get("Completion Time"):
                batches[batch]["end"] = max(batches[batch]["end"] or 0, info["Completion Time"])
        elif kind == "SparkListenerTaskEnd":
            batch = stage_batch.get(e["Stage ID"])
            if batch is None:
                continue
            batches[batch]["stages"][e["Stage ID"]]["tasks"].append(task_figures(e))
    return batches


def task_figures(e: dict) -> dict:
    """One task's times (ms): launch, finish, deserialize, run, CPU, GC, shuffle fetch wait and
    write, and its timed SQL metrics by name."""
    info, metrics = e["Task Info"], e.get("Task Metrics") or {}
    shuffle_read = metrics.get("Shuffle Read Metrics") or {}
    shuffle_write = metrics.get("Shuffle Write Metrics") or {}
    timed = {}
    for acc in info.get("Accumulables", []):
        name = acc.get("Name") or ""
        if name.startswith("internal.") or "time" not in name.lower() and "duration" not in name.lower():
            continue
        try:
            timed[name] = float(acc.get("Update", 0))
        except (TypeError, ValueError):
            continue
    return {"launch": info["Launch Time"], "finish": info["Finish Time"],
            "deserialize": metrics.get("Executor Deserialize Time", 0), "run": metrics.get("Executor Run Time", 0),
            "cpu": metrics.get("Executor CPU Time", 0) / 1e6, "gc": metrics.get("JVM GC Time", 0),
            "fetch_wait": shuffle_read.get("Fetch Wait Time", 0),
            "shuffle_write": shuffle_write.get("Shuffle Write Time", 0) / 1e6, "timed": timed}


def busy_ms(intervals: list[tuple[int, int]]) -> int:
    """How many ms at least one of ``intervals`` covers."""
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def anatomy(batches: dict[int, dict], skip: int) -> dict:
    """Medians over the batches: per stage position (0 = the first stage of a batch's job),
    wall, launch delay, figures summed over the tasks, the slowest task's run; and the batch's
    idle share (ms no task ran between its job's submission and its last stage's completion)."""
    rows = defaultdict(lambda: defaultdict(list))
    whole = defaultdict(list)
    names = {}
    for batch_id in sorted(batches)[skip:]:
        b = batches[batch_id]
        stages = [s for _, s in sorted(b["stages"].items()) if s["tasks"] and s["submitted"] and s["completed"]]
        if not stages or not b["end"]:
            continue
        tasks = [t for s in stages for t in s["tasks"]]
        whole["job wall"].append(b["end"] - b["start"])
        whole["no task running"].append(b["end"] - b["start"] - busy_ms([(t["launch"], t["finish"]) for t in tasks]))
        for position, s in enumerate(stages):
            names[position] = s["name"]
            r = rows[position]
            r["tasks"].append(len(s["tasks"]))
            r["wall"].append(s["completed"] - s["submitted"])
            r["first launch after submit"].append(min(t["launch"] for t in s["tasks"]) - s["submitted"])
            r["last finish to complete"].append(s["completed"] - max(t["finish"] for t in s["tasks"]))
            r["slowest task"].append(max(t["finish"] - t["launch"] for t in s["tasks"]))
            for key in ("deserialize", "run", "cpu", "gc", "fetch_wait", "shuffle_write"):
                r[f"sum {key}"].append(sum(t[key] for t in s["tasks"]))
            overhead = [t["finish"] - t["launch"] - t["deserialize"] - t["run"] for t in s["tasks"]]
            r["sum outside deserialize+run"].append(sum(overhead))
            metric_names = {n for t in s["tasks"] for n in t["timed"]}
            for n in metric_names:
                r[f"metric: {n}"].append(sum(t["timed"].get(n, 0) for t in s["tasks"]))
        if len(stages) > 1:
            for a, b2 in zip(stages, stages[1:]):
                whole["gap between stages"].append(b2["submitted"] - a["completed"])
    med = lambda xs: round(statistics.median(xs), 1)  # noqa: E731
    return {"batches": len(whole["job wall"]), "whole": {k: med(v) for k, v in whole.items()},
            "stages": {p: {"name": names[p], **{k: med(v) for k, v in r.items()}} for p, r in rows.items()}}


def progress_phases(path: Path, skip: int) -> dict:
    """Median ms of each ``durationMs`` phase over the micro-batches with input."""
    progress = [p for p in json.loads(path.read_text()) if p.get("numInputRows")][skip:]
    names = {n for p in progress for n in p["durationMs"]}
    return {n: statistics.median(p["durationMs"].get(n, 0) for p in progress) for n in sorted(names)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("directory", type=Path)
    parser.add_argument("--progress", type=Path)
    parser.add_argument("--skip", type=int, default=20, help="warm-up micro-batches left out (default 20)")
    args = parser.parse_args(argv)
    if args.progress:
        print("trigger phases (median ms):", json.dumps(progress_phases(args.progress, args.skip)))
    result = anatomy(read_jobs(args.directory), args.skip)
    print(f"micro-batch jobs: {result['batches']}")
    for k, v in result["whole"].items():
        print(f"  {k}: {v} ms")
    for position, figures in result["stages"].items():
        print(f"stage {position} ({figures.pop('name')[:80]}):")
        for k, v in sorted(figures.items()):
            print(f"  {k}: {v}")


if __name__ == "__main__":
    main()
