"""Jars from Maven Central, resolved by Maven from the small poms under ``jars/`` and cached.

    python -m devkit.jars fetch [GROUP ...]     # resolve (once); default: kafka-broker
    python -m devkit.jars classpath GROUP       # fetch if needed, print the classpath
    python -m devkit.jars dir GROUP             # fetch if needed, print the directory

Each group is one pom (``jars/<group>/pom.xml``) whose dependencies are copied, with their
runtime dependencies, into ``.cache/jars/<group>-<hash of the pom>/``. A finished directory is
never resolved again, so a second fetch costs nothing; editing the pom (a new version) gives a
new directory, and the older ones of that group are removed. Maven's own repository lives in
``.cache/jars/m2`` so that the whole cache is one git-ignored directory CI can keep.

Groups:

* ``kafka-broker``: Apache Kafka's broker (KRaft) for the tests and benchmarks
  (:mod:`devkit.kafka_broker`). Never put these jars on Spark's classpath.
* ``spark-connectors``: Spark's Kafka connector and Avro format, pinned to the installed
  PySpark's version and Scala suffix (checked before resolving). Only the jars PySpark does not
  ship already are kept. Not used by the service yet.
* ``flink-peer``: Flink's Kafka SQL connector, Avro format and JDBC lookup connector with the
  PostgreSQL driver, for the benchmark peer and the lookup join's differential test.
* ``debezium``: Kafka Connect (standalone) and Debezium's PostgreSQL connector, for the real
  captures of the Debezium tests (:mod:`devkit.kafka_connect`); fetched on first use.

Needs Java on the PATH. Maven is ``mvn`` from the PATH if there is one, else Apache Maven
itself, downloaded once from Maven Central (checked against a pinned SHA-512) into
``.cache/jars/``. ``CHANGEJOIN_JARS_CACHE`` moves the cache.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parent.parent
POMS_DIR = REPO_ROOT / "jars"
ENV_CACHE = "CHANGEJOIN_JARS_CACHE"
DEFAULT_GROUPS = ("kafka-broker",)
# The plugin that copies the jars, pinned so that a resolution does not depend on Maven's default.
COPY_DEPENDENCIES = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies"
_DONE = ".complete"
# Maven itself, when there is no `mvn` on the PATH (a fresh machine with only Python and Java).
MAVEN_VERSION = "3.9.16"
MAVEN_URL = (f"https://repo1.maven.org/maven2/org/apache/maven/apache-maven/{MAVEN_VERSION}/"
             f"apache-maven-{MAVEN_VERSION}-bin.tar.gz")
MAVEN_SHA512 = ("831a8591fe20c8243b1dbe7d71e3244f31d1665b0804b2e825e38cbbe5ce0cafb8338851f90780735568773e0a6cd07"
                "bbec107cda0b896b008b861075358b6f6")


class JarsError(RuntimeError):
    """The jars could not be resolved."""


def cache_root() -> Path:
    return Path(os.environ.get(ENV_CACHE) or REPO_ROOT / ".cache" / "jars")


def groups() -> List[str]:
    return sorted(p.parent.name for p in POMS_DIR.glob("*/pom.xml"))


def pom(group: str) -> Path:
    path = POMS_DIR / group / "pom.xml"
    if not path.is_file():
        raise JarsError(f"no jar group {group!r} (known: {', '.join(groups()) or 'none'}; poms in {POMS_DIR})")
    return path


def cache_dir(group: str) -> Path:
    """Where ``group``'s jars are (or will be): keyed by the hash of its pom."""
    digest = hashlib.sha256(pom(group).read_bytes()).hexdigest()[:16]
    return cache_root() / f"{group}-{digest}"


def is_fetched(group: str) -> bool:
    return (cache_dir(group) / _DONE).is_file()


def jars(group: str) -> List[Path]:
    """The jars of ``group``, fetched first if needed."""
    return sorted(fetch(group).glob("*.jar"))


def classpath(group: str) -> str:
    return os.pathsep.join(str(j) for j in jars(group))


