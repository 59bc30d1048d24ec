"""The public conformance cases, replayed through the real operators by the project's runner."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "data" / "conformance_cases.json"
SHARED_CHECK = ROOT.parent / "shared" / "conformance" / "check.py"


def run_runner(tmp_path, cases=CASES):
    observed = tmp_path / "observed.json"
    proc = subprocess.run(
        [sys.executable, "-m", "operators.conformance", str(cases), "--observed", str(observed)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return proc, observed


def test_every_public_case_passes(tmp_path):
    proc, observed = run_runner(tmp_path)
    lines = proc.stdout.strip().splitlines()
    total = len(json.loads(CASES.read_text())["cases"])
    assert lines[-1] == f"{total} passed, 0 failed", proc.stdout + proc.stderr
    assert proc.returncode == 0
    assert sum(line.startswith("PASS ") for line in lines) == total
    assert set(json.loads(observed.read_text())["cases"]) == {c["name"] for c in json.loads(CASES.read_text())["cases"]}


@pytest.mark.skipif(not SHARED_CHECK.exists(), reason="../shared/conformance/check.py is not beside this checkout")
def test_shared_checker_agrees_with_the_observed_file(tmp_path):
    _, observed = run_runner(tmp_path)
    proc = subprocess.run([sys.executable, str(SHARED_CHECK), str(CASES), str(observed)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert proc.stdout.strip().splitlines()[-1].endswith(" 0 failed")


def test_runner_reports_a_wrong_expectation_as_a_failure(tmp_path):
    data = json.loads(CASES.read_text())
    case = next(c for c in data["cases"] if c["name"] == "sj_left_no_ttl_upsert_overcount")
    # The released-Flink output (FLINK-40681) must not be accepted by the runner's comparison.
    broken = dict(case, name="expects_the_flink_bug")
    expects = iter(case["flink_released_output"])
    broken["events"] = [{"expect": next(expects)} if "expect" in e else e for e in case["events"]]
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({"format": data["format"], "cases": [broken]}))
    proc, _ = run_runner(tmp_path, path)
    assert proc.returncode == 1
    assert proc.stdout.strip().splitlines()[-1] == "0 passed, 1 failed"
    assert proc.stdout.startswith("FAIL expects_the_flink_bug: checkpoint 6")
