"""`expressions` is a pure core as `operators` is: no Spark, no Kafka, no service; the workers
compile and run a plan's expressions without sqlglot (only reading SQL loads it)."""
import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = (
    "pyspark", "py4j", "confluent_kafka", "kafka", "fastavro", "requests", "urllib3", "httpx",
    "socket", "ssl", "http", "urllib", "asyncio", "aiohttp", "grpc", "service", "operators",
)


def _top(name: str) -> str:
    return name.split(".")[0]


def test_no_forbidden_import_in_the_source():
    offenders = []
    for path in sorted((ROOT / "expressions").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if _top(n) in FORBIDDEN]
    assert offenders == []


def _loaded_by(code: str) -> set[str]:
    script = f"import sys, json; before = set(sys.modules); {code}; print(json.dumps(sorted(set(sys.modules) - before)))"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    return {_top(m) for m in json.loads(out.stdout.splitlines()[-1])}


def test_compiling_and_running_typed_expressions_loads_no_sqlglot():
    """What a worker does with a plan's expressions: compile its typed nodes, run them."""
    loaded = _loaded_by(
        "import expressions; f = expressions.compile_projection([['call', 'INT', '+', ['col', 'INT', 'I', 0], "
        "['lit', 'INT NOT NULL', 1]]], ['a + 1']); assert f((1,)) == (2,)")
    assert "expressions" in loaded
    assert loaded & (set(FORBIDDEN) | {"sqlglot"}) == set()


def test_reading_sql_loads_sqlglot_but_no_client():
    loaded = _loaded_by("import expressions.parse; expressions.parse.parse('UPPER(a)')")
    assert "sqlglot" in loaded
    third_party = {"pyspark", "py4j", "confluent_kafka", "kafka", "requests", "urllib3", "httpx", "grpc", "aiohttp"}
    assert loaded & third_party == set()
