"""A throwaway PostgreSQL server for development, demos and the tests (the lookup join's database),
started from the machine's own PostgreSQL binaries: no Docker. The service never uses it.

    with PostgresServer() as url:         # "postgresql://postgres@127.0.0.1:PORT/postgres"
        ...                               # the directory is removed after

    server = PostgresServer()
    url = server.start()                  # initdb into a fresh directory on the first start
    server.stop()                         # a clean shutdown (pg_ctl stop -m fast); the data stays
    server.start()                        # same port, same data
    server.kill()                         # a crash (pg_ctl stop -m immediate): recovery on the next start
    server.create_database("lookups")     # -> its URL
    server.close()                        # stop and remove the directory (if it made it)

One cluster in one directory: ``data/`` (initdb's), ``postgres.log`` (the server's log) and the
Unix socket (``psql -h DIR -p PORT -U postgres``). Loopback only, on a free port picked at the
first start and kept for restarts; user ``postgres``, no password (``trust``); UTF-8 with the C
locale; no fsync and no full-page writes: fast, and not safe against a machine crash, but a stop
or a kill of the server itself loses nothing committed (see :data:`SETTINGS`). initdb takes about a
second, a start, a stop or a restart about a tenth.

The binaries: ``initdb`` and ``pg_ctl`` on the PATH, else the newest ``/usr/lib/postgresql/*/bin``
(Debian's ``postgresql`` package, which puts neither on the PATH). Both refuse to run as root: as
root they run as user ``postgres`` (``runuser``; the Debian package creates that user), which then
owns the directory, so it must be reachable by that user (a fresh temporary directory is). pg_ctl
detaches the server from this process: it is stopped when the Python process exits (atexit), but
not if that process is killed.

``python -m devkit.postgres [PORT]`` runs one until interrupted.
"""
from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

from .broker_process import close_at_exit, forget_at_exit, free_port, log_tail

__all__ = ["PostgresServer", "PostgresServerError", "find_bin_dir"]

USER = "postgres"  # the superuser initdb creates, and the OS user that runs the server as root
DATABASE = "postgres"
DEBIAN_LIB = Path("/usr/lib/postgresql")
INSTALL_HINT = "install Debian's `postgresql` package (apt-get install postgresql)"

#: Server settings for a throwaway database: no durability against a machine crash, for speed. But
#: a commit is written (not flushed) before it returns, so a crash of the server itself
#: (:meth:`PostgresServer.kill`) loses nothing committed; ``synchronous_commit=off`` would lose the
#: last few hundred milliseconds of commits (measured: a table created just before a kill was gone
#: after the restart), and with fsync off it saves next to nothing.
SETTINGS = {
    "fsync": "off",
    "synchronous_commit": "on",
    "full_page_writes": "off",
}


class PostgresServerError(RuntimeError):
    """The server cannot be found, initialised, started or stopped."""


def _version_key(path: Path) -> tuple:
    return tuple(int(part) for part in re.findall(r"\d+", path.parent.name))


def _has_binaries(directory: Path) -> bool:
    return all(os.access(directory / name, os.X_OK) for name in ("initdb", "pg_ctl"))


def find_bin_dir() -> Path:
    """The directory with ``initdb`` and ``pg_ctl``: the PATH's (or where its links point), else the
    newest ``/usr/lib/postgresql/*/bin``."""
    for name in ("pg_ctl", "initdb"):
        found = shutil.which(name)
        if found:
            for directory in (Path(found).parent, Path(found).resolve().parent):
                if _has_binaries(directory):
                    return directory
    for directory in sorted(DEBIAN_LIB.glob("*/bin"), key=_version_key, reverse=True):
        if _has_binaries(directory):
            return directory
    raise PostgresServerError(f"no PostgreSQL server binaries: neither `initdb` and `pg_ctl` on the PATH nor "
                              f"{DEBIAN_LIB}/*/bin; {INSTALL_HINT}")


