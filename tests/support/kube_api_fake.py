"""An in-process fake of the Kubernetes API's read side, for rendering the Helm chart with
``helm template --dry-run=server``: what the chart's ``lookup`` calls see at install and upgrade.

It serves, on 127.0.0.1 and a free port, without authentication:

    GET /version                                    the server's version
    GET /api, /apis                                 discovery (the plain APIVersions / APIGroupList form)
    GET /api/v1, /apis/{group}/{version}            the resources of each kind the chart renders
    GET /api/v1/namespaces/{ns}/{resource}          a list of the objects given (pods, configmaps, ...)
    GET /api/v1/namespaces/{ns}/{resource}/{name}   one of them, or 404

Anything else is a 404 in the API's Status form. Objects are plain dicts as ``kubectl get -o json``
shows them; only ``metadata.namespace`` and ``metadata.name`` are read.

Use it as a context manager; ``kubeconfig`` is a file pointing at it, for helm's KUBECONFIG.
"""

from __future__ import annotations

import json
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

#: (group, version) -> [(kind, plural resource name)]: the kinds the chart renders, and Pod.
KINDS = {
    ("", "v1"): [("Pod", "pods"), ("ConfigMap", "configmaps"), ("Secret", "secrets"),
                 ("Service", "services"), ("ServiceAccount", "serviceaccounts"),
                 ("PersistentVolumeClaim", "persistentvolumeclaims")],
    ("apps", "v1"): [("Deployment", "deployments")],
    ("batch", "v1"): [("Job", "jobs")],
    ("networking.k8s.io", "v1"): [("NetworkPolicy", "networkpolicies")],
    ("policy", "v1"): [("PodDisruptionBudget", "poddisruptionbudgets")],
    ("rbac.authorization.k8s.io", "v1"): [("Role", "roles"), ("RoleBinding", "rolebindings")],
    ("monitoring.coreos.com", "v1"): [("ServiceMonitor", "servicemonitors"), ("PrometheusRule", "prometheusrules")],
}


class FakeKubeApi:
    def __init__(self, objects: list[dict] = (), version: str = "1.35.0"):
        self.objects = list(objects)
        self.version = version
        self.requests: list[str] = []
        self._server: ThreadingHTTPServer | None = None
        self._dir: tempfile.TemporaryDirectory | None = None
        self.kubeconfig: Path | None = None

    # -- what a path answers -------------------------------------------------------------------

    def _answer(self, path: str) -> dict | None:
        parts = [p for p in path.split("/") if p]
        if parts == ["version"]:
            major, minor, _ = self.version.split(".")
            return {"major": major, "minor": minor, "gitVersion": f"v{self.version}", "platform": "linux/amd64"}
        if parts == ["api"]:
            return {"kind": "APIVersions", "versions": ["v1"],
                    "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}
        if parts == ["apis"]:
            groups = [{"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}],
                       "preferredVersion": {"groupVersion": f"{g}/{v}", "version": v}}
                      for g, v in KINDS if g]
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
        if parts[:1] == ["api"]:
            group, rest = "", parts[1:]
        elif parts[:1] == ["apis"] and len(parts) >= 3:
            group, rest = parts[1], parts[2:]
        else:
            return None
        version, rest = rest[0], rest[1:]
        kinds = KINDS.get((group, version))
        if kinds is None:
            return None
        group_version = f"{group}/{version}" if group else version
        if not rest:
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": [
                {"name": plural, "singularName": kind.lower(), "namespaced": True, "kind": kind,
                 "verbs": ["get", "list"]} for kind, plural in kinds]}
        if len(rest) in (3, 4) and rest[0] == "namespaces":
            namespace, plural = rest[1], rest[2]
            kind = dict((p, k) for k, p in kinds).get(plural)
            if kind is None:
                return None
            found = [o for o in self.objects if o.get("kind") == kind
                     and o.get("apiVersion") == group_version and o["metadata"].get("namespace") == namespace]
            if len(rest) == 3:
                return {"kind": f"{kind}List", "apiVersion": group_version, "metadata": {}, "items": found}
            named = [o for o in found if o["metadata"]["name"] == rest[3]]
            return named[0] if named else None
        return None

    # -- the server ------------------------------------------------------------------------------

    def __enter__(self) -> "FakeKubeApi":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                path = self.path.split("?")[0]
                fake.requests.append(path)
                body = fake._answer(path)
                status = 200
                if body is None:
                    status = 404
                    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
                            "message": f"{path} not found", "code": 404}
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self._dir = tempfile.TemporaryDirectory()
        self.kubeconfig = Path(self._dir.name) / "kubeconfig"
        server = f"http://127.0.0.1:{self._server.server_address[1]}"
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": server}}],
            "users": [{"name": "fake", "user": {"token": "fake"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._dir is not None:
            self._dir.cleanup()
