"""The build's one addition to pyproject.toml: the record path's hot modules compiled with Cython.

A wheel (``pip install .``, the image's ``pip wheel .``) carries each module of ``COMPILED`` twice:
its source, and a C extension that Cython made of that same source, which Python imports first.
Nothing in them is written for Cython: the ``.py`` files are the code, the extension only runs
them without the interpreter's dispatch (bench/results/RESULTS.md: 1.20x on left-pk, 22 % less
Python CPU).

- An editable install (``./dev``, ``pip install -e .``) compiles nothing, so a checkout always
  runs, and its tests always prove, the pure-Python modules it edits.
  ``./dev test`` first builds the extensions aside and runs the operators' conformance,
  property and unit tests, the record path's unit tests and two end-to-end joins through them
  (``tests/support/compiled.py``).
- ``CHANGEJOIN_PURE_PYTHON=1`` at build time makes a wheel without extensions. A module that
  fails to compile (no C compiler) is left out with a warning, never fails the build.
- Only modules whose functions run inside Spark's tasks are listed, and none whose closures
  Spark pickles by value (cloudpickle cannot pickle a compiled closure): ``service/pipeline.py``
  and ``service/lookup.py`` stay pure Python, ``tests/service/test_compiled.py`` checks it.
"""
from __future__ import annotations

import logging
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.editable_wheel import editable_wheel

log = logging.getLogger("changejoin.setup")

COMPILED = (
    # the functions compiled expressions call per row (the generated code itself is plain Python)
    "expressions/runtime.py",
    # the join operators: per record, per key of a bucket
    "operators/layouts.py", "operators/minibatch.py", "operators/normalize.py", "operators/regular.py",
    "operators/rows.py", "operators/splitside.py", "operators/state.py", "operators/stateformat.py",
    "operators/interval.py", "operators/temporal.py", "operators/upsert.py", "operators/window.py",
    # the record path inside Spark's tasks: read, decode, envelopes, the join's adapter, encode, produce
    "service/avro/registry.py", "service/avro/schemas.py", "service/avro/values.py",
    "service/avro/writer.py", "service/deadletters.py", "service/decode.py", "service/formats/rowkind.py",
    "service/encode.py", "service/envelope.py", "service/kafka_records.py", "service/keys.py", "service/latency.py",
    "service/processor.py",
    "service/sink.py", "service/sparkstate.py",
)


def extensions() -> list:
    if os.environ.get("CHANGEJOIN_PURE_PYTHON"):
        return []
    return [Extension(path[:-3].replace("/", "."), [path], optional=True) for path in COMPILED]


class CythonBuildExt(build_ext):
    """Cython translates the listed modules to C when (and only when) extensions are built, then
    the C compiler runs on every core."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.parallel = self.parallel or os.cpu_count() or 1

    def build_extensions(self) -> None:
        try:
            from Cython.Build import cythonize
        except ImportError:  # a build without isolation, in an environment without Cython
            log.warning("Cython is not installed: the wheel holds the pure-Python modules only")
            self.extensions = []
            return
        # The C sources go to the build's temporary directory, never beside the modules.
        # annotation_typing off: annotations are documentation here, never checks that Cython adds.
        translated = cythonize(self.extensions, build_dir=self.build_temp, language_level=3, quiet=True,
                               nthreads=os.cpu_count() or 1,
                               compiler_directives={"binding": True, "annotation_typing": False})
        sources = {ext.name: ext.sources for ext in translated}
        for ext in self.extensions:  # setuptools' own objects keep what finalize_options set on them
            ext.sources = sources[ext.name]
        super().build_extensions()


class PureEditable(editable_wheel):
    """An editable install runs the checkout's sources as they are edited: no extensions."""

    def run(self) -> None:
        self.distribution.ext_modules = []
        super().run()


setup(ext_modules=extensions(), cmdclass={"build_ext": CythonBuildExt, "editable_wheel": PureEditable})
