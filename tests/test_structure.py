"""A record's path is one straight line: each step depends on shared definitions, never on a neighbour."""
import ast
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
        assert not service_imports(step) & {"pipeline", "app", "cli"}, step


def test_the_import_parser_sees_relative_absolute_and_function_level_imports(tmp_path, monkeypatch):
    (tmp_path / "probe.py").write_text(
        "from .decode import x\nfrom . import encode\nimport service.sink\n"
        "def f():\n    from service.processor import y\n"
    )
    monkeypatch.setattr(__import__(__name__), "SERVICE", tmp_path)
    assert service_imports("probe") == {"decode", "encode", "sink", "processor"}
