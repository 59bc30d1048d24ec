"""Offline tests of the Helm chart in helm/changejoin.

helm (see tests/support/helm_tool.py) lints and renders the chart for four values files in
tests/deploy/values/; every rendered manifest is validated against the Kubernetes OpenAPI schemas
that kubernetes-validate ships, in strict mode (unknown fields are errors). Then the
rendered objects are checked for what the deployment relies on.

Without helm the tests are skipped on a developer machine, but fail when CI is set.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from devkit.monitoring import dashboard
from tests.support.helm_tool import REPO_ROOT, helm_or_skip, run_helm

CHART = REPO_ROOT / "helm" / "changejoin"
VALUES_DIR = Path(__file__).resolve().parent / "values"
RELEASE = "orders"
NAMESPACE = "streaming"
FULLNAME = "orders-changejoin"

# The Kubernetes version the manifests are rendered for (Capabilities.KubeVersion) and
# validated against. kubernetes-validate 1.37 ships schemas for 1.25 ... 1.37; 1.35 is the
# version helm 4.1 and the bundled kubectl are built against.
KUBE_VERSION = "1.35.0"

# Kinds of custom resources: kubernetes-validate has schemas only for built-in kinds, so
# these are skipped by the schema validation (and checked by the assertions below instead).
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
# The Prometheus Operator's PrometheusRule CRD, its schema as published (see the file's header).
PROMETHEUS_RULE_CRD = Path(__file__).resolve().parent / "crds" / "monitoring.coreos.com_prometheusrules.yaml"


# --------------------------------------------------------------------------------------------
# helpers


@pytest.fixture(scope="session")
def helm() -> Path:
    return helm_or_skip()


def values_file(name: str) -> str:
    return str(VALUES_DIR / f"{name}.yaml")


def template(helm: Path, *values: str, sets: tuple[str, ...] = (), check: bool = True):
    """helm template; returns (CompletedProcess, list of rendered objects)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE,
            "--kube-version", KUBE_VERSION]
    for v in values:
        args += ["-f", v]
    for s in sets:
        args += ["--set", s]
    proc = run_helm(*args, check=check)
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d] if proc.returncode == 0 else []
    return proc, docs


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str, name: str | None = None) -> dict:
    found = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {len(found)}"
    return found[0]


def driver_container(docs: list[dict]) -> dict:
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return container


def env_configmap(docs: list[dict]) -> dict[str, str]:
    return one(docs, "ConfigMap", f"{FULLNAME}-env")["data"]


def executor_pod_template(docs: list[dict]) -> dict:
    cm = one(docs, "ConfigMap", f"{FULLNAME}-executor-template")
    return yaml.safe_load(cm["data"]["executor-pod-template.yaml"])


VALUES_FILES = ("default", "cluster", "secure", "lookup")


@pytest.fixture(scope="module")
def rendered(helm) -> dict[str, list[dict]]:
    """The test values files, rendered once for the whole module."""
    return {name: template(helm, values_file(name))[1] for name in VALUES_FILES}


# --------------------------------------------------------------------------------------------
# lint, render, validate


@pytest.mark.parametrize("name", VALUES_FILES)
def test_lint_strict(helm, name):
    proc = run_helm("lint", "--strict", str(CHART), "-f", values_file(name),
                              "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", VALUES_FILES)
def test_manifests_validate_strictly(rendered, name):
    import kubernetes_validate

    docs = rendered[name]
    assert docs
    validated = 0
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        assert doc["metadata"]["namespace"] == NAMESPACE
        validated += 1
    # The executor pod template is a Pod in all but name: validate it as one.
    if name == "cluster":
        kubernetes_validate.validate(executor_pod_template(docs), KUBE_VERSION, strict=True)
        validated += 1
    assert validated >= 4


@pytest.mark.parametrize("name", VALUES_FILES)
def test_notes_render(helm, name):
    """NOTES.txt is not part of `helm template`; a client-side dry-run install renders it
    without contacting a cluster."""
    proc = run_helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE,
                              "-f", values_file(name), "--dry-run=client", check=True)
    notes = proc.stdout[proc.stdout.index("NOTES:"):]
    assert f"kubectl -n {NAMESPACE} logs -f deployment/{FULLNAME}" in notes
    assert ("executor pod(s)" in notes) == (name == "cluster")
    if name == "lookup":
        assert "Join: orders + PostgreSQL table crm.customers (lookup join) -> orders-enriched" in notes


def test_every_template_file_renders_somewhere(helm, rendered):
    """No template is dead: each one produces an object for at least one values file (the rescale
    Job with rescale.partitions, which the values files leave unset)."""
    kinds = {(d["kind"], d["metadata"]["name"]) for docs in rendered.values() for d in docs}
    kinds |= _names(template(helm, values_file("secure"), sets=("replicas=0", "rescale.partitions=8"))[1])
    expected = {
        ("Deployment", FULLNAME), ("ConfigMap", f"{FULLNAME}-env"),
        ("ConfigMap", f"{FULLNAME}-schemas"), ("ConfigMap", f"{FULLNAME}-executor-template"),
        ("PersistentVolumeClaim", f"{FULLNAME}-checkpoints"), ("Service", FULLNAME),
        ("Service", f"{FULLNAME}-driver"), ("ServiceAccount", FULLNAME),
        ("Role", f"{FULLNAME}-driver"), ("RoleBinding", f"{FULLNAME}-driver"),
        ("ServiceMonitor", FULLNAME), ("PodDisruptionBudget", FULLNAME),
        ("NetworkPolicy", f"{FULLNAME}-driver"), ("Secret", f"{FULLNAME}-spark-auth"),
        ("ConfigMap", f"{FULLNAME}-dashboard"), ("PrometheusRule", FULLNAME),
        ("Job", f"{FULLNAME}-rescale"), ("NetworkPolicy", f"{FULLNAME}-rescale"),
    }
    assert expected <= kinds, expected - kinds


# --------------------------------------------------------------------------------------------
# the driver Deployment


def test_single_driver_recreate(rendered):
    for docs in rendered.values():
        spec = one(docs, "Deployment")["spec"]
        assert spec["replicas"] == 1
        assert spec["strategy"] == {"type": "Recreate"}


def test_replicas_zero_stops_the_job(helm):
    _, docs = template(helm, values_file("default"), sets=("replicas=0",))
    assert one(docs, "Deployment")["spec"]["replicas"] == 0


def test_probes(rendered):
    for docs in rendered.values():
        c = driver_container(docs)
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports["metrics"] == int(env_configmap(docs)["METRICS_PORT"])
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"),
                            ("startupProbe", "/healthz")):
            assert c[probe]["httpGet"] == {"path": path, "port": "metrics"}


def test_metrics_port_follows_config(rendered):
    docs = rendered["secure"]  # metricsPort 9200
    assert env_configmap(docs)["METRICS_PORT"] == "9200"
    svc = one(docs, "Service", FULLNAME)
    assert svc["spec"]["ports"] == [
        {"name": "metrics", "port": 9200, "targetPort": "metrics", "protocol": "TCP"}]


def _assert_restricted(pod_spec: dict, container: dict):
    psc = pod_spec["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert psc["runAsUser"] == 10001  # the image's USER (deploy/Dockerfile)
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    csc = container["securityContext"]
    assert csc["runAsNonRoot"] is True
    assert csc["runAsUser"] == 10001
    assert csc["readOnlyRootFilesystem"] is True
    assert csc["allowPrivilegeEscalation"] is False
    assert csc["capabilities"]["drop"] == ["ALL"]
    assert "add" not in csc["capabilities"]
    assert csc["seccompProfile"] == {"type": "RuntimeDefault"}
    # With a read-only root, Spark and Python need writable scratch space.
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]
    assert "emptyDir" in volumes[mounts["/var/lib/changejoin/spark-local"]]


def test_security_context(rendered):
    for docs in rendered.values():
        pod = one(docs, "Deployment")["spec"]["template"]["spec"]
        _assert_restricted(pod, driver_container(docs))
        assert pod["enableServiceLinks"] is False


def test_service_account_token_only_in_cluster_mode(rendered):
    def automount(docs):
        return one(docs, "Deployment")["spec"]["template"]["spec"]["automountServiceAccountToken"]

    assert automount(rendered["default"]) is False
    assert automount(rendered["cluster"]) is True
    assert by_kind(rendered["secure"], "ServiceAccount") == []  # serviceAccount.create false
    pod = one(rendered["secure"], "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "changejoin-orders"


def test_checksum_annotation_follows_config(helm, rendered):
    def checksum(docs):
        return one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"][
            "checksum/config"]

    base = checksum(rendered["default"])
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    _, same = template(helm, values_file("default"))
    assert checksum(same) == base
    _, changed = template(helm, values_file("default"), sets=("config.leftTopic=orders-v2",))
    assert checksum(changed) != base
    _, extra = template(helm, values_file("default"), sets=("extraEnv.LOG_LEVEL=DEBUG",))
    assert checksum(extra) != base


