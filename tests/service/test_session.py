"""Every Spark property the service sets comes from session.spark_properties: the service's choices,
each overridden by a SPARK_CONF_ variable that sets the same property. No JVM is started here."""
import re
from pathlib import Path

import pytest

from service import app, config, resources, session
from service.config import load_settings
from service.session import launch_properties, query_start_properties, spark_properties
from tests.support.service_env import VALID

ROOT = Path(__file__).resolve().parents[2]
IDLE = "spark.sql.streaming.noDataProgressEventInterval"


def properties(**env) -> dict[str, str]:
    return spark_properties(load_settings({**VALID, **env}))


# -- what the service sets: the properties as changejoin 95f66d7 set them -----------------------------
# (config.py's defaults, pipeline.spark_session's options and app.py's idle-event interval, captured
# from that code without a JVM; the refactoring into session.py kept them identical)

LOG4J = f"-Dlog4j.configurationFile=file:{ROOT}/service/log4j2.properties -Dlog4j2.configurationFile=file:{ROOT}/service/log4j2.properties"
DEFAULTS = {
    "spark.app.name": "changejoin",
    "spark.driver.extraJavaOptions": LOG4J,
    "spark.executor.extraJavaOptions": LOG4J,
    "spark.executorEnv.PYTHONPATH": f"{ROOT}:{ROOT}/service/workersite",  # the latter since issue 21
    "spark.master": "local[*,4]",
    "spark.python.unix.domain.socket.enabled": "true",
    "spark.redaction.regex": "(?i)secret|password|passwd|passphrase|token|credential|jaas|access[.]?key"
                             "|account[.]key|private[.]key|encryption[.]key|oauthbearer[.]config|user[._]?info",
    "spark.redaction.string.regex": r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@]+@",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "spark.sql.streaming.noDataMicroBatches.enabled": "true",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.task.maxFailures": "4",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    IDLE: "3333ms",  # a third of the 10 s readiness window
}
NO_FILE_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
OVERRIDES = {  # SPARK_CONF_ wins over every choice of the service
    "SPARK_CONF_spark_master": "local[3]", "SPARK_CONF_spark_task_maxFailures": "9",
    "SPARK_CONF_spark_app_name": "mine", "SPARK_CONF_spark_sql_shuffle_partitions": "3",
    "SPARK_CONF_spark_sql_adaptive_enabled": "true", "SPARK_CONF_spark_ui_enabled": "true",
    "SPARK_CONF_spark_redaction_regex": "(?i)secret", "SPARK_CONF_spark_python_unix_domain_socket_enabled": "false",
    "SPARK_CONF_spark_sql_streaming_stateStore_rocksdb_changelogCheckpointing_enabled": "false",
    "SPARK_CONF_spark_sql_streaming_checkpointFileManagerClass": "org.example.Mine",
    "SPARK_CONF_spark_sql_streaming_noDataProgressEventInterval": "7s",
    "SPARK_CONF_spark_executor_instances": "4", "SPARK_CONF_spark_hadoop_fs_s3a_secret_key": "s3-secret-7",
}
CASES = [  # (environment, properties changed from DEFAULTS, properties removed)
    ({}, {}, []),
    ({"SPARK_MASTER": "k8s://https://kubernetes.default.svc", "CHECKPOINT_LOCATION": "s3a://bucket/cp"},
     {"spark.master": "k8s://https://kubernetes.default.svc"}, [NO_FILE_MANAGER]),
    ({"SPARK_MASTER": "spark://host:7077", "CHECKPOINT_LOCATION": "hdfs://nn/cp", "LOG_LEVEL": "DEBUG"},
     {"spark.master": "spark://host:7077"}, [NO_FILE_MANAGER]),
    ({"SPARK_MASTER": "local[2]", "CHECKPOINT_LOCATION": "file:///var/cp", "SPARK_UI_ENABLED": "true"},
     {"spark.master": "local[2,4]", "spark.ui.enabled": "true", "spark.sql.shuffle.partitions": "2"}, []),
    ({"SPARK_MASTER": "local", "CHECKPOINT_LOCATION": "/var/cp", "TRIGGER_INTERVAL": "0",
      "READY_MAX_TRIGGER_INTERVALS": "2"},
     {"spark.master": "local[1,4]", IDLE: "1000ms", "spark.sql.shuffle.partitions": "1"}, []),
    ({"TRIGGER_INTERVAL": "5s", "SHUFFLE_PARTITIONS": "3"}, {"spark.sql.shuffle.partitions": "3", IDLE: "16666ms"}, []),
    ({"TRIGGER_INTERVAL": "5s", **OVERRIDES},
     {"spark.app.name": "mine", "spark.executor.instances": "4", "spark.hadoop.fs.s3a.secret.key": "s3-secret-7",
      "spark.master": "local[3]", "spark.python.unix.domain.socket.enabled": "false",
      "spark.redaction.regex": "(?i)secret", "spark.sql.adaptive.enabled": "true", "spark.sql.shuffle.partitions": "3",
      "spark.sql.streaming.checkpointFileManagerClass": "org.example.Mine", IDLE: "7s",
      "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "false", "spark.task.maxFailures": "9",
      "spark.ui.enabled": "true"}, []),
    ({"CHECKPOINT_LOCATION": "s3a://b/cp", "SPARK_CONF_spark_executor_memory": "2g",
      "SPARK_CONF_spark_kubernetes_namespace": "joins"},
     {"spark.executor.memory": "2g", "spark.kubernetes.namespace": "joins"}, [NO_FILE_MANAGER]),
]


