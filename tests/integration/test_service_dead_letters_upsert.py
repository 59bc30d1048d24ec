"""A Schema Registry's credentials reach Spark's workers, end to end. Every dead-letter class in one
stream and the upsert inputs: tests/service/test_joins_dead_letters.py, on the in-memory query
driver."""
import struct
from collections import Counter

import pytest

from tests.support.service_harness import ORDERS, PRICES, JoinHarness, avro, order

pytestmark = pytest.mark.integration

LEFT_JOIN = "SELECT o.order_id, o.product, o.quantity, p.price FROM orders AS o LEFT JOIN prices AS p ON o.product = p.product"


def wire(schema_id: int, schema: dict, row: dict) -> bytes:
    return b"\x00" + struct.pack(">I", schema_id) + avro(schema, row)


def test_registry_credentials_reach_the_workers(kafka_bootstrap, spark, tmp_path, new_topic):
    """They travel in the source's mapper.secret option, apart from mapper.config (pipeline.py)."""
    from tests.support.schema_registry_fake import FakeSchemaRegistry

    with FakeSchemaRegistry(basic_auth_user_info="svc:s3cret-pw") as registry:
        h = JoinHarness(kafka_bootstrap, spark, tmp_path, new_topic, JOIN_SQL=LEFT_JOIN,
                        SCHEMA_REGISTRY_URL=registry.url, SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO="svc:s3cret-pw",
                        LEFT_SCHEMA_FILE="", RIGHT_SCHEMA_FILE="")
        orders_id = registry.register(f"{h.orders}-value", ORDERS)
        registry.register(f"{h.prices}-value", PRICES)
        from tests.support.kafka_fixture import produce

        produce(kafka_bootstrap, h.orders, [(None, wire(orders_id, ORDERS, order(1, "book", 2)), [("rowkind", b"+I")])])
        h.run()
        assert h.retract_table() == Counter({(1, "book", 2, None): 1})  # the workers fetched the schema by id
        assert ("GET", f"/schemas/ids/{orders_id}") in registry.requests
