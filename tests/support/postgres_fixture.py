"""PostgreSQL for the tests (the lookup join's database): a server, and a schema of its own per test.

Where the server comes from (the ``postgres_url`` session fixture), first that works:
1. ``LOOKUP_TEST_DATABASE_URL`` from the environment (a PostgreSQL you run yourself);
2. a testcontainers PostgreSQL container, if testcontainers is installed and a Docker daemon answers;
3. a throwaway server from the machine's PostgreSQL binaries (devkit/postgres.py; Debian's
   ``postgresql`` package, which .ci/run installs).

Tests that stop, kill and restart the database (``postgres_server``) always get their own local
server, which keeps its data and its port across restarts.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import uuid
from typing import Callable, Iterator, Optional, Tuple

import pytest

from devkit.postgres import PostgresServer, PostgresServerError, find_bin_dir
from tests.support.kafka_fixture import _docker_answers

ENV_URL = "LOOKUP_TEST_DATABASE_URL"


# --------------------------------------------------------------------------------------------
# Where the server comes from
# --------------------------------------------------------------------------------------------


def _testcontainers_postgres() -> Optional[Tuple[str, Callable[[], None]]]:
    """(url, stop) of a PostgreSQL container, or None if testcontainers/Docker is missing."""
    try:
        from testcontainers.postgres import PostgresContainer  # imported lazily: optional
    except ImportError:
        return None
    if not _docker_answers():
        return None
    container = PostgresContainer()
    container.start()
    # "postgresql+psycopg2://..." (SQLAlchemy's form) -> what psycopg and the service read.
    url = re.sub(r"^postgresql\+\w+://", "postgresql://", container.get_connection_url())
    return url, container.stop


def wait_for_postgres(url: str, timeout: float = 60.0) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no PostgreSQL answers on {url}: {exc}") from None
            time.sleep(0.2)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """The URL (``postgresql://user[:password]@host:port/db``) of a server shared by the whole test
    session. Tests share it: make tables in a schema of your own (``pg_schema``, ``fresh_schema``)."""
    external = os.environ.get(ENV_URL)
    if external:
        wait_for_postgres(external)
        yield external
        return
    container = _testcontainers_postgres()
    if container is not None:
        url, stop = container
        try:
            wait_for_postgres(url)
            yield url
        finally:
            stop()
        return
    server = PostgresServer()
    try:
        yield server.start()
    finally:
        server.close()


@pytest.fixture
def postgres_server() -> Iterator[PostgresServer]:
    """A private, started PostgreSQL server for one test, which the test may stop(), kill() and
    start() again: same port, same data. Its URL is ``postgres_server.url``."""
    try:
        find_bin_dir()
    except PostgresServerError as exc:
        if os.environ.get(ENV_URL):
            pytest.skip(f"this test stops and restarts its own PostgreSQL, and {ENV_URL} cannot be "
                        f"restarted: {exc}")
        raise
    server = PostgresServer()  # its own temporary directory: as root, user postgres must reach it
    server.start()
    try:
        yield server
    finally:
        server.close()


# --------------------------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------------------------


def schema_name(stem: str = "t") -> str:
    """A schema name unique to this call: ``stem`` as a lowercase identifier, and 8 hex digits."""
    stem = re.sub(r"[^a-z0-9]+", "_", stem.lower()).strip("_")[:40] or "t"
    if stem[0].isdigit():
        stem = f"t_{stem}"
    return f"{stem}_{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def fresh_schema(url: str, stem: str = "t") -> Iterator[str]:
    """Create a schema with a name of its own on the server at ``url``, yield its name, and drop it
    (with everything in it) after."""
    import psycopg
    from psycopg import sql

    name = schema_name(stem)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with contextlib.suppress(psycopg.OperationalError):  # a test may leave the server down
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def pg_schema(postgres_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """A schema of this test's own on the session server (``postgres_url``), named after the test;
    dropped with its tables after the test."""
    with fresh_schema(postgres_url, request.node.name) as name:
        yield name