@pytest.fixture(autouse=True)
def eight_cpus(monkeypatch):
    """``local[*]`` on a machine of 8 usable CPUs: the count 95f66d7 set whatever the machine (a new
    checkpoint's task count now follows a local master's cores: config.default_task_partitions)."""
    monkeypatch.setattr(config, "usable_cpus", lambda: 8)


@pytest.mark.parametrize("env, changed, removed", CASES)
def test_the_service_sets_the_spark_properties_it_always_set(env, changed, removed):
    settings = load_settings({**VALID, **env})
    expected = {k: v for k, v in {**DEFAULTS, **changed}.items() if k not in removed}
    assert spark_properties(settings) == expected
    # Spark starts with all of them but the idle-event interval the service chooses, which is set
    # on the session when the query starts; one SPARK_CONF_ sets is there from the start.
    user_sets_idle = "SPARK_CONF_spark_sql_streaming_noDataProgressEventInterval" in env
    assert query_start_properties(settings) == ({} if user_sets_idle else {IDLE: expected[IDLE]})
    assert launch_properties(settings) == {k: v for k, v in expected.items() if k != IDLE or user_sets_idle}


class _RuntimeConf:
    def __init__(self, values):
        self.values = dict(values)

    def get(self, key, default=None):
        return self.values.get(key, default)

    def set(self, key, value):
        self.values[key] = value

    def unset(self, key):
        self.values.pop(key, None)


@pytest.mark.parametrize("env, changed, removed", CASES)
def test_spark_starts_with_the_launch_properties_and_the_query_with_the_rest(env, changed, removed, monkeypatch):
    from pyspark.sql import SparkSession

    settings = load_settings({**VALID, **env})
    started = {}
    monkeypatch.setattr(session, "_launch_jvm", lambda conf: started.setdefault("jvm", dict(conf.getAll())))

    class Spark:
        version = "4.3.0"

        class sparkContext:
            @staticmethod
            def setLogLevel(level):
                started["log_level"] = level

    def get_or_create(builder):
        started["session"] = dict(builder._options)
        return Spark

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", get_or_create)
    for var in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        monkeypatch.delenv(var, raising=False)
    session.spark_session(settings)
    assert started["jvm"] == started["session"] == launch_properties(settings)
    assert started["log_level"] == ("INFO" if env.get("LOG_LEVEL") == "DEBUG" else "WARN")

    spark = type("Session", (), {"conf": _RuntimeConf({IDLE: "10s"})})()
    service = app.Service(settings, plan=object(), spark=spark)
    with service._idle_events_within_ready_window():
        during = dict(spark.conf.values)
    assert during == {IDLE: spark_properties(settings)[IDLE] if IDLE in query_start_properties(settings) else "10s"}
    assert spark.conf.values == {IDLE: "10s"}  # the session's own value, restored


# -- the service's choices, one by one ------------------------------------------------------------

def test_spark_ui_is_off_unless_enabled():
    assert properties()["spark.ui.enabled"] == "false"
    assert properties(SPARK_UI_ENABLED="true")["spark.ui.enabled"] == "true"
    assert properties(SPARK_CONF_spark_ui_enabled="true")["spark.ui.enabled"] == "true"
    # Spark's own redaction covers the same secrets and URL user info.
    conf = properties()
    for name in ("spark.hadoop.fs.azure.account.key.a.blob.core.windows.net", "sasl.oauthbearer.config"):
        assert re.search(conf["spark.redaction.regex"], name)
    assert re.search(conf["spark.redaction.string.regex"].replace("(?i)", ""), "https://u:p@h")


