"""Token counters: tiktoken cl100k_base offline, a Hugging Face tokenizer.json, or your own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

import shardstore
from shardstore.tokens import HFTokenizerCounter, TiktokenCounter, make_counter


def test_cl100k_counts_offline() -> None:
    counter = make_counter(None)
    assert isinstance(counter, TiktokenCounter)
    assert counter.count("hello world") == 2
    assert counter.count("<|endoftext|>") > 1  # special-token text is counted as plain text


def test_unknown_encoding_is_a_configuration_error() -> None:
    with pytest.raises(shardstore.ConfigurationError):
        make_counter("no_such_encoding")


def _tokenizer_json(tmp_path: Path) -> Path:
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["the cat sat on the mat"] * 3, trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    )
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_hf_tokenizer_json(tmp_path: Path) -> None:
    path = _tokenizer_json(tmp_path)
    counter = make_counter(str(path))
    assert isinstance(counter, HFTokenizerCounter)
    assert counter.count("the cat sat") == 3
    assert make_counter(tmp_path).count("the cat sat on the mat") == 6  # a folder works too
    with pytest.raises(shardstore.ConfigurationError):
        make_counter(str(tmp_path / "missing" / "tokenizer.json"))


class Chars:
    """A custom counter: one token per character."""

    name = "chars"

    def count(self, text: str) -> int:
        return len(text)


def test_pluggable_counter_drives_the_chunker(dsn: str) -> None:
    store = shardstore.connect(dsn, tokenizer=Chars(), chunk_tokens=120, token_margin=0.0)
    try:
        sid = store.create_session("acme")
        message = {"role": "user", "content": "x" * 20}  # 48 characters of JSON
        results = [store.append_turn(sid, message) for _ in range(5)]
        assert [r.tokens for r in results] == [48] * 5
        assert [r.chunk_seq for r in results] == [0, 0, 1, 1, 2]
    finally:
        store.close()


def test_hf_tokenizer_with_store(
    dsn: str, tmp_path: Path, make_store: Callable[..., shardstore.Store]
) -> None:
    store = shardstore.connect(dsn, tokenizer=_tokenizer_json(tmp_path))
    try:
        sid = store.create_session("acme")
        assert store.append_turn(sid, {"role": "user", "content": "the cat"}).tokens > 0
    finally:
        store.close()
