"""How the service ends when it must: one structured line with the cause, exit code 1; and how
transient task failures are retried first."""
import io
import json
import logging

import pytest

from service.app import Service, log_fatal
from service.catalog import plan_for
from service.config import load_settings
from service.logs import JsonFormatter
from service.session import DAEMON_BROKEN_PIPE, TASK_ATTEMPTS, _relay_jvm_stderr, expect_stop, with_task_retries
from tests.support.service_env import VALID


@pytest.mark.parametrize("master, expected", [
    ("local[*]", f"local[*,{TASK_ATTEMPTS}]"), ("local[2]", f"local[2,{TASK_ATTEMPTS}]"),
    ("local", f"local[1,{TASK_ATTEMPTS}]"), ("local[2, 7]", "local[2, 7]"),
    ("spark://127.0.0.1:7077", "spark://127.0.0.1:7077"), ("k8s://https://kubernetes.default.svc", "k8s://https://kubernetes.default.svc"),
])
def test_local_masters_retry_failed_tasks_unless_told_otherwise(master, expected):
    assert with_task_retries(master) == expected


@pytest.fixture
def json_log():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    yield stream
    root.removeHandler(handler)


def test_a_failed_query_is_one_json_line_with_its_first_line_as_cause(json_log):
    error = RuntimeError("[STREAM_FAILED] Query changejoin terminated with exception: boom\n\tat org.apache.spark...\n" * 3)
    log_fatal(error)
    (line,) = [json.loads(x) for x in json_log.getvalue().splitlines()]
    assert line["level"] == "CRITICAL" and line["event"] == "fatal" and line["exit_code"] == 1
    assert line["cause"] == "[STREAM_FAILED] Query changejoin terminated with exception: boom"
    assert line["message"] == "changejoin stopped: " + line["cause"]
    assert line["error_type"] == "RuntimeError" and "org.apache.spark" in line["detail"]