def test_values_reach_the_environment_verbatim(helm, tmp_path):
    """Multi-line SQL with quotes, colons and '#', and large numbers, arrive unchanged."""
    sql = ("SELECT o.id, c.name AS \"customer: name\" -- '#1'\n"
           "FROM orders o\n  LEFT JOIN customers c ON o.cid = c.id\n")
    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump({
        "config": {"joinSql": sql, "maxRecordsPerTrigger": 12345678901, "outputKey": "on"},
        "spark": {"conf": {"spark.sql.adaptive.enabled": False, "spark.memory.fraction": 0.5}},
    }))
    _, docs = template(helm, values_file("default"), str(extra))
    env = env_configmap(docs)
    assert env["JOIN_SQL"] == sql
    assert env["MAX_RECORDS_PER_TRIGGER"] == "12345678901"
    assert env["OUTPUT_KEY"] == "on"
    assert env["SPARK_CONF_spark_sql_adaptive_enabled"] == "false"
    assert env["SPARK_CONF_spark_memory_fraction"] == "0.5"


def test_schema_files_configmap_mounted(rendered):
    docs = rendered["default"]
    cm = one(docs, "ConfigMap", f"{FULLNAME}-schemas")
    assert set(cm["data"]) == {"orders.avsc", "customers.avsc"}
    assert json.loads(cm["data"]["orders.avsc"])["name"] == "Order"
    pod = one(docs, "Deployment")["spec"]["template"]
    assert "checksum/schemas" in pod["metadata"]["annotations"]
    mounts = {m["name"]: m for m in driver_container(docs)["volumeMounts"]}
    assert mounts["schemas"]["mountPath"] == "/etc/changejoin/schemas"
    assert mounts["schemas"]["readOnly"] is True
    env = env_configmap(docs)
    assert env["LEFT_SCHEMA_FILE"] == "/etc/changejoin/schemas/orders.avsc"
    # An existing ConfigMap is mounted instead of a chart-made one.
    secure = rendered["secure"]
    assert not [d for d in by_kind(secure, "ConfigMap") if d["metadata"]["name"].endswith("-schemas")]
    volumes = {v["name"]: v for v in one(secure, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["schemas"]["configMap"]["name"] == "orders-schemas"


@pytest.mark.parametrize("name, sets, message", [
    ("default", ("config.leftSchemaFile=/etc/changejoin/schemas/order.avsc",),
     "config.leftSchemaFile=/etc/changejoin/schemas/order.avsc names no file of schemas.files (customers.avsc, "
     "orders.avsc): add order.avsc to schemas.files, or name one of those"),
    ("default", ("config.rightSchemaFile=/schemas/customers.avsc",),
     "config.rightSchemaFile=/schemas/customers.avsc is no file the chart mounts: schema files are mounted at "
     "schemas.mountPath, as /etc/changejoin/schemas/<name>, from schemas.files or schemas.existingConfigMap"),
    ("default", ("config.leftSchemaFile=/etc/changejoin/schemas/v1/orders.avsc",), "is no file the chart mounts"),
    ("default", ("schemas.files=null",),
     "config.leftSchemaFile=/etc/changejoin/schemas/orders.avsc: no schema file is mounted: put the schema in "
     "schemas.files as orders.avsc (or name a ConfigMap holding it in schemas.existingConfigMap)"),
    ("default", ("schemas.mountPath=/schemas",), "is no file the chart mounts"),
    ("default", ("schemas.mountPath=/schemas", "config.leftSchemaFile=/schemas/orders.avsc",
                 "config.rightSchemaFile=/schemas/customers.avsc"), None),
    # An existing ConfigMap's keys are looked up at install; helm template sees no cluster.
    ("secure", ("config.leftSchemaFile=/etc/changejoin/schemas/anything.avsc",), None),
    ("secure", ("config.leftSchemaFile=/opt/orders.avsc",), "is no file the chart mounts"),
    ("default", ("config.schemaRegistryUrl=http://registry:8081", "config.leftSchemaFile=",
                 "config.rightSchemaFile="), None),
])
def test_a_schema_file_no_mounted_file_provides_is_refused(helm, name, sets, message):
    """It rendered, and the pod stopped at once on 'LEFT_SCHEMA_FILE: no such file'."""
    proc, _ = template(helm, values_file(name), sets=sets, check=False)
    if message is None:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode != 0
        assert message in proc.stderr, proc.stderr


# --------------------------------------------------------------------------------------------
# checkpoint storage


def test_checkpoint_pvc_by_default(rendered):
    docs = rendered["default"]
    pvc = one(docs, "PersistentVolumeClaim")
    assert pvc["metadata"]["name"] == f"{FULLNAME}-checkpoints"
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert "storageClassName" not in pvc["spec"]
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    mounts = {m["name"]: m["mountPath"] for m in driver_container(docs)["volumeMounts"]}
    assert env_configmap(docs)["CHECKPOINT_LOCATION"] == mounts["checkpoints"]


def test_checkpoint_storage_class_and_size(helm):
    _, docs = template(helm, values_file("default"),
                       sets=("checkpoint.storageClass=fast-ssd", "checkpoint.size=50Gi"))
    pvc = one(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["storageClassName"] == "fast-ssd"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "50Gi"


def test_checkpoint_existing_claim(rendered):
    docs = rendered["secure"]
    assert by_kind(docs, "PersistentVolumeClaim") == []
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == "orders-checkpoints"


def test_checkpoint_uri_means_no_pvc(helm, rendered):
    uri = "s3a://bucket/changejoin/orders"
    _, docs = template(helm, values_file("default"), sets=(f"checkpoint.uri={uri}",))
    assert by_kind(docs, "PersistentVolumeClaim") == []
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert "checkpoints" not in {v["name"] for v in pod["volumes"]}
    assert env_configmap(docs)["CHECKPOINT_LOCATION"] == uri
    assert by_kind(rendered["cluster"], "PersistentVolumeClaim") == []


# --------------------------------------------------------------------------------------------
# Spark modes

CLUSTER_ONLY = {("Role", f"{FULLNAME}-driver"), ("RoleBinding", f"{FULLNAME}-driver"),
                ("Service", f"{FULLNAME}-driver"),
                ("ConfigMap", f"{FULLNAME}-executor-template"), ("Secret", f"{FULLNAME}-spark-auth")}


def _names(docs):
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


def test_local_mode_renders_no_cluster_objects(rendered):
    for name in ("default", "secure"):
        docs = rendered[name]
        assert not (_names(docs) & CLUSTER_ONLY)
        env = env_configmap(docs)
        assert "SPARK_MASTER" not in env  # the service's default, local[*]
        assert not any(k.startswith("SPARK_CONF_spark_kubernetes") for k in env)
        c = driver_container(docs)
        assert {p["name"] for p in c["ports"]} == {"metrics"}
        assert not any(e["name"].startswith("SPARK_CONF_") for e in c.get("env", []))


def test_cluster_mode_objects(rendered):
    docs = rendered["cluster"]
    assert CLUSTER_ONLY <= _names(docs)
    env = env_configmap(docs)
    assert env["SPARK_MASTER"] == "k8s://https://kubernetes.default.svc"
    assert env["SPARK_CONF_spark_kubernetes_namespace"] == NAMESPACE
    assert env["SPARK_CONF_spark_kubernetes_container_image"] == \
        "registry.example.com/data/changejoin:0.1.0"
    assert env["SPARK_CONF_spark_executor_instances"] == "3"
    assert env["SPARK_CONF_spark_executor_cores"] == "2"
    assert env["SPARK_CONF_spark_executor_memory"] == "4g"
    assert env["SPARK_CONF_spark_executor_memoryOverhead"] == "1g"
    assert env["SPARK_CONF_spark_hadoop_fs_s3a_endpoint"] == "http://minio.storage.svc:9000"

    # Executors reach the driver through the headless Service, on fixed ports.
    svc = one(docs, "Service", f"{FULLNAME}-driver")
    assert svc["spec"]["clusterIP"] == "None"
    assert env["SPARK_CONF_spark_driver_host"] == f"{FULLNAME}-driver.{NAMESPACE}.svc"
    svc_ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    assert svc_ports == {"driver-rpc": int(env["SPARK_CONF_spark_driver_port"]),
                         "blockmanager": int(env["SPARK_CONF_spark_blockManager_port"])}
    c = driver_container(docs)
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": 9108, **svc_ports}
    deployment = one(docs, "Deployment")
    assert svc["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]

    # The driver's pod name and address come from the downward API.
    downward = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"]
                for e in c["env"] if "fieldRef" in e.get("valueFrom", {})}
    assert downward == {"SPARK_CONF_spark_kubernetes_driver_pod_name": "metadata.name",
                        "SPARK_CONF_spark_driver_bindAddress": "status.podIP"}

    # The executor pod template is mounted where spark.kubernetes.executor.podTemplateFile says.
    template_file = env["SPARK_CONF_spark_kubernetes_executor_podTemplateFile"]
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert template_file == mounts["spark-templates"] + "/executor-pod-template.yaml"
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["spark-templates"]["configMap"]["name"] == f"{FULLNAME}-executor-template"
    assert "checksum/executor-template" in deployment["spec"]["template"]["metadata"]["annotations"]


def test_executor_pod_template(rendered):
    pod = executor_pod_template(rendered["cluster"])
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["name"] == env_configmap(rendered["cluster"])[
        "SPARK_CONF_spark_kubernetes_executor_podTemplateContainerName"]
    assert container["command"] == ["changejoin-spark-executor"]
    assert spec["automountServiceAccountToken"] is False
    _assert_restricted(spec, container)
    # Spark uses volumes named spark-local-dir-* as the executor's local dirs.
    assert any(v["name"].startswith("spark-local-dir-") for v in spec["volumes"])
    assert spec["nodeSelector"] == {"workload": "spark"}
    assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "executor"


def test_role_is_minimal(rendered):
    role = one(rendered["cluster"], "Role")
    rules = {tuple(r["resources"]): set(r["verbs"]) for r in role["rules"]}
    for r in role["rules"]:
        assert r["apiGroups"] == [""]
        assert "resourceNames" not in r
    assert rules == {
        ("pods",): {"get", "list", "watch", "create", "patch", "delete", "deletecollection"},
        ("configmaps",): {"get", "list", "create", "delete", "deletecollection"},
        ("persistentvolumeclaims",): {"get", "list", "create", "delete", "deletecollection"},
    }
    all_verbs = set().union(*rules.values())
    assert not all_verbs & {"*", "update", "escalate", "bind", "impersonate"}
    binding = one(rendered["cluster"], "RoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": FULLNAME,
                                    "namespace": NAMESPACE}]
    assert not by_kind(rendered["cluster"], "ClusterRole")


def test_cluster_mode_requires_checkpoint_uri(helm):
    proc, _ = template(helm, values_file("default"), sets=("spark.mode=cluster",), check=False)
    assert proc.returncode != 0
    assert "checkpoint.uri" in proc.stderr


def test_cluster_mode_network_policies(helm):
    _, docs = template(helm, values_file("cluster"), sets=("networkPolicy.enabled=true",))
    driver = one(docs, "NetworkPolicy", f"{FULLNAME}-driver")
    executor = one(docs, "NetworkPolicy", f"{FULLNAME}-executor")
    rpc_rule = [r for r in driver["spec"]["ingress"]
                if {p["port"] for p in r["ports"]} == {"driver-rpc", "blockmanager"}]
    assert rpc_rule and rpc_rule[0]["from"][0]["podSelector"]["matchLabels"][
        "app.kubernetes.io/component"] == "executor"
    assert executor["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "executor"
    import kubernetes_validate
    for np in (driver, executor):
        kubernetes_validate.validate(np, KUBE_VERSION, strict=True)


# --------------------------------------------------------------------------------------------
# secrets and security options


def test_secrets_only_by_reference(rendered):
    docs = rendered["secure"]
    assert by_kind(docs, "Secret") == []
    c = driver_container(docs)
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"]}
    assert refs == {
        "KAFKA_CLIENT_SASL_USERNAME": {"name": "kafka-credentials", "key": "username"},
        "KAFKA_CLIENT_SASL_PASSWORD": {"name": "kafka-credentials", "key": "password"},
        "SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO": {"name": "registry-credentials",
                                                 "key": "user-info"},
    }
    env = env_configmap(docs)
    assert env["KAFKA_CLIENT_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["KAFKA_CLIENT_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert env["KAFKA_CLIENT_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM"] == "https"
    assert env["KAFKA_CLIENT_SSL_CA_LOCATION"] == "/etc/changejoin/kafka-tls/ca.crt"
    assert not any(re.search("PASSWORD|SECRET|USER_INFO", k) for k in env)
    volumes = {v["name"]: v for v in one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["kafka-tls"]["secret"]["secretName"] == "kafka-ca"
    # Bulk secrets come in with envFrom secretRef.
    cluster = driver_container(rendered["cluster"])
    assert {"secretRef": {"name": "changejoin-s3-credentials"}} in cluster["envFrom"]


def test_mutual_tls_files_and_key_password(helm):
    _, docs = template(helm, values_file("secure"), sets=(
        "kafka.tls.certKey=tls.crt", "kafka.tls.keyKey=tls.key",
        "kafka.tls.keyPasswordKey=key-password"))
    env = env_configmap(docs)
    assert env["KAFKA_CLIENT_SSL_CERTIFICATE_LOCATION"] == "/etc/changejoin/kafka-tls/tls.crt"
    assert env["KAFKA_CLIENT_SSL_KEY_LOCATION"] == "/etc/changejoin/kafka-tls/tls.key"
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in driver_container(docs)["env"]}
    assert refs["KAFKA_CLIENT_SSL_KEY_PASSWORD"] == {"name": "kafka-ca", "key": "key-password"}


def test_service_monitor_pdb_network_policy(rendered):
    docs = rendered["secure"]
    sm = one(docs, "ServiceMonitor")
    svc = one(docs, "Service", FULLNAME)
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    for key, value in sm["spec"]["selector"]["matchLabels"].items():
        assert svc["metadata"]["labels"][key] == value
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"

    pdb = one(docs, "PodDisruptionBudget")
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["maxUnavailable"] == 0
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()

    np = one(docs, "NetworkPolicy")
    assert np["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (metrics_rule,) = np["spec"]["ingress"]
    assert metrics_rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert metrics_rule["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"}
    assert {53} <= {p["port"] for rule in np["spec"]["egress"] for p in rule.get("ports", [])}

    for name in ("default", "cluster"):
        kinds = {d["kind"] for d in rendered[name]}
        assert not kinds & {"ServiceMonitor", "PodDisruptionBudget", "NetworkPolicy"}


def test_dashboard_configmap_and_prometheus_rule_only_when_switched_on(rendered):
    """secure.yaml switches both on; the other values files leave them off (the default)."""
    docs = rendered["secure"]
    cm = one(docs, "ConfigMap", f"{FULLNAME}-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"  # what the Grafana sidecar looks for
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Streaming"}
    assert cm["metadata"]["namespace"] == NAMESPACE
    # The chart's own file, unchanged: the ConfigMap is no copy to keep in step.
    assert json.loads(cm["data"]["changejoin.json"]) == dashboard()
    rule = one(docs, "PrometheusRule", FULLNAME)
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    alerts = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    assert len(alerts) >= 7 and all(r["labels"]["team"] == "data" for r in alerts)
    for name in ("default", "cluster", "lookup"):
        assert not [d for d in rendered[name] if d["kind"] == "PrometheusRule"
                    or d["metadata"]["name"] == f"{FULLNAME}-dashboard"], name


def test_dashboard_labels_and_namespace_are_configurable(helm):
    _, docs = template(helm, values_file("default"), sets=(
        "grafanaDashboard.enabled=true", "grafanaDashboard.namespace=monitoring",
        "grafanaDashboard.labels.grafana_dashboard=null", "grafanaDashboard.labels.dashboards=changejoin"))
    cm = one(docs, "ConfigMap", f"{FULLNAME}-dashboard")
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["dashboards"] == "changejoin"
    assert "grafana_dashboard" not in cm["metadata"]["labels"]


def _strict(schema):
    """The CRD's schema as ``kubectl --validate=strict`` applies it: an object that lists its
    fields accepts no others (the API server prunes unknown fields, strict validation refuses them).
    Its patterns are Go's (RE2); the one inline flag among them is moved where Python's ``re`` takes it."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        if isinstance(out.get("pattern"), str) and out["pattern"].startswith("^(?i)"):
            out["pattern"] = "(?i)^" + out["pattern"][len("^(?i)"):]  # Go's inline flag, where Python wants it
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def test_prometheus_rule_validates_against_the_crd_schema(rendered):
    import jsonschema

    crd = yaml.safe_load(PROMETHEUS_RULE_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = _strict(version["schema"]["openAPIV3Schema"])
    rule = one(rendered["secure"], "PrometheusRule")
    assert rule["apiVersion"] == f"{crd['spec']['group']}/v1" and rule["kind"] == crd["spec"]["names"]["kind"]
    jsonschema.validate(rule, schema)
    # The validation can fail: a misspelt field, a duration Prometheus would not parse.
    bad = json.loads(json.dumps(rule))
    bad["spec"]["groups"][0]["rules"][0]["for_"] = "5m"
    with pytest.raises(jsonschema.ValidationError, match="for_"):
        jsonschema.validate(bad, schema)
    bad = json.loads(json.dumps(rule))
    bad["spec"]["groups"][0]["rules"][0]["for"] = "5 minutes"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


# --------------------------------------------------------------------------------------------
# the lookup join (config.rightLookupUrl: the right side is a PostgreSQL table)


def test_lookup_join_variables(rendered):
    env = env_configmap(rendered["lookup"])
    assert {k: v for k, v in env.items() if "LOOKUP" in k} == {
        "RIGHT_LOOKUP_URL": "postgresql://changejoin@postgres.crm.svc:5432/crm?sslmode=require",
        "RIGHT_LOOKUP_TABLE": "crm.customers",
        "LOOKUP_BATCH_SIZE": "500",
        "LOOKUP_QUERY_TIMEOUT": "10s",
        "LOOKUP_MAX_RETRIES": "0",
        "LOOKUP_RETRY_BACKOFF": "250ms",
        "LOOKUP_CACHE": "partial",
        "LOOKUP_CACHE_MAX_ROWS": "50000",
        "LOOKUP_CACHE_EXPIRE_AFTER_WRITE": "5m",
        "LOOKUP_CACHE_EXPIRE_AFTER_ACCESS": "1m",
        "LOOKUP_CACHE_MISSING_KEY": "false",
    }
    assert env["RIGHT_TABLE"] == "customers"
    # Nothing of a right input: the service refuses these with RIGHT_LOOKUP_URL.
    refused = {re.sub(r"(?<!^)(?=[A-Z])", "_", key).upper() for key in RIGHT_STREAM_ONLY}
    assert refused == {"RIGHT_TOPIC", "RIGHT_SCHEMA_FILE", "RIGHT_PRIMARY_KEY", "RIGHT_CHANGELOG_MODE",
                       "RIGHT_EVENT_TIME_COLUMN", "RIGHT_STATE_TTL"}
    assert not refused & _rendered_env_names(rendered["lookup"])
    # The checkpoint is the chart's volume, a local directory.
    assert env["CHECKPOINT_LOCATION"] == "/var/lib/changejoin/checkpoints"
    # Without a lookup URL, none of it.
    for name in ("default", "cluster", "secure"):
        assert not any("LOOKUP" in k for k in _rendered_env_names(rendered[name]))


def test_lookup_options_left_empty_are_not_rendered(helm):
    _, docs = template(helm, values_file("lookup"), sets=tuple(
        f"config.{key}=null" for key in ("rightLookupTable", "lookupBatchSize", "lookupQueryTimeout",
                                         "lookupMaxRetries", "lookupRetryBackoff", "lookupCache",
                                         "lookupCacheMaxRows", "lookupCacheExpireAfterWrite",
                                         "lookupCacheExpireAfterAccess", "lookupCacheMissingKey")))
    env = env_configmap(docs)
    assert {k for k in env if "LOOKUP" in k} == {"RIGHT_LOOKUP_URL"}  # the service's defaults apply


def test_lookup_password_only_by_reference(rendered):
    docs = rendered["lookup"]
    assert by_kind(docs, "Secret") == []
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in driver_container(docs)["env"]}
    assert refs == {"RIGHT_LOOKUP_PASSWORD": {"name": "crm-database", "key": "changejoin-password"}}
    (entry,) = driver_container(docs)["env"]
    assert "value" not in entry
    assert not any(re.search("PASSWORD|SECRET|USER_INFO", k) for k in env_configmap(docs))
    # Without lookup.password.existingSecret, no password variable at all.
    for name in ("default", "cluster", "secure"):
        assert "RIGHT_LOOKUP_PASSWORD" not in _rendered_env_names(rendered[name])


def _strings(node):
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)
    else:
        yield str(node)


def test_no_password_value_in_the_rendered_manifests(helm, rendered):
    """The lookup join's manifests hold the password's Secret name and key, never a value: no
    value names it, and every way of handing the chart one is refused without echoing it."""
    docs = rendered["lookup"]
    text = "\n".join(_strings(docs))
    assert "RIGHT_LOOKUP_PASSWORD" in text and "crm-database" in text
    for doc in docs:
        for container in (doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])):
            for entry in container.get("env", []):
                if "PASSWORD" in entry["name"]:
                    assert set(entry) == {"name", "valueFrom"} and set(entry["valueFrom"]) == {"secretKeyRef"}
        if doc["kind"] == "ConfigMap":
            assert not any("password" in k.lower() for k in doc["data"])
            assert not any(re.search(r"password=|://[^/@]*:[^/@]*@", v) for v in doc["data"].values())
    canary = "hunter2-canary"
    for sets in (
        (f"extraEnv.RIGHT_LOOKUP_PASSWORD={canary}",),
        (f"config.rightLookupUrl=postgresql://changejoin:{canary}@postgres.crm.svc:5432/crm",),
        (f"config.rightLookupUrl=postgresql://changejoin@postgres.crm.svc/crm?password={canary}",),
        (f"config.rightLookupUrl=postgres://postgres.crm.svc/crm?sslmode=require&password={canary}",),
        (f"lookup.password.value={canary}",),
        (f"lookup.password={canary}",),
        (f"spark.conf.spark\\.executorEnv\\.RIGHT_LOOKUP_PASSWORD={canary}",),
        (f"kafka.properties.sasl\\.password={canary}",),
    ):
        proc, _ = template(helm, values_file("lookup"), sets=sets, check=False)
        assert proc.returncode != 0, sets
        assert canary not in proc.stdout + proc.stderr, (sets, proc.stderr)


@pytest.mark.parametrize("name, sets, ok", [
    ("default", ("config.rightTopic=",), False),       # required without a lookup URL ...
    ("default", ("config.rightTopic=null",), False),   # ... by the schema too
    ("lookup", (), True),                               # not with one
    ("lookup", ("config.rightTopic=",), True),
    ("lookup", ("config.rightTopic=null",), True),
])
def test_right_topic_required_unless_lookup_url(helm, name, sets, ok):
    proc, _ = template(helm, values_file(name), sets=sets, check=False)
    assert (proc.returncode == 0) == ok, proc.stderr
    if not ok:
        assert "rightTopic" in proc.stderr, proc.stderr


@pytest.mark.parametrize("key, value", [
    ("rightTopic", "customers"), ("rightSchemaFile", "/etc/changejoin/schemas/customers.avsc"),
    ("rightPrimaryKey", "customer_id"), ("rightChangelogMode", "retract"),
    ("rightEventTimeColumn", "updated_at"), ("rightStateTtl", "1d"),
])
def test_schema_refuses_right_input_settings_with_a_lookup_url(helm, key, value):
    proc, _ = template(helm, values_file("lookup"), sets=(f"config.{key}={value}",), check=False)
    assert proc.returncode != 0
    assert "schema" in proc.stderr.lower() and key in proc.stderr, proc.stderr


@pytest.mark.parametrize("name, sets, fragment", [
    ("lookup", ("config.lookupCache=full",), "lookupCache"),                 # none or partial
    ("lookup", ("config.lookupCache=none",), "lookupCacheMaxRows"),          # cache options need partial
    ("lookup", ("config.lookupBatchSize=100001",), "lookupBatchSize"),
    ("lookup", ("config.lookupMaxRetries=-1",), "lookupMaxRetries"),
    ("lookup", ("config.lookupQueryTimeout=soon",), "lookupQueryTimeout"),
    ("lookup", ("config.lookupCacheMissingKey=maybe",), "lookupCacheMissingKey"),
    ("lookup", ("config.rightLookupUrl=mysql://db.crm.svc/crm",), "rightLookupUrl"),
    ("lookup", ("config.rightLookupUrl=postgresql://db.crm.svc",), "rightLookupUrl"),  # no database
    ("lookup", ("lookup.password.existingSecret=Not_A_Name",), "existingSecret"),
    ("default", ("config.lookupCache=partial",), "lookupCache"),             # lookup keys need the URL
    ("default", ("config.rightLookupTable=crm.customers",), "rightLookupTable"),
])
def test_schema_refuses_bad_lookup_values(helm, name, sets, fragment):
    proc, _ = template(helm, values_file(name), sets=sets, check=False)
    assert proc.returncode != 0
    assert "schema" in proc.stderr.lower(), proc.stderr
    assert fragment in proc.stderr, proc.stderr


@pytest.mark.parametrize("name, sets, message", [
    ("lookup", ("config.rightTable=", "config.rightLookupTable="), "config.rightTable (or config.rightLookupTable)"),
    ("lookup", ("config.rightTable=",), None),  # RIGHT_TABLE defaults to RIGHT_LOOKUP_TABLE's last part
    ("lookup", ("config.leftSchemaFile=",), "schemaRegistryUrl"),
    ("lookup", ("config.leftSchemaFile=", "config.schemaRegistryUrl=http://registry:8081"), None),
    ("lookup", ("checkpoint.uri=s3a://bucket/changejoin/orders",), "leave checkpoint.uri empty"),
    ("lookup", ("spark.mode=cluster",), "ReadWriteMany"),
    ("lookup", ("spark.mode=cluster", "checkpoint.accessModes={ReadWriteMany}"), None),
    ("lookup", ("spark.mode=cluster", "checkpoint.existingClaim=orders-shared"), None),
    ("lookup", ("lookup.password.existingSecret=",), None),
    ("default", ("lookup.password.existingSecret=crm-database",), "config.rightLookupUrl"),
])
def test_lookup_template_checks(helm, name, sets, message):
    proc, _ = template(helm, values_file(name), sets=sets, check=False)
    if message is None:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode != 0
        assert message in proc.stderr, proc.stderr


def test_lookup_join_in_cluster_mode_shares_the_checkpoint_volume(helm, rendered):
    """On a cluster the checkpoint is a local directory every executor mounts: the chart's
    ReadWriteMany claim, mounted at the same path in the driver and the executor pods."""
    import kubernetes_validate

    _, docs = template(helm, values_file("lookup"),
                       sets=("spark.mode=cluster", "checkpoint.accessModes={ReadWriteMany}"))
    pvc = one(docs, "PersistentVolumeClaim")
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    env = env_configmap(docs)
    assert env["CHECKPOINT_LOCATION"] == "/var/lib/changejoin/checkpoints"
    assert env["SPARK_MASTER"].startswith("k8s://")
    driver_pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    executor = executor_pod_template(docs)
    kubernetes_validate.validate(executor, KUBE_VERSION, strict=True)
    for pod, container in ((driver_pod, driver_container(docs)), (executor["spec"], executor["spec"]["containers"][0])):
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["checkpoints"] == env["CHECKPOINT_LOCATION"]
        assert volumes["checkpoints"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    # A topic-topic join in cluster mode keeps its object-store checkpoint; executors mount none.
    executor = executor_pod_template(rendered["cluster"])
    assert "checkpoints" not in {v["name"] for v in executor["spec"]["volumes"]}


# --------------------------------------------------------------------------------------------
# values validation


@pytest.mark.parametrize("bad, fragment", [
    ("confg:\n  leftTopic: x\n", "confg"),                               # typo, top level
    ("config:\n  lefTopic: x\n", "lefTopic"),                            # typo, nested
    ("replicas: two\n", "replicas"),                                     # wrong type
    ("replicas: 2\n", "replicas"),                                       # one writer only
    ("config:\n  metricsPort: x\n", "metricsPort"),                      # wrong type
    ("config:\n  leftChangelogMode: insert\n", "leftChangelogMode"),     # not in enum
    ("config:\n  outputMode: append\n", "outputMode"),                   # not in enum
    ("spark:\n  mode: yarn\n", "mode"),                                  # not in enum
    ("spark:\n  executor:\n    instances: many\n", "instances"),         # wrong type
    ("checkpoint:\n  sise: 1Gi\n", "sise"),                              # typo, nested
    ("image:\n  pullPolicy: Sometimes\n", "pullPolicy"),                 # not in enum
    ("kafka:\n  properties:\n    sasl.password: hunter2\n", "sasl.password"),  # inline secret
    ("kafka:\n  properties:\n    ssl.key.pem: xyz\n", "ssl.key.pem"),          # inline secret
    ("kafka:\n  sasl:\n    password: hunter2\n", "password"),            # inline secret
    ("networkPolicy:\n  enabled: yes please\n", "enabled"),              # wrong type
    ("config:\n  stateTtl: '10'\n", "stateTtl"),                         # a duration without its unit
])
def test_schema_rejects_bad_values(helm, tmp_path, bad, fragment):
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text(bad)
    proc, _ = template(helm, values_file("default"), str(bad_file), check=False)
    assert proc.returncode != 0, f"accepted:\n{bad}"
    assert "schema" in proc.stderr.lower(), proc.stderr
    assert fragment in proc.stderr, proc.stderr
    lint = run_helm("lint", "--strict", str(CHART), "-f", values_file("default"),
                              "-f", str(bad_file))
    assert lint.returncode != 0


@pytest.mark.parametrize("sets, message", [
    ((), None),
    (("config.leftTopic=",), "config.leftTopic is required"),
    (("config.leftSchemaFile=",), "schemaRegistryUrl"),
    (("config.sparkMaster=local[2]", "spark.mode=cluster", "checkpoint.uri=s3a://b/c"),
     "config.sparkMaster"),
    (("extraEnv.KAFKA_CLIENT_SASL_PASSWORD=hunter2",), "secret"),
    (("extraEnv.SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO=u:p",), "secret"),
    (("extraEnv.KAFKA_CLIENT_SASL_OAUTHBEARER_CLIENT_SECRET=s",), "secret"),
])
def test_template_checks(helm, sets, message):
    proc, _ = template(helm, values_file("default"), sets=sets, check=False)
    if message is None:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode != 0
        assert message in proc.stderr, proc.stderr


def test_chart_defaults_alone_are_rejected_with_a_clear_message(helm):
    proc, _ = template(helm, check=False)
    assert proc.returncode != 0
    assert "is required" in proc.stderr


def _walk_schema(node, path="$"):
    if isinstance(node, dict):
        yield path, node
        for key, child in node.items():
            yield from _walk_schema(child, f"{path}.{key}")
    elif isinstance(node, list):
        for i, child in enumerate(node):
            yield from _walk_schema(child, f"{path}[{i}]")


def test_schema_is_closed_at_every_level():
    """Every object in values.schema.json either lists its properties and allows no others,
    is a typed map, or is a Kubernetes object passed through (marked with a $comment)."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_objects = []
    for path, node in _walk_schema(schema):
        if node.get("type") != "object":
            continue
        if "properties" in node:
            if node.get("additionalProperties") is not False:
                open_objects.append(path)
        elif isinstance(node.get("additionalProperties"), dict):
            continue  # a map with typed values
        elif "$comment" not in node:
            open_objects.append(path)
    assert open_objects == []


def test_values_yaml_matches_schema_keys():
    """values.yaml documents every top-level key the schema allows, and no other."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values) == set(schema["properties"]) - {"global"}
    assert set(values["config"]) == set(schema["properties"]["config"]["properties"])
    lookup = schema["properties"]["lookup"]["properties"]
    assert set(values["lookup"]) == set(lookup)
    assert set(values["lookup"]["password"]) == set(lookup["password"]["properties"])
    assert set(values["rescale"]) == set(schema["properties"]["rescale"]["properties"])


def _documented_keys(lines: list[str], indent: int) -> dict[str, bool]:
    """Keys at this indentation -> whether a "# --" comment documents them: the comment block
    right above, or for the second of a pair (leftTable, rightTable) the first one's."""
    found: dict[str, bool] = {}
    previous = None
    for n, line in enumerate(lines):
        match = re.match(rf"^ {{{indent}}}([A-Za-z]+):", line)
        if not match:
            continue
        block = []
        for above in reversed(lines[:n]):
            if not above.strip().startswith("#"):
                break
            block.append(above.strip())
        documented = any(c.startswith("# --") for c in block)
        if not block and previous is not None and lines[n - 1] == previous[1]:
            documented = found[previous[0]]
        found[match.group(1)] = documented
        previous = (match.group(1), line)
    return found


def test_values_yaml_documents_the_lookup_keys():
    """Each lookup key of values.yaml has its own "# --" comment (helm-docs' style), and the
    README names each."""
    text = (CHART / "values.yaml").read_text()
    readme = (CHART / "README.md").read_text()
    lines = text.splitlines()
    start = lines.index("config:")
    end = next(n for n in range(start + 1, len(lines)) if re.match(r"^[a-zA-Z]", lines[n]))
    config_keys = _documented_keys(lines[start:end], 2)
    assert set(config_keys) == set(yaml.safe_load(text)["config"])
    assert all(config_keys.values()), [k for k, ok in config_keys.items() if not ok]
    for key in filter(_is_lookup_key, config_keys):
        assert f"`{key}`" in readme, f"README.md does not mention config.{key}"
    start = lines.index("lookup:")
    end = next(n for n in range(start + 1, len(lines)) if re.match(r"^[a-zA-Z]", lines[n]))
    password = _documented_keys(lines[start:end], 4)
    assert password == {"existingSecret": True, "passwordKey": True}
    assert "`lookup.password`" in readme and "`lookup.password.existingSecret`" in readme


def test_values_yaml_documents_the_rescale_keys():
    """Each rescale key of values.yaml has its own "# --" comment; the README names each and
    explains the upgrade path (docs/operations.md#rescaling)."""
    text = (CHART / "values.yaml").read_text()
    readme = (CHART / "README.md").read_text()
    lines = text.splitlines()
    start = lines.index("rescale:")
    end = next(n for n in range(start + 1, len(lines)) if re.match(r"^[a-zA-Z#]", lines[n]))
    keys = _documented_keys(lines[start:end], 2)
    assert keys == {key: True for key in yaml.safe_load(text)["rescale"]}
    for key in keys:
        assert f"`rescale.{key}`" in readme, f"README.md does not mention rescale.{key}"
    assert "operations.md#rescaling" in readme


# --------------------------------------------------------------------------------------------
# the environment the chart renders is the one the service reads


def _rendered_env_names(docs: list[dict]) -> set[str]:
    names = set(env_configmap(docs))
    names |= {e["name"] for e in driver_container(docs).get("env", [])}
    return names


def _accepted(name: str) -> bool:
    from service import config

    return name in config.env_var_names() or name.startswith(tuple(config.ENV_PREFIXES))


def test_rendered_env_vars_are_accepted_by_the_service(rendered):
    for label, docs in rendered.items():
        unknown = sorted(n for n in _rendered_env_names(docs) if not _accepted(n))
        assert unknown == [], f"{label}: the service does not read {unknown}"


# The right input's settings a lookup join refuses (the service refuses them with RIGHT_LOOKUP_URL).
RIGHT_STREAM_ONLY = ("rightTopic", "rightSchemaFile", "rightPrimaryKey", "rightChangelogMode",
                     "rightEventTimeColumn", "rightStateTtl")


def _is_lookup_key(key: str) -> bool:
    return key.startswith(("lookup", "rightLookup"))


def test_every_config_key_maps_to_a_service_variable(helm):
    """Set every config.* key: each becomes a variable the service reads. Twice, since a lookup
    join's keys and the right input's RIGHT_STREAM_ONLY ones exclude each other."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    props = schema["properties"]["config"]["properties"]
    values = {}
    for key, prop in props.items():
        types = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
        if "boolean" in types:
            values[key] = "true"
        elif "integer" in types:
            values[key] = str(max(prop.get("minimum", 0), 1) if key != "metricsPort" else 9108)
        elif "enum" in prop:
            values[key] = [v for v in prop["enum"] if v][-1 if key == "lookupCache" else 0]  # partial
        elif "ms|s|sec" in prop.get("pattern", ""):  # a duration
            values[key] = "5s"
        elif key.endswith("SchemaFile"):  # files the values files mount (the chart refuses others)
            values[key] = "/etc/changejoin/schemas/" + ("orders.avsc" if key.startswith("left") else "customers.avsc")
        elif key == "schemaRegistryUrl":
            values[key] = "http://registry:8081"
        elif key == "rightLookupUrl":
            values[key] = "postgresql://changejoin@postgres:5432/crm"
        else:
            values[key] = "x"
    assert values["lookupCache"] == "partial"
    env: dict[str, str] = {}
    for base, keys in (("default", [k for k in props if not _is_lookup_key(k)]),
                       ("lookup", [k for k in props if k not in RIGHT_STREAM_ONLY])):
        _, docs = template(helm, values_file(base), sets=tuple(f"config.{k}={values[k]}" for k in keys))
        env.update(env_configmap(docs))
    from service import config

    names = config.env_var_names()
    mapped = {re.sub(r"(?<!^)(?=[A-Z])", "_", key).upper() for key in props}
    assert mapped <= set(env), mapped - set(env)
    assert mapped <= names, f"not read by the service: {sorted(mapped - names)}"


def test_chart_can_set_every_required_variable(rendered):
    required = {"KAFKA_BOOTSTRAP_SERVERS", "LEFT_TOPIC", "OUTPUT_TOPIC", "JOIN_SQL"}
    from service import config

    assert required | {"RIGHT_TOPIC", "RIGHT_LOOKUP_URL", "RIGHT_TABLE"} <= config.env_var_names()
    for label, docs in rendered.items():
        names = _rendered_env_names(docs)
        assert required <= names, f"{label}: missing {required - names}"
        if "RIGHT_LOOKUP_URL" in names:  # a lookup join: the right side is a database table
            assert "RIGHT_TOPIC" not in names and "RIGHT_TABLE" in names
            assert "SCHEMA_REGISTRY_URL" in names or "LEFT_SCHEMA_FILE" in names
        else:
            assert "RIGHT_TOPIC" in names
            assert "SCHEMA_REGISTRY_URL" in names or {"LEFT_SCHEMA_FILE", "RIGHT_SCHEMA_FILE"} <= names
    assert "RIGHT_LOOKUP_URL" in _rendered_env_names(rendered["lookup"])


def test_service_accepts_the_rendered_configuration(rendered, tmp_path):
    """The service's own loader (service.config.load_settings) accepts the environment each
    values file renders: ConfigMap data, plus stand-ins for what Kubernetes injects (Secret
    values, downward-API fields) and the mounted schema files."""
    from service import config

    for label, docs in rendered.items():
        env = dict(env_configmap(docs))
        for entry in driver_container(docs).get("env", []):
            # A Secret's value; the registry's user info has its form (user:password).
            env[entry["name"]] = "stand-in:secret" if entry["name"].endswith("USER_INFO") else "stand-in"
        schema_cms = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-schemas")]
        for var in ("LEFT_SCHEMA_FILE", "RIGHT_SCHEMA_FILE"):
            if var in env:
                local = tmp_path / label / Path(env[var]).name
                local.parent.mkdir(parents=True, exist_ok=True)
                data = schema_cms[0]["data"] if schema_cms else {}
                local.write_text(data.get(local.name, '{"type": "string"}'))
                env[var] = str(local)
        settings = config.load_settings(env)
        assert settings.left_topic == env["LEFT_TOPIC"]
        assert settings.checkpoint_location == env["CHECKPOINT_LOCATION"]
        assert settings.metrics_port == int(env["METRICS_PORT"])
        if label == "cluster":
            assert settings.spark_master.startswith("k8s://")
            assert settings.spark_conf["spark.blockManager.port"] == "7079"
            assert settings.spark_conf["spark.kubernetes.executor.podTemplateFile"].endswith(".yaml")
        if label == "secure":
            props = settings.kafka_properties()
            assert props["security.protocol"] == "SASL_SSL"
            assert props["sasl.password"] == "stand-in"
            assert props["ssl.ca.location"] == "/etc/changejoin/kafka-tls/ca.crt"
        assert settings.lookup == (label == "lookup")
        if label == "lookup":
            assert settings.right_topic is None
            assert settings.right_lookup_password == "stand-in"
            assert settings.lookup_table_name == "crm.customers"
            assert (settings.lookup_batch_size, settings.lookup_max_retries) == (500, 0)
            assert (settings.lookup_query_timeout_ms, settings.lookup_retry_backoff_ms) == (10_000, 250)
            assert settings.lookup_cache == "partial"
            assert settings.lookup_cache_max_rows == 50_000
            assert settings.lookup_cache_expire_after_write_ms == 300_000
            assert settings.lookup_cache_expire_after_access_ms == 60_000
            assert settings.lookup_cache_missing_key is False


# --------------------------------------------------------------------------------------------
# Spark RPC authentication and encryption (cluster mode), the Spark UI


def test_cluster_mode_authenticates_and_encrypts_spark_rpc(rendered):
    import base64

    docs = rendered["cluster"]
    env = env_configmap(docs)
    assert env["SPARK_CONF_spark_authenticate"] == "true"
    assert env["SPARK_CONF_spark_network_crypto_enabled"] == "true"
    assert env["SPARK_CONF_spark_network_crypto_authEngineVersion"] == "2"
    assert env["SPARK_CONF_spark_network_crypto_cipher"] == "AES/GCM/NoPadding"
    secret_file = env["SPARK_CONF_spark_authenticate_secret_driver_file"]
    assert env["SPARK_CONF_spark_authenticate_secret_executor_file"] == secret_file
    assert not any("secret" in v.lower() and "file" not in k for k, v in env.items())  # the file, not the secret

    secret = one(docs, "Secret", f"{FULLNAME}-spark-auth")
    assert secret["type"] == "Opaque" and set(secret["data"]) == {"secret"}
    assert len(base64.b64decode(secret["data"]["secret"])) == 64

    def mounted_file(pod_spec, container):
        volumes = {v["name"]: v for v in pod_spec["volumes"]}
        for m in container["volumeMounts"]:
            vol = volumes[m["name"]]
            if "secret" in vol and secret_file.startswith(m["mountPath"] + "/"):
                assert m["readOnly"] is True
                items = {i["path"]: i["key"] for i in vol["secret"]["items"]}
                return vol["secret"]["secretName"], items[secret_file[len(m["mountPath"]) + 1:]]
        return None

    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert mounted_file(pod, driver_container(docs)) == (f"{FULLNAME}-spark-auth", "secret")
    executor = executor_pod_template(docs)
    (container,) = executor["spec"]["containers"]
    assert mounted_file(executor["spec"], container) == (f"{FULLNAME}-spark-auth", "secret")
    # Nothing of it in local mode.
    for name in ("default", "secure"):
        assert not any("authenticate" in k or "crypto" in k for k in env_configmap(rendered[name]))


def test_cluster_mode_spark_auth_from_an_existing_secret(helm):
    _, docs = template(helm, values_file("cluster"), sets=(
        "spark.authenticate.existingSecret=orders-spark-rpc", "spark.authenticate.secretKey=token"))
    assert by_kind(docs, "Secret") == []
    env = env_configmap(docs)
    assert env["SPARK_CONF_spark_authenticate_secret_driver_file"] == "/etc/changejoin/spark-auth/token"
    for pod in (one(docs, "Deployment")["spec"]["template"]["spec"], executor_pod_template(docs)["spec"]):
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["spark-auth"]["secret"]["secretName"] == "orders-spark-rpc"
        assert volumes["spark-auth"]["secret"]["items"] == [{"key": "token", "path": "token"}]


def test_spark_auth_secret_is_random_per_fresh_install(helm):
    """Without a cluster to look up, each render makes a new secret (an installed release keeps
    its own through `lookup`)."""
    def value(docs):
        return one(docs, "Secret", f"{FULLNAME}-spark-auth")["data"]["secret"]

    assert value(template(helm, values_file("cluster"))[1]) != value(template(helm, values_file("cluster"))[1])


def test_spark_ui_off_unless_enabled(helm, rendered):
    from service import config

    assert "SPARK_UI_ENABLED" not in env_configmap(rendered["default"])  # the service's default: off
    _, docs = template(helm, values_file("default"), sets=("config.sparkUiEnabled=true",))
    assert env_configmap(docs)["SPARK_UI_ENABLED"] == "true"
    assert "SPARK_UI_ENABLED" in config.env_var_names()


def test_the_chart_refuses_the_secrets_the_service_hides(helm, tmp_path):
    """The chart's check of extraEnv, kafka.properties and spark.conf names agrees with the
    service's rule (service.config.is_secret_name) on every name of tests/service/test_config.py."""
    from tests.support.secret_names import PUBLIC_NAMES, SECRET_NAMES

    from service import config

    def values_for(name):
        if name.startswith("spark."):
            return {"spark": {"conf": {name: "x"}}}
        if name.islower():
            return {"extraEnv": {"KAFKA_CLIENT_" + name.upper().replace(".", "_"): "x"}}
        return {"extraEnv": {name: "x"}}

    for name in SECRET_NAMES:
        assert config.is_secret_name(name)
        f = tmp_path / "v.yaml"
        f.write_text(yaml.safe_dump(values_for(name)))
        proc, _ = template(helm, values_file("default"), str(f), check=False)
        assert proc.returncode != 0 and "is a secret" in proc.stderr, name
    merged: dict = {"extraEnv": {}, "spark": {"conf": {}}}
    for name in PUBLIC_NAMES:
        assert not config.is_secret_name(name)
        v = values_for(name)
        merged["extraEnv"].update(v.get("extraEnv", {}))
        merged["spark"]["conf"].update(v.get("spark", {}).get("conf", {}))
    for key in ("KAFKA_BOOTSTRAP_SERVERS", "JOIN_SQL"):  # set by config.*; extraEnv would override them
        merged["extraEnv"].pop(key, None)
    f = tmp_path / "public.yaml"
    f.write_text(yaml.safe_dump(merged))
    proc, _ = template(helm, values_file("default"), str(f), check=False)
    assert proc.returncode == 0, proc.stderr


def test_exactly_once_values_become_the_services_variables(helm, tmp_path):
    from service.config import env_var_names

    extra = tmp_path / "extra.yaml"
    extra.write_text(yaml.safe_dump({"config": {
        "delivery": "exactly-once", "kafkaTransactionalIdPrefix": "team-a.orders", "kafkaTransactionTimeoutMs": 60000,
        "progressTopic": "orders_priced.progress"}}))
    _, docs = template(helm, values_file("default"), str(extra))
    env = env_configmap(docs)
    assert {k: env[k] for k in ("DELIVERY", "KAFKA_TRANSACTIONAL_ID_PREFIX", "KAFKA_TRANSACTION_TIMEOUT_MS",
                                "PROGRESS_TOPIC")} == {
        "DELIVERY": "exactly-once", "KAFKA_TRANSACTIONAL_ID_PREFIX": "team-a.orders",
        "KAFKA_TRANSACTION_TIMEOUT_MS": "60000", "PROGRESS_TOPIC": "orders_priced.progress"}
    assert {"DELIVERY", "KAFKA_TRANSACTIONAL_ID_PREFIX", "KAFKA_TRANSACTION_TIMEOUT_MS", "PROGRESS_TOPIC"} <= env_var_names()
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"config": {"delivery": "twice"}}))
    proc, _ = template(helm, values_file("default"), str(bad), check=False)
    assert proc.returncode != 0 and "delivery" in proc.stderr


# --------------------------------------------------------------------------------------------
# the rescale Job (rescale.partitions: `changejoin rescale --partitions N`, docs/operations.md#rescaling)

RESCALE = ("replicas=0", "rescale.partitions=8")
RESCALE_JOB = f"{FULLNAME}-rescale"
# Pod settings the driver and the Job share, set so that their equality says something.
POD_SETTINGS = ("priorityClassName=streaming-high", "nodeSelector.zone=eu-1a", "podLabels.team=data",
                "podAnnotations.example\\.com/owner=data", "tolerations[0].key=dedicated",
                "tolerations[0].operator=Exists")


def rescale_pod(docs: list[dict]) -> tuple[dict, dict]:
    """The rescale Job's pod spec and its one container."""
    pod = one(docs, "Job", RESCALE_JOB)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return pod, container


def test_no_rescale_job_unless_rescale_partitions(helm, rendered):
    for name, docs in rendered.items():
        assert by_kind(docs, "Job") == [], name
        assert not [d for d in docs if d["metadata"]["name"].endswith("-rescale")], name
    _, stopped = template(helm, values_file("default"), sets=("replicas=0", "networkPolicy.enabled=true"))
    assert by_kind(stopped, "Job") == []
    assert [d["metadata"]["name"] for d in by_kind(stopped, "NetworkPolicy")] == [f"{FULLNAME}-driver"]
    _, unset = template(helm, values_file("default"), sets=("replicas=0", "rescale.partitions=null"))
    assert by_kind(unset, "Job") == []


@pytest.mark.parametrize("name", VALUES_FILES)
def test_rescale_job_runs_with_the_drivers_pod(helm, name):
    """The Job's pod is the driver's in all the service reads: image, environment (the same
    ConfigMap and Secrets), volumes and mounts, identity, security contexts, placement."""
    import kubernetes_validate

    _, driver_docs = template(helm, values_file(name), sets=POD_SETTINGS)
    _, docs = template(helm, values_file(name), sets=RESCALE + POD_SETTINGS)
    job = one(docs, "Job", RESCALE_JOB)
    kubernetes_validate.validate(job, KUBE_VERSION, strict=True)
    assert env_configmap(docs) == env_configmap(driver_docs)  # the environment, whole

    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 0
    driver_pod = deployment["spec"]["template"]["spec"]
    driver = driver_container(docs)
    pod, container = rescale_pod(docs)
    for key in ("image", "imagePullPolicy", "securityContext", "envFrom", "volumeMounts", "resources"):
        assert container[key] == driver[key], key
    assert pod["volumes"] == driver_pod["volumes"]
    for key in ("serviceAccountName", "enableServiceLinks", "priorityClassName", "imagePullSecrets",
                "securityContext", "nodeSelector", "tolerations", "affinity"):
        assert pod.get(key) == driver_pod.get(key), key
    assert pod["enableServiceLinks"] is False and pod["priorityClassName"] == "streaming-high"
    _assert_restricted(pod, container)
    driver_template = deployment["spec"]["template"]["metadata"]
    job_template = job["spec"]["template"]["metadata"]
    assert job_template["labels"]["team"] == "data"
    assert job_template["annotations"] == {"example.com/owner": "data"}

    # Secrets come in as they do for the driver; in cluster mode Spark runs in the pod.
    def secret_refs(c):
        return [e for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})]

    assert secret_refs(container) == secret_refs(driver)
    plain = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    assert not [e for e in container.get("env", []) if "fieldRef" in e.get("valueFrom", {})]
    if name == "cluster":
        assert plain == {"SPARK_MASTER": "local[*]", "SPARK_CONF_spark_driver_host": "127.0.0.1",
                         "SPARK_CONF_spark_authenticate": "false", "SPARK_CONF_spark_network_crypto_enabled": "false"}
    else:
        assert plain == {}
    assert all(_accepted(n) for n in {e["name"] for e in container.get("env", [])})

    # The command, and a Job that runs once.
    assert container["name"] == "rescale"
    assert container["command"] == ["changejoin", "rescale", "--partitions", "8"]
    assert "ports" not in container and "livenessProbe" not in container
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert job["spec"]["backoffLimit"] == 1 and job["spec"]["ttlSecondsAfterFinished"] == 86400
    assert job["spec"]["podFailurePolicy"]["rules"] == [{"action": "FailJob", "onExitCodes": {
        "containerName": "rescale", "operator": "In", "values": [2]}}]  # a refusal is not retried
    assert job["metadata"]["annotations"] == {"helm.sh/hook": "post-install,post-upgrade",
                                              "helm.sh/hook-delete-policy": "before-hook-creation"}
    # Not the driver: neither the Deployment, its Services, its PDB nor its NetworkPolicy select it.
    assert job_template["labels"]["app.kubernetes.io/component"] == "rescale"
    assert not deployment["spec"]["selector"]["matchLabels"].items() <= job_template["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"].items() <= driver_template["labels"].items()
    for svc in by_kind(docs, "Service"):
        assert not svc["spec"]["selector"].items() <= job_template["labels"].items()


def test_rescale_job_takes_its_own_resources(helm):
    _, docs = template(helm, values_file("cluster"), sets=RESCALE + (
        "rescale.resources.limits.memory=16Gi", "rescale.resources.requests.cpu=4",
        "rescale.backoffLimit=0", "rescale.ttlSecondsAfterFinished=600"))
    _, container = rescale_pod(docs)
    assert container["resources"] == {"limits": {"memory": "16Gi"}, "requests": {"cpu": 4}}
    assert driver_container(docs)["resources"]["limits"]["memory"] == "4Gi"
    spec = one(docs, "Job", RESCALE_JOB)["spec"]
    assert (spec["backoffLimit"], spec["ttlSecondsAfterFinished"]) == (0, 600)


@pytest.mark.parametrize("sets, message", [
    (("rescale.partitions=8",),
     "rescale.partitions=8 needs replicas=0: the driver must be stopped before its checkpoint is rewritten; "
     "upgrade with replicas=0 first, wait until its pod is gone, then with replicas=0 and rescale.partitions=8 "
     "(docs/operations.md#rescaling)"),
    (("replicas=1", "rescale.partitions=3"), "rescale.partitions=3 needs replicas=0"),
    (RESCALE + ("extraEnv.STATE_BUCKETS=4",),
     "rescale.partitions=8: the state is kept in extraEnv.STATE_BUCKETS=4 buckets, at most one task each: at most 4"),
    (("replicas=0", "rescale.partitions=4", "extraEnv.STATE_BUCKETS=4"), None),
    (("replicas=0", "rescale.partitions=300", "extraEnv.STATE_BUCKETS=0"), None),  # one key per grouping key
    (RESCALE + ("config.stateBuckets=4",),
     "rescale.partitions=8: the state is kept in config.stateBuckets=4 buckets, at most one task each: at most 4"),
    (RESCALE + ("config.stateBuckets=4", "extraEnv.STATE_BUCKETS=16"), "in config.stateBuckets=4 buckets"),
    (("replicas=0", "rescale.partitions=300", "config.stateBuckets=0"), None),
    (("replicas=0", "rescale.partitions=1"), None),
    (("replicas=0", "rescale.partitions=10000"), None),
])
def test_rescale_template_checks(helm, sets, message):
    """Refused unless the driver is stopped (replicas 0), and beyond STATE_BUCKETS when
    config.stateBuckets (or extraEnv) sets it."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", KUBE_VERSION,
            "-f", values_file("default")]
    for s in sets:
        args += ["--set-string" if s.startswith("extraEnv.") else "--set", s]  # extraEnv holds strings
    proc = run_helm(*args)
    if message is None:
        assert proc.returncode == 0, proc.stderr
        docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
        partitions = next(s.split("=")[1] for s in sets if s.startswith("rescale.partitions="))
        assert rescale_pod(docs)[1]["command"] == ["changejoin", "rescale", "--partitions", partitions]
    else:
        assert proc.returncode != 0
        assert message in proc.stderr, proc.stderr


@pytest.mark.parametrize("value", ["0", "-1", "10001", "eight", "2.5", "true"])
def test_schema_bounds_rescale_partitions(helm, value):
    proc, _ = template(helm, values_file("default"), sets=("replicas=0", f"rescale.partitions={value}"), check=False)
    assert proc.returncode != 0, value
    assert "schema" in proc.stderr.lower() and "rescale/partitions" in proc.stderr, proc.stderr


def test_rescale_partitions_bound_is_the_services():
    """The schema's range of rescale.partitions is SHUFFLE_PARTITIONS' (service.config)."""
    from service import config

    schema = json.loads((CHART / "values.schema.json").read_text())
    partitions = schema["properties"]["rescale"]["properties"]["partitions"]
    assert (partitions["minimum"], partitions["maximum"]) == (1, config.MAX_SHUFFLE_PARTITIONS)
    field = config.Settings.model_fields["shuffle_partitions"]
    bounds = {type(m).__name__: m for m in field.metadata}
    assert (bounds["Ge"].ge, bounds["Le"].le) == (1, config.MAX_SHUFFLE_PARTITIONS)


def _pod(name: str, component: str, instance: str = RELEASE) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE, "labels": {
        "app.kubernetes.io/name": "changejoin", "app.kubernetes.io/instance": instance,
        "app.kubernetes.io/component": component}}}


@pytest.mark.parametrize("pods, refused", [
    ([], None),
    ([_pod("orders-changejoin-7d9f8-x2kq4", "driver")], "orders-changejoin-7d9f8-x2kq4"),
    # Another release's driver, this release's executors and an earlier rescale Job's pod: not the driver.
    ([_pod("other-changejoin-5c6d7-abcde", "driver", "other"), _pod("orders-changejoin-exec-1", "executor"),
      _pod("orders-changejoin-rescale-q8x7z", "rescale")], None),
])
def test_rescale_waits_until_the_driver_pod_is_gone(helm, pods, refused):
    """At install and upgrade the chart looks the release's pods up: replicas 0 stops the driver, but
    its pod finishes its micro-batch first, and an object-store checkpoint has no lock that would stop
    a rescale beside it. Rendered against a fake API server that lists the pods given."""
    from tests.support.kube_api_fake import FakeKubeApi

    with FakeKubeApi(pods) as api:
        proc = run_helm(
            "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", values_file("cluster"),
            "--set", "replicas=0", "--set", "rescale.partitions=8",
            "--dry-run=server", "--disable-openapi-validation", kubeconfig=str(api.kubeconfig))
    assert f"/api/v1/namespaces/{NAMESPACE}/pods" in api.requests
    if refused is None:
        assert proc.returncode == 0, proc.stderr
        assert rescale_pod([d for d in yaml.safe_load_all(proc.stdout) if d])[1]["command"][-1] == "8"
    else:
        assert proc.returncode != 0
        assert (f"rescale.partitions=8: the driver pod {refused} is still there (it finishes its micro-batch first): "
                f"wait until it is gone (kubectl -n {NAMESPACE} wait --for=delete pod/{refused} --timeout=10m), "
                "then upgrade again") in proc.stderr, proc.stderr


def test_rescale_network_policy(helm):
    """With networkPolicy.enabled the Job's pod takes no traffic and reaches what the driver reaches."""
    import kubernetes_validate

    _, docs = template(helm, values_file("secure"), sets=RESCALE)
    policy = one(docs, "NetworkPolicy", RESCALE_JOB)
    kubernetes_validate.validate(policy, KUBE_VERSION, strict=True)
    labels = one(docs, "Job", RESCALE_JOB)["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"] and "ingress" not in policy["spec"]
    driver = one(docs, "NetworkPolicy", f"{FULLNAME}-driver")
    assert policy["spec"]["egress"] == driver["spec"]["egress"]  # DNS and networkPolicy.egress
    assert not driver["spec"]["podSelector"]["matchLabels"].items() <= labels.items()


def test_rescale_notes(helm):
    proc = run_helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", values_file("default"),
                              "--set", "replicas=0", "--set", "rescale.partitions=8", "--dry-run=client", check=True)
    notes = proc.stdout[proc.stdout.index("NOTES:"):]
    assert f"kubectl -n {NAMESPACE} logs job/{RESCALE_JOB}" in notes
    assert "config.shufflePartitions=8 (or null) and rescale.partitions unset" in notes


