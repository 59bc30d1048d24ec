"""The chart's schema of the service's settings is written from ``service.config.Settings``
(``devkit/chart_schema.py``): the checked-in ``values.schema.json`` is what the generator writes,
and every variable of the service has a chart key, or is one the chart sets from another value.
(Each key becomes a variable the service reads: test_helm_chart.py's
test_every_config_key_maps_to_a_service_variable.)"""
from __future__ import annotations

import json
import re
from typing import Literal

from pydantic import Field

from devkit import chart_schema
from service import config

SCHEMA = chart_schema.SCHEMA


def _variable(key: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).upper()  # the chart's snakecase | upper


def test_the_checked_in_schema_is_what_the_generator_writes():
    text = SCHEMA.read_text()
    assert chart_schema.render(text) == text, "values.schema.json is stale: run python -m devkit.chart_schema"
    assert chart_schema.main(["--check"]) == 0


def test_every_variable_has_a_chart_key():
    keys = json.loads(SCHEMA.read_text())["properties"]["config"]["properties"]
    mapped = {_variable(key) for key in keys}
    names = config.env_var_names()
    missing = sorted(names - mapped - set(chart_schema.SET_ELSEWHERE))
    assert missing == [], f"no chart key: {missing} (add the key to values.yaml, then run python -m devkit.chart_schema)"
    assert set(chart_schema.SET_ELSEWHERE) <= names and not set(chart_schema.SET_ELSEWHERE) & mapped
    assert all(chart_schema.chart_key(_variable(key)) == key for key in keys)


def test_the_keys_take_the_services_types_bounds_and_values():
    keys = json.loads(SCHEMA.read_text())["properties"]["config"]["properties"]
    fields = {info.alias: info for info in config.Settings.model_fields.values() if info.alias}
    assert keys["shufflePartitions"]["maximum"] == 10_000 and keys["lookupMaxRetries"]["maximum"] == 100
    assert keys["leftFormat"]["enum"][1:] == list(fields["LEFT_FORMAT"].annotation.__args__)
    assert keys["idleTimeout"]["pattern"] == chart_schema.DURATION_PATTERN
    assert keys["failOnDataLoss"]["type"] == ["boolean", "null"]
    from service.sink import MESSAGE_TIMEOUT_MARGIN_MS

    assert keys["kafkaTransactionTimeoutMs"]["minimum"] == 2 * MESSAGE_TIMEOUT_MARGIN_MS  # the model's check


def test_a_new_variable_or_a_changed_bound_makes_the_schema_stale():
    """What the stale check compares: a field added to Settings, or a bound changed, changes the
    generated file (so the test above fails until it is written and the key documented)."""
    class More(config.Settings):
        new_thing: int | None = Field(None, alias="NEW_THING", ge=2, le=9)
        new_mode: Literal["a", "b"] = Field("a", alias="NEW_MODE")
        new_wait_ms: int = Field(5_000, alias="NEW_WAIT", gt=0)

    text = SCHEMA.read_text()
    generated = json.loads(chart_schema.render(text, More))["properties"]["config"]["properties"]
    assert generated["newThing"] == {"type": ["integer", "null"], "description": "NEW_THING.", "minimum": 2, "maximum": 9}
    assert generated["newMode"] == {"type": "string", "description": "NEW_MODE.", "enum": ["", "a", "b"]}
    assert generated["newWait"]["pattern"] == chart_schema.DURATION_PATTERN
    assert chart_schema.render(text, More) != text
