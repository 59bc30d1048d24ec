"""The public conformance cases, replayed through the real operators by the project's runner."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "tests" / "conformance" / "README.md"  # the cases' format, cited by section
CASES = ROOT / "tests" / "conformance" / "cases.json"
INTERVAL_WINDOW_CASES = ROOT / "tests" / "conformance" / "cases-interval-window.json"
SHARED = ROOT.parent / "shared" / "conformance"
SHARED_CHECK = SHARED / "check.py"
# Each case file of this repository and the shared file it is a copy of.
CASE_FILES = {CASES: SHARED / "cases.json", INTERVAL_WINDOW_CASES: SHARED / "cases-interval-window.json"}


def run_runner(tmp_path, cases=CASES):
    observed = tmp_path / "observed.json"
    proc = subprocess.run(
        [sys.executable, "-m", "operators.conformance", str(cases), "--observed", str(observed)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return proc, observed


@pytest.mark.parametrize("cases", list(CASE_FILES), ids=lambda p: p.stem)
def test_every_public_case_passes(tmp_path, cases):
    proc, observed = run_runner(tmp_path, cases)
    lines = proc.stdout.strip().splitlines()
    total = len(json.loads(cases.read_text())["cases"])
    assert lines[-1] == f"{total} passed, 0 failed", proc.stdout + proc.stderr
    assert proc.returncode == 0
    assert sum(line.startswith("PASS ") for line in lines) == total
    assert set(json.loads(observed.read_text())["cases"]) == {c["name"] for c in json.loads(cases.read_text())["cases"]}


@pytest.mark.skipif(not SHARED_CHECK.exists(), reason="../shared/conformance/check.py is not beside this checkout")
@pytest.mark.parametrize("cases", list(CASE_FILES), ids=lambda p: p.stem)
def test_shared_checker_agrees_with_the_observed_file(tmp_path, cases):
    _, observed = run_runner(tmp_path, cases)
    command = [sys.executable, str(SHARED_CHECK), str(cases), str(observed)]
    proc = subprocess.run(command, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert proc.stdout.strip().splitlines()[-1].endswith(" 0 failed")


@pytest.mark.parametrize("copy", list(CASE_FILES), ids=lambda p: p.stem)
def test_the_case_files_are_copies_of_the_shared_ones(copy):
    shared = CASE_FILES[copy]
    if not shared.exists():
        pytest.skip(f"{shared} is not beside this checkout")
    # The cases themselves must be the same; the file's format line and description may differ.
    assert json.loads(copy.read_text())["cases"] == json.loads(shared.read_text())["cases"]


def test_the_format_readme_is_a_copy_of_the_shared_one():
    shared = SHARED / "README.md"
    if not shared.exists():
        pytest.skip(f"{shared} is not beside this checkout")
    assert README.read_text() == shared.read_text()


def test_every_section_the_code_cites_is_in_the_format_readme():
    headings = set(re.findall(r"^#+ (\d+(?:\.\d+)?)\.? ", README.read_text(), flags=re.M))
    cited = set()
    for path in [*(ROOT / "operators").glob("*.py"), *(ROOT / "tests").glob("*.py")]:
        text = " ".join(path.read_text().split())  # a citation may be wrapped over two lines
        for match in re.finditer(r"tests/conformance/README\.md sections? ([\d. ,and]+)", text):
            cited.update((path.name, n) for n in re.findall(r"\d+(?:\.\d+)?", match.group(1)))
    assert cited
    assert {(name, n) for name, n in cited if n not in headings} == set()


def test_window_cases_report_late_copies_per_side(tmp_path):
    _, observed = run_runner(tmp_path, INTERVAL_WINDOW_CASES)
    cases = {c["name"]: c for c in json.loads(INTERVAL_WINDOW_CASES.read_text())["cases"]}
    seen = json.loads(observed.read_text())["cases"]
    given = [name for name, case in cases.items() if "late_rows_dropped" in case]
    assert given
    for name in given:
        assert seen[name]["late_rows_dropped"] == cases[name]["late_rows_dropped"], name


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


def _interval_window_case(name):
    data = json.loads(INTERVAL_WINDOW_CASES.read_text())
    return data, next(c for c in data["cases"] if c["name"] == name)


def _run_one(tmp_path, data, case):
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"format": data["format"], "cases": [case]}))
    proc, _ = run_runner(tmp_path, path)
    return proc


def test_runner_reports_a_moved_watermark_marker_as_a_failure(tmp_path):
    data, case = _interval_window_case("wj_derived_tumble_left_late_boundary")
    expected = list(case["expected_changelog"])
    # Move the first joined row before the marker that precedes it.
    marker = next(i for i, e in enumerate(expected) if "watermark" in e)
    expected.insert(marker, expected.pop(marker + 1))
    proc = _run_one(tmp_path, data, dict(case, name="moved_marker", expected_changelog=expected))
    assert proc.returncode == 1
    assert proc.stdout.startswith("FAIL moved_marker: rows before the first watermark"), proc.stdout


def test_runner_reports_a_wrong_delay_of_the_output_watermark_as_a_failure(tmp_path):
    data, case = _interval_window_case("iv_rowtime_left_realtime_cleanup")
    expected = [dict(e, watermark=e["watermark"] + 1) if "watermark" in e else e for e in case["expected_changelog"]]
    proc = _run_one(tmp_path, data, dict(case, name="wrong_delay", expected_changelog=expected))
    assert proc.returncode == 1
    assert proc.stdout.startswith("FAIL wrong_delay: entry 1"), proc.stdout


def test_runner_reports_a_wrong_late_count_as_a_failure(tmp_path):
    data, case = _interval_window_case("wj_op_tumble_inner")
    proc = _run_one(tmp_path, data, dict(case, name="wrong_late", late_rows_dropped={"left": 0, "right": 0}))
    assert proc.returncode == 1
    assert proc.stdout.startswith("FAIL wrong_late: late_rows_dropped"), proc.stdout


@pytest.mark.parametrize("base, change", [
    ("iv_sql_rowtime_inner", {"join_type": "SEMI"}),
    ("iv_sql_rowtime_inner", {"time_attribute": {"left": "proctime", "right": 2, "unit": "epoch_millis"}}),
    ("iv_sql_rowtime_inner", {"right_input_spec": {"kind": "InputSideHasNoUniqueKey", "unique_key": None}}),
    ("wj_prog_tumble_inner", {"time_attribute": {"left": "proctime", "right": "proctime", "unit": "epoch_millis"}}),
    ("wj_prog_tumble_inner", {"window": {"type": "SESSION", "gap_ms": 5000}}),
    ("wj_prog_tumble_inner", {"window": {"type": "CUMULATE", "step_ms": 3000, "max_size_ms": 10000, "offset_ms": 0}}),
], ids=["interval-semi", "interval-mixed-time", "interval-changelog-input", "window-proctime", "window-session",
        "window-cumulate-uneven"])
def test_interval_and_window_joins_flink_does_not_plan_are_refused(base, change):
    from operators.conformance import compare, run_case

    _, case = _interval_window_case(base)
    refused = dict(case, **change, kind="config_error", requested_kind=case["kind"], events=[],
                   expected_mode="error", expected_error={"stage": "configuration", "reason": "-"})
    observed = run_case(refused)
    assert observed.get("error"), observed
    assert compare(refused, observed) is None
