"""The tests' PostgreSQL (devkit/postgres.py, the lookup join's database): a real server from the
machine's binaries, which answers, keeps its data and its port across a stop and a kill, and goes
away with its directory. And the fixtures that hand it out (tests/support/postgres_fixture.py)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import psycopg
import pytest

from devkit import postgres
from devkit.postgres import PostgresServer, PostgresServerError
from tests.support.postgres_fixture import fresh_schema

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rows(url: str) -> list:
    with psycopg.connect(url, connect_timeout=5) as conn:
        return [r[0] for r in conn.execute("SELECT v FROM kept ORDER BY v")]


def refuses(url: str) -> bool:
    try:
        psycopg.connect(url, connect_timeout=2).close()
    except psycopg.OperationalError:
        return True
    return False


def test_a_server_answers_and_keeps_its_data_and_port_across_a_stop_and_a_kill():
    server = PostgresServer()  # its own temporary directory, removed by close()
    try:
        url = server.start()
        assert url == f"postgresql://postgres@127.0.0.1:{server.port}/postgres" == server.url
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_user, 6 * 7").fetchone() == ("postgres", 42)
            assert conn.execute("SHOW server_encoding").fetchone() == ("UTF8",)
            conn.execute("CREATE TABLE kept (v text)")
            conn.execute("INSERT INTO kept VALUES ('before the stop')")

        server.stop()
        assert not server.is_running() and refuses(url)
        assert server.start() == url  # same port, same data
        assert rows(url) == ["before the stop"]

        with psycopg.connect(url, autocommit=True) as conn:  # committed just before the crash
            conn.execute("INSERT INTO kept VALUES ('before the kill')")
        server.kill()
        assert not server.is_running() and refuses(url)
        assert server.start() == url
        assert rows(url) == ["before the kill", "before the stop"]
        assert "database system was interrupted" in server.log_path.read_text()  # recovered from a crash

        lookups = server.create_database("lookups")
        assert lookups == url.rsplit("/", 1)[0] + "/lookups"
        with psycopg.connect(lookups) as conn:
            assert conn.execute("SELECT current_database()").fetchone() == ("lookups",)
    finally:
        directory = server.data_dir
        server.close()
    assert not server.is_running() and refuses(url)
    assert directory is not None and not directory.exists()


def test_the_restartable_fixture_and_a_fresh_schema(postgres_server):
    with fresh_schema(postgres_server.url, "Some Test[1]") as name:
        assert name.startswith("some_test_1_")
        with psycopg.connect(postgres_server.url, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {name}.kept (v text)")
            conn.execute(f"INSERT INTO {name}.kept VALUES ('x')")
        postgres_server.stop()
        postgres_server.start()
        with psycopg.connect(postgres_server.url) as conn:
            assert conn.execute(f"SELECT v FROM {name}.kept").fetchall() == [("x",)]
    with psycopg.connect(postgres_server.url) as conn:  # dropped, with its table
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (name,)).fetchone() == (0,)


def test_the_session_server_gives_each_test_its_own_schema(postgres_url, pg_schema):
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = %s", (pg_schema,)).fetchone() == (1,)
    assert pg_schema.startswith("test_the_session_server_gives_")


def test_no_binaries_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(postgres, "DEBIAN_LIB", tmp_path / "none")
    server = PostgresServer()
    with pytest.raises(PostgresServerError, match="install Debian's `postgresql` package"):
        server.start()
    assert server.data_dir is None  # nothing made, nothing left behind


def test_the_command_line_prints_the_url_and_stops_on_sigterm():
    proc = subprocess.Popen([sys.executable, "-m", "devkit.postgres"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("postgresql://postgres@127.0.0.1:"), proc.stderr.read() if not url else url
        assert not refuses(url)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        assert refuses(url)  # the server, which pg_ctl detached, went with it
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
