"""Encryption at rest on a Citus cluster (docs/security.md, docs/scale-out.md): sealed
appends, tail and history across folds, rewind with the rewind-epoch check, forks,
checkpoints, facts and ``purge_subject(shred=True)`` on a distributed store, and every
statement the encryption layer adds routed to one shard.

Skipped unless ``SHARDSTORE_CITUS_DSN`` names a database on a Citus coordinator (see
tests/citus/test_citus.py); the schema is migrated and distributed there, and the tests use
sessions and tenants of their own."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.core.sql import query
from shardstore.encryption import LocalKeyProvider, Scope
from shardstore.errors import DecryptionFailed, KeyShredded

CITUS_DSN = os.environ.get("SHARDSTORE_CITUS_DSN")
pytestmark = pytest.mark.skipif(not CITUS_DSN, reason="SHARDSTORE_CITUS_DSN is not set")

MARKER = "quokka-citus-5150"


def _msg(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{MARKER} {i} " + "w " * 20}


def _tenant() -> str:
    return f"t_{uuid.uuid4().hex[:10]}"


def _raw(dsn: str, sql: str, params: Any = None) -> list[Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


@pytest.fixture(scope="module")
def citus() -> Iterator[str]:
    assert CITUS_DSN
    store = shardstore.connect(CITUS_DSN)
    try:
        store.distribute()
    finally:
        store.close()
    yield CITUS_DSN


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> LocalKeyProvider:
    root = tmp_path_factory.mktemp("citus-keys")
    return LocalKeyProvider(root / "store", key_file=root / "kek")


@pytest.fixture(scope="module")
def enc(citus: str, keys: LocalKeyProvider) -> Iterator[shardstore.Store]:
    s = shardstore.connect(citus, encryption=keys, chunk_tokens=300)
    yield s
    s.close()


def _buffered(dsn: str, sid: uuid.UUID, seq: int) -> str:
    rows = _raw(
        dsn,
        "SELECT message::text FROM shardstore.turn_buffer WHERE session_id = %s AND turn_seq = %s",
        (sid, seq),
    )
    assert rows, f"turn {seq} is not buffered"
    return str(rows[0][0])


def test_sealed_statements_route_to_one_shard(enc: shardstore.Store, citus: str) -> None:
    sid = enc.create_session(_tenant(), subject_id="router")
    enc.append_turns(sid, [_msg(i) for i in range(3)], idempotency_keys=["a", "b", "c"])
    enc.rewind(sid, 1)
    child = enc.fork(sid)
    with psycopg.connect(citus, autocommit=True) as conn:
        for name, params in (
            ("sealed_append_head", {"sid": sid, "keys": ["a", "z"]}),
            ("sealed_epochs", (sid,)),
            ("sealed_copies", (child,)),
            ("session_owners", (sid,)),
        ):
            plan = [r[0] for r in conn.execute("EXPLAIN " + query(name), params).fetchall()]
            tasks = [line.strip() for line in plan if "Task Count" in line]
            assert tasks == ["Task Count: 1"], (name, plan)


def test_encrypted_session_on_a_distributed_store(enc: shardstore.Store, citus: str) -> None:
    tenant = _tenant()
    sid = enc.create_session(tenant, subject_id="amy")
    messages = [_msg(i) for i in range(30)]
    for m in messages[:20]:
        enc.append_turn(sid, m)
    enc.append_turns(sid, messages[20:])
    old = _buffered(citus, sid, 28)
    enc.flush(sid)
    enc.drain_folds()
    assert [t.message for t in enc.tail(sid, n=5)] == messages[-5:]
    assert [t.message for t in enc.history(sid)] == messages
    assert any(c.partition for c in enc.chunks(sid))  # some turns are folded
    # nothing of the text on any shard, read through the coordinator
    stored = _raw(
        citus,
        "SELECT message::text FROM shardstore.turn_buffer WHERE session_id = %s"
        " UNION ALL SELECT conversation_chunk::text FROM shardstore.agent_history"
        " WHERE session_id = %s",
        (sid, sid),
    )
    assert stored and not any(MARKER in text for (text,) in stored)

    # rewind: the new epoch is written on the session's shard and checked by every read
    assert enc.rewind(sid, 28) == 2
    enc.append_turns(sid, [_msg(100), _msg(101)])
    assert json.loads(_buffered(citus, sid, 28))["e"] == 1
    assert [t.message for t in enc.tail(sid, n=3)] == [messages[27], _msg(100), _msg(101)]
    new = _buffered(citus, sid, 28)
    _raw(
        citus,
        "UPDATE shardstore.turn_buffer SET message = %s::jsonb"
        " WHERE session_id = %s AND turn_seq = 28",
        (old, sid),
    )
    with pytest.raises(DecryptionFailed):
        enc.tail(sid, n=3)
    with pytest.raises(DecryptionFailed):
        list(enc.history(sid, from_seq=28))
    _raw(
        citus,
        "UPDATE shardstore.turn_buffer SET message = %s::jsonb"
        " WHERE session_id = %s AND turn_seq = 28",
        (new, sid),
    )
    assert enc.tail(sid, n=1)[0].message == _msg(101)

    # checkpoints and facts, sealed on the shards
    done = enc.append_turn(sid, _msg(102), checkpoint={"plan": MARKER})
    cp = enc.checkpoint(sid, {"plan": f"{MARKER} later"})
    assert enc.restore(sid).checkpoint == cp
    earlier = enc.restore(sid, done.checkpoint_id).checkpoint
    assert earlier is not None and earlier.state == {"plan": MARKER}
    enc.remember(tenant, "amy", "likes", {"food": MARKER}, source=(sid, 3))
    assert enc.recall(tenant, "amy")[0].value == {"food": MARKER}
    states = _raw(
        citus, "SELECT state::text FROM shardstore.checkpoints WHERE session_id = %s", (sid,)
    )
    facts = _raw(citus, "SELECT value::text FROM shardstore.facts WHERE tenant_id = %s", (tenant,))
    assert states and facts and not any(MARKER in t for (t,) in [*states, *facts])

    # shred: the subject's key goes, and with it every ciphertext still anywhere
    key = enc.ctx.sealer.keys.key_for(Scope("subject", tenant, "amy"), create=False)  # type: ignore[union-attr]
    assert key is not None
    report = enc.purge_subject(tenant, "amy", shred=True)
    assert report.shredded_keys == (key.kid,)
    with pytest.raises(KeyShredded):
        enc.ctx.sealer.keys.key(key.kid)  # type: ignore[union-attr]
    assert not _raw(citus, "SELECT 1 FROM shardstore.turn_buffer WHERE session_id = %s", (sid,))


def test_fork_reads_its_inheritance_after_its_parent_rewinds(enc: shardstore.Store) -> None:
    parent = enc.create_session(_tenant(), subject_id="fam")
    enc.append_turns(parent, [_msg(i) for i in range(6)])
    enc.rewind(parent, 4)
    enc.append_turns(parent, [_msg(14), _msg(15)])
    inherited = [*[_msg(i) for i in range(4)], _msg(14), _msg(15)]
    child = enc.fork(parent, at_turn_seq=5)
    enc.append_turn(child, _msg(26))
    enc.rewind(parent, 2)  # copies of turns 2..5 go to the child's shard first
    enc.append_turn(parent, _msg(32))
    assert [t.message for t in enc.history(child)] == [*inherited, _msg(26)]
    assert [t.message for t in enc.tail(child, n=3)] == [_msg(14), _msg(15), _msg(26)]
    assert [t.message for t in enc.history(parent)] == [_msg(0), _msg(1), _msg(32)]


def test_async_store_with_encryption_on_citus(citus: str, keys: LocalKeyProvider) -> None:
    async def scenario() -> None:
        store = await shardstore.connect_async(citus, encryption=keys)
        try:
            sid = await store.create_session(_tenant(), subject_id="async")
            await store.append_turns(sid, [_msg(i) for i in range(4)])
            assert await store.rewind(sid, 2) == 2
            await store.append_turn(sid, _msg(12))
            assert [t.message for t in await store.tail(sid, n=3)] == [_msg(0), _msg(1), _msg(12)]
        finally:
            await store.close()

    asyncio.run(scenario())


def test_search_over_sealed_turns_on_citus(citus: str, keys: LocalKeyProvider) -> None:
    # the client-side keyed text pass, the keyed ranking and the embedding worker's opened
    # turns on a distributed store: text, vector and hybrid find the sealed turn of the
    # session and of the tenant, and a shredded subject is found no more
    from tests.embedders import HashEmbedder

    tenant = _tenant()
    with shardstore.connect(
        citus, encryption=keys, chunk_tokens=300, embedding_model=HashEmbedder()
    ) as store:
        sid = store.create_session(tenant, "vera")
        store.append_turns(sid, [_msg(i) for i in range(6)])
        store.append_turn(sid, {"role": "user", "content": "the vault code is QX-7731"})
        other = store.create_session(tenant, "walt")
        store.append_turn(other, {"role": "user", "content": "walt keeps QX-7731 too"})
        store.flush(sid)
        store.embed()
        for scope in ({"session_id": sid}, {"tenant_id": tenant}):
            for mode in ("text", "hybrid"):
                hits = store.search("QX-7731", mode=mode, k=5, **scope)
                found = [t.message["content"] for h in hits for t in h.turns]
                assert "the vault code is QX-7731" in found, (scope, mode, found)
        vector = HashEmbedder().embed(["the vault code is QX-7731"])[0]
        hits = store.search(vector, session_id=sid, k=1)
        assert hits and hits[0].turns[-1].message["content"] == "the vault code is QX-7731"
        assert _raw(
            citus,
            "SELECT count(*) FROM shardstore.turn_text WHERE tsv::text LIKE %s",
            ("%qx-7731%",),
        ) == [(0,)]
        store.purge_subject(tenant, "vera", shred=True)
        hits = store.search("QX-7731", tenant_id=tenant, mode="text", k=5)
        assert [t.message["content"] for h in hits for t in h.turns] == ["walt keeps QX-7731 too"]
