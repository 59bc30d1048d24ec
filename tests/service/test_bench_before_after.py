"""bench.before_after: what it reads back from bench.compare's logs (real logs of an ABBA comparison
run by hand, tests/data/before_after/, with the broker's lines left out), the ABBA order, its
report from a log directory, and the runs themselves in a detached worktree of the other revision
(a small git repository whose ``bench.compare`` only prints a run's line)."""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import textwrap
from pathlib import Path

import pytest

from bench import before_after
from bench.harness.logs import expected_outputs, latency_runs, throughput_runs
from bench.latency_sweep import runs_of

LOGS = Path(__file__).resolve().parent.parent / "data" / "before_after"


def test_the_sides_alternate_abba_for_any_number_of_runs():
    assert before_after.abba(1) == [("this", 1), ("before", 1)]
    assert before_after.abba(3) == [("this", 1), ("before", 1), ("before", 2), ("this", 2), ("this", 3), ("before", 3)]
    order = before_after.abba(4)
    assert [side for side, _ in order] == ["this", "before", "before", "this"] * 2
    assert sorted(order) == sorted((side, n) for side in ("this", "before") for n in range(1, 5))


def test_a_throughput_line_reads_back_with_every_figure():
    (run,) = throughput_runs((LOGS / "bulk-this-1.log").read_text())
    assert run == {"scenario": "left-pk", "round": 1, "system": "changejoin", "elapsed": 22.8, "in_rate": 17530,
                   "output": 3438800, "kinds": {"+I": 1773260, "-D": 882971, "-U": 782569, "final rows": 107720},
                   "digest": "80cfe324df6b", "cpu": {"python": 23.0, "broker": 4.7, "jvm": 12.6, "other": 0.0},
                   "peak_rss_mb": 2452, "batch_p50": 7753, "batch_p99": 11115, "first_output": 14.3, "state_mb": 3.7,
                   "dead_letters": None}
    assert expected_outputs((LOGS / "bulk-this-1.log").read_text()) == {
        "left-pk": {"final rows": 107720, "digest": "80cfe324df6b"}}


def test_throughput_lines_without_output_digest_or_batches_and_failed_runs():
    text = textwrap.dedent("""\
          inner-nopk r2 flink-p2-bh: 10.0 s, 40,000 in rows/s, output -  , cpu {'jvm': 30.5}, peak RSS 900 MB, batch p50/p99 None/None ms, first output - s, state 1,204.5 MB
          inner-nopk r1 changejoin: 12.5 s, 32,000 in rows/s, output 5000 {'+I': 5000} , cpu {'python': 9.0}, peak RSS 1200 MB, batch p50/p99 900/1200 ms, first output 3.1 s, state 2.0 MB, dead letters 7
          left-pk r1 flink-p2: FAILED exit 1
        | left-pk | changejoin | 1 | 2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 | 11 | 12 | 13 |
        """)
    bh, cj, failed = throughput_runs(text)
    assert (bh["system"], bh["round"], bh["in_rate"], bh["output"], bh["kinds"], bh["digest"]) == \
        ("flink-p2-bh", 2, 40000, None, {}, None)
    assert (bh["batch_p50"], bh["first_output"], bh["state_mb"]) == (None, None, 1204.5)
    assert (cj["output"], cj["kinds"], cj["digest"], cj["dead_letters"]) == (5000, {"+I": 5000}, None, 7)
    assert failed == {"scenario": "left-pk", "round": 1, "system": "flink-p2", "failed": "exit 1"}


def test_latency_rows_read_back_with_cpu_and_batches():
    runs = latency_runs((LOGS / "lat-this-1.log").read_text())
    assert [(r["rate"], r["p50"], r["p99"]) for r in runs] == [(2000, 688, 1356), (6000, 1020, 1636)]
    assert runs[0] == {"scenario": "left-pk", "system": "changejoin", "rate": 2000, "achieved": 2000,
                       "outputs": 167139, "p50": 688, "p90": 1039, "p99": 1356, "max": 1494, "first": 749,
                       "last": 623, "batch_p50": 0.7, "batch_p99": 1.4, "kept_up": True,
                       "cpu": {"broker": 22.0, "jvm": 68.0, "python": 34.0}, "peak_rss_mb": 2222}
    # latency_sweep reads the same rows through the shared parser
    assert runs_of(str(LOGS / "lat-this-1.log")) == runs
    flink = latency_runs("| left-pk | flink-p2 | 3,000 | 2,999 | 10 | 5 | 6 | 7 | 8 | 5 / 6 | - | jvm 40 | 1,500 |\n"
                         "| left-pk | changejoin | 3,000 | failed: no output |" + " |" * 9)
    assert (flink[0]["batch_p50"], flink[0]["cpu"], flink[0]["peak_rss_mb"]) == (None, {"jvm": 40.0}, 1500)
    assert flink[1] == {"scenario": "left-pk", "system": "changejoin", "rate": 3000, "failed": "no output"}


