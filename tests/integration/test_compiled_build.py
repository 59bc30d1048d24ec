"""The build a wheel carries (setup.py's Cython extensions of the record path's hot modules), proven
as the checkout's pure-Python modules are: built aside, then the operators' conformance, property
and unit tests, the record path's unit tests and two end-to-end joins (this session's broker, a
Spark query whose Python workers import the extensions) run through it in a pytest of their own."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from compiled import BUILD_VARIABLE, REPO_ROOT, build, compiled_modules

#: The record path's unit tests (no broker, no Spark query) that exercise compiled service modules.
SERVICE_TESTS = ("test_avro.py", "test_avro_writer.py", "test_buckets.py", "test_deadletters.py", "test_debezium.py",
                 "test_decode.py", "test_encode.py", "test_expressions_in_queries.py", "test_keys.py", "test_latency.py",
                 "test_sparkstate.py",
                 "test_split_side.py",
                 "test_window_late_rows.py", "test_compiled.py::test_check_config_says_whether_the_modules_run_compiled")
#: End to end: retractions through a LEFT join, and bad records to the dead-letter topic.
END_TO_END = ("test_left_join_with_retractions_materializes_to_the_joined_table",
              "test_bad_records_go_to_the_dead_letter_topic_and_the_join_goes_on")


def test_the_operators_record_path_and_end_to_end_tests_pass_through_the_compiled_extensions(tmp_path, kafka_bootstrap):
    if not shutil.which(os.environ.get("CC", "cc")):
        pytest.skip("no C compiler (cc): the extensions cannot be built here")
    dest = tmp_path / "build"
    build(dest, tmp_path / "temp")
    built = {p.name.split(".")[0] for p in dest.rglob("*.so")}
    assert built == {name.rsplit(".", 1)[1] for name in compiled_modules()}
    tests = ["tests/operators", "tests/expressions", *(f"tests/service/{t}" for t in SERVICE_TESTS),
             *(f"tests/integration/test_service_e2e.py::{t}" for t in END_TO_END)]
    env = {**os.environ, BUILD_VARIABLE: str(dest), "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-rA", *tests],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, "\n".join(lines[-40:]) + proc.stderr[-2000:]
    # The run's header names the build (conftest.pytest_report_header fails a run that imports otherwise).
    assert f"changejoin: compiled extensions from {dest}" in proc.stdout
    passed = {line.split()[1].split("::")[-1] for line in lines if line.startswith("PASSED ")}
    assert set(END_TO_END) <= passed
    assert {"test_every_public_case_passes[cases]", "test_every_public_case_passes[cases-interval-window]"} <= passed
    assert "test_changelog_materializes_to_the_join_after_every_record" in {t.split("[")[0] for t in passed}  # property-based
