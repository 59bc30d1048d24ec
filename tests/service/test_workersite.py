"""Spark's Python processes import the installed PySpark, not the zip of it Spark puts first on their
path (service/workersite/sitecustomize.py), and any other sitecustomize still runs."""
import os
import subprocess
import sys
from pathlib import Path

import pyspark

from service.session import WORKER_SITE, spark_properties
from service.config import load_settings
from tests.support.service_env import VALID

sys.path.insert(0, str(WORKER_SITE))
try:
    import sitecustomize as workersite  # the module under test, whatever else is on the path
finally:
    sys.path.remove(str(WORKER_SITE))
assert Path(workersite.__file__).parent == WORKER_SITE, workersite.__file__

INSTALLED = Path(pyspark.__file__).parent  # <site>/pyspark
SPARK_ZIPS = sorted(str(p) for p in (INSTALLED / "python" / "lib").glob("*.zip"))


def installed(root: Path) -> tuple[str, str]:
    """A pip-style PySpark under ``root``: (its site directory, the zip inside the package)."""
    lib = root / "site" / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    (root / "site" / "pyspark" / "__init__.py").write_text("")
    (lib / "pyspark.zip").write_bytes(b"")
    return str(root / "site"), str(lib / "pyspark.zip")


def test_an_installed_pysparks_zip_goes_behind_the_package(tmp_path):
    site, zipped = installed(tmp_path)
    path = ["", zipped, "/elsewhere/py4j-0.10.9.9-src.zip", "/project", "/usr/lib/python3.11", site]
    assert workersite.prefer_installed_pyspark(path) == [
        "", "/elsewhere/py4j-0.10.9.9-src.zip", "/project", "/usr/lib/python3.11", site, zipped]


def test_a_spark_distributions_zip_and_an_unreachable_package_keep_their_place(tmp_path):
    site, zipped = installed(tmp_path / "pip")
    distribution = tmp_path / "spark-4.3.0" / "python" / "lib"
    distribution.mkdir(parents=True)
    (distribution / "pyspark.zip").write_bytes(b"")
    path = [str(distribution / "pyspark.zip"), "/project"]
    assert workersite.prefer_installed_pyspark(path) == path  # no package beside it
    assert workersite.prefer_installed_pyspark([zipped, "/project"]) == [zipped, "/project"]  # site not on the path
    (Path(site) / "pyspark" / "__init__.py").unlink()
    assert workersite.prefer_installed_pyspark([zipped, site]) == [zipped, site]  # no package there


def run_as_a_spark_worker(code: str, *extra: str) -> str:
    """``code`` in a Python process with the path Spark gives its workers: its zips first, then the
    project's PYTHONPATH (``spark.executorEnv.PYTHONPATH``)."""
    executor_path = spark_properties(load_settings(VALID))["spark.executorEnv.PYTHONPATH"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*SPARK_ZIPS, executor_path, *extra])}
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout


def test_a_worker_with_the_services_path_imports_the_installed_pyspark():
    assert any(p.endswith("pyspark.zip") for p in SPARK_ZIPS)
    imported = run_as_a_spark_worker("import pyspark.worker, pyspark; print(pyspark.__file__)").strip()
    assert imported == pyspark.__file__


def test_the_next_sitecustomize_on_the_path_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("import builtins\nbuiltins.OTHER_SITE_RAN = True\n")
    out = run_as_a_spark_worker("import builtins, pyspark; print(getattr(builtins, 'OTHER_SITE_RAN', False), "
                                "pyspark.__file__)", str(tmp_path))
    assert out.split() == ["True", pyspark.__file__]
