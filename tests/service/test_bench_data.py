"""The benchmark's debezium scenario reads the same changes as left-pk: the debezium-json messages
bench/harness/data.py writes, read by the service's own decoder (as upserts of the primary key, as
changejoin reads them with the key declared, and as a full changelog from the before images),
materialize to the table left-pk's Avro/RowKind changelog does; and the harness's settings for the
scenario plan a debezium-json join of those topics."""
from __future__ import annotations

from collections import Counter

import pytest

from bench.harness.data import changelogs, data_of, debezium, debezium_topics, json_value, topics
from service.formats.debezium_json import DebeziumDecoder

SIDES = {  # columns, Avro types, nullable, primary key (schemas/orders.avsc, schemas/prices.avsc)
    "orders": (("order_id", "product", "quantity"), ("long", "string", "int"), (False, False, False), (0,)),
    "prices": (("product", "price", "currency"), ("string", "double", ["null", "string"]), (False, False, True), (0,)),
}


def rowkind_table(changes) -> Counter:
    table: Counter = Counter()
    for kind, row in changes:
        table[tuple(row.values())] += 1 if kind in ("+I", "+U") else -1
    return +table


def read(side: str, messages, upsert: bool) -> Counter:
    columns, types, nullable, key = SIDES[side]
    decoder = DebeziumDecoder(columns, types, nullable, None, key, upsert)
    retract: Counter = Counter()
    keyed: dict = {}
    for message, carried in messages:
        changes, skipped = decoder.changes(json_value(message))
        assert skipped is None
        assert len(changes) == (1 if upsert else carried)
        for kind, row in changes:
            if upsert:  # +U: the key's row now; -D: the key's delete
                if kind == 3:
                    keyed.pop(decoder.key_of(row))
                else:
                    keyed[decoder.key_of(row)] = row
            else:
                retract[row] += 1 if kind in (0, 2) else -1
    return Counter(keyed.values()) if upsert else retract


@pytest.mark.parametrize("upsert", [True, False])
@pytest.mark.parametrize("rows", [3_000, 2_999])  # odd: a -U cut off from its +U (a delete)
def test_the_debezium_messages_materialize_to_the_rowkind_changelogs_table(upsert, rows):
    orders, prices = changelogs(rows, 50, "left-pk")
    assert sum(1 for kind, _ in orders + prices if kind == "-U") > rows // 5  # updates do happen
    for side, changes in (("orders", orders), ("prices", prices)):
        messages = debezium(changes)
        assert sum(n for _, n in messages) == len(changes)
        assert read(side, messages, upsert) == rowkind_table(changes)


def test_the_debezium_scenario_is_left_pk_on_its_debezium_json_topics(tmp_path):
    from bench.harness.changejoin import service_settings
    from service.catalog import plan_for

    assert data_of("debezium") == "left-pk"
    assert topics("debezium")[:2] == debezium_topics("left-pk") != topics("left-pk")[:2]
    settings = service_settings("127.0.0.1:1", "debezium", 1, 1, str(tmp_path / "cp"))
    assert (settings.left_format, settings.right_format) == ("debezium-json", "debezium-json")
    plan = plan_for(settings)  # row schemas from the schema files: no broker asked
    rowkind = plan_for(service_settings("127.0.0.1:1", "left-pk", 1, 1, str(tmp_path / "cp2")))
    assert plan.output_schema["fields"] == rowkind.output_schema["fields"]


def test_changejoin_retract_runs_the_debezium_scenario_in_retract_mode_and_is_reported_against_both(tmp_path):
    from bench.harness.changejoin import service_settings
    from bench.harness.peers import RETRACT_ENV, systems_of
    from bench.harness.report import format_cost
    from service.catalog import plan_for

    systems = ["changejoin", "changejoin-rowkind", "changejoin-retract"]
    assert systems_of("debezium", systems) == systems and systems_of("left-pk", systems) == ["changejoin"]
    plan = plan_for(service_settings("127.0.0.1:1", "debezium", 1, 1, str(tmp_path / "cp"), extra=RETRACT_ENV))
    assert [(s.changelog_mode, s.normalized) for s in plan.sides] == [("retract", False)] * 2
    runs = [{"system": system, "round": n, "in_rate": rate} for n in (1, 2)
            for system, rate in (("changejoin", 700.0), ("changejoin-rowkind", 1000.0), ("changejoin-retract", 910.0))]
    assert format_cost("debezium", runs) == [
        "- debezium: changejoin debezium-json / rowkind input rows/s: median 0.70, min 0.70; by round r1 0.70, r2 0.70",
        "- debezium: changejoin debezium-json retract / rowkind input rows/s: median 0.91, min 0.91; by round r1 0.91, "
        "r2 0.91",
        "- debezium: changejoin debezium-json retract / upsert input rows/s: median 1.30, min 1.30; by round r1 1.30, "
        "r2 1.30"]
