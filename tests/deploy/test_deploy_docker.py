"""Static checks of deploy/Dockerfile and .dockerignore (no Docker daemon is needed).

The Dockerfile is parsed into stages and instructions: continuation lines are joined,
heredoc bodies (COPY <<'EOF' ...) are kept apart, ARG defaults are substituted.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
SPARK_DEFAULTS = ROOT / "deploy" / "spark-defaults.conf"
CHART = ROOT / "helm" / "changejoin"


@dataclass
class Instruction:
    keyword: str
    args: str
    heredocs: list[str] = field(default_factory=list)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    lines = text.splitlines()
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        # Join continuation lines (comments inside a continued instruction are dropped).
        while line.rstrip().endswith("\\") and i < len(lines):
            nxt = lines[i]
            i += 1
            if nxt.lstrip().startswith("#"):
                continue
            line = line.rstrip()[:-1] + " " + nxt.strip()
        keyword, _, args = line.strip().partition(" ")
        keyword = keyword.upper()
        heredocs = []
        for marker in re.findall(r"<<-?['\"]?(\w+)['\"]?", args):
            body = []
            while i < len(lines) and lines[i].strip() != marker:
                body.append(lines[i])
                i += 1
            i += 1  # the closing marker
            heredocs.append("\n".join(body) + "\n")
        instr = Instruction(keyword, args.strip(), heredocs)
        if keyword == "FROM":
            parts = args.split()
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base=parts[0], name=name))
        elif not stages:
            if keyword == "ARG":
                key, _, default = args.partition("=")
                global_args[key.strip()] = default.strip()
        else:
            stages[-1].instructions.append(instr)
    return global_args, stages


def substitute(value: str, variables: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)",
                  lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), value)


def stage_variables(global_args: dict[str, str], stage: Stage) -> dict[str, str]:
    """ARG defaults and ENV values of a stage (ENV in KEY=VALUE form)."""
    variables = dict(global_args)
    for instr in stage.instructions:
        if instr.keyword == "ARG":
            key, _, default = instr.args.partition("=")
            variables[key.strip()] = default.strip()
        elif instr.keyword == "ENV":
            for token in shlex.split(instr.args):
                key, _, value = token.partition("=")
                variables[key] = substitute(value, variables)
    return variables


@pytest.fixture(scope="module")
def dockerfile():
    return parse_dockerfile(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def final(dockerfile):
    global_args, stages = dockerfile
    return stages[-1], stage_variables(global_args, stages[-1])


def declared_volumes(stage: Stage) -> list[str]:
    volumes = []
    for instr in stage.all("VOLUME"):
        volumes += json.loads(instr.args) if instr.args.startswith("[") else instr.args.split()
    return volumes


def under_a_volume(path: str, volumes: list[str]) -> bool:
    return any(path == v or path.startswith(v.rstrip("/") + "/") for v in volumes)


# --------------------------------------------------------------------------------------------
# stages and base images


def test_multi_stage_with_pinned_bases(dockerfile):
    global_args, stages = dockerfile
    assert len(stages) >= 2
    assert stages[0].name == "builder"
    names = {s.name for s in stages if s.name}
    for stage in stages:
        base = substitute(stage.base, global_args)
        if base in names:
            continue
        # A full version tag, e.g. python:3.11.14-slim-bookworm: never latest or a floating
        # minor tag.
        assert re.fullmatch(r"python:3\.11\.\d+-slim-(bookworm|trixie)", base), base
    # The virtualenv made in the builder links to the builder's interpreter: same base.
    assert len({substitute(s.base, global_args) for s in stages}) == 1


def test_builder_makes_a_wheel_with_pinned_dependencies(dockerfile):
    _, stages = dockerfile
    builder = stages[0]
    runs = " ".join(i.args for i in builder.all("RUN"))
    assert "pip wheel" in runs
    assert "--constraint" in runs and "--only-binary=:all:" in runs
    env = stage_variables({}, builder)
    assert env.get("PIP_NO_CACHE_DIR") == "1"


def test_builder_compiles_the_modules_setup_py_lists(dockerfile):
    """The wheel carries the extensions setup.py compiles (tests/support/compiled.py tests them): the
    builder copies setup.py, has a C compiler, and pins the build's Cython and setuptools for pip's
    isolated build. (The runtime stage has no compiler: test_java_runtime_and_no_build_tools.)"""
    _, stages = dockerfile
    builder = stages[0]
    assert "setup.py" in _copied_sources(builder)
    runs = " ".join(i.args for i in builder.all("RUN"))
    installs = " ".join(re.findall(r"apt-get install ([^&;|]*)", runs)).split()
    assert {"gcc", "libc6-dev"} <= set(installs)
    wheel = re.search(r"(\S+=\S+ )*python -m pip wheel", runs)
    assert wheel and "PIP_CONSTRAINT=/build/build-requires.txt" in wheel.group(0)
    pins = [i for i in builder.all("COPY") if "/build/build-requires.txt" in i.args]
    assert len(pins) == 1 and pins[0].heredocs
    pinned = {canonicalize_name(name): version for name, _, version in
              (line.partition("==") for line in pins[0].heredocs[0].split())}
    for requirement in map(Requirement, tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]):
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"the build requires {requirement}, unpinned in the image"
        assert requirement.specifier.contains(pinned[name]), f"{name}=={pinned[name]} is not {requirement}"


def test_constraints_pin_every_dependency(dockerfile):
    """Every runtime dependency of pyproject.toml is pinned, at a version it accepts."""
    _, stages = dockerfile
    copies = [i for i in stages[0].all("COPY") if "constraints.txt" in i.args]
    assert len(copies) == 1 and copies[0].heredocs
    pins = {}
    for line in copies[0].heredocs[0].splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"not pinned: {line}"
            pins[canonicalize_name(name)] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for dep in project["dependencies"]:
        req = Requirement(dep)
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not pinned in deploy/Dockerfile"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{req.name}=={pins[name]} does not satisfy {req.specifier}"


# --------------------------------------------------------------------------------------------
# the runtime stage


def test_final_stage_runs_as_fixed_non_root_user(final):
    stage, variables = final
    users = stage.all("USER")
    assert users, "no USER in the final stage"
    user = substitute(users[-1].args, variables)
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, user  # numeric: runAsNonRoot can check it
    assert not gid or (gid.isdigit() and int(gid) != 0)
    assert int(uid) == 10001
    # USER comes after every RUN, so nothing runs as root after it.
    last_user = max(i for i, ins in enumerate(stage.instructions) if ins.keyword == "USER")
    assert all(ins.keyword != "RUN" for ins in stage.instructions[last_user:])


def test_entrypoint(final):
    stage, _ = final
    (entrypoint,) = stage.all("ENTRYPOINT")
    assert json.loads(entrypoint.args) == ["changejoin", "run"]
    assert not stage.all("CMD")


def test_volumes_and_writable_paths(final):
    stage, variables = final
    volumes = declared_volumes(stage)
    assert {"/tmp", "/var/lib/changejoin/spark-local", "/var/lib/changejoin/checkpoints"} <= set(volumes)
    for key in ("SPARK_LOCAL_DIRS", "CHECKPOINT_LOCATION", "HOME"):
        assert under_a_volume(variables[key], volumes), f"{key}={variables[key]}"
    (workdir,) = stage.all("WORKDIR")
    assert under_a_volume(workdir.args, volumes)


def test_environment(final):
    _, variables = final
    assert variables["PYTHONDONTWRITEBYTECODE"] == "1"
    assert variables["JAVA_HOME"].startswith("/usr/lib/jvm/")
    assert variables["PATH"].startswith("/opt/changejoin/venv/bin:")
    assert variables["SPARK_HOME"].startswith("/opt/changejoin/venv/lib/python3.11/")
    assert variables["PYSPARK_PYTHON"] == "/opt/changejoin/venv/bin/python"


def test_spark_uses_the_local_dir_volume(final):
    stage, variables = final
    volumes = declared_volumes(stage)
    conf = {}
    for line in SPARK_DEFAULTS.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, value = line.split(None, 1)
            conf[key] = value.strip()
    assert conf["spark.local.dir"] == variables["SPARK_LOCAL_DIRS"]
    for key, value in conf.items():
        if value.startswith("/"):
            assert under_a_volume(value, volumes), f"{key}={value} is not on a volume"
    copied = [i.args for i in stage.all("COPY") if "spark-defaults.conf" in i.args]
    assert copied and copied[0].split()[-1] == variables["SPARK_CONF_DIR"] + "/spark-defaults.conf"


def test_java_runtime_and_no_build_tools(final):
    stage, _ = final
    runs = " ".join(i.args for i in stage.all("RUN"))
    installs = re.findall(r"apt-get install ([^&;|]*)", runs)
    assert installs, "the final stage installs no Java runtime"
    packages = set()
    for cmd in installs:
        assert "--no-install-recommends" in cmd
        packages |= {w for w in cmd.split() if not w.startswith("-")}
    assert "openjdk-17-jre-headless" in packages
    forbidden = re.compile(
        r"^(gcc|g\+\+|cpp|clang|make|cmake|build-essential|binutils|.*-dev|openjdk-\d+-jdk.*|"
        r"python3-pip|git|curl|wget)$")
    assert not [p for p in packages if forbidden.match(p)]
    assert "rm -rf /var/lib/apt/lists/*" in runs
    # Nothing is pip-installed in the final stage (the virtualenv is built in the builder and
    # copied over); the base image's pip is removed.
    assert not re.search(r"\bpip3?(\s+-\S+)*\s+(install|download|wheel)\b", runs)
    assert re.search(r"pip uninstall --yes --no-cache-dir pip setuptools wheel", runs)
    froms = [i.args for i in stage.all("COPY") if "--from=" in i.args]
    assert froms == ["--from=builder /opt/changejoin/venv /opt/changejoin/venv"]


def test_builder_removes_pip_from_the_copied_venv(dockerfile):
    _, stages = dockerfile
    runs = " ".join(i.args for i in stages[0].all("RUN"))
    assert re.search(r"/opt/changejoin/venv/bin/pip uninstall --yes pip", runs)


# --------------------------------------------------------------------------------------------
# the Spark executor launcher


def _launcher(stage: Stage) -> str:
    for instr in stage.all("COPY"):
        if instr.args.endswith("/usr/local/bin/changejoin-spark-executor"):
            assert "--chmod=0755" in instr.args
            return instr.heredocs[0]
    raise AssertionError("no changejoin-spark-executor in the final stage")


def test_executor_launcher_builds_the_executor_command(final, tmp_path):
    """Run the launcher with a stand-in `java` that prints its arguments."""
    stage, _ = final
    script = tmp_path / "changejoin-spark-executor"
    script.write_text(_launcher(stage))
    script.chmod(0o755)
    java = tmp_path / "jvm" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    java.chmod(0o755)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "JAVA_HOME": str(java.parent.parent),
        "SPARK_HOME": "/opt/spark", "SPARK_CONF_DIR": "/etc/spark",
        "SPARK_EXECUTOR_MEMORY": "2g", "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@d:7078",
        "SPARK_EXECUTOR_ID": "3", "SPARK_EXECUTOR_CORES": "2", "SPARK_APPLICATION_ID": "spark-1",
        "SPARK_EXECUTOR_POD_IP": "10.0.0.7", "SPARK_RESOURCE_PROFILE_ID": "0",
        "SPARK_EXECUTOR_POD_NAME": "orders-exec-3",
        "SPARK_JAVA_OPT_10": "-Dten=10", "SPARK_JAVA_OPT_2": "-Dtwo=2 with space",
        "SPARK_JAVA_OPT_0": "-Dzero=0",
    }
    out = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    args = out.stdout.splitlines()
    assert args[:3] == ["-Dzero=0", "-Dtwo=2 with space", "-Dten=10"]  # numeric order, intact
    assert args[3:5] == ["-Xms2g", "-Xmx2g"]
    assert args[args.index("-cp") + 1] == "/etc/spark:/opt/spark/jars/*"
    assert "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend" in args
    pairs = dict(zip(args, args[1:]))
    assert pairs["--driver-url"] == env["SPARK_DRIVER_URL"]
    assert pairs["--executor-id"] == "3"
    assert pairs["--hostname"] == "10.0.0.7"
    assert pairs["--podName"] == "orders-exec-3"


def test_chart_matches_the_image(final):
    """The chart's executor command, user and paths are the image's."""
    stage, variables = final
    _launcher(stage)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    uid = int(substitute(stage.all("USER")[-1].args, variables).split(":")[0])
    assert values["podSecurityContext"]["runAsUser"] == uid
    assert values["containerSecurityContext"]["runAsUser"] == uid
    assert values["checkpoint"]["mountPath"] == variables["CHECKPOINT_LOCATION"]
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert f'"changejoin.sparkLocalDir" -}}}}{variables["SPARK_LOCAL_DIRS"]}{{{{' in helpers
    template = (CHART / "templates" / "executor-template-configmap.yaml").read_text()
    assert "- changejoin-spark-executor" in template


# --------------------------------------------------------------------------------------------
# .dockerignore


def _ignore_patterns() -> list[str]:
    return [line.strip() for line in DOCKERIGNORE.read_text().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def _ignored(path: str, patterns: list[str]) -> bool:
    """Simplified .dockerignore matching (no '!' exceptions are used in the file)."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        assert not pattern.startswith("!"), "exceptions are not handled by this test"
        pattern = pattern.strip("/")
        for cand in candidates:
            if fnmatch.fnmatchcase(cand, pattern):
                return True
            if pattern.startswith("**/") and fnmatch.fnmatchcase(cand.split("/")[-1], pattern[3:]):
                return True
    return False


