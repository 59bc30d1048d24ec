"""A query's stages for one plan without Spark: decode, normalize, join and the upsert materializer
on Spark's state faked per stage (``spark_fakes.KeyedHandle``, or PySpark's own handle on a fake of
its state server: ``state_server.WireHandle``). tests/service/test_buckets.py proves the bucket
layout against the per-key one on it; test_debezium_retract.py runs the bench's scenarios on it."""
from __future__ import annotations

from service.catalog import plan_for
from service.config import load_settings
from service.decode import InputDecoder
from service.processor import JoinProcessor, NormalizeProcessor, UpsertProcessor
from tests.support.service_env import VALID
from tests.support.spark_fakes import KeyedHandle
from tests.support.state_server import WireHandle


class Query:
    """The query's stages for one plan, in one layout, with Spark's state faked per stage."""

    def __init__(self, env: dict, buckets: int, wire: bool = False):
        """``wire``: the stages reach their state through PySpark's own handle and state client, on
        a fake of Spark's state server (state_server.py), as they do in Spark; else through fake
        state objects (spark_fakes.KeyedHandle)."""
        settings = {name: value for name, value in {**VALID, **env}.items() if value is not None}
        self._handle = WireHandle if wire else KeyedHandle
        self._stages(plan_for(load_settings({**settings, "STATE_BUCKETS": str(buckets)})))

    @classmethod
    def of_plan(cls, plan) -> "Query":
        """The stages of ``plan``, however its settings were made."""
        query = cls.__new__(cls)
        query._handle = KeyedHandle
        query._stages(plan)
        return query

    def _stages(self, plan) -> None:
        self.plan = plan
        plan_json = self.plan.to_json()
        self.decoders = [InputDecoder(self.plan, side, "rowkind", None) for side in (0, 1)]
        self.normalize = {side: (NormalizeProcessor(plan_json, side), self._handle())
                          for side in (0, 1) if self.plan.sides[side].normalized}
        self.join = (JoinProcessor(plan_json), self._handle())
        self.upsert = (UpsertProcessor(plan_json), self._handle()) if self.plan.upsert_materializer else None
        for processor, handle in [*self.normalize.values(), self.join, *([self.upsert] if self.upsert else [])]:
            processor.init(handle)

    def batch(self, records: list, now: int = 5_000, watermark: int = -1) -> list:
        """The rows written for one micro-batch of ``records`` ((side, KafkaRecord) pairs)."""
        envelopes = []
        for side in (0, 1):
            mine = [record for s, record in records if s == side]
            rows = list(self.decoders[side].map_all(mine))
            if side in self.normalize:
                processor, handle = self.normalize[side]
                rows = handle.run(processor, rows, lambda r: r[0])
            envelopes += rows
        mode = self.plan.time_mode.value
        until = {"EventTime": watermark, "ProcessingTime": now}.get(mode)
        processor, handle = self.join
        out = handle.run(processor, envelopes, lambda r: r[0], now, watermark, until)
        if self.upsert:
            processor, handle = self.upsert
            out = handle.run(processor, out, lambda r: r.okey, now, watermark)
        return out