def test_from_logs_reports_the_runs_in_abba_order_with_medians_and_ratios(capsys):
    before_after.main(["--from-logs", str(LOGS), "--logs-prefix", "bulk"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| left-pk | changejoin | ")]
    # per run, in the order run: this 1, before 1, before 2, this 2
    assert [tuple(c.strip() for c in row.split("|")[3:6]) for row in rows[:4]] == [
        ("this", "1", "17,530"), ("before", "1", "17,282"), ("before", "2", "20,732"), ("this", "2", "19,724")]
    # per side: min and median of rows/s and of Python CPU (this: 23.0 and 21.3 s; before: 22.6 and 19.1 s)
    assert "| left-pk | changejoin | this | 2 | 17,530 | 18,627 | 21.3 | 22.1 |" in out
    assert "| left-pk | changejoin | before | 2 | 17,282 | 19,007 | 19.1 | 20.9 |" in out
    assert "this / before, medians: in rows/s 0.98, Python CPU s 1.06" in out
    assert "every run's final table digest is 80cfe324df6b (fixed by the data)" in out
    assert "DIFFERS" not in out

    before_after.main(["--from-logs", str(LOGS), "--logs-prefix", "lat"])
    out = capsys.readouterr().out
    assert "p50 0.83 (710 against 854 ms), p99 0.84 (1,383 against 1,641 ms)" in out  # 2,000 rows/s
    assert "p50 0.77 (1,018 against 1,318 ms), p99 0.99 (2,077 against 2,098 ms)" in out  # 6,000 rows/s


def test_from_logs_wants_one_invocation_and_says_loudly_when_outputs_differ(tmp_path, capsys):
    for name in ("bulk-this-1.log", "bulk-before-1.log", "lat-this-1.log"):
        shutil.copy(LOGS / name, tmp_path / name)
    with pytest.raises(SystemExit, match="several invocations .*bulk, lat.*--logs-prefix"):
        before_after.main(["--from-logs", str(tmp_path)])
    (tmp_path / "lat-this-1.log").unlink()
    other = (tmp_path / "bulk-before-1.log").read_text().replace(" 80cfe324df6b, cpu", " 0123456789ab, cpu")
    (tmp_path / "bulk-before-1.log").write_text(other)
    before_after.main(["--from-logs", str(tmp_path)])
    captured = capsys.readouterr()
    assert "**left-pk: OUTPUT DIFFERS between runs**: final table digest expected 80cfe324df6b" in captured.out
    assert "'before 1 changejoin r1': '0123456789ab'" in captured.out
    assert "OUTPUT DIFFERS" in captured.err


FAKE_COMPARE = '''\
import os, sys
print("cwd", os.getcwd(), "path", os.environ["PYTHONPATH"], "args", " ".join(sys.argv[1:]))
print("  left-pk r1 changejoin: 1.0 s, {rate} in rows/s, output 10 {{}} abc123, cpu {{'python': {cpu}}}, "
      "peak RSS 1 MB, batch p50/p99 None/None ms, first output - s, state - MB")
'''


def commit(repo: Path, rate: str, cpu: float) -> None:
    (repo / "bench" / "compare.py").write_text(FAKE_COMPARE.format(rate=rate, cpu=cpu))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-qm", rate], check=True)


def test_runs_alternate_between_this_checkout_and_a_worktree_of_the_revision_removed_after(tmp_path):
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    (repo / "bench" / "__init__.py").write_text("")
    (repo / ".gitignore").write_text(".cache\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    commit(repo, "1,000", 4.0)  # before
    commit(repo, "3,000", 2.0)  # this
    (repo / ".cache").mkdir()
    logs = tmp_path / "logs"
    logs.mkdir()
    with before_after.worktree(repo, "HEAD~1") as before:
        assert (before / ".cache").is_symlink() and (before / ".cache").resolve() == (repo / ".cache").resolve()
        done = before_after.measure(repo, before, 2, ["--rows", "10", "--scenarios", "left-pk"], logs)
    assert not before.exists()
    assert len(subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True,
                              check=True).stdout.splitlines()) == 1
    assert [(side, n, path.name) for side, n, path in done] == [
        ("this", 1, "run-this-1.log"), ("before", 1, "run-before-1.log"),
        ("before", 2, "run-before-2.log"), ("this", 2, "run-this-2.log")]
    for side, _, path in done:
        checkout = repo if side == "this" else before
        first = path.read_text().splitlines()[0]
        assert first == f"cwd {checkout} path {checkout} args --rows 10 --scenarios left-pk"
    assert before_after.logs_in(logs) == done
    through, _, _, _ = before_after.read(done)
    assert {(r["side"], r["in_rate"]) for r in through} == {("this", 3000), ("before", 1000)}
    assert "in rows/s 3.00, Python CPU s 0.50" in before_after.render(through, [], {}, "cmd", "note")


def test_the_worktree_goes_also_when_the_runs_fail(tmp_path):
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    commit(repo, "1,000", 1.0)
    with pytest.raises(KeyboardInterrupt):
        with before_after.worktree(repo, "HEAD") as before:
            assert (before / "bench" / "compare.py").exists()
            raise KeyboardInterrupt
    assert not before.exists() and not before.parent.exists()
    assert len(subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True,
                              check=True).stdout.splitlines()) == 1
    with pytest.raises(SystemExit, match="--before nosuchrev: not a commit"):
        before_after.revision(repo, "nosuchrev")


def test_the_plot_draws_rows_per_run_and_latency_by_rate(tmp_path):
    pytest.importorskip("matplotlib")
    through, _, _, _ = before_after.read(before_after.logs_in(LOGS, "bulk"))
    _, latency, _, _ = before_after.read(before_after.logs_in(LOGS, "lat"))
    png = tmp_path / "before-after.png"
    before_after.plot(through, latency, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_whole_invocation_runs_reports_and_records(tmp_path, monkeypatch, capsys):
    """main() end to end on the small repository as "this checkout": the worktree, the runs, the
    report, and --record's section and plot (into a RESULTS.md of the test's own)."""
    pytest.importorskip("matplotlib")
    from bench.harness import report

    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    (repo / "bench" / "__init__.py").write_text("")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    commit(repo, "1,000", 4.0)
    commit(repo, "2,000", 2.0)
    monkeypatch.setattr(before_after, "ROOT", repo)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # the kept logs, the worktree
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(report, "RESULTS", tmp_path / "RESULTS.md")
    before_after.main(["--before", "HEAD~1", "--runs", "1", "--record", "--title", "fake", "--", "--rows", "10"])
    out = capsys.readouterr().out
    assert "| left-pk | changejoin | this | 1 | 2,000 |" in out and "| left-pk | changejoin | before | 1 | 1,000 |" in out
    assert "this / before, medians: in rows/s 2.00, Python CPU s 0.50" in out
    logs = Path(out.splitlines()[0].removeprefix("logs: "))
    assert logs.parent == tmp_path / "tmp"
    assert sorted(p.name for p in logs.iterdir()) == ["run-before-1.log", "run-this-1.log"]
    recorded = (tmp_path / "RESULTS.md").read_text()
    assert " UTC fake\n" in recorded
    assert "`python -m bench.before_after --before 'HEAD~1' --runs 1 --record --title fake -- --rows 10`" in recorded
    assert "in rows/s 2.00" in recorded
    (png,) = tmp_path.glob("before-after-*.png")
    assert f"]({png.name})" in recorded
    assert len(subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True,
                              check=True).stdout.splitlines()) == 1
    assert [p.name for p in (tmp_path / "tmp").iterdir()] == [logs.name]  # the worktree's directory is gone


def test_a_log_without_any_run_is_a_failed_row_not_silence(tmp_path, capsys):
    shutil.copy(LOGS / "bulk-this-1.log", tmp_path / "x-this-1.log")
    (tmp_path / "x-before-1.log").write_text("Traceback (most recent call last):\nImportError: no bench.compare\n")
    before_after.main(["--from-logs", str(tmp_path)])
    out = capsys.readouterr().out
    assert "| - | - | before | 1 | FAILED: no run in x-before-1.log: see it |" in out
    assert "| left-pk | changejoin | this | 1 | 17,530 |" in out