@contextlib.contextmanager
def _lock(root: Path) -> Iterator[None]:
    """One fetch at a time per cache (two test runs, or ./dev and .ci/run, may start together)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pom_property(text: str, name: str) -> Optional[str]:
    match = re.search(rf"<{re.escape(name)}>\s*([^<\s]+)\s*</{re.escape(name)}>", text)
    return match.group(1) if match else None


def _pyspark_jars_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise JarsError("spark-connectors must match the installed PySpark, and PySpark is not installed")
    return Path(list(spec.submodule_search_locations)[0]) / "jars"


def _check_spark_versions(pom_text: str) -> None:
    """The connectors' version and Scala suffix must be exactly the installed PySpark's."""
    spark_dir = _pyspark_jars_dir()
    installed = sorted(spark_dir.glob("spark-sql_*.jar"))
    match = re.fullmatch(r"spark-sql_(\d+\.\d+)-(.+)\.jar", installed[0].name) if installed else None
    if match is None:
        raise JarsError(f"cannot tell PySpark's Spark version: no spark-sql_<scala>-<version>.jar in {spark_dir}")
    scala, version = match.groups()
    wanted = (_pom_property(pom_text, "scala.binary.version"), _pom_property(pom_text, "spark.version"))
    if wanted != (scala, version):
        raise JarsError(
            f"jars/spark-connectors/pom.xml asks for Spark {wanted[1]} (Scala {wanted[0]}) but the installed "
            f"PySpark is Spark {version} (Scala {scala}): set spark.version and scala.binary.version to match"
        )


def _artifact_stem(jar_name: str) -> str:
    """``kafka-clients-3.9.2.jar`` -> ``kafka-clients``: the name without its version."""
    match = re.fullmatch(r"(.+?)-\d+(?:\.\d+)+(?:[-.][A-Za-z0-9]+)*\.jar", jar_name)
    return match.group(1) if match else jar_name


def _drop_jars_spark_has(directory: Path) -> None:
    shipped = {_artifact_stem(j.name) for j in _pyspark_jars_dir().glob("*.jar")}
    for jar in directory.glob("*.jar"):
        if _artifact_stem(jar.name) in shipped:
            jar.unlink()


def _maven(root: Path) -> str:
    """``mvn`` from the PATH, else Apache Maven downloaded once into the cache (call under the lock)."""
    found = shutil.which("mvn")
    if found:
        return found
    home = root / f"apache-maven-{MAVEN_VERSION}"
    mvn = home / "bin" / "mvn"
    if mvn.is_file():
        return str(mvn)
    import tarfile
    import urllib.request

    print(f"no mvn on the PATH: downloading Apache Maven {MAVEN_VERSION} from Maven Central", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        archive = Path(tmp) / "maven.tar.gz"
        try:
            with urllib.request.urlopen(MAVEN_URL, timeout=60) as response, open(archive, "wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:
            raise JarsError(f"no mvn on the PATH and downloading {MAVEN_URL} failed: {exc}") from exc
        digest = hashlib.sha512(archive.read_bytes()).hexdigest()
        if digest != MAVEN_SHA512:
            raise JarsError(f"{MAVEN_URL} does not have the pinned SHA-512 (got {digest})")
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        (Path(tmp) / home.name).rename(home)
    return str(mvn)


def _run_maven(pom_path: Path, output: Path, repo: Path) -> None:
    mvn = _maven(repo.parent)
    cmd = [
        mvn, "-B", "-q", "-f", str(pom_path), f"-Dmaven.repo.local={repo}",
        COPY_DEPENDENCIES, f"-DoutputDirectory={output}", "-DincludeScope=runtime",
    ]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stdout.splitlines()[-30:])
        raise JarsError(f"Maven could not resolve {pom_path} (exit {proc.returncode}):\n{tail}")


def fetch(group: str, quiet: bool = True) -> Path:
    """Resolve ``group``'s jars into the cache unless they are there already; return the directory."""
    target = cache_dir(group)
    if (target / _DONE).is_file():
        return target
    root = cache_root()
    with _lock(root):
        if (target / _DONE).is_file():  # fetched by someone else while we waited
            return target
        pom_path = pom(group)
        if group == "spark-connectors":
            _check_spark_versions(pom_path.read_text())
        if not quiet:
            print(f"resolving {group} from Maven Central ({pom_path.relative_to(REPO_ROOT)}) ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        work = Path(tempfile.mkdtemp(prefix=f".{group}-", dir=root))
        try:
            _run_maven(pom_path, work, root / "m2")
            if group == "spark-connectors":
                _drop_jars_spark_has(work)
            if not any(work.glob("*.jar")):
                raise JarsError(f"Maven resolved no jars for {group}")
            (work / _DONE).write_text(hashlib.sha256(pom_path.read_bytes()).hexdigest() + "\n")
            shutil.rmtree(target, ignore_errors=True)
            work.rename(target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        for stale in root.glob(f"{group}-*"):  # other versions of this group's pom
            if stale != target and stale.is_dir() and re.fullmatch(rf"{re.escape(group)}-[0-9a-f]{{16}}", stale.name):
                shutil.rmtree(stale, ignore_errors=True)
        if not quiet:
            size = sum(f.stat().st_size for f in target.glob("*.jar")) / 2**20
            print(f"{group}: {len(list(target.glob('*.jar')))} jars, {size:.0f} MiB in "
                  f"{time.monotonic() - started:.0f} s -> {target}", file=sys.stderr, flush=True)
    return target


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: python -m devkit.jars fetch [GROUP ...] | classpath GROUP | dir GROUP"
    if not args or args[0] not in ("fetch", "classpath", "dir"):
        print(usage, file=sys.stderr)
        return 2
    command, names = args[0], args[1:]
    try:
        if command == "fetch":
            for name in names or DEFAULT_GROUPS:
                fetch(name, quiet=False)
        elif len(names) != 1:
            print(usage, file=sys.stderr)
            return 2
        elif command == "classpath":
            print(classpath(names[0]))
        else:
            print(fetch(names[0]))
    except JarsError as exc:
        print(f"devkit.jars: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
