"""No vectors for encrypted data (issue 36 point 4; docs/decisions/0025-encrypted-search.md):
``configure_sealed_vectors(False)`` deletes every vector of a sealed turn and none of a
plaintext turn, the embedding workers (``embed``, ``maintain``) then leave sealed turns
without vectors and drain the queue of them, vector and hybrid search with ``encryption=``
rank by keyed text and still find exact codes, and switching it on again queues the skipped
turns. The setting is the database's, so each test restores it (on) before it ends. One
module database; the hash embedder (the real model's rankings are in
test_search_encrypted.py and the benchmark)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import AccessDenied, ConfigurationError, InvalidInput
from tests.embedders import HashEmbedder
from tests.encryption.conftest import raw
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

CODE = "QX-4471"
FILLER = [
    "the weather in the harbour was grey and windy",
    "we compared three laptop models and their battery life",
    "she baked bread with rye flour for the market",
    "the train to the mountains leaves at seven",
]


def conversation(n: int, code_at: int) -> list[dict[str, Any]]:
    messages = [{"role": "user", "content": f"{FILLER[i % len(FILLER)]} {i}"} for i in range(n)]
    messages[code_at] = {"role": "user", "content": f"my refund reference is {CODE} for the card"}
    return messages


@pytest.fixture(scope="module")
def model() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture(scope="module")
def stores(
    module_dsn: str, keys: LocalKeyProvider, model: HashEmbedder
) -> Iterator[dict[str, shardstore.Store]]:
    enc = shardstore.connect(module_dsn, encryption=keys, chunk_tokens=40, embedding_model=model)
    plain = shardstore.connect(module_dsn, chunk_tokens=40, embedding_model=model)
    yield {"enc": enc, "plain": plain}
    enc.configure_sealed_vectors(True)
    enc.close()
    plain.close()


def vectors(dsn: str, sid: uuid.UUID) -> int:
    ((n,),) = raw(
        dsn, "SELECT count(*) FROM shardstore.chunk_vectors WHERE session_id = %s", (sid,)
    )
    return int(n)


def pending(dsn: str, sid: uuid.UUID) -> tuple[int, int]:
    """Queued chunks of the session, and its buffered turns above the embedding watermark."""
    ((queued, buffered),) = raw(
        dsn,
        "SELECT (SELECT count(*) FROM shardstore.embed_queue WHERE session_id = %(s)s),"
        " (SELECT count(*) FROM shardstore.turn_buffer b"
        "   LEFT JOIN shardstore.embed_marks m USING (session_id)"
        "  WHERE b.session_id = %(s)s AND b.turn_seq >= coalesce(m.upto, 0))",
        {"s": sid},
    )
    return int(queued), int(buffered)


def setup_pair(stores: dict[str, shardstore.Store], tenant: str) -> tuple[uuid.UUID, uuid.UUID]:
    """A sealed and a plaintext session of ``tenant``, folded in part, embedded."""
    enc, plain = stores["enc"], stores["plain"]
    sealed = enc.create_session(tenant, subject_id="alice")
    clear = plain.create_session(tenant)
    enc.append_turns(sealed, conversation(14, 5))
    plain.append_turns(clear, conversation(14, 5))
    enc.drain_folds()
    plain.drain_folds()
    enc.embed()
    return sealed, clear


def test_off_deletes_sealed_vectors_workers_skip_them_search_falls_back_on_requeues(
    stores: dict[str, shardstore.Store], module_dsn: str
) -> None:
    enc, plain = stores["enc"], stores["plain"]
    sealed, clear = setup_pair(stores, "sv-flow")
    before_sealed, before_clear = vectors(module_dsn, sealed), vectors(module_dsn, clear)
    assert before_sealed > 0 and before_clear > 0
    assert (
        raw(
            module_dsn,
            "SELECT count(*) FROM shardstore.turn_buffer WHERE session_id = %s",
            (sealed,),
        )[0][0]
        > 0
    ), "some sealed turns stay buffered (both paths covered)"
    try:
        assert enc.sealed_vectors() is True
        deleted = enc.configure_sealed_vectors(False)
        assert deleted >= before_sealed  # every vector of a sealed turn
        assert vectors(module_dsn, sealed) == 0
        assert vectors(module_dsn, clear) == before_clear  # none of a plaintext turn
        assert plain.sealed_vectors() is False and enc.configure_sealed_vectors(False) == 0

        # new sealed turns (buffered and folded) are left without vectors, the queue drained
        more = [{"role": "user", "content": f"a later sealed note {i}"} for i in range(12)]
        enc.append_turns(sealed, more)
        plain.append_turns(clear, more)
        enc.drain_folds()
        plain.drain_folds()
        assert pending(module_dsn, sealed) != (0, 0)
        enc.embed()
        assert vectors(module_dsn, sealed) == 0 and pending(module_dsn, sealed) == (0, 0)
        assert vectors(module_dsn, clear) > before_clear
        enc.append_turns(sealed, more[:3])
        enc.drain_folds()
        report = plain.maintain()  # a worker without encryption= drains them too
        assert report is not None
        assert vectors(module_dsn, sealed) == 0 and pending(module_dsn, sealed) == (0, 0)

        # vector and hybrid search rank by keyed text: the exact code is still found
        for mode in ("vector", "hybrid"):
            for scope in ({"session_id": sealed}, {"tenant_id": "sv-flow"}):
                hits = enc.search(f"refund reference {CODE}", mode=mode, **scope)
                assert hits and hits[0].session_id == sealed, (mode, scope)
                assert CODE in hits[0].turns[-1].message["content"], (mode, scope)
        with pytest.raises(ConfigurationError):
            enc.search([0.1] * 256, session_id=sealed, mode="vector")
        ctx = enc.context(sealed, max_tokens=80, recall=CODE, k=1)
        assert any(CODE in str(m.get("content")) for m in ctx.messages), ctx.parts
        # a plaintext store's vector search is unchanged
        hits = plain.search(f"refund reference {CODE}", session_id=clear, mode="vector")
        assert hits and CODE in hits[0].turns[-1].message["content"]
    finally:
        requeued = enc.configure_sealed_vectors(True)
    assert requeued > 0 and pending(module_dsn, sealed) != (0, 0)
    enc.embed()
    assert vectors(module_dsn, sealed) > 0 and pending(module_dsn, sealed) == (0, 0)
    hits = enc.search([0.0] * 255 + [1.0], session_id=sealed, mode="vector")  # vectors again
    assert hits
    assert enc.configure_sealed_vectors(True) == 0  # on already: nothing queued


@pytest.mark.parametrize(
    "bad", [None, 1, 0, "false", "no", [], {"x": 1}, [[[[False]]]], "off" * 100_000, 1.0]
)
def test_hostile_arguments_are_refused_before_anything_changes(
    stores: dict[str, shardstore.Store], bad: Any
) -> None:
    enc = stores["enc"]
    with pytest.raises(InvalidInput):
        enc.configure_sealed_vectors(bad)
    assert enc.sealed_vectors() is True


def test_a_tenant_role_cannot_switch_it(module_dsn: str) -> None:
    role = make_tenant_role(module_dsn)
    try:
        with as_tenant(module_dsn, role, "sv-tenant") as conn:
            for attempt in (
                "SELECT shardstore.vec_sealed_vectors_set_v1(false)",
                "UPDATE shardstore.text_search_config SET sealed_vectors = false",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(attempt)
        with as_tenant(module_dsn, role, "sv-tenant") as conn:
            tenant_store = shardstore.connect(conn)
            try:
                with pytest.raises(AccessDenied):
                    tenant_store.configure_sealed_vectors(False)
                assert tenant_store.sealed_vectors() is True
            finally:
                tenant_store.close()
    finally:
        drop_tenant_role(module_dsn, role)
    ((on,),) = raw(module_dsn, "SELECT sealed_vectors FROM shardstore.text_search_config")
    assert on is True


def test_async_parity(
    stores: dict[str, shardstore.Store],
    module_dsn: str,
    keys: LocalKeyProvider,
    model: HashEmbedder,
) -> None:
    sealed, clear = setup_pair(stores, "sv-async")
    assert vectors(module_dsn, sealed) > 0

    async def flow() -> None:
        astore = await shardstore.connect_async(
            module_dsn, encryption=keys, embedding_model=model, chunk_tokens=40
        )
        try:
            assert await astore.sealed_vectors() is True
            with pytest.raises(InvalidInput):
                await astore.configure_sealed_vectors("off")  # type: ignore[arg-type]
            assert await astore.configure_sealed_vectors(False) > 0
            assert vectors(module_dsn, sealed) == 0 and vectors(module_dsn, clear) > 0
            hits = await astore.search(CODE, session_id=sealed, mode="hybrid")
            assert hits and CODE in hits[0].turns[-1].message["content"]
            with pytest.raises(ConfigurationError):
                await astore.search([1.0] * 256, tenant_id="sv-async", mode="vector")
            assert await astore.configure_sealed_vectors(True) > 0
            await astore.embed()
            assert vectors(module_dsn, sealed) > 0
        finally:
            await astore.configure_sealed_vectors(True)
            await astore.close()

    asyncio.run(flow())


def test_maintain_with_encryption_indexes_sealed_turns_for_text_search(
    stores: dict[str, shardstore.Store], module_dsn: str
) -> None:
    """A maintenance run with ``encryption=`` gives sealed turns (folded and buffered) their
    keyed text windows, so that a search finds them indexed; a run without a key store
    cannot and reports nothing for them."""
    enc, plain = stores["enc"], stores["plain"]
    sid = enc.create_session("sv-maint", subject_id="bob")
    enc.append_turns(sid, conversation(12, 7))
    enc.drain_folds()
    windows = "SELECT count(DISTINCT turn_seq) FROM shardstore.turn_text WHERE session_id = %s"
    assert raw(module_dsn, windows, (sid,))[0][0] == 0
    without = plain.maintain(embed=False)
    assert without.sealed_text_turns_indexed is None
    assert raw(module_dsn, windows, (sid,))[0][0] == 0
    report = enc.maintain(embed=False)
    assert report.sealed_text_turns_indexed is not None
    assert report.sealed_text_turns_indexed >= 12 and report.sealed_text_sessions_indexed
    assert raw(module_dsn, windows, (sid,))[0][0] == 12
    assert any(row[0] == "sealed text indexed" for row in report.detail_rows())
    assert report.to_json()["sealed_text_turns_indexed"] == report.sealed_text_turns_indexed
    assert enc.maintain(embed=False).sealed_text_turns_indexed == 0  # nothing left
    hits = enc.search(CODE, session_id=sid, mode="text")
    assert hits and CODE in hits[0].turns[-1].message["content"]
    assert raw(module_dsn, windows, (sid,))[0][0] == 12  # indexed once
