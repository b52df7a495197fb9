"""Which sessions a search of an encrypted store indexes first (``text_sealed_pending_v1``):
exactly those holding a sealed turn without text windows, buffered or folded, compared with
the turns and windows the session holds; and a folded turn whose windows are gone is found
again by the next search."""

from __future__ import annotations

import uuid

import pytest

import shardstore
from tests.encryption.conftest import raw

WORDS = ["harbour", "laptop", "bread", "mountains", "bicycle", "lantern", "orchard", "violin"]


def conversation() -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"turn {i} mentions {WORDS[i % len(WORDS)]} and quokka{i}"}
        for i in range(40)
    ]


def pending(dsn: str, sid: uuid.UUID) -> bool:
    return bool(raw(dsn, "SELECT shardstore.text_sealed_pending_v1(%s)", (sid,))[0][0])


def without_windows(dsn: str, sid: uuid.UUID) -> set[int]:
    """The model: turns of the session (buffered or folded) that have no text window."""
    stored = {
        int(r[0])
        for r in raw(
            dsn,
            "SELECT turn_seq FROM shardstore.turn_buffer WHERE session_id = %(s)s "
            "UNION SELECT (e->>'s')::bigint FROM shardstore.agent_history h, "
            "jsonb_array_elements(h.conversation_chunk) e WHERE h.session_id = %(s)s",
            {"s": sid},
        )
    }
    indexed = {
        int(r[0])
        for r in raw(
            dsn, "SELECT DISTINCT turn_seq FROM shardstore.turn_text WHERE session_id = %s", (sid,)
        )
    }
    return stored - indexed


def folded(dsn: str, sid: uuid.UUID) -> list[int]:
    rows = raw(
        dsn,
        "SELECT (e->>'s')::bigint FROM shardstore.agent_history h, "
        "jsonb_array_elements(h.conversation_chunk) e WHERE h.session_id = %s ORDER BY 1",
        (sid,),
    )
    return [int(r[0]) for r in rows]


@pytest.fixture(scope="module")
def indexed_session(enc_store: shardstore.Store, module_dsn: str) -> uuid.UUID:
    sid = enc_store.create_session("t-pending", "user:p", "agent")
    enc_store.append_turns(sid, conversation())
    enc_store.drain_folds()
    enc_store.search("harbour", session_id=sid, mode="text", k=1)  # the pass indexes it all
    return sid


def test_pending_is_exactly_a_turn_without_windows(
    enc_store: shardstore.Store, module_dsn: str, indexed_session: uuid.UUID
) -> None:
    sid = indexed_session
    turns = folded(module_dsn, sid)
    buffered = sorted(
        int(r[0])
        for r in raw(
            module_dsn, "SELECT turn_seq FROM shardstore.turn_buffer WHERE session_id = %s", (sid,)
        )
    )
    assert len(turns) >= 10 and buffered, "the session must hold folded and buffered turns"
    assert without_windows(module_dsn, sid) == set()
    assert pending(module_dsn, sid) is False
    # a turn of the first folded chunk, one of the last, one still buffered
    for seq in (turns[0], turns[-1], buffered[-1]):
        raw(
            module_dsn,
            "DELETE FROM shardstore.turn_text WHERE session_id = %s AND turn_seq = %s",
            (sid, seq),
        )
        assert without_windows(module_dsn, sid) == {seq}
        assert pending(module_dsn, sid) is True
        hits = enc_store.search(f"quokka{seq}", session_id=sid, mode="text", k=1)
        assert [t.turn_seq for t in hits[0].turns if f"quokka{seq}" in t.message["content"]] == [
            seq
        ]
        assert without_windows(module_dsn, sid) == set()
        assert pending(module_dsn, sid) is False


def test_a_session_of_another_shape_is_judged_alike(
    enc_store: shardstore.Store, module_dsn: str
) -> None:
    # only buffered turns, no chunk folded yet: no partition is read, the answer the same
    sid = enc_store.create_session("t-pending", "user:q", "agent")
    enc_store.append_turn(sid, {"role": "user", "content": "a lantern in the orchard"})
    assert folded(module_dsn, sid) == []
    assert pending(module_dsn, sid) is True
    enc_store.search("lantern", session_id=sid, mode="text", k=1)
    assert pending(module_dsn, sid) is False
    # a session with no turn at all, and one that does not exist
    empty = enc_store.create_session("t-pending", "user:r", "agent")
    assert pending(module_dsn, empty) is False
    assert pending(module_dsn, uuid.uuid4()) is False
