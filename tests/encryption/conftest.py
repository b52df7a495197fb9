"""Module-scoped databases and key stores for the encryption tests: each module shares one
database and one key store among its tests (each test uses sessions of its own), so that
a module pays one database clone instead of one per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.encryption import LocalKeyProvider


@pytest.fixture(scope="module")
def module_dsn(server_dsn: str, _databases: Any) -> Iterator[str]:
    """A migrated database for the whole module (the suite's clone of the template)."""
    name = _databases.take()
    yield make_conninfo(server_dsn, dbname=name)
    _databases.drop_later([name])


@pytest.fixture(scope="module")
def key_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("keys")


@pytest.fixture(scope="module")
def keys(key_dir: Path) -> LocalKeyProvider:
    return LocalKeyProvider(key_dir / "store", key_file=key_dir / "kek")


@pytest.fixture(scope="module")
def enc_store(module_dsn: str, keys: LocalKeyProvider) -> Iterator[shardstore.Store]:
    store = shardstore.connect(module_dsn, encryption=keys, chunk_tokens=60)
    yield store
    store.close()


@pytest.fixture(scope="module")
def plain_store(module_dsn: str) -> Iterator[shardstore.Store]:
    store = shardstore.connect(module_dsn, chunk_tokens=60)
    yield store
    store.close()


def raw(dsn: str, sql: str, params: Any = None) -> list[Any]:
    """A statement run by the database owner, outside any store."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []
