"""The modules a wheel carries compiled (setup.py's ``COMPILED``): none hands Spark a function it
pickles by value (cloudpickle cannot pickle a compiled closure; it pickles a compiled module's
classes and top-level functions by name), and ``check-config`` says which run compiled. The
tests that run through the compiled extensions: tests/support/compiled.py (TESTS)."""
from __future__ import annotations

import ast
import os
from pathlib import Path

from tests.support.compiled import BUILD_VARIABLE, REPO_ROOT
from tests.support.compiled import compiled_modules as compiled_modules_of_setup

#: DataFrame methods whose function argument Spark pickles and runs in its Python workers.
SHIPPING = {"mapInArrow", "mapInPandas", "foreachBatch", "foreachPartition", "applyInPandas",
            "applyInArrow", "transformWithState", "transformWithStateInPandas"}


def _module_of(path: Path) -> str:
    return ".".join(path.relative_to(REPO_ROOT).with_suffix("").parts)


def _defining_module(tree: ast.Module, module: str, name: str) -> str:
    """The module that defines ``name`` as ``module`` sees it (its own, or where it imports it
    from, at the top or inside a function)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
            package = module.rsplit(".", 1)[0]
            return f"{package}.{node.module}" if node.level == 1 else node.module
    return module


def shipped_functions() -> dict[str, set[tuple[str, str]]]:
    """{module: (method, what)}: each call of a SHIPPING method in service/ is recorded in the
    module making it (what: "call") and in the module defining the function it passes."""
    found: dict[str, set[tuple[str, str]]] = {}
    for path in sorted((REPO_ROOT / "service").rglob("*.py")):
        module = _module_of(path)
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in SHIPPING and node.args):
                continue
            method = node.func.attr
            found.setdefault(module, set()).add((method, "call"))  # a lambda or closure may be made here
            arg = node.args[0]
            target = arg.func if isinstance(arg, ast.Call) else arg
            if isinstance(target, ast.Name):  # made by a function or class, perhaps another module's
                found.setdefault(_defining_module(tree, module, target.id), set()).add((method, target.id))
    return found


def test_no_module_that_hands_spark_a_function_is_compiled():
    shipped = shipped_functions()
    # The scan sees the pipeline's calls and where the functions and processors it passes live.
    assert {"service.pipeline", "service.lookup", "service.processor"} <= set(shipped), shipped
    compiled = set(compiled_modules_of_setup())
    assert compiled, "setup.py compiles nothing"
    # transformWithState gets an instance of a processor class, which cloudpickle pickles by its
    # class's name: processor.py may be compiled. A module that makes a closure for Spark may not.
    closures = {m for m, uses in shipped.items() if any(how != "transformWithState" or what == "call"
                                                          for how, what in uses)}
    assert {"service.pipeline", "service.lookup"} <= closures
    assert not closures & compiled, f"compiled, yet they make functions Spark pickles: {sorted(closures & compiled)}"


def test_every_compiled_module_exists_and_none_is_a_package_init():
    for name in compiled_modules_of_setup():
        path = REPO_ROOT / (name.replace(".", "/") + ".py")
        assert path.is_file() and path.name != "__init__.py", name


def test_check_config_says_whether_the_modules_run_compiled():
    """``changejoin check-config``'s build line names the compiled modules: all of setup.py's
    list in a build (the compiled build's run, tests/support/compiled.py, runs this test through one), none in a checkout."""
    from service.cli import build_description, compiled_modules

    if os.environ.get(BUILD_VARIABLE):
        assert compiled_modules() == sorted(compiled_modules_of_setup())
        assert build_description().startswith(f"{len(compiled_modules())} modules compiled by Cython")
    else:
        assert compiled_modules() == []
        assert build_description().startswith("pure Python")
