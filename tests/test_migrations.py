"""Migrations: idempotent, safe when run concurrently, and every statement the code sends
is valid against the schema they build."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.executor import run_sync
from shardstore.migrations import all_migrations, migrate_op
from shardstore.sql import _queries


@pytest.fixture
def empty_dsn(server_dsn: str) -> Iterator[str]:
    name = f"shardstore_empty_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield make_conninfo(server_dsn, dbname=name)
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_concurrent_migrators_apply_each_version_once(empty_dsn: str) -> None:
    applied: list[list[int]] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def migrate() -> None:
        try:
            with psycopg.connect(empty_dsn, autocommit=True) as conn:
                barrier.wait()
                applied.append(run_sync(conn, migrate_op()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    versions = [m.version for m in all_migrations()]
    assert sorted(v for run in applied for v in run) == versions
    with psycopg.connect(empty_dsn, autocommit=True) as conn:
        assert run_sync(conn, migrate_op()) == []
        rows = conn.execute(
            "SELECT version FROM shardstore.schema_migrations ORDER BY 1"
        ).fetchall()
        assert [r[0] for r in rows] == versions


def test_every_query_is_valid_against_the_migrated_schema(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name, sql in _queries().items():
            counter = iter(range(1, 100))
            numbered = re.sub(r"%s", lambda _, c=counter: f"${next(c)}", sql)
            names: dict[str, int] = {}  # %(name)s: one number per name
            numbered = re.sub(
                r"%\((\w+)\)s",
                lambda m, n=names: f"${n.setdefault(m.group(1), len(n) + 1)}",
                numbered,
            )
            # PREPARE parses and analyses: every table, column, function and type must exist
            conn.execute(f"PREPARE check_{name} AS {numbered}")
            conn.execute(f"DEALLOCATE check_{name}")


def test_a_changed_migration_is_reported(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE shardstore.schema_migrations SET checksum = 'edited' WHERE version = 1"
        )
        with pytest.raises(shardstore.ConfigurationError, match="differs"):
            run_sync(conn, migrate_op())
