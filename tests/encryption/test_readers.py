"""Every reader under encryption: a store connected without ``encryption=`` refuses sealed
values with ``EncryptionRequired`` (it never returns them sealed, as if they were the data);
the session adapters open what they read (LangChain, OpenAI Agents); the LangGraph saver,
which writes through statements of its own, refuses an encrypted store."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import shardstore
from shardstore.errors import (
    ConfigurationError,
    DecryptionFailed,
    EncryptionRequired,
    PlaintextRefused,
)
from tests.encryption.conftest import raw

MARKER = "ibis-marker-2718"


@pytest.fixture(scope="module")
def sealed_session(enc_store: shardstore.Store) -> uuid.UUID:
    """A session with sealed turns (buffered and folded), a checkpoint, a fact and a
    summary."""
    sid = enc_store.create_session(tenant_id="t1", subject_id="ann")
    enc_store.append_turns(
        sid, [{"role": "user", "content": f"{MARKER} {i} " + "w " * 20} for i in range(8)]
    )
    enc_store.checkpoint(sid, {"plan": MARKER}, tool_calls=[MARKER])
    enc_store.remember("t1", "ann", "likes", MARKER, source=(sid, 1))
    enc_store.flush(sid)
    enc_store.drain_folds()
    assert enc_store.summarize(lambda turns: f"{MARKER} summary", session_id=sid) >= 1
    return sid


def test_a_store_without_encryption_refuses_sealed_values(
    plain_store: shardstore.Store, sealed_session: uuid.UUID
) -> None:
    sid = sealed_session
    reads: dict[str, Any] = {
        "tail": lambda: plain_store.tail(sid),
        "tail_explained": lambda: plain_store.tail_explained(sid),
        "history": lambda: list(plain_store.history(sid)),
        "restore": lambda: plain_store.restore(sid),
        "checkpoints": lambda: plain_store.checkpoints(sid),
        "recall": lambda: plain_store.recall("t1", "ann"),
        "fact_history": lambda: plain_store.fact_history("t1", "ann", "likes"),
        "summaries": lambda: plain_store.summaries(sid),
        "context": lambda: plain_store.context(sid, max_tokens=400),
    }
    for name, read in reads.items():
        with pytest.raises(EncryptionRequired) as refused:
            read()
        # both a configuration problem and an unreadable value, and it says what to pass
        assert isinstance(refused.value, ConfigurationError), name
        assert isinstance(refused.value, DecryptionFailed), name
        assert "encryption=" in str(refused.value), name
        assert MARKER not in str(refused.value), name
    # a caller's plaintext message that happens to carry the envelope's field names is
    # plaintext, for a store without encryption
    own = plain_store.create_session(tenant_id="t1")
    odd = {"role": "user", "content": "x", "ss_enc": 1, "k": "a.b", "c": "zz"}
    plain_store.append_turn(own, odd)
    assert plain_store.tail(own)[0].message == odd


def test_session_adapters_open_what_they_read(
    enc_store: shardstore.Store, plain_store: shardstore.Store, module_dsn: str
) -> None:
    pytest.importorskip("langchain_core")
    pytest.importorskip("agents")
    from langchain_core.messages import AIMessage, HumanMessage

    from shardstore.integrations.langchain import ShardstoreChatMessageHistory
    from shardstore.integrations.openai_agents import ShardstoreSession

    chat = ShardstoreChatMessageHistory("lc-1", enc_store, tenant_id="t1", subject_id="bea")
    chat.add_messages([HumanMessage(content=MARKER), AIMessage(content="reply")])
    assert [m.content for m in chat.messages] == [MARKER, "reply"]
    newest = ShardstoreChatMessageHistory("lc-1", enc_store, tenant_id="t1", max_messages=1)
    assert [m.content for m in newest.messages] == ["reply"]
    with pytest.raises(EncryptionRequired):
        _ = ShardstoreChatMessageHistory("lc-1", plain_store, tenant_id="t1").messages

    session = ShardstoreSession("oa-1", enc_store, tenant_id="t1", subject_id="bea")
    items = [{"role": "user", "content": f"{MARKER} {i}"} for i in range(3)]

    async def agents_round() -> None:
        await session.add_items(items)  # type: ignore[arg-type]
        assert await session.get_items() == items
        assert await session.get_items(limit=2) == items[1:]
        assert await session.pop_item() == items[2]
        assert await session.get_items() == items[:2]
        on_plain = ShardstoreSession("oa-1", plain_store, tenant_id="t1")
        for read in (on_plain.get_items(limit=1), on_plain.pop_item()):
            with pytest.raises(EncryptionRequired):
                await read
        assert await session.get_items() == items[:2]  # the refused pop removed nothing

    asyncio.run(agents_round())
    stored = raw(
        module_dsn,
        "SELECT message::text FROM shardstore.turn_buffer WHERE session_id = ANY (%s)",
        ([chat.shardstore_session_id, session.shardstore_session_id],),
    )
    assert len(stored) == 4 and not any(MARKER in text for (text,) in stored)

    # a plaintext row where the adapter expects ciphertext is refused, not returned
    raw(
        module_dsn,
        'UPDATE shardstore.turn_buffer SET message = \'{"role": "user", "content": "x"}\''
        " WHERE session_id = %s AND turn_seq = 1",
        (session.shardstore_session_id,),
    )
    with pytest.raises(PlaintextRefused):
        asyncio.run(session.get_items(limit=1))
