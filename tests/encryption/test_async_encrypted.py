"""asyncio parity: ``connect_async(encryption=)``, ``connect_tenant_async(encryption=)``,
every read opening what it returns, ``purge_subject(shred=True)`` and the session adapters
on an AsyncStore, with the same refusals as the sync store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import (
    ConfigurationError,
    DecryptionFailed,
    EncryptionRequired,
    InvalidInput,
    KeyShredded,
)
from tests.encryption.conftest import raw

MARKER = "tapir-marker-1618"


def test_the_async_store_seals_opens_and_shreds(module_dsn: str, keys: LocalKeyProvider) -> None:
    pytest.importorskip("langchain_core")
    pytest.importorskip("agents")
    from langchain_core.messages import HumanMessage

    from shardstore.integrations.langchain import ShardstoreChatMessageHistory
    from shardstore.integrations.openai_agents import ShardstoreSession

    messages = [{"role": "user", "content": f"{MARKER} {i} " + "w " * 20} for i in range(8)]

    async def scenario() -> None:
        with pytest.raises(ConfigurationError):
            await shardstore.connect_async(module_dsn, encryption="keys")  # type: ignore[arg-type]
        store = await shardstore.connect_async(module_dsn, encryption=keys, chunk_tokens=60)
        plain = await shardstore.connect_async(module_dsn)
        try:
            sid = await store.create_session(tenant_id="t1", subject_id="amy")
            await store.append_turns(sid, messages[:5])
            done = await store.append_turn(sid, messages[5], checkpoint={"plan": MARKER})
            for message in messages[6:]:
                await store.append_turn(sid, message)
            assert [t.message for t in await store.tail(sid, n=3)] == messages[-3:]
            assert [t.message for t in (await store.tail_explained(sid, n=2)).turns] == (
                messages[-2:]
            )
            assert [t.message async for t in store.history(sid)] == messages
            assert (await store.restore(sid)).checkpoint.state == {"plan": MARKER}
            assert (await store.restore(sid, done.checkpoint_id)).turns[-1].message == messages[5]
            await store.remember("t1", "amy", "likes", MARKER, source=(sid, 0))
            assert (await store.recall("t1", "amy"))[0].value == MARKER
            await store.flush(sid)
            assert await store.summarize(lambda turns: f"{MARKER} s", session_id=sid) >= 1
            assert (await store.summaries(sid))[0].text == f"{MARKER} s"
            assert (await store.context(sid, max_tokens=200)).messages[-1] == messages[-1]

            chat = ShardstoreChatMessageHistory("lc-a", store, tenant_id="t1", subject_id="amy")
            await chat.aadd_messages([HumanMessage(content=MARKER)])
            assert [m.content for m in await chat.aget_messages()] == [MARKER]
            agents = ShardstoreSession("oa-a", store, tenant_id="t1", subject_id="amy")
            await agents.add_items([{"role": "user", "content": MARKER}])
            assert await agents.get_items(limit=1) == [{"role": "user", "content": MARKER}]
            assert await agents.pop_item() == {"role": "user", "content": MARKER}

            for read in (plain.tail(sid), plain.restore(sid), plain.recall("t1", "amy")):
                with pytest.raises(EncryptionRequired):
                    await read
            with pytest.raises(InvalidInput):
                await store.purge_subject("t1", "amy", shred="yes")  # type: ignore[arg-type]
            with pytest.raises(ConfigurationError):
                await plain.purge_subject("t1", "amy", shred=True)
            assert (await store.tail(sid, n=1))[0].message == messages[-1]  # refusals: no shred

            sealed = raw(
                module_dsn,
                "SELECT e->'m' FROM shardstore.agent_history h,"
                " jsonb_array_elements(h.conversation_chunk) e"
                " WHERE h.session_id = %s AND (e->>'s')::bigint = 0",
                (sid,),
            )[0][0]
            report = await store.purge_subject("t1", "amy", shred=True)
            assert len(report.shredded_keys) == 1 and report.sessions_affected == 3
            with pytest.raises(KeyShredded):  # a copy of a row taken before: unopenable
                store.ctx.sealer.open(sealed, "turn", str(sid), "0", "a copied turn")  # type: ignore[union-attr]
        finally:
            await store.close()
            await plain.close()

    asyncio.run(scenario())
    dumped = raw(module_dsn, "SELECT message::text FROM shardstore.turn_buffer")
    assert not any(MARKER in text for (text,) in dumped)


def test_a_tenant_async_store_encrypts(module_dsn: str, tmp_path: Path) -> None:
    from shardstore.schema import rls

    keys = LocalKeyProvider(tmp_path / "keys")

    async def scenario() -> None:
        store = await rls.connect_tenant_async(module_dsn, tenant="t9", encryption=keys)
        try:
            sid = await store.create_session(tenant_id="t9")
            await store.append_turn(sid, {"role": "user", "content": MARKER})
            assert (await store.tail(sid))[0].message == {"role": "user", "content": MARKER}
        finally:
            await store.close()
        with pytest.raises(ConfigurationError):
            await rls.connect_tenant_async(module_dsn, tenant="t9", encryption=3)  # type: ignore[arg-type]
        other = await rls.connect_tenant_async(
            module_dsn, tenant="t9", encryption=LocalKeyProvider(tmp_path / "other")
        )
        try:  # another key store (another KEK, no such data key): nothing is returned
            with pytest.raises(DecryptionFailed):
                await other.tail(sid)
        finally:
            await other.close()

    asyncio.run(scenario())
