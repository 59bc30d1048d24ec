"""The modules setup.py compiles with Cython, and where a test run imports them from.

A checkout (an editable install) runs the pure-Python modules: the reference every test proves.
``CHANGEJOIN_TEST_BUILD=DIR`` runs the tests on a build instead (``build(DIR)``: the packages with
their extensions, as a wheel holds them), first on the path. ``./dev test`` runs the suite in two
pytest runs, each test once: first ``python -m tests.support.compiled``, which builds the
extensions once and runs :data:`TESTS` (the operators' and expressions' tests, the record path's
unit tests and two end-to-end joins) on them, then every other test on the checkout's modules
(``pytest --after-compiled``: tests/conftest.py deselects what :func:`selects` says the first run
ran). Either way ``check_imports`` makes sure the run imports what it claims to, never a stale
extension left beside an edited ``.py``.
"""
from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_VARIABLE = "CHANGEJOIN_TEST_BUILD"

#: The record path's unit tests (no broker, no Spark query) that exercise compiled service modules.
SERVICE_TESTS = ("test_avro.py", "test_avro_writer.py", "test_buckets.py", "test_deadletters.py", "test_debezium.py",
                 "test_decode.py", "test_encode.py", "test_expressions_in_queries.py", "test_keys.py", "test_latency.py",
                 "test_sparkstate.py",
                 "test_split_side.py", "test_window_late_rows.py",
                 # the joins on the in-memory query driver: the record path's stages end to end
                 "test_joins_regular.py", "test_joins_temporal.py", "test_joins_interval_window.py",
                 "test_joins_hot_key.py", "test_joins_dead_letters.py", "test_joins_restarts.py", "test_joins_lookup.py",
                 "test_compiled.py::test_check_config_says_whether_the_modules_run_compiled")
#: End to end: retractions through a LEFT join, and bad records to the dead-letter topic (a
#: broker and a Spark query whose Python workers import the extensions).
END_TO_END = ("test_left_join_with_retractions_materializes_to_the_joined_table",
              "test_bad_records_go_to_the_dead_letter_topic_and_the_join_goes_on")
#: What the compiled build's run runs: the operators' conformance, property and unit tests, the
#: expressions', the record path's and the two joins.
TESTS = ("tests/operators", "tests/expressions", *(f"tests/service/{t}" for t in SERVICE_TESTS),
         *(f"tests/integration/test_service_e2e.py::{t}" for t in END_TO_END))


def selects(nodeid: str) -> bool:
    """Whether :data:`TESTS` selects the test ``nodeid`` (pytest's id, from the repository's root):
    a folder, a file or a test of it, each with its parameters."""
    return any(nodeid == t or nodeid.startswith((t + "/", t + "::", t + "[")) for t in TESTS)


def compiled_modules() -> list[str]:
    """``COMPILED`` of setup.py as module names (setup.py is read, not run)."""
    tree = ast.parse((REPO_ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["COMPILED"]:
            return [path[:-3].replace("/", ".") for path in ast.literal_eval(node.value)]
    raise AssertionError("setup.py has no COMPILED")


def build(dest: Path, temp: Path) -> None:
    """The packages as a wheel holds them, in ``dest``: sources and the compiled extensions.
    ``CFLAGS=-O0``: the tests check behaviour, not speed (~20 s on two cores, against ~110 s for
    the wheel's ``-O3`` build with its isolated environment)."""
    env = {**os.environ, "CFLAGS": "-O0"}
    env.pop("CHANGEJOIN_PURE_PYTHON", None)
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(dest),
                           "build_ext", "--build-lib", str(dest), "--build-temp", str(temp)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]


def check_imports() -> str:
    """Every compiled module imports from where this run says: its ``.py`` in the checkout, or
    the extension in ``CHANGEJOIN_TEST_BUILD``, which is first on the path. What it found, for the
    test header."""
    build_dir = os.environ.get(BUILD_VARIABLE)
    # Not first, the build would lose to the checkout for what the run has not imported yet.
    assert not build_dir or Path(sys.path[0]).resolve() == Path(build_dir).resolve(), (
        f"{BUILD_VARIABLE}={build_dir} is not first on sys.path but {sys.path[0]} (tests/conftest.py puts it "
        "first; pytest's --import-mode=append, pyproject.toml, leaves it there)")
    wrong = []
    for name in compiled_modules():
        origin = Path(importlib.util.find_spec(name).origin).resolve()  # found, not run: no PySpark to import
        if build_dir:
            ok = origin.parent.is_relative_to(Path(build_dir).resolve()) and \
                origin.name.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
        else:
            ok = origin == REPO_ROOT / (name.replace(".", "/") + ".py")
        if not ok:
            wrong.append(f"{name}: {origin}")
    assert not wrong, (f"imported from the wrong place ({BUILD_VARIABLE}={build_dir or 'unset'}; an extension "
                       "built in place shadows the edited .py: delete it): " + ", ".join(wrong))
    return f"compiled extensions from {build_dir}" if build_dir else "pure-Python modules of the checkout"


def main(args: list[str]) -> int:
    """Build the extensions aside, run :data:`TESTS` on them (``args``: more pytest arguments),
    then remove the build. Without a C compiler it says so and runs :data:`TESTS` on the
    checkout's modules instead: ``./dev test``'s second run leaves them out either way."""
    if not shutil.which(os.environ.get("CC", "cc")):
        print("compiled build: no C compiler (cc), so the extensions are not built or tested here; "
              "its tests run on the checkout's modules", file=sys.stderr)
        env = {k: v for k, v in os.environ.items() if k != BUILD_VARIABLE}
        return subprocess.run([sys.executable, "-m", "pytest", *TESTS, *args], cwd=REPO_ROOT, env=env).returncode
    with tempfile.TemporaryDirectory(prefix="changejoin-build-") as temp:
        dest = Path(temp) / "build"
        print(f"compiled build: building setup.py's extensions into {dest}", file=sys.stderr)
        build(dest, Path(temp) / "temp")
        # devkit is the checkout's tooling (the test broker's jars are found beside it), not what
        # the build proves: the tests import it from the checkout.
        shutil.rmtree(dest / "devkit", ignore_errors=True)
        env = {**os.environ, BUILD_VARIABLE: str(dest)}
        # conftest.pytest_report_header fails the run unless every compiled module is the build's extension.
        return subprocess.run([sys.executable, "-m", "pytest", *TESTS, *args], cwd=REPO_ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