def test_dockerignore_excludes_local_state():
    patterns = _ignore_patterns()
    for path in (".venv", ".git", ".cache/helm/2.2.2/helm", ".pytest_cache", ".hypothesis",
                 "service/__pycache__/x.cpython-311.pyc", "checkpoints", "spark-warehouse",
                 "tests/service/test_avro.py", "changejoin.egg-info", "dist/x.whl", "build/lib"):
        assert _ignored(path, patterns), path


def test_dockerignore_keeps_what_the_build_copies(dockerfile):
    _, stages = dockerfile
    patterns = _ignore_patterns()
    for stage in stages:
        for instr in stage.all("COPY"):
            if "--from=" in instr.args or instr.heredocs:
                continue
            sources = [a for a in instr.args.split() if not a.startswith("--")][:-1]
            for src in sources:
                assert not _ignored(src.rstrip("/"), patterns), f"{src} is excluded"
                assert (ROOT / src).exists(), f"the image build copies {src}, which is missing"


def _copied_sources(stage: Stage) -> list[str]:
    """What a stage's COPY/ADD instructions take from the build context (not --from, not heredocs)."""
    sources = []
    for instr in stage.all("COPY") + stage.all("ADD"):
        if "--from=" in instr.args or instr.heredocs:
            continue
        sources += [a for a in instr.args.split() if not a.startswith("--")][:-1]
    return sources