def test_spark_defaults_filesystem_checkpoints_unix_sockets_rocksdb_changelogs_unless_spark_conf_says_otherwise():
    key = "spark.sql.streaming.checkpointFileManagerClass"
    for local in ("checkpoints", "/var/lib/changejoin/cp", "file:///var/lib/changejoin/cp"):
        conf = properties(CHECKPOINT_LOCATION=local)
        assert conf[key].endswith(".FileSystemBasedCheckpointFileManager"), local
    for remote in ("s3a://bucket/cp", "hdfs://namenode/cp"):  # Spark's own choice for other file systems
        assert key not in properties(CHECKPOINT_LOCATION=remote), remote
    # the JVM and its Python workers (and the state server) talk over Unix domain sockets
    assert properties()["spark.python.unix.domain.socket.enabled"] == "true"
    conf = properties(SPARK_CONF_spark_python_unix_domain_socket_enabled="false")
    assert conf["spark.python.unix.domain.socket.enabled"] == "false"
    # RocksDB commits a micro-batch as a changelog file, not a new snapshot
    changelog = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
    assert properties()[changelog] == "true"
    conf = properties(SPARK_CONF_spark_sql_streaming_stateStore_rocksdb_changelogCheckpointing_enabled="false")
    assert conf[changelog] == "false"
    mine = "org.example.MyCheckpointFileManager"
    conf = properties(SPARK_CONF_spark_sql_streaming_checkpointFileManagerClass=mine)
    assert conf[key] == mine


def test_the_settings_keep_the_spark_conf_variables_as_set():
    """SPARK_CONF_ is configuration (config.py); what the service adds to it is session.py's."""
    assert load_settings(VALID).spark_conf == {}
    assert load_settings({**VALID, "SPARK_CONF_spark_executor_instances": "4"}).spark_conf == {
        "spark.executor.instances": "4"}


# -- the documentation names every property the service chooses ------------------------------------

SPARK_SETTINGS = "## Spark settings"  # the section of docs/configuration.md that names them
CONFIGURATION_DOC = ROOT / "docs" / "configuration.md"


def spark_settings_paragraph() -> str:
    """The section of ``docs/configuration.md`` headed ``## Spark settings``, up to the next heading."""
    text = CONFIGURATION_DOC.read_text()
    start = text.find(SPARK_SETTINGS + "\n")
    assert start >= 0, f"no section {SPARK_SETTINGS!r} in {CONFIGURATION_DOC}"
    end = text.find("\n## ", start + len(SPARK_SETTINGS))
    return text[start:end if end >= 0 else len(text)]


def test_the_spark_settings_paragraph_names_every_property_the_service_sets():
    named = set(re.findall(r"`(spark\.[A-Za-z0-9.]+)", spark_settings_paragraph()))
    chosen = set(properties()) | set(properties(CHECKPOINT_LOCATION="s3a://bucket/cp"))
    assert not chosen - named, f"name them in the {SPARK_SETTINGS} section: {sorted(chosen - named)}"
    assert not named - chosen, f"the service does not set {sorted(named - chosen)}"


def test_check_config_prints_the_spark_properties_with_secrets_hidden():
    from tests.support.service_env import changejoin

    proc = changejoin("check-config", env={**VALID, "SPARK_CONF_spark_hadoop_fs_s3a_secret_key": "s3-secret-7"})
    assert proc.returncode == 0, proc.stderr
    shown = proc.stdout.split("spark properties:\n", 1)[1].split("plan:\n", 1)[0].splitlines()
    cores = str(resources.usable_cpus())  # this machine's: the command runs in a process of its own
    assert shown == [f"  {k}={'*****' if k.endswith('secret.key') else v}" for k, v in sorted(
        {**DEFAULTS, "spark.hadoop.fs.s3a.secret.key": "", "spark.sql.shuffle.partitions": cores}.items())]
    assert "s3-secret-7" not in proc.stdout


def test_a_spark_of_another_release_is_refused_naming_the_release():
    from service.session import check_spark_version

    check_spark_version("4.3.0")
    check_spark_version("4.3.1")
    for other in ("4.2.0", "4.4.0", "3.5.1"):
        with pytest.raises(RuntimeError, match=f"the cluster runs Spark {other}; changejoin runs on Spark 4.3.x"):
            check_spark_version(other)