def test_rescale_job_starts_spark_in_its_pod(helm, tmp_path):
    """In spark.mode=cluster the Job's environment (the driver's ConfigMap, then its own entries)
    starts Spark locally: the ConfigMap alone names the stopped driver's Service as spark.driver.host
    (Spark cannot bind to it) and a secret file Spark refuses outside Kubernetes. A fresh process,
    with the files the pod mounts stood in for."""
    import subprocess
    import sys

    _, docs = template(helm, values_file("cluster"), sets=RESCALE)
    _, container = rescale_pod(docs)
    env = dict(env_configmap(docs))
    env.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
    secret = tmp_path / "spark-auth"
    secret.write_text("s" * 64)
    for key, value in env.items():
        if value.startswith("/etc/changejoin/spark-auth/"):
            env[key] = str(secret)
    env["CHECKPOINT_LOCATION"] = str(tmp_path / "checkpoint")
    script = ("import json, os\n"
              "from service.config import load_settings\n"
              "from service.session import spark_session\n"
              "spark = spark_session(load_settings(json.loads(os.environ['RESCALE_ENV'])))\n"
              "print(spark.sparkContext.master, spark.range(100).repartition(4).selectExpr('sum(id)').first()[0])\n"
              "spark.stop()\n")
    process_env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**process_env, "RESCALE_ENV": json.dumps(env)}, cwd=str(REPO_ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    master, total = proc.stdout.split()[-2:]
    assert master.startswith("local[*") and total == "4950", proc.stdout