TOOLING = ("devkit", "bench", "tests")  # development, tests and benchmarks: never in the image


def test_the_image_copies_no_tooling(dockerfile):
    """devkit/ (the test brokers, Maven jars), bench/ and tests/ never reach the image: no COPY
    takes them or the whole context, .dockerignore keeps them out of the build context, and the
    builder's wheel holds only the packages it copies (pyproject finds packages rather than
    listing them: devkit is installed in a checkout, and simply absent from the build)."""
    _, stages = dockerfile
    patterns = _ignore_patterns()
    copied = set()
    for stage in stages:
        for src in _copied_sources(stage):
            top = src.strip("/").removeprefix("./").split("/")[0]
            assert top not in ("", ".", "*"), f"COPY {src} copies the whole build context"
            assert top not in TOOLING, f"the image copies {src}"
            copied.add(top)
    for tooling in TOOLING:
        assert _ignored(tooling, patterns) and _ignored(f"{tooling}/x.py", patterns), tooling
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = setuptools["packages"]
    if isinstance(packages, list):  # a listed package missing from the build context fails the build
        assert set(packages) <= copied, f"pyproject lists {sorted(set(packages) - copied)}, which the image lacks"
        shipped = set(packages)
    else:
        include = packages["find"]["include"]
        shipped = {top for top in copied if any(fnmatch.fnmatchcase(top, p) for p in include)}
        assert any(fnmatch.fnmatchcase("devkit", p) for p in include), "devkit is installed in a checkout"
    assert shipped == {"expressions", "operators", "service"}


def test_the_build_holds_the_files_the_service_opens_by_path(tmp_path):
    """The image installs the project from its wheel, whose files are what setuptools builds: the
    log4j configuration the JVMs read, and the workers' sitecustomize (service/workersite, a
    directory on their path rather than a package, so package data) must be among them."""
    import sys

    build = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import setup; "
         f"sys.argv = ['setup.py', '-q', 'build_py', '--build-lib', {str(tmp_path)!r}]; setup()"],
        cwd=ROOT, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    for name in ("service/log4j2.properties", "service/workersite/sitecustomize.py"):
        assert (tmp_path / name).read_bytes() == (ROOT / name).read_bytes(), name
