"""What a worker builds from the driver's config: once per process (shipping.built), and then out
of the garbage collector's way in Spark's Python workers only."""
import gc
import itertools

from service import shipping

_ids = itertools.count()


def build(config: dict) -> dict:
    return {"built": config["n"], "payload": [[i] for i in range(1000)]}


def test_a_worker_builds_once_per_config_and_then_freezes_what_it_holds(monkeypatch):
    monkeypatch.setenv("SPARK_PYTHON_RUNTIME", "PYTHON_WORKER")
    n = next(_ids)
    before = gc.get_freeze_count()
    try:
        first = shipping.built(build, {"n": n})
        assert shipping.built(build, {"n": n}) is first
        assert first["built"] == n
        assert gc.get_freeze_count() >= before + 1000  # its payload too
    finally:
        gc.unfreeze()


def test_the_driver_keeps_its_objects_in_the_collectors_generations(monkeypatch):
    monkeypatch.delenv("SPARK_PYTHON_RUNTIME", raising=False)
    before = gc.get_freeze_count()
    shipping.built(build, {"n": next(_ids)})
    assert gc.get_freeze_count() == before
