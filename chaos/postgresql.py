"""A private PostgreSQL server for tests and runs: Debian's ``postgresql``, started and stopped
by its pid, in a directory of its own.

How this works: ``PostgresServer().start()`` runs ``initdb`` into a fresh temporary directory
(trust authentication, one superuser ``haclient``), then ``postgres`` on 127.0.0.1 on a free
port with its unix socket in that directory, and waits until it accepts a connection. PostgreSQL
refuses to run as root: as root, both run as the ``postgres`` user Debian's package makes (or
``nobody``), and the directory is theirs. ``stop()`` asks the server to stop fast (SIGINT to its
pid), SIGKILLs it if it lingers, and removes the directory. ``url`` is the
``postgresql://`` URL of its ``postgres`` database; ``create_database()`` makes a fresh one.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Self

__all__ = ["PostgresServer", "PostgresServerError"]

_USER = "haclient"
_RUN_AS = ("postgres", "nobody")


class PostgresServerError(RuntimeError):
    """The server could not be started."""


class PostgresServer:
    """One PostgreSQL server on a loopback port; a context manager (``start`` on entry)."""

    def __init__(self) -> None:
        self.port = 0
        self.directory: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._databases = 0

    @staticmethod
    def binaries() -> Path | None:
        """The directory with ``initdb`` and ``postgres`` (Debian keeps them out of PATH, in
        /usr/lib/postgresql/<version>/bin; the newest version wins); None: not installed."""
        found = sorted(
            glob.glob("/usr/lib/postgresql/*/bin/postgres"),
            key=lambda path: int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0,
        )
        if found:
            return Path(found[-1]).parent
        on_path = shutil.which("postgres")
        return None if on_path is None else Path(on_path).parent

    @classmethod
    def available(cls) -> bool:
        """Whether PostgreSQL is installed."""
        return cls.binaries() is not None

    @property
    def url(self) -> str:
        """``postgresql://haclient@127.0.0.1:<port>/postgres``."""
        return self.url_of("postgres")

    def url_of(self, database: str) -> str:
        """The URL of ``database`` on this server."""
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/{database}"

    def start(self, timeout: float = 60.0) -> None:
        """initdb, start, and wait until it accepts connections.

        Raises:
            PostgresServerError: not installed, or not ready within ``timeout`` seconds.
        """
        bin_dir = self.binaries()
        if bin_dir is None:
            raise PostgresServerError("PostgreSQL is not installed (Debian: postgresql)")
        self.directory = Path(tempfile.mkdtemp(prefix="haclient-pg-"))
        data = self.directory / "data"
        account = _account() if os.geteuid() == 0 else None
        if account is not None:
            os.chown(self.directory, account.pw_uid, account.pw_gid)
        as_user: dict[str, Any] = (
            {} if account is None else {"user": account.pw_uid, "group": account.pw_gid}
        )
        log = self.directory / "server.log"
        initdb = subprocess.run(
            [bin_dir / "initdb", "-D", data, "-U", _USER, "--auth=trust", "-E", "UTF8"],
            capture_output=True,
            cwd=self.directory,
            timeout=timeout,
            **as_user,
        )
        if initdb.returncode != 0:
            raise PostgresServerError(f"initdb failed: {initdb.stderr.decode(errors='replace')}")
        self.port = _free_port()
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    bin_dir / "postgres",
                    "-D",
                    data,
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                    "-k",
                    self.directory,
                    "-c",
                    "fsync=off",  # a throwaway server: its data need not survive the machine
                    "-c",
                    "max_connections=100",
                ],
                stdout=out,
                stderr=out,
                cwd=self.directory,
                **as_user,
            )
        self._wait_ready(time.monotonic() + timeout, log)

    def _wait_ready(self, deadline: float, log: Path) -> None:
        import psycopg

        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise PostgresServerError(f"postgres exited: {log.read_text(errors='replace')}")
            try:
                psycopg.connect(self.url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                time.sleep(0.1)
        self.stop()
        raise PostgresServerError("postgres did not accept connections in time")

    def create_database(self) -> str:
        """A fresh database on this server; its URL."""
        import psycopg

        self._databases += 1
        name = f"db{self._databases}_{os.getpid()}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_of(name)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop the server by its pid (fast shutdown; SIGKILL past ``timeout``), and remove its
        directory. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        directory, self.directory = self.directory, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<PostgresServer 127.0.0.1:{self.port} {'running' if self.proc else 'stopped'}>"


def _account() -> pwd.struct_passwd:
    """The unprivileged user a server started by root runs as."""
    for name in _RUN_AS:
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise PostgresServerError(f"none of the users {_RUN_AS} exists to run postgres as")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
