"""Context assembly and text recall through fork lineage, stored summary counts, and the
bounded text ranking.

A fork's session-scoped text search (and context recall) finds the inherited turns it reads,
folded or still in the parent's buffer, and none of the parent's turns past the fork point;
after a copy-on-write rewind of the parent the fork finds its copies; a GDPR purge of the
parent leaves no lexeme of the erased turns anywhere. context() reads its window and
summaries in one statement with the summaries' stored message counts: it must equal the
rule (assembly.plan) applied to public reads, whatever counts are stored. A text query
over a scope larger than the sample scores a bounded candidate set, and rare lexemes are
still found exactly."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.context import assembly
from shardstore.history.tokens import make_counter
from shardstore.models import Turn
from shardstore.search import text as textsearch

StoreFactory = Callable[..., shardstore.Store]
SMALL: dict[str, Any] = {
    "chunk_tokens": 60,
    "partition_interval": timedelta(days=3650),
    "premake": 0,
}
WORDS = ["refund", "kernel", "ticket", "ocean", "pixel", "quartz", "lemon", "zebra"]


def msg(i: int, tag: str = "p") -> dict[str, Any]:
    words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(i % 5))
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag}{i} {words}"}


def stub(turns: list[Turn]) -> str:
    return f"summary of turns {turns[0].turn_seq}-{turns[-1].turn_seq}: " + " ".join(
        str(t.message.get("content", ""))[:20] for t in turns
    )


def found(store: shardstore.Store, sid: Any, query: str) -> set[int]:
    """The turn_seqs of the hits' matching turns (each hit's last turn) for a text search."""
    return {h.turns[-1].turn_seq for h in store.search(query, session_id=sid, k=50, mode="text")}


def count(dsn: str, sql: str, args: tuple[Any, ...] = ()) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql, args).fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.slow
def test_text_search_follows_the_fork_lineage(make_store: StoreFactory, dsn: str) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme", subject_id="user:1")
    sent = [msg(i) for i in range(30)]
    sent[3] = {"role": "user", "content": "the secret word is xylophone"}
    sent[12] = {"role": "user", "content": "saffron saffron"}
    sent[17] = {"role": "user", "content": "gooseberry buffered"}
    sent[20] = {"role": "user", "content": "marmalade after the fork"}
    store.append_turns(parent, sent[:16])
    store.flush(parent)  # 0..15 folded
    store.append_turns(parent, sent[16:18])  # 16, 17 buffered in the parent
    child = store.fork(parent, at_turn_seq=17)
    buffered = "SELECT count(*) FROM shardstore.turn_buffer WHERE session_id = %s AND turn_seq = 17"
    assert count(dsn, buffered, (parent,)) == 1  # turn 17 is still in the parent's buffer
    assert found(store, child, "gooseberry") == {17}  # inherited from the parent's buffer
    store.append_turns(parent, sent[18:])
    store.append_turn(child, {"role": "user", "content": "walrus in the fork"})  # turn 18
    assert found(store, child, "xylophone") == {3}  # inherited, folded
    assert found(store, child, "gooseberry") == {17}  # inherited, folded since
    assert found(store, child, "walrus") == {18}  # its own
    assert found(store, child, "marmalade") == set()  # the parent's, past the fork point
    assert found(store, parent, "marmalade") == {20} and found(store, parent, "walrus") == set()
    hit = store.search("xylophone", session_id=child, k=1, mode="text")[0]
    assert hit.session_id == child and hit.turns[-1].message == sent[3]
    # a fork of the fork reads both ancestors, each bounded
    grandchild = store.fork(child, at_turn_seq=18)
    store.append_turn(child, {"role": "user", "content": "narwhal only in the child"})
    assert found(store, grandchild, "xylophone") == {3}
    assert found(store, grandchild, "walrus") == {18}
    assert found(store, grandchild, "narwhal") == set()
    before = {q: found(store, child, q) for q in ("xylophone", "saffron", "gooseberry", "walrus")}
    # copy-on-write: the parent rewound below the fork point; the fork keeps finding its turns
    store.flush(parent)
    store.rewind(parent, 2)
    assert found(store, parent, "xylophone") == set()
    assert {q: found(store, child, q) for q in before} == before
    assert found(store, grandchild, "xylophone") == {3}
    assert (
        count(
            dsn,
            "SELECT count(*) FROM shardstore.turn_text WHERE session_id = %s AND turn_seq = 3",
            (child,),
        )
        == 1
    )
    # a GDPR purge of the parent erases its turns from the copies: no lexeme left anywhere
    lexeme_rows = "SELECT count(*) FROM shardstore.turn_text WHERE tsv @> ARRAY[hashtext(%s)]"
    assert count(dsn, lexeme_rows, ("xylophon",)) > 0  # the check below sees them while held
    store.purge_session(parent)
    assert found(store, child, "xylophone") == set()
    assert found(store, grandchild, "xylophone") == set()
    assert found(store, child, "walrus") == {18}
    for word in ("xylophon", "saffron", "gooseberri"):
        rows = count(dsn, lexeme_rows, (word,))
        assert rows == 0, word
    # the child's turns past its new fork point stay searchable after its own rewind
    store.rewind(child, 19)
    assert found(store, child, "narwhal") == set() and found(store, child, "walrus") == {18}


@pytest.mark.slow
def test_hybrid_in_a_fork_ranks_inherited_vectors(make_store: StoreFactory) -> None:
    from tests.embedders import HashEmbedder

    store = make_store(embedding_model=HashEmbedder(window_tokens=8), **SMALL)
    parent = store.create_session("acme")
    sent = [msg(i) for i in range(20)]
    sent[3] = {"role": "user", "content": "the secret word is xylophone"}
    sent[15] = {"role": "user", "content": "marmalade marmalade"}
    store.append_turns(parent, sent)
    store.flush(parent)
    child = store.fork(parent, at_turn_seq=10)
    store.embed()
    hits = store.search("xylophone", session_id=child, k=3, mode="hybrid")
    assert hits[0].session_id == child and hits[0].turns[-1].turn_seq == 3
    everything = store.search("marmalade", session_id=child, k=50, mode="hybrid")
    assert all(t.turn_seq <= 10 for h in everything for t in h.turns)


def test_context_recall_and_summaries_in_a_fork(make_store: StoreFactory) -> None:
    store = make_store(**SMALL)
    parent = store.create_session("acme")
    sent = [msg(i) for i in range(40)]
    sent[4] = {"role": "user", "content": "my order id is QX-4471, please track it"}
    sent[30] = {"role": "user", "content": "order QX-9999 belongs to the parent only"}
    store.append_turns(parent, sent)
    store.drain_folds()
    store.summarize(stub)
    child = store.fork(parent, at_turn_seq=25)
    store.append_turns(child, [msg(i, "c") for i in range(26, 40)])
    store.drain_folds()
    ctx = store.context(child, 300, recall="QX-4471 QX-9999")
    recalled = [p for p in ctx.parts if p.kind == "recall"]
    assert any(p.first_turn_seq is not None and p.first_turn_seq <= 4 for p in recalled)
    text = " ".join(str(m["content"]) for m in ctx.messages)
    assert "QX-9999" not in text  # the parent's turn past the fork point
    summaries = [p for p in ctx.parts if p.kind == "summary"]
    assert summaries  # the parent's summaries of the chunks the fork inherits whole
    assert all(p.last_turn_seq is not None and p.last_turn_seq <= 25 for p in summaries)
    assert ctx.tokens <= 300
    history = {t.turn_seq: t.message for t in store.history(child)}
    for message, part in zip(ctx.messages, ctx.parts, strict=True):
        if part.kind == "recent":
            assert part.first_turn_seq is not None
            assert message == history[part.first_turn_seq]


def reference(
    store: shardstore.Store, sid: Any, budget: int, recent_min: int, tokenizer: Any = None
) -> Any:
    """The context by the rule alone from public reads (every summary message counted; with
    a tokenizer of one's own, every turn too, over a window of 4x the budget, or the
    newest unit read by turns when that window holds none)."""
    count_message = assembly.message_counter(make_counter(tokenizer))
    own = tokenizer is not None
    window = store.tail(sid, max_tokens=budget * assembly.CUSTOM_FETCH_FACTOR if own else budget)
    turn_count = store.session(sid).turn_count
    n = 2
    while own and not window and n < 2 * turn_count:
        # the newest unit is over the fetch in stored counts: read by turns (2, 4, 8...)
        window = store.tail(sid, n=n)
        n *= 2

    def turn_tokens(t: Turn) -> int:
        return count_message(t.message) if own else t.tokens

    groups = assembly.units(window)
    sizes = [sum(turn_tokens(t) for t in g) for g in groups]
    taken = assembly.first_units(sizes, budget, recent_min)
    start = groups[len(groups) - taken][0].turn_seq if taken else store.session(sid).turn_count
    limit = min(assembly.MAX_SUMMARIES, budget // 8 + 1)
    older = [s for s in reversed(store.summaries(sid)) if s.last_turn_seq < start][:limit]
    return assembly.plan(
        window,
        max_tokens=budget,
        recent_min_tokens=recent_min,
        turn_tokens=turn_tokens,
        count=count_message,
        summaries=older,
    )


class Halved:
    """A tokenizer of one's own: half of cl100k's count (more summaries fit than stored
    counts say), named apart from the store's."""

    name = "halved"

    def __init__(self) -> None:
        self.inner = make_counter(None)

    def count(self, text: str) -> int:
        return (self.inner.count(text) + 1) // 2