class PostgresServer:
    """Start, stop, kill and restart one PostgreSQL server on loopback, in its own directory.

    ``data_dir`` is that directory (kept by :meth:`close`; keep its path short, the Unix socket
    lives in it); by default a fresh temporary one, removed by :meth:`close`. ``bin_dir`` holds
    ``initdb`` and ``pg_ctl`` (by default :func:`find_bin_dir`). ``settings`` add to or override
    :data:`SETTINGS` (``postgres -c name=value``)."""

    def __init__(
        self,
        port: Optional[int] = None,
        host: str = "127.0.0.1",
        data_dir: Optional[str] = None,
        bin_dir: Optional[str] = None,
        settings: Optional[Dict[str, str]] = None,
        startup_timeout: float = 60.0,
    ):
        self.host = host
        self.port = port
        self._own_dir = data_dir is None
        self.data_dir: Optional[Path] = Path(data_dir).resolve() if data_dir else None
        self.bin_dir: Optional[Path] = Path(bin_dir) if bin_dir else None
        self.settings = {**SETTINGS, **(settings or {})}
        self.startup_timeout = startup_timeout

    # ---- addresses and files ----------------------------------------------------------------

    @property
    def url(self) -> str:
        """``postgresql://postgres@HOST:PORT/postgres``: the superuser, no password."""
        return self.url_for(DATABASE)

    def url_for(self, database: str) -> str:
        if self.port is None:
            raise PostgresServerError("the PostgreSQL server has not been started yet")
        return f"postgresql://{USER}@{self.host}:{self.port}/{database}"

    @property
    def pgdata(self) -> Optional[Path]:
        """The cluster's data directory (PGDATA, initdb's), inside :attr:`data_dir`."""
        return self.data_dir / "data" if self.data_dir else None

    @property
    def log_path(self) -> Optional[Path]:
        return self.data_dir / "postgres.log" if self.data_dir else None

    def log_tail(self, lines: int = 30) -> str:
        return log_tail(self.log_path, lines)

    # ---- running initdb and pg_ctl ------------------------------------------------------------

    @staticmethod
    def _as_root() -> bool:
        return os.geteuid() == 0

    def _owner(self) -> pwd.struct_passwd:
        try:
            return pwd.getpwnam(USER)
        except KeyError:
            raise PostgresServerError(f"running as root, and initdb and pg_ctl refuse root: they run as user "
                                      f"`{USER}`, which does not exist; {INSTALL_HINT}, which creates it") from None

    def _command(self, program: str, *args: str) -> List[str]:
        if self.bin_dir is None:
            self.bin_dir = find_bin_dir()
        command = [str(self.bin_dir / program), *args]
        if self._as_root():
            self._owner()
            runuser = shutil.which("runuser")
            if runuser is None:
                raise PostgresServerError(f"running as root, and {program} refuses root: it needs `runuser` "
                                          f"(util-linux) to run as user `{USER}`")
            command = [runuser, "-u", USER, "--", *command]
        return command

    def _run(self, program: str, *args: str, timeout: Optional[float] = None) -> subprocess.CompletedProcess:
        assert self.data_dir is not None
        # cwd: the tools change to their working directory, which as root is often unreachable for `postgres`.
        return subprocess.run(self._command(program, *args), cwd=self.data_dir, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout or self.startup_timeout + 30)

    def _pg_ctl(self, action: str, *args: str) -> subprocess.CompletedProcess:
        assert self.pgdata is not None
        return self._run("pg_ctl", action, "-D", str(self.pgdata), "-w",
                         "-t", str(max(1, int(self.startup_timeout))), *args)

    # ---- lifecycle ----------------------------------------------------------------------------

    def _prepare_dir(self) -> None:
        if self.data_dir is None:
            self.data_dir = Path(tempfile.mkdtemp(prefix="changejoin-postgres-"))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self._as_root():
            owner = self._owner()
            os.chown(self.data_dir, owner.pw_uid, owner.pw_gid)

    def _initdb(self) -> None:
        """Create the cluster once; a restart reuses it."""
        assert self.pgdata is not None
        if (self.pgdata / "PG_VERSION").is_file():
            return
        proc = self._run("initdb", "-D", str(self.pgdata), "-A", "trust", "-U", USER, "--no-sync",
                         "-E", "UTF8", "--locale=C")
        if proc.returncode != 0:
            raise PostgresServerError(f"initdb into {self.pgdata} failed (exit {proc.returncode}):\n"
                                      f"{proc.stdout[-3000:]}")

    def _options(self) -> str:
        """The server's command line (pg_ctl -o, which a shell splits)."""
        assert self.data_dir is not None and self.port is not None
        settings = {"listen_addresses": self.host, **self.settings}
        args = ["-p", str(self.port), "-k", str(self.data_dir)]
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        return " ".join(shlex.quote(arg) for arg in args)

    def is_running(self) -> bool:
        """Whether the server of this directory runs (its ``postmaster.pid`` names a live process)."""
        if self.pgdata is None:
            return False
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def start(self) -> str:
        """Start the server (same port and data as before if it ran already; the first start runs
        initdb), wait until it accepts connections, and return :attr:`url`."""
        if self.is_running():
            return self.url
        if self.bin_dir is None:
            self.bin_dir = find_bin_dir()  # before making a directory: no binaries, nothing to clean up
        self._prepare_dir()
        self._initdb()
        assert self.log_path is not None
        first = self.port is None
        attempts = 3 if first else 1
        for attempt in range(attempts):
            if self.port is None or attempt:
                self.port = free_port(self.host)
            proc = self._pg_ctl("start", "-l", str(self.log_path), "-o", self._options())
            if proc.returncode == 0:
                close_at_exit(self)
                return self.url
            log = self.log_tail()
            if self.is_running():  # pg_ctl gave up waiting: do not leave the server behind
                self._pg_ctl("stop", "-m", "immediate")
            # Only a port taken between picking and binding is worth another try.
            if "already in use" not in log or attempt == attempts - 1:
                raise PostgresServerError(f"the PostgreSQL server did not start on {self.host}:{self.port} "
                                          f"(pg_ctl exit {proc.returncode}): {proc.stdout.strip()}\n{log}")
        raise AssertionError("unreachable")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server, keeping its data. ``mode`` is pg_ctl's: ``smart`` (wait for the clients
        to disconnect), ``fast`` (disconnect them, then a clean shutdown) or ``immediate`` (quit at
        once, as a crash: the next start recovers from the write-ahead log)."""
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"stop mode {mode!r}: smart, fast or immediate")
        forget_at_exit(self)
        if not self.is_running():
            return
        proc = self._pg_ctl("stop", "-m", mode)
        if proc.returncode != 0 and self.is_running():
            raise PostgresServerError(f"pg_ctl stop -m {mode} failed (exit {proc.returncode}): "
                                      f"{proc.stdout.strip()}\n{self.log_tail()}")

    def kill(self) -> None:
        """Stop the server as a crash would (``pg_ctl stop -m immediate``): no shutdown checkpoint,
        clients cut off; the data stays, and the next :meth:`start` recovers it."""
        self.stop(mode="immediate")

    def close(self) -> None:
        """Stop the server and remove its directory if this object created it."""
        self.stop(mode="immediate" if self._own_dir else "fast")
        if self._own_dir and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.data_dir = None

    def create_database(self, name: str) -> str:
        """Create database ``name`` (owned by ``postgres``) and return its URL."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url_for(name)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        where = f"{self.host}:{self.port}" if self.port else "not started"
        return f"PostgresServer({where}, {self.data_dir})"


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m devkit.postgres [PORT]``: run a server until interrupted, printing its URL.
    SIGTERM and SIGHUP stop it as Ctrl-C does (the server is no child of this process: nothing
    else would stop it)."""
    args = list(sys.argv[1:] if argv is None else argv)
    server = PostgresServer(port=int(args[0]) if args else None)

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, interrupt)
    print(server.start(), flush=True)
    try:
        while server.is_running():
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
