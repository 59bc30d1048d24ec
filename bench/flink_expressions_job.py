"""Flink 2.3 evaluating SQL expressions over rows: the peer of changejoin's compiled expressions in
tests/integration/test_expressions_flink_differential.py.

Runs in Flink's own virtualenv (``.cache/flink-venv``, bench/harness/peers.py), from the
repository's root:

    python -m bench.flink_expressions_job SPEC.json RESULT.json

``SPEC.json``: ``{"columns": [[name, flink type], ...], "rows": [[value, ...], ...], "expressions":
[sql, ...], "batch": n}``; a value is JSON: DECIMAL as a string, DATE ``yyyy-mm-dd``, TIMESTAMP
``yyyy-mm-dd hh:mm:ss[.ffffff]``, DOUBLE a number or ``"NaN"`` / ``"Infinity"`` / ``"-Infinity"``.
The rows are a table made with ``from_elements`` (read at run time: Flink's planner does not fold
them), named ``v``. The expressions are evaluated ``batch`` at a time, one batch-mode job each
(``SELECT e1, e2, ... FROM v``, local mini-cluster, parallelism 1); a batch that fails is split in
halves until the failing expression stands alone, so one failure costs a few jobs, not one per
expression. ``RESULT.json``: per expression ``{"type": Flink's type, "values": [...]}`` (a value of
a DATE, TIME or TIMESTAMP type is Flink's ``CAST(... AS STRING)``, a DECIMAL a string, a DOUBLE
as above) or ``{"error": the exception's last cause}``.
"""
from __future__ import annotations

import datetime
import json
import math
import re
import sys
from decimal import Context, Decimal


#: The column the rows are numbered in (the first of the spec's), to put the results in order.
ROW_ID = "rid"


def _value(text, flink_type: str):
    if text is None:
        return None
    root = flink_type.split("(")[0].split(" ")[0]
    if root == "DECIMAL":
        return Decimal(text)
    if root == "DATE":
        return datetime.date.fromisoformat(text)
    if root == "TIMESTAMP":
        return datetime.datetime.fromisoformat(text)
    if root in ("DOUBLE", "FLOAT"):
        return float(text)
    if root in ("BYTES", "VARBINARY"):
        return bytearray.fromhex(text)
    return text


def _data_type(flink_type: str):
    from pyflink.table import DataTypes

    match = re.match(r"(\w+)(?:\((\d+)(?:,\s*(\d+))?\))?", flink_type)
    root, a, b = match.group(1), match.group(2), match.group(3)
    simple = {"INT": DataTypes.INT(), "BIGINT": DataTypes.BIGINT(), "DOUBLE": DataTypes.DOUBLE(),
              "FLOAT": DataTypes.FLOAT(), "STRING": DataTypes.STRING(), "DATE": DataTypes.DATE(),
              "BOOLEAN": DataTypes.BOOLEAN(), "BYTES": DataTypes.BYTES()}
    if root in simple:
        return simple[root]
    if root == "DECIMAL":
        return DataTypes.DECIMAL(int(a), int(b))
    if root == "TIMESTAMP":
        return DataTypes.TIMESTAMP(int(a))
    raise SystemExit(f"unknown column type {flink_type}")


def _json(value, flink_type: str = ""):
    if value is None:
        return None
    if isinstance(value, Decimal) and flink_type.startswith("DECIMAL("):
        # PyFlink's collect pickles a BigDecimal by its engineering string (Pyrolite's Pickler:
        # toEngineeringString), which writes 4.7E-16 at scale 17 as 470E-18, a scale of 18: back to
        # the type's scale (exact: only zeros are added or removed)
        scale = int(flink_type.split(",")[1].split(")")[0])
        return str(value.quantize(Decimal(1).scaleb(-scale), context=Context(prec=80)))  # 38 digits and more
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    return value


def _cause(err: Exception) -> str:
    """The Java exception's last cause, else the exception itself (py4j's first line only says which
    call failed: "An error occurred while calling o8.sqlQuery.")."""
    text = str(err)
    causes = re.findall(r"Caused by: ([^\n]*)", text)
    thrown = [m.group(1) for m in re.finditer(r"^[:\s]*([\w.$]+(?:Exception|Error)\b[^\n]*)", text, re.M)]
    return (causes[-1] if causes else thrown[0] if thrown else text.strip().splitlines()[0])[:500]


def main() -> None:
    spec_path, result_path = sys.argv[1], sys.argv[2]
    spec = json.loads(open(spec_path).read())
    from pyflink.table import DataTypes, EnvironmentSettings, TableEnvironment

    env = TableEnvironment.create(EnvironmentSettings.in_batch_mode())
    env.get_config().set("parallelism.default", "1")
    columns = spec["columns"]
    schema = DataTypes.ROW([DataTypes.FIELD(name, _data_type(t)) for name, t in columns])
    rows = [tuple(_value(v, t) for v, (_, t) in zip(row, columns)) for row in spec["rows"]]
    env.create_temporary_view("v", env.from_elements(rows, schema))
    results: dict = {}

    def run(batch: list[str]) -> None:
        if not batch:
            return
        try:
            table = env.sql_query("SELECT " + ", ".join(batch) + " FROM v")
            types = [c.getDataType().getLogicalType().asSerializableString()
                     for c in table._j_table.getResolvedSchema().getColumns()]
            wrapped = [f"CAST(({e}) AS STRING)" if t.split("(")[0].split(" ")[0] in ("DATE", "TIME", "TIMESTAMP")
                       else e for e, t in zip(batch, types)]
            with env.sql_query(f"SELECT {ROW_ID}, " + ", ".join(wrapped) + " FROM v").execute().collect() as rows_out:
                values = sorted(([*r] for r in rows_out), key=lambda r: r[0])
            values = [r[1:] for r in values]
        except Exception as err:  # noqa: BLE001 - Flink's planner or the job refused it: split, then record
            if len(batch) == 1:
                results[batch[0]] = {"error": _cause(err)}
                return
            half = len(batch) // 2
            run(batch[:half])
            run(batch[half:])
            return
        for i, (expression, flink_type) in enumerate(zip(batch, types)):
            results[expression] = {"type": flink_type, "values": [_json(r[i], flink_type) for r in values]}

    expressions = spec["expressions"]
    size = spec.get("batch", 25)
    for start in range(0, len(expressions), size):
        run(expressions[start:start + size])
    with open(result_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