class Ones:
    """Every message is one token: many summaries fit, so the read limit (budget / 8 + 1)
    decides how many are used."""

    name = "ones"

    def count(self, text: str) -> int:
        return 1


@pytest.mark.slow
def test_context_is_the_rule_with_stored_missing_or_foreign_counts(
    make_store: StoreFactory, dsn: str
) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme")
    store.append_turns(sid, [msg(i) for i in range(300)])
    store.drain_folds()
    assert store.summarize(stub) > 20
    stored = count(
        dsn,
        "SELECT count(*) FROM shardstore.chunk_summaries"
        " WHERE message_tokens IS NOT NULL AND counted_by = 'cl100k_base'",
    )
    assert stored == len(store.summaries(sid))
    cases = [(b, r) for b in (1, 40, 150, 400, 900, 2500, 10**5) for r in (0, b // 2, b)]

    def all_equal() -> None:
        for budget, recent_min in cases:
            ctx = store.context(sid, budget, recent_min_tokens=recent_min)
            assert ctx == reference(store, sid, budget, recent_min), (budget, recent_min)
            for own in (Halved(), Ones()):
                ctx = store.context(sid, budget, recent_min_tokens=recent_min, tokenizer=own)
                want = reference(store, sid, budget, recent_min, own)
                assert ctx == want, (own.name, budget, recent_min)

    all_equal()
    assert any(p.kind == "summary" for p in store.context(sid, 900).parts)
    with psycopg.connect(dsn, autocommit=True) as conn:
        # summaries written before migration 0019: counted at read time
        conn.execute(
            "UPDATE shardstore.chunk_summaries SET message_tokens = NULL WHERE chunk_seq % 2 = 0"
        )
        all_equal()
        # counts by another store's tokenizer (here absurd) are not used
        conn.execute(
            "UPDATE shardstore.chunk_summaries SET message_tokens = 100000, counted_by = 'other'"
            " WHERE chunk_seq % 3 = 0"
        )
        all_equal()


def test_text_ranking_is_bounded_and_exact_for_rare_lexemes(
    make_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make_store(**SMALL)
    sid = store.create_session("acme")
    sent = [
        {"role": "user", "content": f"router password reset {i} " + "w " * (i % 7)}
        for i in range(400)
    ]
    sent[37] = {"role": "user", "content": "router password reset for order QX-4471"}
    sent[210] = {"role": "user", "content": "nothing common here, only zanzibar"}
    store.append_turns(sid, sent)
    store.flush(sid)

    def ranking(query: str) -> list[tuple[int, float]]:
        hits = store.search(query, session_id=sid, k=50, mode="text")
        return [(h.turns[-1].turn_seq, round(h.score, 9)) for h in hits]

    exact = {q: ranking(q) for q in ("QX-4471 router", "zanzibar", "router password reset")}
    assert exact["QX-4471 router"][0][0] == 37
    monkeypatch.setattr(textsearch, "TEXT_SAMPLE", 40)
    monkeypatch.setattr(textsearch, "TEXT_CAP", 20)
    sampled = {q: ranking(q) for q in exact}
    # rare lexemes: every window holding them is scored, so they rank first as before
    assert sampled["QX-4471 router"][0][0] == 37
    assert sampled["zanzibar"] == exact["zanzibar"]  # only rare lexemes: the exact ranking
    # common lexemes only: candidates are the 40 newest windows
    common = [turn for turn, _ in sampled["router password reset"]]
    assert common and min(common) >= 400 - 40 - 1
    # a scope within the sample is scored exactly as before
    monkeypatch.setattr(textsearch, "TEXT_SAMPLE", 1000)
    assert {q: ranking(q) for q in exact} == exact


def test_async_fork_text_search(dsn: str) -> None:
    store = shardstore.connect(dsn, **SMALL)
    parent = store.create_session("acme")
    store.append_turns(parent, [msg(i) for i in range(10)])
    store.append_turn(parent, {"role": "user", "content": "xylophone"})
    store.flush(parent)
    child = store.fork(parent, at_turn_seq=10)
    want = store.search("xylophone", session_id=child, k=3, mode="text")
    store.close()

    async def go() -> list[Any]:
        astore = await shardstore.connect_async(dsn, **SMALL)
        try:
            return list(await astore.search("xylophone", session_id=child, k=3, mode="text"))
        finally:
            await astore.close()

    got = asyncio.run(go())
    assert got == want and want[0].session_id == child
    assert isinstance(child, uuid.UUID)
