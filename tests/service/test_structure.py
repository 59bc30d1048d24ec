"""A record's path is one straight line: each step depends on shared definitions, never on a neighbour.
What the workers run never loads the driver's planner or SQL front end. A package of ``service/``
(``sql/``, ``database/``, ``avro/``) is one room: the rest of the service enters it by its ``__init__``, and
inside, its modules stand on floors, each importing only those below it. And the service stands
apart from the tooling: no service module imports devkit at module level. The tests are one package
(``tests``) that imports what they share as ``tests.support.<module>`` and no test module."""
import ast
import re
import sys
from pathlib import Path

SERVICE = Path(__file__).resolve().parents[2] / "service"
STEPS = ("source", "decode", "lookup", "processor", "encode", "sink")
# The modules Spark's workers run (the record path, and the plan's trip to them).
WORKERS = STEPS + ("shipping", "transactions", "faults", "database")
SQL = SERVICE / "sql"
# The SQL front end's modules, each importing only modules before it here.
SQL_LAYERS = ("model", "dialect", "resolve", "inputs", "intervals", "windows", "where", "joins")
#: Every package of service/ with its modules bottom up: each imports only modules before it here.
PACKAGES = {
    "sql": SQL_LAYERS,
    "database": ("errors", "names", "connection", "catalog", "keys", "cache", "client"),
    "avro": ("schemas", "registry", "values", "writer"),
    "formats": ("base", "connect", "debezium", "debezium_avro", "debezium_json", "rowkind"),
}


def imports(path: Path, package: str = "service") -> list[tuple[str, bool]]:
    """Every import in ``path`` (a module of ``package``) as (absolute module name, at module level):
    relative imports are resolved against ``package``; ``from m import a`` gives ``m`` and ``m.a``
    (``a`` may be a module); an import inside a function (or lambda) is not at module level, one
    anywhere else (class body, ``if``, ``try``) runs on import and is."""
    found = []

    def visit(node, top: bool) -> None:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            if node.module:
                found.append((module, top))
            found.extend((f"{module}.{a.name}" if module else a.name, top) for a in node.names)
        elif isinstance(node, ast.Import):
            found.extend((alias.name, top) for alias in node.names)
        inner = top and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(ast.parse(path.read_text()), True)
    return found


def imports_of(path: Path, package: str) -> set[str]:
    """The modules (and names) ``path``, a module of ``package``, imports anywhere."""
    return {name for name, _ in imports(path, package)}


def sources(room: str) -> list[tuple[Path, str]]:
    """(path, package) of every source file of a room of ``service/``: ``service/<room>.py``, or
    every module of the package ``service/<room>/``."""
    single = SERVICE / f"{room}.py"
    if single.exists():
        return [(single, "service")]
    return [(path, ".".join(("service",) + path.parent.relative_to(SERVICE).parts))
            for path in sorted((SERVICE / room).rglob("*.py"))]


def service_imports(module: str) -> set[str]:
    """The other rooms of ``service`` (modules, packages) that ``service/<module>.py``, or any
    module of the package ``service/<module>/``, imports anywhere (also inside functions)."""
    return {name.split(".")[1] for path, package in sources(module) for name, _ in imports(path, package)
            if name.startswith("service.")} - {module}


def test_no_step_of_the_record_path_imports_another_step():
    for step in STEPS:
        neighbours = service_imports(step) & (set(STEPS) - {step})
        assert not neighbours, f"service/{step}.py imports {sorted(neighbours)}: depend on shared definitions instead"


def test_exactly_once_is_the_sinks_half_and_the_crash_points_know_nothing():
    """``transactions.py`` writes what the sink writes, in transactions: of the steps it uses only
    the sink, and no wiring; ``faults.py`` (the tests' crash points) imports no service module."""
    assert service_imports("transactions") & (set(STEPS) | {"pipeline", "app", "cli", "session"}) <= {"sink"}
    assert service_imports("faults") == set()
    assert not service_imports("sink") & {"transactions", "faults"}


def test_the_lookup_database_knows_nothing_of_the_service():
    """service/database/ is PostgreSQL for the lookup step and the planner: it imports no service
    module but the owner of secrets and the base error (which import none), and no step but the
    lookup uses it."""
    assert service_imports("database") <= {"secrets", "errors"}
    assert service_imports("secrets") == set() and service_imports("errors") == set()
    assert [m for m in STEPS if "database" in service_imports(m)] == ["lookup"]


#: What service/secrets.py alone defines: the name rule, redaction, and reading a URL's password.
SECRET_RULE = {"is_secret_name", "redact", "redact_text", "redact_url", "url_passwords", "url_password",
               "password_forms", "without_user_info", "_url_secrets", "_secrets", "_without_user_info"}


def test_secrets_have_one_owner():
    """Which names are secret, how a text is shown without them and where a URL carries a
    password are decided in service/secrets.py alone (it once took three parsers of a URL's
    password: config, database, shipping; a fourth in contact): no other module defines them, or
    reads a parsed URL's ``password`` or ``parse_qs`` for one."""
    for path in sorted(SERVICE.rglob("*.py")):
        if path == SERVICE / "secrets.py":
            continue
        tree = ast.parse(path.read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))} & SECRET_RULE
        assert not defined, f"{path.relative_to(SERVICE.parent)} defines {sorted(defined)}: use service/secrets.py"
        read = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "password"
                and not (isinstance(n.value, ast.Name) and n.value.id == "self")
                or isinstance(n, ast.Name) and n.id == "parse_qs"]
        assert not read, f"{path.relative_to(SERVICE.parent)} reads a URL's password (line {read[0]}): use service/secrets.py"


