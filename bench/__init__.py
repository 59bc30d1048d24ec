"""The benchmarks: development tooling, never shipped in the image.

Each runs from the checkout's root as a module: ``python -m bench.<name>`` (``./dev bench`` runs
every ``bench/*_bench.py``; ``./dev bench compare`` runs ``python -m bench.compare``). What they
share is in :mod:`bench.harness`; recorded rounds go to bench/results/ (RESULTS.md and plots).
Nothing is imported here: bench/flink_job.py runs as ``-m bench.flink_job`` in Flink's own
virtualenv, which has none of the project's dependencies.
"""
