"""Run by Python at the start of every process Spark launches for the service, before anything in
it imports PySpark: this directory is on those processes' ``PYTHONPATH`` (``service/session.py``,
``spark.executorEnv.PYTHONPATH``), and Python's ``site`` imports the first ``sitecustomize`` on the
path. It imports nothing of the service and nothing outside the standard library.

Spark puts its ``pyspark.zip`` first on the path of every Python process it starts: the workers,
the Python data source's planners and streaming runners, ``transformWithState``'s driver-side
runner. Python compiles a module it imports from a zip from source every time (``zipimport``
neither reads ``__pycache__`` nor writes bytecode): PySpark's worker modules cost ~1.0 CPU-s to
import from the zip against ~0.25 from an installed PySpark, and a query start launches a dozen
such processes on top of the first micro-batch's work (``bench/results/RESULTS.md``).

With pip's PySpark the zip is a copy inside the installed package
(``<site>/pyspark/python/lib/pyspark.zip``), the same version as the ``pyspark`` package beside
it. Such a zip moves to the end of the path, so that the installed package, with its bytecode
cached, is imported instead, and the zip still serves if it is not found; a zip anywhere else (a
Spark distribution's ``$SPARK_HOME/python/lib``) keeps its place. Then the next ``sitecustomize``
on the path, if there is one, runs as it would have without this one.
"""
from __future__ import annotations

import os
import sys


def installed_copies(path: list[str]) -> list[str]:
    """The entries of ``path`` that are the ``pyspark.zip`` of an installed PySpark whose package
    is importable from an entry of ``path`` itself."""
    on_path = {os.path.abspath(entry or os.curdir) for entry in path}
    copies = []
    for entry in path:
        if os.path.basename(entry) != "pyspark.zip":
            continue
        lib = os.path.dirname(os.path.abspath(entry))
        package = os.path.dirname(os.path.dirname(lib))  # <site>/pyspark from <site>/pyspark/python/lib
        if (os.path.basename(package) == "pyspark" and os.path.isfile(os.path.join(package, "__init__.py"))
                and os.path.dirname(package) in on_path):
            copies.append(entry)
    return copies


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` with the zips of :func:`installed_copies` moved to its end, in their order."""
    copies = installed_copies(path)
    return [entry for entry in path if entry not in copies] + copies


def _run_the_next_sitecustomize() -> None:
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))


if "pyspark" not in sys.modules:
    sys.path[:] = prefer_installed_pyspark(sys.path)
_run_the_next_sitecustomize()
