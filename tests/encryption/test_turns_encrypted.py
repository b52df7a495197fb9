"""Turns under encryption: stored sealed, read back on every path, bound to their place."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import DecryptionFailed, PlaintextRefused

MARKER = "zebra-marker-4711"


@pytest.fixture
def keys(tmp_path: Path) -> LocalKeyProvider:
    return LocalKeyProvider(tmp_path / "keys")


@pytest.fixture
def enc(make_store: Callable[..., shardstore.Store], keys: LocalKeyProvider) -> shardstore.Store:
    return make_store(encryption=keys)


def _raw(dsn: str, sql: str, params: Any = None) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def test_turns_round_trip_and_are_sealed_in_the_database(enc: shardstore.Store, dsn: str) -> None:
    sid = enc.create_session(tenant_id="t1", subject_id="alice")
    messages = [{"role": "user", "content": f"{MARKER} {i}"} for i in range(40)]
    enc.append_turn(sid, messages[0], idempotency_key="k0")
    enc.append_turns(sid, messages[1:30])
    for m in messages[30:]:
        enc.append_turn(sid, m)
    again = enc.append_turn(sid, messages[0], idempotency_key="k0")
    assert again.duplicate and again.turn_seq == 0
    enc.flush(sid)
    assert [t.message for t in enc.tail(sid, n=5)] == messages[-5:]
    assert [t.message for t in enc.history(sid)] == messages
    dumped = _raw(dsn, "SELECT message::text FROM shardstore.turn_buffer") + _raw(
        dsn, "SELECT conversation_chunk::text FROM shardstore.agent_history"
    )
    assert dumped and not any(MARKER in row[0] for row in dumped)


def test_ciphertext_copied_to_another_position_session_or_tenant_is_refused(
    enc: shardstore.Store, dsn: str
) -> None:
    a = enc.create_session(tenant_id="t1", subject_id="alice")
    b = enc.create_session(tenant_id="t1", subject_id="alice")
    c = enc.create_session(tenant_id="t2", subject_id="alice")
    for sid in (a, b, c):
        enc.append_turns(sid, [{"role": "user", "content": f"{MARKER} {i}"} for i in range(3)])
    copy = (
        "UPDATE shardstore.turn_buffer SET message = (SELECT message FROM shardstore.turn_buffer"
        " WHERE session_id = %s AND turn_seq = %s) WHERE session_id = %s AND turn_seq = %s"
    )
    _raw(dsn, copy, (a, 0, a, 2))  # another position
    with pytest.raises(DecryptionFailed):
        enc.tail(a)
    _raw(dsn, copy, (a, 1, b, 1))  # another session, same subject and key
    with pytest.raises(DecryptionFailed):
        enc.history(b, 1, 2).__next__()
    _raw(dsn, copy, (a, 0, c, 0))  # another tenant
    with pytest.raises(DecryptionFailed):
        enc.tail(c, n=1 + 2)
    _raw(
        dsn,
        'UPDATE shardstore.turn_buffer SET message = \'{"role": "user", "content": "x"}\''
        " WHERE session_id = %s AND turn_seq = 2",
        (c,),
    )
    with pytest.raises(PlaintextRefused):
        enc.tail(c, n=1)
