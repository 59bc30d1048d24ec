"""`operators` must stay a pure core: no Spark, no Kafka, nothing that talks to a network."""
import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = (
    "pyspark", "py4j", "confluent_kafka", "kafka", "fastavro", "requests", "urllib3", "httpx",
    "socket", "ssl", "http", "urllib", "asyncio", "aiohttp", "grpc", "service",
)


def _top(name: str) -> str:
    return name.split(".")[0]


def test_no_forbidden_import_in_the_source():
    offenders = []
    for path in sorted((ROOT / "operators").rglob("*.py")):
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


def test_importing_operators_loads_no_forbidden_module():
    loaded = _loaded_by("import operators, operators.conformance, operators.testing")
    assert loaded & set(FORBIDDEN) == set()
    assert "operators" in loaded


def test_the_in_memory_host_stays_out_of_production():
    """``operators.testing`` (LocalRunner, InMemoryState) and the conformance runner serve tests,
    benchmarks and the cases: importing ``operators`` does not load them, and the service never
    imports them."""
    script = "import sys, operators; print(sorted(m for m in sys.modules if m.startswith('operators.')))"
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().replace("'", '"'))
    assert "operators.testing" not in loaded and "operators.conformance" not in loaded
    offenders = []
    for path in sorted((ROOT / "service").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            offenders += [f"{path.name}: {n}" for n in names if n in ("operators.testing", "operators.conformance")]
    assert offenders == []


def test_compiling_a_condition_loads_no_network_library():
    # sqlglot is loaded to parse the condition. Its import of importlib.metadata pulls in the standard
    # library's email/socket/urllib modules without using them, so only third-party clients are checked.
    loaded = _loaded_by("import operators; operators.compile_condition('l.a > r.b', ['a'], ['b'])")
    assert "sqlglot" in loaded
    third_party = {"pyspark", "py4j", "confluent_kafka", "kafka", "requests", "urllib3", "httpx", "grpc", "aiohttp"}
    assert loaded & third_party == set()