def config_reads_by_key(root: Path) -> list[str]:
    """Where a module of ``root`` reads a config by key: ``x[...]`` or ``x.get(...)`` where ``x`` is
    named as a worker config or a part of one (``config``, ``self._sink_config``, ``delivery``,
    ``secrets``, ``crash``)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Subscript):
                target = node.value
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
                target = node.func.value
            else:
                continue
            name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
            if name in {"delivery", "secrets", "crash"} or name.endswith("config"):
                found.append(f"{path.relative_to(root)}:{node.lineno} {name}")
    return found


def test_the_workers_config_is_read_by_attribute():
    """The workers' configuration is one frozen ``shipping.WorkerConfig`` (with its ``Secrets``,
    ``Delivery`` and ``faults.CrashPoint``): a reader asks for an attribute, and a misspelt one fails
    where it is read, where a dict's ``config.get("crash")`` read None. No module reads a config
    by key (tests/service/test_shipping.py: every field is read)."""
    assert config_reads_by_key(SERVICE) == []


def test_the_config_by_key_check_bites(tmp_path):
    (tmp_path / "probe.py").write_text('def f(config, self):\n    return config["plan"], self._sink_config.get("crash"), '
                                       'self.delivery["prefix"], config.plan, settings["x"]\n')
    assert config_reads_by_key(tmp_path) == ["probe.py:2 config", "probe.py:2 _sink_config", "probe.py:2 delivery"]


#: What is under a checkpoint: Spark's logs, state and metadata, changejoin's file and lock, and the
#: lookups a lookup join pins (``changejoin/lookups``).
CHECKPOINT_ENTRIES = {"offsets", "commits", "state", "sources", "metadata", "changejoin", "lookups",
                      "changejoin-state.json", "changejoin.lock"}
#: The modules that may ask where a location is a local directory: config.py (which defines it and
#: refuses a lookup join elsewhere), the session (Spark's file manager for a local checkpoint) and
#: the checkpoint.
LOCAL_DIRECTORY_USERS = {"config.py", "session.py", "checkpoint.py"}


def paths_under_the_checkpoint(root: Path) -> list[str]:
    """Where a module of ``root`` but ``checkpoint.py`` builds a path under a checkpoint: an entry of
    :data:`CHECKPOINT_ENTRIES` as a part of a path (an argument of a ``join``/``Path``/``joinpath``
    call, an operand of ``/`` or ``+``, a ``/``-separated part of a string or an f-string; docstrings
    left out), or
    ``local_directory`` called outside :data:`LOCAL_DIRECTORY_USERS`."""
    found = []

    def parts(text: str) -> set[str]:
        return set(text.split("/")) if "/" in text else {text}

    for path in sorted(root.rglob("*.py")):
        if path.name == "checkpoint.py":
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            pieces: list = []
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in ("join", "Path", "PurePath", "joinpath"):
                    pieces = node.args
                if name == "local_directory" and path.name not in LOCAL_DIRECTORY_USERS:
                    found.append(f"{path.relative_to(root)}:{node.lineno} local_directory")
            elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.Add)):
                pieces = [node.left, node.right]
            elif isinstance(node, ast.JoinedStr):
                pieces = [v for v in node.values if isinstance(v, ast.Constant)]
                pieces = [p for p in pieces if "/" in p.value]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "/" in node.value \
                    and id(node) not in docstrings:
                pieces = [node]
            for piece in pieces:
                if isinstance(piece, ast.Constant) and isinstance(piece.value, str) \
                        and parts(piece.value) & CHECKPOINT_ENTRIES:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {piece.value!r}")
    return sorted(set(found))


def test_only_the_checkpoint_builds_paths_under_it():
    """``checkpoint.Checkpoint`` owns ``CHECKPOINT_LOCATION`` and everything under it (Spark's logs,
    ``changejoin-state.json``, the lock, the pinned lookups' directory): another module asks it, and
    never re-derives a path (the location's local directory was once derived in four modules, the
    pins' directory in two)."""
    assert paths_under_the_checkpoint(SERVICE) == []


def test_the_checkpoint_path_check_bites(tmp_path):
    (tmp_path / "probe.py").write_text(
        '"""Pins go to <CHECKPOINT_LOCATION>/changejoin/lookups."""\nfrom pathlib import Path\n'
        'a = os.path.join(directory, "offsets", str(batch))\n'
        'b = Path(location) / "changejoin-state.json"\n'
        'c = f"{location}/commits/{batch}"\n'
        'd = location.rstrip("/") + "/state"\n'
        'e = os.path.join(local_directory(location), "changejoin/lookups")\n'
        'fine = {"offsets": None}, f"lost files of its offsets/ and commits/ logs", progress["sources"]\n')
    assert paths_under_the_checkpoint(tmp_path) == [
        "probe.py:3 'offsets'", "probe.py:4 'changejoin-state.json'", "probe.py:5 '/commits/'", "probe.py:6 '/state'",
        "probe.py:7 'changejoin/lookups'", "probe.py:7 local_directory"]


def test_every_error_of_the_service_derives_from_the_one_base():
    """An error class of the service (a class whose bases lead to a built-in exception) derives
    from ``errors.ChangejoinError``, which ``cli.main`` catches in one place; only a private one
    (``_Name``: control flow inside a module, never shown) may not."""
    import builtins

    bases: dict[str, list[str]] = {}
    where: dict[str, str] = {}
    for path in sorted(SERVICE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in node.bases]
                where[node.name] = str(path.relative_to(SERVICE.parent))

    def builtin_exception(name: str) -> bool:
        value = getattr(builtins, name, None)
        return isinstance(value, type) and issubclass(value, BaseException)

    def ancestors(name: str, seen=()) -> set[str]:
        found = set()
        for base in bases.get(name, ()):
            if base not in seen:
                found |= {base} | ancestors(base, seen + (name,))
        return found

    errors = {name for name in bases if name != "ChangejoinError" and any(map(builtin_exception, ancestors(name)))}
    assert {"ConfigError", "PlanError", "QueryError", "DatabaseError", "ServerError", "SchemaRegistryError"} <= errors
    orphans = sorted(f"{where[n]}: {n}" for n in errors if not n.startswith("_") and "ChangejoinError" not in ancestors(n))
    assert orphans == [], "derive these from service.errors.ChangejoinError"


def test_the_steps_do_not_import_the_wiring():
    for step in STEPS:
        assert not service_imports(step) & {"pipeline", "app", "cli", "session"}, step


def modules() -> list[str]:
    """Every room of ``service/``: its modules and its packages."""
    return sorted([path.stem for path in SERVICE.glob("*.py")] + list(PACKAGES))


def test_only_the_processors_use_spark_state_and_it_knows_no_step_and_no_wiring():
    """sparkstate.py is the service half of the checkpoint format: the processors' alone."""
    assert [m for m in modules() if "sparkstate" in service_imports(m)] == ["processor"]
    assert not service_imports("sparkstate") & (set(STEPS) | {"pipeline", "app", "cli", "session"})


def test_the_class_archive_knows_nothing_and_only_the_session_uses_it():
    """classarchive.py (SPARK_CLASS_ARCHIVE_DIR) picks a JVM option and names a file: it imports no
    service module, and only the session, which launches Spark's JVM and waits for it, uses it."""
    assert service_imports("classarchive") == set()
    assert [m for m in modules() if "classarchive" in service_imports(m)] == ["session"]


def test_what_the_machine_gives_is_read_in_one_place_that_knows_nothing():
    """resources.py reads the process's CPUs and memory (its cgroup's limits): it imports no service
    module, and the cgroup files are named nowhere else."""
    assert service_imports("resources") == set()
    for room in modules():
        for path, _ in sources(room):
            assert room == "resources" or "/sys/fs/cgroup" not in path.read_text(), \
                f"{path.relative_to(SERVICE.parent)} reads a cgroup file: use service/resources.py"


def test_the_spark_session_knows_no_step_and_no_state():
    assert not service_imports("session") & (set(STEPS) | {"sparkstate", "pipeline", "app", "cli"})


SPARK_PROPERTY = re.compile(r"^spark\.[A-Za-z0-9]+(\.[A-Za-z0-9]+)*$")


def test_only_the_session_names_spark_properties():
    """Every Spark property the service sets comes from session.spark_properties; config.py only
    reads what the user's SPARK_CONF_ sets to check it: spark.ui.enabled against SPARK_UI_ENABLED,
    spark.sql.shuffle.partitions against SHUFFLE_PARTITIONS, the state store provider (RocksDB only),
    spark.speculation (off with DELIVERY=exactly-once) (and jars.py reads
    spark.version, a property of Spark's Maven pom)."""
    allowed = {"config": {"spark.ui.enabled", "spark.speculation", "spark.sql.shuffle.partitions",
                          "spark.sql.streaming.stateStore.providerClass"}, "jars": {"spark.version"}}
    for module in modules():
        if module == "session":
            continue
        named = {node.value for path, _ in sources(module) for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and SPARK_PROPERTY.match(node.value)}
        assert named <= allowed.get(module, set()), f"service/{module}.py names {sorted(named)}: use session.py"


def test_the_import_parser_sees_relative_absolute_and_function_level_imports(tmp_path, monkeypatch):
    (tmp_path / "probe.py").write_text(
        "from .decode import x\nfrom . import encode\nimport service.sink\n"
        "def f():\n    from service.processor import y\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "SERVICE", tmp_path)
    assert service_imports("probe") == {"decode", "encode", "sink", "processor"}


def service_closure(module: str) -> set[str]:
    """Every room of ``service`` (module or package) that loading ``service/<module>.py`` loads,
    through any chain of imports (a package: through any of its modules)."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        if (SERVICE / f"{current}.py").exists() or (SERVICE / current / "__init__.py").exists():
            todo.extend(service_imports(current))
    return seen - {module}


def test_the_workers_load_neither_the_planner_nor_the_sql_front_end():
    """The workers receive a built plan (``service/plan.py``); building it (reading the catalog,
    planning, explaining) is the driver's job."""
    driver = {"planner", "sql", "catalog", "explain"}
    for worker in WORKERS + ("plan",):
        loaded = service_closure(worker)
        assert not loaded & driver, f"service/{worker}.py loads {sorted(loaded & driver)}"
    assert "formats" in service_closure("decode")


def test_the_planner_reads_nothing():
    """``build_plan(settings, catalog)`` plans from the catalog it is given: the planner imports
    nothing that reads a file or talks to a server (the catalog's readers, the sink, the lookup
    database, the registry client), at module level or inside a function; ``service/catalog.py``
    does that I/O, and the Kafka consumer that reads a topic's newest messages is the catalog's,
    not the sink's."""
    names = imports_of(SERVICE / "planner.py", "service")
    io = {"service.catalog", "service.sink", "service.contact", "service.avro.SchemaRegistry",
          "service.avro.load_schema_file", "service.database.describe_table", "service.database.LookupClient"}
    assert not names & io, f"service/planner.py imports {sorted(names & io)}"
    # of the lookup database's module, only the URL's redaction (a pure function)
    assert {n for n in names if n.startswith("service.database.")} <= {"service.database.redact"}
    assert not {n.split(".")[0] for n in names} & {"confluent_kafka", "requests", "psycopg", "socket", "urllib"}
    assert "service.planner" in imports_of(SERVICE / "catalog.py", "service")
    assert "newest_values" not in {n.id for n in ast.walk(ast.parse((SERVICE / "sink.py").read_text()))
                                   if isinstance(n, ast.Name)} | _defined(SERVICE / "sink.py")


def test_the_explanation_only_reads_a_built_plan():
    """``service/explain.py`` renders a plan: it neither plans nor reads the catalog, and the
    planner does not render."""
    assert not service_imports("explain") & {"planner", "catalog", "config", "database", "sink", "contact"}
    assert "explain" not in service_imports("planner")


def _defined(path: Path) -> set[str]:
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}


# -- input formats ---------------------------------------------------------------------------------
FORMATS = SERVICE / "formats"
#: service/formats/'s modules, each importing only those it names here (the package's shared
#: modules before it, never another tenant); ``__init__`` (the registry) imports them all.
FORMATS_LAYERS = {
    "base": set(),  # what a format is
    "connect": set(),  # Kafka Connect's types (the Debezium encodings share them)
    "debezium": {"base", "connect"},  # the Debezium change protocol
    "rowkind": {"base"},  # tenant: rowkind
    "debezium_json": {"base", "connect", "debezium"},  # tenant: debezium-json
    "debezium_avro": {"base", "connect", "debezium"},  # tenant: debezium-avro
}
FORMATS_MODULES = ("__init__", *FORMATS_LAYERS)
#: The service modules a format may use: shared definitions only, never a step, the plan, the
#: configuration, the planner or the wiring (those ask the formats, not the other way round).
FORMATS_MAY_USE = {"avro", "deadletters", "envelope", "errors", "keys", "formats"}
#: The names of the formats (``*_FORMAT``'s values), which no module outside service/formats/ names.
FORMAT_NAME = re.compile(r"(?<![\w.-])(rowkind|debezium-json|debezium-avro)(?![\w-])")


def formats_imports(module: str) -> set[str]:
    """The modules of service/formats/ that ``service/formats/<module>.py`` imports."""
    return {name.split(".")[2] for name in imports_of(FORMATS / f"{module}.py", "service.formats")
            if name.startswith("service.formats.")}


def formats_service_imports(module: str) -> set[str]:
    """The ``service`` modules outside service/formats/ that ``service/formats/<module>.py`` imports."""
    return {name.split(".")[1] for name in imports_of(FORMATS / f"{module}.py", "service.formats")
            if name.startswith("service.") and not name.startswith("service.formats")}


def test_every_format_module_has_a_layer():
    assert {p.stem for p in FORMATS.glob("*.py")} == set(FORMATS_MODULES)


def test_each_format_module_imports_only_its_shared_modules_and_no_other_tenant():
    for module, allowed in FORMATS_LAYERS.items():
        found = formats_imports(module)
        assert found <= allowed, f"service/formats/{module}.py imports {sorted(found - allowed)}"
    assert formats_imports("__init__") <= set(FORMATS_LAYERS)


def test_the_formats_use_shared_definitions_only():
    for module in FORMATS_MODULES:
        found = formats_service_imports(module)
        assert found <= FORMATS_MAY_USE, f"service/formats/{module}.py imports {sorted(found - FORMATS_MAY_USE)}"


def test_the_registry_holds_every_tenant_and_config_accepts_exactly_its_names():
    import typing

    from service import formats
    from service.config import InputFormat

    assert set(typing.get_args(InputFormat)) == set(formats.NAMES) == {"rowkind", "debezium-json", "debezium-avro"}
    assert typing.get_args(InputFormat) == formats.NAMES
    assert formats.DEFAULT == "rowkind"
    assert all(name == fmt.name for name, fmt in formats.FORMATS.items())


def test_no_module_outside_the_formats_names_a_format():
    """A format is asked (``formats.format_of(name)``), never compared by name: no string in the
    code of ``service/`` outside service/formats/ (docstrings and comments may name them) holds a
    format's name. One exception, of another meaning: ``kafka_records.DEFAULT_ROWKIND_HEADER``,
    the default name of the header that carries a row's change kind (``ROWKIND_HEADER``; the
    output's records and the dead letters of rows carry it too)."""
    for path in sorted(SERVICE.rglob("*.py")):
        if FORMATS in path.parents:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        header = {id(node.value) for node in tree.body if path.name == "kafka_records.py" and isinstance(node, ast.Assign)
                  and [t.id for t in node.targets if isinstance(t, ast.Name)] == ["DEFAULT_ROWKIND_HEADER"]}
        named = [(node.lineno, node.value) for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                 and id(node) not in header and FORMAT_NAME.search(node.value)]
        assert not named, f"service/{path.relative_to(SERVICE)} names a format {named}: ask service.formats"


def test_the_format_name_check_sees_comparisons_and_messages(tmp_path, monkeypatch):
    probe = tmp_path / "service"
    probe.mkdir()
    (probe / "probe.py").write_text('"""The rowkind format."""\nif fmt == "debezium-json":\n    pass\n'
                                    'rowkind_header = "rowkind_header"\n')
    monkeypatch.setattr(sys.modules[__name__], "SERVICE", probe)
    monkeypatch.setattr(sys.modules[__name__], "FORMATS", probe / "formats")
    try:
        test_no_module_outside_the_formats_names_a_format()
    except AssertionError as err:
        assert "(2, 'debezium-json')" in str(err)
    else:
        raise AssertionError("the probe's comparison went unseen")
    (probe / "probe.py").write_text('"""The rowkind format."""\nx = f"a {y} debezium-avro topic"\n')
    try:
        test_no_module_outside_the_formats_names_a_format()
    except AssertionError as err:
        assert "debezium-avro topic" in str(err)
    else:
        raise AssertionError("the probe's message went unseen")
    (probe / "probe.py").write_text('"""The rowkind format."""\nrowkind_header = "rowkind_header"\n')
    test_no_module_outside_the_formats_names_a_format()


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
    """It reads SQL against column names; the plan, the configuration and the schemas are the planner's.
    Its one import of the service is the base of its error (service/errors.py, which imports nothing)."""
    assert service_imports("errors") == set()
    for path in SQL.glob("*.py"):
        outside = {name for name in imports_of(path, "service.sql")
                   if name.split(".")[0] == "service" and not name.startswith("service.sql")
                   and name not in ("service.errors", "service.errors.ChangejoinError")}
        assert not outside, f"service/sql/{path.name} imports {sorted(outside)}"


def package_imports(package: str, module: str) -> set[str]:
    """The modules of ``service/<package>/`` that its ``<module>.py`` imports."""
    return {name.split(".")[2] for name in imports_of(SERVICE / package / f"{module}.py", f"service.{package}")
            if name.startswith(f"service.{package}.")}


def test_every_package_is_listed_with_its_floors():
    """A new package (or a module of one) gets its place in :data:`PACKAGES`."""
    found = {p.parent.name for p in SERVICE.glob("*/__init__.py")}
    assert found == set(PACKAGES), f"service's packages are {sorted(found)}: list each in PACKAGES"
    for package, layers in PACKAGES.items():
        assert {p.stem for p in (SERVICE / package).glob("*.py")} - {"__init__"} == set(layers), package
        assert not list((SERVICE / package).glob("*/__init__.py")), f"service/{package}/ has a subpackage"


def test_each_package_module_imports_only_the_modules_below_it():
    """No sideways imports, no cycles: each module of a package stands on the ones before it."""
    for package, layers in PACKAGES.items():
        for i, module in enumerate(layers):
            above = package_imports(package, module) - set(layers[:i])
            assert not above, (f"service/{package}/{module}.py imports {sorted(above)}, which are not below it "
                               f"in {layers}")


def test_the_service_enters_a_package_by_its_door():
    """The rest of the service imports what a package's ``__init__`` offers, never one of its
    modules: what is inside may move between floors without an import site outside changing."""
    for path in sorted(SERVICE.rglob("*.py")):
        inside = path.parent.relative_to(SERVICE).parts[:1]
        package = ".".join(("service",) + path.parent.relative_to(SERVICE).parts)
        for name in imports_of(path, package):
            parts = name.split(".")
            if len(parts) >= 3 and parts[0] == "service" and parts[1] in PACKAGES and (parts[1],) != inside:
                assert parts[2] not in PACKAGES[parts[1]], f"{path.relative_to(SERVICE.parent)} imports {name}"


def test_the_import_parser_resolves_relative_imports_in_a_subpackage(tmp_path):
    (tmp_path / "probe.py").write_text("from .model import x\nfrom . import dialect\nfrom ..plan import y\n"
                                       "import service.sql.joins\n")
    assert imports_of(tmp_path / "probe.py", "service.sql") == {
        "service.sql.model", "service.sql.model.x", "service.sql.dialect", "service.plan", "service.plan.y",
        "service.sql.joins"}


def test_the_import_parser_tells_module_level_from_function_level_imports(tmp_path):
    (tmp_path / "probe.py").write_text(
        "import devkit.jars\nfrom .. import devkit\ntry:\n    from devkit import kafka_broker\nexcept ImportError:\n    pass\n"
        "class C:\n    from devkit.broker_process import free_port\n"
        "def f():\n    from devkit.embedded_broker import EmbeddedBroker\n"
        "async def h():\n    import devkit\n"
    )
    got = imports(tmp_path / "probe.py")
    assert {name for name, top in got if top} == {
        "devkit.jars", "devkit", "devkit.kafka_broker", "devkit.broker_process", "devkit.broker_process.free_port"}
    assert {name for name, top in got if not top} == {
        "devkit.embedded_broker", "devkit.embedded_broker.EmbeddedBroker", "devkit"}


#: The service modules that may import devkit, inside a function only: the demo starts its broker.
DEVKIT_INSIDE_FUNCTIONS = {"demo"}


def test_no_service_module_imports_devkit_at_module_level():
    """devkit (brokers, Maven jars) is tooling, never in the image: the service must import
    without it. Only the demo may reach for it, from inside a function."""
    modules = sorted(SERVICE.rglob("*.py"))
    assert {p.stem for p in modules} >= {"app", "cli", "demo", "pipeline"} | set(STEPS)
    for path in modules:
        for name, top in imports(path, ".".join(("service",) + path.parent.relative_to(SERVICE).parts)):
            if name == "devkit" or name.startswith("devkit."):
                assert not top, f"service/{path.name} imports {name} at module level"
                assert path.stem in DEVKIT_INSIDE_FUNCTIONS, f"service/{path.name} imports {name}"
    assert any(name.startswith("devkit.") for name, top in imports(SERVICE / "demo.py") if not top), \
        "the demo no longer imports its broker from devkit: update DEVKIT_INSIDE_FUNCTIONS"


BENCH = SERVICE.parent / "bench"


def test_the_benchmarks_are_a_package_without_path_edits():
    """bench/ runs as ``python -m bench.<name>``: no module edits ``sys.path``, and what one
    benchmark takes from another comes from ``bench.harness``, never a sibling script by its bare
    name (the old ``import pipeline_bench`` after a ``sys.path`` edit)."""
    modules = sorted(BENCH.glob("*.py")) + sorted((BENCH / "harness").glob("*.py"))
    assert (BENCH / "__init__.py").exists() and (BENCH / "harness" / "__init__.py").exists()
    scripts = {p.stem for p in BENCH.glob("*.py")} | {p.stem for p in (BENCH / "harness").glob("*.py")}
    for path in modules:
        package = "bench.harness" if path.parent.name == "harness" else "bench"
        tree = ast.parse(path.read_text())
        edits = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "path"
                 and isinstance(n.value, ast.Name) and n.value.id == "sys"]
        assert not edits, f"{path.relative_to(BENCH.parent)} uses sys.path (line {edits[0].lineno})"
        bare = {name for name, _ in imports(path, package) if name.split(".")[0] in scripts - {"__init__"}}
        assert not bare, f"{path.relative_to(BENCH.parent)} imports {sorted(bare)}: import from bench.harness"


def test_every_package_is_in_the_wheel():
    """pyproject.toml finds the packages by name patterns; setuptools ships no package they miss."""
    import tomllib

    from setuptools import find_packages

    root = SERVICE.parent
    found = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    shipped = set(find_packages(where=str(root), include=found["include"]))
    packages = {".".join(p.parent.relative_to(root).parts) for top in ("expressions", "operators", "service", "devkit")
                for p in (root / top).rglob("__init__.py")}
    assert packages == shipped


DEVKIT = SERVICE.parent / "devkit"


def test_every_local_server_reuses_the_brokers_process_helpers():
    """devkit's servers (brokers, PostgreSQL, Kafka Connect, Prometheus) share one free-port
    picker, one exit registry and one parent-death signal, in ``devkit/broker_process.py``: no
    other module defines or registers its own."""
    for path in sorted(DEVKIT.glob("*.py")):
        if path.name == "broker_process.py":
            continue
        tree = ast.parse(path.read_text())
        defined = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert not defined & {"free_port", "_die_with_parent", "_stop_all"}, f"devkit/{path.name} copies a helper"
        imported = {name for name, _ in imports(path, "devkit")}
        assert "atexit" not in imported, f"devkit/{path.name} registers its own exit hook: use close_at_exit"
        assert "prctl" not in path.read_text(), f"devkit/{path.name} sets its own parent-death signal"


def _code_strings(path: Path) -> set[str]:
    """The string constants of a module, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings}


def test_the_dashboard_and_the_alerts_have_one_source():
    """The chart ships them (helm/changejoin/monitoring/): the tests and the benchmarks read the
    dashboard through ``devkit/monitoring.py`` alone and the alerts only as ``helm template``
    renders them, so no code names either file but that module."""
    root = SERVICE.parent
    modules = [p for top in ("service", "operators", "devkit", "bench", "tests") for p in (root / top).rglob("*.py")]
    assert (root / "devkit" / "monitoring.py") in modules
    for path in modules:
        if path == Path(__file__).resolve():
            continue  # this test names them to look for them
        named = {s for s in _code_strings(path) if s.endswith(("dashboard.json", "alerts.yaml"))}
        allowed = {"dashboard.json"} if path == root / "devkit" / "monitoring.py" else set()
        assert named <= allowed, f"{path.relative_to(root)} names {sorted(named)}: use devkit.monitoring"


TESTS = SERVICE.parent / "tests"
#: The modules under tests/ that may edit ``sys.path``: the conftest puts the build and the
#: repository's root first, and the workers' site hook's test imports the hook it tests (then
#: takes its folder off again).
TESTS_PATH_EDITS = {"conftest.py", "service/test_workersite.py"}


def test_the_tests_are_a_package_without_path_edits():
    """tests/ is a package: every folder of it that holds modules has an ``__init__.py`` (a test
    module is ``tests.<folder>.test_x``, what tests share ``tests.support.<module>``), and no
    module reaches another through a ``sys.path`` edit. tests/data/ holds data, and a script that
    writes some with another checkout's service."""
    folders = {path.parent for path in TESTS.rglob("*.py")} - {TESTS / "data", *(TESTS / "data").rglob("*")}
    assert {"support", "operators", "service", "integration", "deploy", "expressions"} <= {f.name for f in folders}
    assert sorted(str(f.relative_to(TESTS.parent)) for f in folders if not (f / "__init__.py").exists()) == []
    for path in sorted(TESTS.rglob("*.py")):
        edits = sys_path_edits(path)
        where = str(path.relative_to(TESTS))
        assert not edits or where in TESTS_PATH_EDITS, f"tests/{where} edits sys.path (line {edits[0]})"
    assert all(sys_path_edits(TESTS / where) for where in TESTS_PATH_EDITS), "update TESTS_PATH_EDITS"


def _is_sys_path(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "path" and isinstance(node.value, ast.Name) \
        and node.value.id == "sys"


def sys_path_edits(path: Path) -> list[int]:
    """The lines where a module changes ``sys.path``: calls its methods (``insert``, ``append``,
    ``remove``, ...), assigns it or an item of it, or deletes one (reading it is no edit)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and _is_sys_path(node.func.value):
            lines.append(node.lineno)
        targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        lines += [t.lineno for t in targets
                  if _is_sys_path(t) or (isinstance(t, ast.Subscript) and _is_sys_path(t.value))]
    return sorted(lines)


def test_the_path_edit_check_bites(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("import sys\nsys.path.insert(0, 'x')\nsys.path[:0] = ['y']\nsys.path += ['z']\n"
                     "del sys.path[0]\nsys.path = []\nfirst = sys.path[0]\nfound = 'x' in sys.path\n")
    assert sys_path_edits(probe) == [2, 3, 4, 5, 6]


def test_every_test_module_has_a_name_of_its_own():
    """A test module's file name says what it proves and names it alone, as the documents, the
    issues and the commit messages cite it (``test_state_format.py``): no two folders hold the
    same ``test_x.py``, although as ``tests.<folder>.test_x`` pytest could import both."""
    seen: dict[str, list[str]] = {}
    for path in TESTS.rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(TESTS)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def _package_of(path: Path, root: Path) -> str:
    """The package of a module under ``root``, which stands for tests/."""
    return ".".join(("tests",) + path.parent.relative_to(root).parts)


#: A string that names a test module for an import elsewhere: a mapper Spark's workers import
#: (``"tests.integration.test_x:factory"``, or bare ``"test_x:factory"``), a module to import or
#: patch (``"tests.service.test_x"``, ``"tests.service.test_x.NAME"``).
TEST_MODULE_NAME = re.compile(r"(?:\w+\.)*test_\w+:[\w.]+|tests(?:\.\w+)*\.test_\w+(?:\.\w+)*")


def imports_of_test_modules(root: Path) -> list[str]:
    """Where a module under ``root`` (tests/) imports a test module (``tests.<folder>.test_x``, or
    bare ``test_x``), or names one as a string for an import elsewhere (a mapper for Spark's workers,
    a module to import or patch)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for name, _ in imports(path, _package_of(path, root)):
            if any(part.startswith("test_") for part in name.split(".")):
                found.append(f"{path.relative_to(root)}: {name}")
        found += [f"{path.relative_to(root)}: {s!r}" for s in _code_strings(path) if TEST_MODULE_NAME.fullmatch(s)]
    return found


def test_no_test_module_imports_another():
    """What tests share (settings, plans, harnesses, fixtures, mappers for Spark's workers) lives in
    tests/support/, never in a test module another one imports: a test module's name says what it
    proves, and moving or removing it breaks nothing else (there were 41 such imports)."""
    assert imports_of_test_modules(TESTS) == []


def test_the_test_module_import_check_bites(tmp_path):
    (tmp_path / "service").mkdir()
    (tmp_path / "service" / "test_probe.py").write_text(
        'from test_config import VALID\nimport test_cli\n'
        'def f():\n    from test_docs import slugs\n'
        'MAPPER = "test_kafka_source:make_echo_mapper"\nfrom tests.support.service_env import VALID\n'
        'from tests.service.test_plan import CASES\nimport tests.deploy.test_helm_chart\nfrom . import test_keys\n'
        'MAPPERS = ["tests.integration.test_kafka_source:make_echo_mapper",\n'
        '           "tests.support.echo_mappers:make_echo_mapper"]\n'
        'TARGET, PREFIX = "tests.service.test_cli.load_settings", "test_the_session_server_gives_"\n')
    assert sorted(imports_of_test_modules(tmp_path)) == sorted([
        "service/test_probe.py: test_cli", "service/test_probe.py: test_config",
        "service/test_probe.py: test_config.VALID", "service/test_probe.py: test_docs",
        "service/test_probe.py: test_docs.slugs", "service/test_probe.py: 'test_kafka_source:make_echo_mapper'",
        "service/test_probe.py: tests.service.test_plan", "service/test_probe.py: tests.service.test_plan.CASES",
        "service/test_probe.py: tests.deploy.test_helm_chart", "service/test_probe.py: tests.service.test_keys",
        "service/test_probe.py: 'tests.integration.test_kafka_source:make_echo_mapper'",
        "service/test_probe.py: 'tests.service.test_cli.load_settings'"])


def support_modules() -> set[str]:
    """The modules of tests/support/ by their names."""
    return {path.stem for path in (TESTS / "support").glob("*.py")} - {"__init__"}


#: A string that may name a module for an import elsewhere: ``"module.NAME"``, ``"module:factory"``.
MODULE_NAME = re.compile(r"(\w+)(?:\.\w+)*(?::[\w.]+)?")


def bare_support_imports(root: Path) -> list[str]:
    """Where a module under ``root`` (tests/) reaches what the tests share other than as
    ``tests.support.<module>`` (``from tests.support.<module> import ...``, ``import
    tests.support.<module>``): a support module by its bare name (``from service_env import VALID``,
    which only a ``sys.path`` entry for tests/support/ would find), a relative import, any other
    name under ``tests`` (``from tests import helm_tool``, ``from tests.support import helm_tool``),
    or a string naming a support module by its bare name for an import elsewhere (a mapper
    ``"echo_mappers:factory"`` for Spark's workers, a patch target ``"kafka_fixture.produce"``)."""
    support = support_modules()
    found = []
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                found.append(f"{where}: {'.' * node.level}{node.module or ''} (relative)")
                continue
            names = [node.module] if isinstance(node, ast.ImportFrom) else \
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            for name in names:
                parts = name.split(".")
                named = parts[:2] == ["tests", "support"] and len(parts) > 2 and parts[2] in support
                if parts[0] in support or (parts[0] == "tests" and not named):
                    found.append(f"{where}: {name}")
        found += [f"{where}: {s!r}" for s in _code_strings(path) if (match := MODULE_NAME.fullmatch(s))
                  and match.group(1) in support and s != match.group(1) and not s.endswith(".py")]
    return found


def test_the_tests_import_shared_code_only_as_tests_support():
    """What the tests share is imported by one name, ``tests.support.<module>``, by the test
    modules, the conftest and the support modules alike, as Spark's workers import it (their path
    has the repository's root, not tests/support/): a bare ``import kafka_fixture`` works only
    where something put tests/support/ on the path, and makes a second copy of a module imported
    under both names."""
    assert support_modules() >= {"service_env", "kafka_fixture", "echo_mappers", "compiled", "helm_tool"}
    assert bare_support_imports(TESTS) == []


def test_the_support_import_check_bites(tmp_path):
    (tmp_path / "service").mkdir()
    (tmp_path / "service" / "test_probe.py").write_text(
        'from service_env import VALID\nimport helm_tool\nimport kafka_fixture as kf\n'
        'def f():\n    from query_driver import QueryDriver\n'
        'from ..support.service_harness import JoinHarness\nfrom . import test_keys\n'
        'from tests import helm_tool\nfrom tests.support import compiled\nimport tests.support\n'
        'from tests.support.no_such_module import x\n'
        'MAPPER, TARGET = "echo_mappers:make_echo_mapper", "kafka_fixture.produce"\n'
        # what the rule asks for, and what only looks alike
        'from tests.support.service_env import VALID\nimport tests.support.helm_tool\n'
        'from service.config import load_settings\nimport compiledb\n'
        'OK = ["tests.support.echo_mappers:make_echo_mapper", "compiled", "compiled.py",\n'
        '      "tests/support/compiled.py"]\n')
    assert sorted(bare_support_imports(tmp_path)) == sorted(f"service/test_probe.py: {name}" for name in [
        "service_env", "helm_tool", "kafka_fixture", "query_driver", "..support.service_harness (relative)",
        ". (relative)", "tests", "tests.support", "tests.support", "tests.support.no_such_module",
        "'echo_mappers:make_echo_mapper'", "'kafka_fixture.produce'"])


def test_the_workers_site_hook_is_alone_and_needs_only_the_standard_library():
    """service/workersite is on the path of every Python process Spark starts, before PySpark is
    imported (session.WORKER_SITE): it holds its sitecustomize alone, which imports neither the
    service nor PySpark nor anything outside the standard library."""
    site = SERVICE / "workersite"
    assert sorted(p.name for p in site.iterdir() if p.name != "__pycache__") == ["sitecustomize.py"]
    tops = {name.split(".")[0] for name, _ in imports(site / "sitecustomize.py")}
    assert tops - {"__future__"} <= set(sys.stdlib_module_names), tops


def test_one_operator_dispatch_serves_the_plan_and_the_conformance_runner():
    """``operators.operator_for(spec)`` is the one place a spec becomes its operator: the service's
    plan and the conformance runner name no ``make_*`` of the operators (a new join kind is wired
    once)."""
    root = SERVICE.parent
    makers = {"make_join", "make_temporal_join", "make_interval_join", "make_window_join", "make_lookup_join"}
    for path in [*sorted(SERVICE.rglob("*.py")), root / "operators" / "conformance.py"]:
        named = {node.id for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Name)}
        named |= {name.rsplit(".", 1)[-1] for name in imports_of(path, "service")}
        assert not named & makers, f"{path.relative_to(root)} names {sorted(named & makers)}: use operators.operator_for"
    import operators

    assert {make.__name__ for _, make in operators._MAKERS} == makers
