"""Tables that later features register in shardstore.purge_targets are cleared by purges and
by retention alike."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import shardstore


@pytest.fixture
def admin(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE public.notes (session_id uuid NOT NULL, body text);"
            "CREATE TABLE public.chunk_vectors"
            " (session_id uuid NOT NULL, chunk_seq bigint, v text);"
            "INSERT INTO shardstore.purge_targets (table_name, note)"
            " VALUES ('public.notes', 'test');"
            "INSERT INTO shardstore.purge_targets (table_name, chunk_column, note)"
            " VALUES ('public.chunk_vectors', 'chunk_seq', 'test')"
        )
        yield conn


def _count(conn: psycopg.Connection[Any], table: str, sid: Any) -> int:
    row = conn.execute(f"SELECT count(*) FROM {table} WHERE session_id = %s", (sid,)).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
def test_retention_clears_registered_tables(
    make_store: Callable[..., shardstore.Store], admin: psycopg.Connection[Any]
) -> None:
    store = make_store(partition_interval=timedelta(seconds=1), premake=2)
    old = store.create_session("acme", "user:old")
    kept = store.create_session("acme", "user:kept")
    time.sleep(1 - time.time() % 1 + 0.1)
    store.append_turn(old, {"role": "user", "content": "old"})
    store.flush(old)
    for sid in (old, kept):
        admin.execute("INSERT INTO public.notes VALUES (%s, 'remember this')", (sid,))
        admin.execute("INSERT INTO public.chunk_vectors VALUES (%s, 0, 'vector')", (sid,))
    time.sleep(3.2)
    store.append_turn(kept, {"role": "user", "content": "recent"})
    report = store.maintain(retention=timedelta(seconds=2))
    assert report.errors == [] and report.sessions_expired == 1
    assert _count(admin, "public.notes", old) == 0
    assert _count(admin, "public.chunk_vectors", old) == 0
    assert _count(admin, "public.notes", kept) == 1
    assert _count(admin, "public.chunk_vectors", kept) == 1


def test_purge_clears_registered_tables(
    store: shardstore.Store, admin: psycopg.Connection[Any]
) -> None:
    gone = store.create_session("acme", "user:gone")
    stays = store.create_session("acme", "user:stays")
    for sid in (gone, stays):
        store.append_turn(sid, {"role": "user", "content": "hi"})
        admin.execute("INSERT INTO public.notes VALUES (%s, 'remember this')", (sid,))
    report = store.purge_subject("acme", "user:gone")
    assert report.sessions_affected == 1
    assert _count(admin, "public.notes", gone) == 0
    assert _count(admin, "public.notes", stays) == 1
