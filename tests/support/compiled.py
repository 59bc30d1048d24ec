"""The modules setup.py compiles with Cython, and where a test run imports them from.

A checkout (an editable install) runs the pure-Python modules: the reference every test proves.
``CHANGEJOIN_TEST_BUILD=DIR`` runs the tests on a build instead (``build(DIR)``: the packages with
their extensions, as a wheel holds them), first on the path;
``tests/integration/test_compiled_build.py`` does that for the operators' tests, the record
path's and two end-to-end joins. Either way ``check_imports`` makes sure the run imports what
it claims to, never a stale extension left beside an edited ``.py``.
"""
from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_VARIABLE = "CHANGEJOIN_TEST_BUILD"


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
    the extension in ``CHANGEJOIN_TEST_BUILD``. What it found, for the test header."""
    build_dir = os.environ.get(BUILD_VARIABLE)
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
