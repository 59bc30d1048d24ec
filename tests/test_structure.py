"""A record's path is one straight line: each step depends on shared definitions, never on a neighbour.
What the workers run never loads the driver's planner or SQL front end, and the SQL front end's
modules each import only those above them."""
import ast
from pathlib import Path

SERVICE = Path(__file__).resolve().parent.parent / "service"
STEPS = ("source", "decode", "processor", "encode", "sink")
# The modules Spark's workers run (the record path, and the plan's trip to them).
WORKERS = STEPS + ("shipping",)
SQL = SERVICE / "sql"
# The SQL front end's modules, each importing only modules before it here.
SQL_LAYERS = ("model", "dialect", "resolve", "intervals", "windows", "joins")


def imports_of(path: Path, package: str) -> set[str]:
    """The modules that ``path``, a module of ``package``, imports anywhere (also inside functions),
    as dotted names with relative imports resolved: ``from .x import y`` in ``service.sql`` is
    ``service.sql.x``, ``from . import x`` and ``from service import x`` name the module x."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            if node.module and (node.level or "." in node.module):
                found.add(module)  # from .x import y / from service.x import y
            else:  # from . import x / from service import x: each x may be a module
                found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def service_imports(module: str) -> set[str]:
    """The ``service`` modules that ``service/<module>.py`` imports anywhere (also inside functions)."""
    return {name.split(".")[1] for name in imports_of(SERVICE / f"{module}.py", "service")
            if name.split(".")[0] == "service" and "." in name}


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


def service_closure(module: str) -> set[str]:
    """Every ``service`` module that loading ``service/<module>.py`` loads, through any chain of
    imports. A package (``service/sql``) is listed but not followed."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if (SERVICE / f"{current}.py").exists():
            todo.extend(service_imports(current))
    return seen - {module}


def test_the_workers_load_neither_the_planner_nor_the_sql_front_end():
    """The workers receive a built plan (``service/plan.py``); building it is the driver's job."""
    for worker in WORKERS + ("plan",):
        loaded = service_closure(worker)
        assert not loaded & {"planner", "sql"}, f"service/{worker}.py loads {sorted(loaded & {'planner', 'sql'})}"


def sql_imports(module: str) -> set[str]:
    """The ``service.sql`` modules that ``service/sql/<module>.py`` imports."""
    return {name.split(".")[2] for name in imports_of(SQL / f"{module}.py", "service.sql")
            if name.startswith("service.sql.")}


def test_every_sql_module_has_a_layer():
    assert {p.stem for p in SQL.glob("*.py")} - {"__init__"} == set(SQL_LAYERS)


def test_each_sql_module_imports_only_the_modules_above_it():
    """No import cycles: model (plain data) and dialect (sqlglot) at the bottom, joins at the top."""
    for i, module in enumerate(SQL_LAYERS):
        above = sql_imports(module) - set(SQL_LAYERS[:i])
        assert not above, f"service/sql/{module}.py imports {sorted(above)}, which are not above it in {SQL_LAYERS}"
    assert not sql_imports("model")
    assert sql_imports("dialect") <= {"model"}


def test_the_sql_front_end_knows_nothing_of_the_service():
    """It reads SQL against column names; the plan, the configuration and the schemas are the planner's."""
    for path in SQL.glob("*.py"):
        outside = {name for name in imports_of(path, "service.sql")
                   if name.split(".")[0] == "service" and not name.startswith("service.sql")}
        assert not outside, f"service/sql/{path.name} imports {sorted(outside)}"


def test_the_import_parser_resolves_relative_imports_in_a_subpackage(tmp_path):
    (tmp_path / "probe.py").write_text("from .model import x\nfrom . import dialect\nfrom ..plan import y\n"
                                       "import service.sql.joins\n")
    assert imports_of(tmp_path / "probe.py", "service.sql") == {
        "service.sql.model", "service.sql.dialect", "service.plan", "service.sql.joins"}


def test_every_package_is_in_the_wheel():
    """pyproject.toml lists the packages explicitly, and setuptools then ships no subpackage it omits."""
    import tomllib

    root = SERVICE.parent
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    packages = {".".join(p.parent.relative_to(root).parts) for top in ("operators", "service")
                for p in (root / top).rglob("__init__.py")}
    assert packages == listed
