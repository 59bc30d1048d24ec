"""A record's path is one straight line: each step depends on shared definitions, never on a neighbour."""
import ast
import re
from pathlib import Path

SERVICE = Path(__file__).resolve().parent.parent / "service"
STEPS = ("source", "decode", "processor", "encode", "sink")


def service_imports(module: str) -> set[str]:
    """The ``service`` modules that ``service/<module>.py`` imports anywhere (also inside functions)."""
    tree = ast.parse((SERVICE / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:  # from . import x / from .x import y
                found.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
            elif node.module and node.module.split(".")[0] == "service":
                parts = node.module.split(".")
                found.update(parts[1:2] if len(parts) > 1 else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "service" and len(parts) > 1:
                    found.add(parts[1])
    return found


def test_no_step_of_the_record_path_imports_another_step():
    for step in STEPS:
        neighbours = service_imports(step) & (set(STEPS) - {step})
        assert not neighbours, f"service/{step}.py imports {sorted(neighbours)}: depend on shared definitions instead"


def test_the_steps_do_not_import_the_wiring():
    for step in STEPS:
        assert not service_imports(step) & {"pipeline", "app", "cli", "session"}, step


def modules() -> list[str]:
    return sorted(path.stem for path in SERVICE.glob("*.py"))


def test_only_the_processors_use_spark_state_and_it_knows_no_step_and_no_wiring():
    """sparkstate.py is the service half of the checkpoint format: the processors' alone."""
    assert [m for m in modules() if "sparkstate" in service_imports(m)] == ["processor"]
    assert not service_imports("sparkstate") & (set(STEPS) | {"pipeline", "app", "cli", "session"})


def test_the_spark_session_knows_no_step_and_no_state():
    assert not service_imports("session") & (set(STEPS) | {"sparkstate", "pipeline", "app", "cli"})


SPARK_PROPERTY = re.compile(r"^spark\.[A-Za-z0-9]+(\.[A-Za-z0-9]+)*$")


def test_only_the_session_names_spark_properties():
    """Every Spark property the service sets comes from session.spark_properties; config.py only
    reads the user's spark.ui.enabled to check it against SPARK_UI_ENABLED (and jars.py reads
    spark.version, a property of Spark's Maven pom)."""
    allowed = {"config": {"spark.ui.enabled"}, "jars": {"spark.version"}}
    for module in modules():
        if module == "session":
            continue
        tree = ast.parse((SERVICE / f"{module}.py").read_text())
        named = {node.value for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and SPARK_PROPERTY.match(node.value)}
        assert named <= allowed.get(module, set()), f"service/{module}.py names {sorted(named)}: use session.py"


def test_the_import_parser_sees_relative_absolute_and_function_level_imports(tmp_path, monkeypatch):
    (tmp_path / "probe.py").write_text(
        "from .decode import x\nfrom . import encode\nimport service.sink\n"
        "def f():\n    from service.processor import y\n"
    )
    monkeypatch.setattr(__import__(__name__), "SERVICE", tmp_path)
    assert service_imports("probe") == {"decode", "encode", "sink", "processor"}
