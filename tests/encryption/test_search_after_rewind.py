"""Search finds an encrypted session's turns written after a rewind: the text pass and the
embedding worker open each sealed turn with the session's rewind epochs (a turn sealed in
epoch 1 does not open as if the session had never been rewound), while a turn removed by
the rewind is found by neither."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from tests.embedders import HashEmbedder


@pytest.fixture(scope="module")
def store(module_dsn: str, keys: LocalKeyProvider) -> Iterator[shardstore.Store]:
    s = shardstore.connect(module_dsn, encryption=keys, embedding_model=HashEmbedder())
    yield s
    s.close()


def found(hits: list[shardstore.SearchHit], word: str) -> list[int]:
    return sorted(
        {t.turn_seq for h in hits for t in h.turns if word in str(t.message.get("content"))}
    )


def test_turns_after_a_rewind_are_found_by_text_and_by_vector(store: shardstore.Store) -> None:
    sid = store.create_session("t-rewind-search", "user:r", "agent")
    store.append_turns(
        sid,
        [
            {"role": "user", "content": "the harbour lantern glows"},
            {"role": "assistant", "content": "a removed orchard violin"},
            {"role": "user", "content": "another removed orchard violin"},
        ],
    )
    assert store.rewind(sid, 1) == 2
    store.append_turn(sid, {"role": "user", "content": "after the rewind a quokka sings"})
    store.embed()
    assert found(store.search("quokka", session_id=sid, mode="text", k=5), "quokka") == [1]
    assert found(store.search("lantern", session_id=sid, mode="text", k=5), "lantern") == [0]
    assert store.search("violin", session_id=sid, mode="text", k=5) == []
    vector = HashEmbedder().embed(["after the rewind a quokka sings"])[0]
    hits = store.search(list(vector), session_id=sid, k=5)
    assert found(hits, "quokka") == [1]
    assert found(hits, "violin") == []
