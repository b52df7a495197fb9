"""A real PgBouncer in transaction mode in front of the test server, for the pooler tests.

Transaction mode is what Supabase, Neon, Heroku and most Kubernetes set-ups run: each
transaction of a client may go to a different server connection, and a server connection
goes to another client as soon as a transaction ends. The pool here is small on purpose,
so that the clients of a test share few server connections and anything a client leaves on
one (a session setting, a prepared statement, a session-level lock) meets another client.

PgBouncer comes from the Debian package ``pgbouncer`` (``.ci/run`` installs it); where it is
not installed the pooler tests are skipped with that message, or fail where
``SHARDSTORE_REQUIRE_PGBOUNCER`` is set (CI).
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# server connections per (database, user): fewer than the clients of a test, so that they
# take turns on the same server connections
POOL_SIZE = 3


@dataclass
class Pooler:
    """A running PgBouncer: the DSN of a database through it, and the users it lets in."""

    port: int
    userlist: Path
    process: subprocess.Popen[bytes]
    server: dict[str, Any]

    def dsn(self, direct: str, **overrides: Any) -> str:
        """``direct``'s database (and user) reached through the pooler."""
        params = conninfo_to_dict(direct)
        params.update(host="127.0.0.1", port=str(self.port), **overrides)
        params.pop("password", None)
        user = str(params.get("user") or "postgres")
        self.allow(user)
        return make_conninfo("", **{k: v for k, v in params.items() if v is not None})

    def allow(self, user: str) -> None:
        """Let ``user`` log in through the pooler (its password, if any, is the server's)."""
        lines = self.userlist.read_text().splitlines()
        entry = f'"{user}" "{self.server.get("password") or ""}"'
        if entry in lines:
            return
        self.userlist.write_text("\n".join([*lines, entry]) + "\n")
        self.process.send_signal(signal.SIGHUP)  # PgBouncer re-reads its files
        _wait_for(lambda: _accepts(self.port, user), f"PgBouncer to let {user} in")


def _accepts(port: int, user: str) -> bool:
    try:
        conninfo = make_conninfo(host="127.0.0.1", port=port, user=user, dbname="postgres")
        psycopg.connect(conninfo, connect_timeout=5).close()
    except psycopg.OperationalError:
        return False
    return True


def _wait_for(ready: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as(socket_dir: str | None) -> str | None:
    """PgBouncer refuses to run as root: the user that owns the server's socket directory
    (the embedded server's), else nobody."""
    if os.geteuid() != 0:
        return None
    if socket_dir and os.path.isdir(socket_dir):
        owner = pwd.getpwuid(os.stat(socket_dir).st_uid).pw_name
        if owner != "root":
            return owner
    return "nobody"


@pytest.fixture(scope="session")
def pgbouncer(server_dsn: str) -> Iterator[Pooler]:
    exe = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
    )
    if exe is None:
        message = "PgBouncer is not installed (Debian package pgbouncer; .ci/run installs it)"
        if os.environ.get("SHARDSTORE_REQUIRE_PGBOUNCER"):
            pytest.fail(message)
        pytest.skip(message)
    server = conninfo_to_dict(server_dsn)
    host = str(server.get("host") or "127.0.0.1")
    target = f"host={host}" + (f" port={server['port']}" if server.get("port") else "")
    workdir = Path(tempfile.mkdtemp(prefix="shardstore-pgbouncer-"))
    port = _free_port()
    user = _run_as(host if host.startswith("/") else None)
    userlist = workdir / "users.txt"
    userlist.write_text(f'"{server.get("user") or "postgres"}" "{server.get("password") or ""}"\n')
    ini = workdir / "pgbouncer.ini"
    ini.write_text(
        "\n".join(
            [
                "[databases]",
                f"* = {target}",
                "[pgbouncer]",
                "listen_addr = 127.0.0.1",
                f"listen_port = {port}",
                "unix_socket_dir =",
                "auth_type = trust",
                f"auth_file = {userlist}",
                "pool_mode = transaction",
                f"default_pool_size = {POOL_SIZE}",
                "max_client_conn = 2000",
                # a store's pool may hold its connections: clients queue, never fail
                "query_wait_timeout = 600",
                "ignore_startup_parameters = extra_float_digits,options",
                f"logfile = {workdir / 'pgbouncer.log'}",
                "",
            ]
        )
    )
    if user is not None:
        shutil.chown(workdir, user)
        for path in (userlist, ini):
            shutil.chown(path, user)
    command = [exe, *(["-u", user] if user else []), str(ini)]
    # PgBouncer in the foreground logs every line to stderr as well: into a file, never a
    # pipe nobody drains (once the pipe's buffer is full, PgBouncer blocks on the write and
    # every client of every later test waits for it)
    stderr_path = workdir / "stderr.log"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        _wait_for(
            lambda: process.poll() is not None or _accepts(port, server.get("user") or "postgres"),
            "PgBouncer to start",
        )
        if process.poll() is not None:
            err = stderr_path.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"PgBouncer did not start: {err}")
        yield Pooler(port, userlist, process, server)
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def pooled_dsn(pgbouncer: Pooler, dsn: str) -> str:
    """This test's database through the pooler (the test's own user)."""
    return pgbouncer.dsn(dsn)