def test_the_cause_of_a_python_error_wrapped_by_spark_is_the_exception_its_traceback_ends_with(json_log):
    error = RuntimeError(
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: [PYTHON_STREAMING_DATA_SOURCE_"
        "RUNTIME_ERROR] Failed when Python streaming data source perform latestOffset: Traceback (most recent "
        "call last):\n  File \"/x/source.py\", line 733, in latestOffset\n    lost += self._records_lost(p)\n"
        "            ^^^^^^^^^^^^^^^^^^^\nservice.source.KafkaSourceError: topic 'orders' partition 0: offsets 3 "
        "to 4 (2 records) were deleted: set FAIL_ON_DATA_LOSS=false\n SQLSTATE: 38000\n\tat org.apache.spark.X(Y.scala:1)")
    log_fatal(error)
    (line,) = [json.loads(x) for x in json_log.getvalue().splitlines()]
    assert line["cause"] == ("KafkaSourceError: topic 'orders' partition 0: offsets 3 to 4 (2 records) were "
                             "deleted: set FAIL_ON_DATA_LOSS=false")
    assert line["error_type"] == "KafkaSourceError" and line["detail"] == str(error)


def test_a_service_that_cannot_start_exits_1_with_the_cause(json_log, monkeypatch):
    settings = load_settings(VALID)
    service = Service(settings, plan_for(settings), spark=object())

    def fail():
        raise ConnectionError("broker kafka:9092 is unreachable")

    monkeypatch.setattr(service, "start", fail)
    monkeypatch.setattr(service, "stop", lambda *a, **k: None)
    assert service.run_forever() == 1
    lines = [json.loads(x) for x in json_log.getvalue().splitlines()]
    fatal = [x for x in lines if x.get("event") == "fatal"]
    assert len(fatal) == 1 and fatal[0]["cause"] == "broker kafka:9092 is unreachable"


def test_the_jvm_stderr_relay_drops_only_the_lines_nobody_can_act_on():
    jvm = io.BytesIO(
        b"WARNING: Using incubator modules: jdk.incubator.vector\n"
        b"26/11/25 00:06:23 ERROR MicroBatchExecution: a real error\n"
        b"Starting Streaming TransformWithStateInPandas Python worker.\n"
        b"\n"
        b"Streaming TransformWithStateInPandas Python worker Completed execution of UDF: <bound method f>.\n"
        b"\n"
        b"\n"
        b"WARNING: Using incubator modules: jdk.incubator.foreign, jdk.incubator.vector\n"
        b"\tat org.apache.spark.X(X.scala:1)\n"
        b"partial line without newline"
    )
    out = io.BytesIO()
    _relay_jvm_stderr(jvm, out)
    assert out.getvalue() == (
        b"26/11/25 00:06:23 ERROR MicroBatchExecution: a real error\n"
        b"\n"  # an empty line of its own stays: only the one after a dropped line goes with it
        b"WARNING: Using incubator modules: jdk.incubator.foreign, jdk.incubator.vector\n"
        b"\tat org.apache.spark.X(X.scala:1)\n"
        b"partial line without newline"
    )


def test_the_jvm_stderr_relay_makes_one_line_of_pysparks_daemon_losing_a_worker_connection():
    daemon = (b"Traceback (most recent call last):\n"
              b'  File "/x/pyspark.zip/pyspark/daemon.py", line 264, in manager\n'
              b'  File "/x/pyspark.zip/pyspark/daemon.py", line 95, in worker\n')
    other = (b"Traceback (most recent call last):\n"
             b'  File "/x/service/processor.py", line 3, in f\n'
             b"    raise BrokenPipeError\n")
    jvm = io.BytesIO(daemon + b"BrokenPipeError: [Errno 32] Broken pipe\n"
                     + b"26/11/26 05:51:51 ERROR TaskSchedulerImpl: Lost executor 0\n"
                     + other + b"BrokenPipeError: [Errno 32] Broken pipe\n"
                     + daemon + b"ValueError: another error\n"
                     + b"Traceback (most recent call last):\n" + b'  File "cut short"\n')
    out = io.BytesIO()
    expect_stop(False)  # a service stopped earlier in this process leaves it set (session.py)
    _relay_jvm_stderr(jvm, out)
    assert out.getvalue() == (
        DAEMON_BROKEN_PIPE
        + b"26/11/26 05:51:51 ERROR TaskSchedulerImpl: Lost executor 0\n"
        + other + b"BrokenPipeError: [Errno 32] Broken pipe\n"  # not the daemon's: kept whole
        + daemon + b"ValueError: another error\n"  # another error: kept whole
        + b"Traceback (most recent call last):\n" + b'  File "cut short"\n'  # the stream's end: kept
    )


def test_the_daemons_broken_pipe_is_one_line_also_with_its_source_lines():
    """PySpark's daemon run from the installed package (service/workersite), not Spark's zip:
    Python prints each frame's source line and carets under it."""
    daemon = (b"Traceback (most recent call last):\n"
              b'  File "/v/site-packages/pyspark/daemon.py", line 264, in manager\n'
              b"    code = worker(sock, authenticated)\n"
              b"           ^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
              b'  File "/v/site-packages/pyspark/daemon.py", line 95, in worker\n'
              b"    outfile.flush()\n")
    other = (b"Traceback (most recent call last):\n"
             b'  File "/v/site-packages/pyspark/daemon.py", line 264, in manager\n'
             b"    code = worker(sock, authenticated)\n"
             b'  File "/x/service/processor.py", line 3, in f\n'
             b"    raise BrokenPipeError\n")
    out = io.BytesIO()
    expect_stop(False)
    _relay_jvm_stderr(io.BytesIO(daemon + b"BrokenPipeError: [Errno 32] Broken pipe\n"
                                 + other + b"BrokenPipeError: [Errno 32] Broken pipe\n"), out)
    assert out.getvalue() == DAEMON_BROKEN_PIPE + other + b"BrokenPipeError: [Errno 32] Broken pipe\n"


def test_the_daemons_broken_pipe_is_not_relayed_while_the_service_stops():
    """Stopping the query and Spark closes the workers' connections: nothing to report then (the
    demo's output ended with the warning)."""
    traceback = (b"Traceback (most recent call last):\n"
                 b'  File "/x/pyspark.zip/pyspark/daemon.py", line 95, in worker\n'
                 b"BrokenPipeError: [Errno 32] Broken pipe\n")
    expect_stop()
    try:
        out = io.BytesIO()
        _relay_jvm_stderr(io.BytesIO(traceback + b"WARN other\n"), out)
        assert out.getvalue() == b"WARN other\n"
    finally:
        expect_stop(False)
    out = io.BytesIO()
    _relay_jvm_stderr(io.BytesIO(traceback), out)
    assert out.getvalue() == DAEMON_BROKEN_PIPE
