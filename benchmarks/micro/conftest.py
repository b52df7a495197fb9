"""Fixtures of the hot-path microbenchmarks: the test suite's server and databases.

Run on demand, never in CI (``testpaths`` is ``tests``)::

    python -m pytest benchmarks/micro --benchmark-columns=median,iqr,min,max,rounds
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import shardstore
from tests.conftest import new_database, server_dsn, template_db

__all__ = ["new_database", "server_dsn", "template_db"]


@pytest.fixture
def dsn(new_database: Callable[[], str]) -> str:
    """A fresh migrated database for one benchmark."""
    return new_database()


@pytest.fixture
def make_store(dsn: str) -> Iterator[Callable[..., shardstore.Store]]:
    """Stores on the benchmark's database, closed after it."""
    opened: list[shardstore.Store] = []

    def make(**settings: object) -> shardstore.Store:
        store = shardstore.connect(dsn, **settings)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()
