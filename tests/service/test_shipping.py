"""What the driver ships to the workers (``service/shipping.py``): one frozen, typed worker config,
which pickles as Spark ships it in a task's closure and travels as JSON in the source's options
with its secrets apart, whose every field some reader asks for by name."""
from __future__ import annotations

import ast
import dataclasses
import gc
import itertools
import json
import pickle
from pathlib import Path

import pytest
from pyspark import cloudpickle

from service.config import load_settings
from service import shipping
from service.faults import CrashPoint
from service.shipping import Delivery, Secrets, WorkerConfig, built, worker_config, worker_secrets
from service.transactions import delivery_config
from tests.support.service_env import VALID

SERVICE = Path(__file__).resolve().parents[2] / "service"
#: The parts of a worker config: every field of each is read somewhere (:func:`unread_fields`).
PARTS = (WorkerConfig, Secrets, Delivery, CrashPoint)


def config(**env) -> WorkerConfig:
    settings = load_settings({**VALID, "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "svc:s3cret-pw",
                              "KAFKA_CLIENT_SASL_PASSWORD": "kafka-pw", **env})
    from service.catalog import plan_for

    return worker_config(settings, plan_for(settings), 3, secrets=worker_secrets(settings),
                         delivery=delivery_config(settings, "ck-id", {"progress_topic": "p", "progress_origin": [5, 7]}, 3),
                         crash=CrashPoint("after-commit", 2, driver_pid=1234))


def test_every_part_is_frozen():
    c = config()
    for part, name in ((c, "plan"), (c.secrets, "kafka"), (c.delivery, "prefix"), (c.crash, "point")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(part, name, None)
    assert isinstance(c.secrets.kafka, tuple) and isinstance(c.delivery.origin, tuple)  # no dict or list inside


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_a_config_round_trips_through_pickle_whole(dumps):
    c = config()
    again = pickle.loads(dumps(c))
    assert again == c and hash(again) == hash(c)
    assert again.delivery.origin == (5, 7) and again.crash.driver_pid == 1234
    assert dict(again.secrets.kafka)["sasl.password"] == "kafka-pw"
    assert len(dumps(c)) < 2 * len(c.plan) + 2000  # the plan's JSON and a few hundred bytes


def test_a_config_built_once_per_worker_process_and_equal_config():
    c = config()
    made = []

    def build(config):
        made.append(config)
        return object()

    first = built(build, c)
    assert built(build, pickle.loads(pickle.dumps(c))) is first  # another task's copy
    assert built(build, dataclasses.replace(c, output_partitions=4)) is not first
    assert len(made) == 2


def test_the_sources_json_carries_no_secret_and_the_merged_options_give_the_config_back():
    """``mapper.config`` holds the config without its secrets, ``mapper.secret`` them
    (``source.load_mapper`` merges the two); an unknown name fails instead of being dropped."""
    settings = load_settings({**VALID, "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": "svc:s3cret-pw"})
    from service.catalog import plan_for

    c = worker_config(settings, plan_for(settings), secrets=worker_secrets(settings, kafka=False)).for_side(1)
    public, secret = c.to_json(), c.secrets.to_json()
    assert "s3cret-pw" not in public and "s3cret-pw" in secret
    assert WorkerConfig.from_json_dict({**json.loads(public), **json.loads(secret)}) == c
    assert WorkerConfig.from_json_dict(json.loads(public)).secrets == Secrets()
    with pytest.raises(TypeError):
        WorkerConfig.from_json_dict({**json.loads(public), "rowkind_headr": "x"})
    with pytest.raises(ValueError):
        config().to_json()  # a delivery and a crash point travel in the sink's closure only


def test_no_secret_is_in_a_repr():
    text = repr(config())
    assert "s3cret-pw" not in text and "kafka-pw" not in text
    assert "Secrets(registry_auth, kafka: hidden)" in text


def unread_fields(parts, root: Path = SERVICE) -> set[str]:
    """The fields of ``parts`` that no module of ``root`` reads as ``<x>.<field>`` where ``x`` is
    a config or a part of one by its name (``config``, ``self._sink_config``, ``delivery``,
    ``config.secrets``, ``spec``: a crash point)."""
    readers = {"delivery", "secrets", "spec", "crash"}
    read = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                owner = node.value
                name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                if name in readers or name.endswith("config"):
                    read.add((name, node.attr))
    fields = {f"{part.__name__}.{f.name}" for part in parts for f in dataclasses.fields(part)}
    names = {name for _, name in read}
    return {field for field in fields if field.split(".")[1] not in names}


def test_every_field_of_the_worker_config_is_read():
    """A field nobody reads is a key the driver ships for nothing (or one a reader misspells)."""
    assert unread_fields(PARTS) == set()


def test_the_unread_field_check_bites(tmp_path):
    @dataclasses.dataclass(frozen=True)
    class Probe:
        read_one: int
        never_read: int
        read_elsewhere: int

    (tmp_path / "probe.py").write_text("def f(config, other):\n    return config.read_one, other.read_elsewhere\n")
    assert unread_fields([Probe], tmp_path) == {"Probe.never_read", "Probe.read_elsewhere"}


_ids = itertools.count()


def kept(config: tuple) -> dict:
    return {"built": config[1], "payload": [[i] for i in range(1000)]}


def test_a_worker_freezes_what_it_built_out_of_the_collectors_generations(monkeypatch):
    monkeypatch.setenv("SPARK_PYTHON_RUNTIME", "PYTHON_WORKER")
    n = next(_ids)
    before = gc.get_freeze_count()
    try:
        first = shipping.built(kept, ("n", n))
        assert shipping.built(kept, ("n", n)) is first and first["built"] == n
        assert gc.get_freeze_count() >= before + 1000  # its payload too
    finally:
        gc.unfreeze()


def test_the_driver_keeps_its_objects_in_the_collectors_generations(monkeypatch):
    monkeypatch.delenv("SPARK_PYTHON_RUNTIME", raising=False)
    before = gc.get_freeze_count()
    shipping.built(kept, ("n", next(_ids)))
    assert gc.get_freeze_count() == before
