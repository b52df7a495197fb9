"""Token counters: tiktoken cl100k_base offline, a Hugging Face tokenizer.json, or your own."""

from __future__ import annotations

import base64
import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

import shardstore
from shardstore.core.jsoncodec import encode_message
from shardstore.demo import synthetic
from shardstore.history.tokens import (
    HFTokenizerCounter,
    TiktokenCounter,
    _SplintrCl100k,
    make_counter,
)


def test_cl100k_counts_offline() -> None:
    counter = make_counter(None)
    assert isinstance(counter, TiktokenCounter)
    assert counter.count("hello world") == 2
    assert counter.count("<|endoftext|>") > 1  # special-token text is counted as plain text


# ---------------------------------------------------------------- the fast cl100k path

_SPECIALS = [
    "<|endoftext|>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|endofprompt|>",
]
_PIECES = st.one_of(
    st.text(max_size=40),
    st.sampled_from(
        [
            " ",
            "  ",
            "\n",
            "\n\n",
            "\t",
            "\r\n",
            "\u00a0",
            "\u3000",
            "'s",
            "'ll",
            "n't",
            "123",
            "4567",
            "é",
            "\u0301",
            "中文",
            "😀",
            "🇫🇷",
            '{"role": "user", "content": "',
            "\\u00e9",
            *_SPECIALS,
        ]
    ),
)


def _reference() -> Callable[[str], int]:
    slow = TiktokenCounter("cl100k_base", fast=False)
    assert slow._fast is None
    return slow.count


def test_the_fast_counter_is_the_default_where_splintr_is_installed() -> None:
    counter = make_counter(None)
    assert isinstance(counter, TiktokenCounter) and isinstance(counter._fast, _SplintrCl100k)
    assert counter.name == TiktokenCounter("cl100k_base", fast=False).name == "cl100k_base"
    assert make_counter(None)._fast is counter._fast  # one per process: its cache is shared


def test_fast_counts_do_not_depend_on_the_piece_cache() -> None:
    """splintr caches split pieces: a text counted cold, warm, after other texts filled the
    cache, and from several threads at once gets tiktoken's count every time."""
    fast, slow = make_counter(None), _reference()
    messages = [encode_message(m) for m in synthetic.messages(11, 600)]
    expected = [slow(t) for t in messages]
    assert [fast.count(t) for t in messages] == expected  # cold, then ...
    assert [fast.count(t) for t in reversed(messages)] == expected[::-1]  # ... warm
    results: dict[int, list[int]] = {}

    def count_all(k: int) -> None:
        results[k] = [fast.count(t) for t in messages[k::4]]

    threads = [threading.Thread(target=count_all, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[k] == expected[k::4] for k in range(4))


@settings(max_examples=400, deadline=None)
@given(parts=st.lists(_PIECES, max_size=30))
def test_fast_and_tiktoken_counts_agree_on_any_text(parts: list[str]) -> None:
    """Stored counts must not depend on which implementation counted them."""
    text = "".join(parts)
    assert make_counter(None).count(text) == _reference()(text)


def test_texts_around_the_fast_limit_agree() -> None:
    fast, slow = make_counter(None), _reference()
    limit = TiktokenCounter.FAST_MAX_CHARS
    for n in (limit - 1, limit, limit + 1):
        text = ("ab cd 12 é " * limit)[:n]
        assert fast.count(text) == slow(text)


class _NoTiktoken:
    """Stands in for tiktoken's encoding: any call means the text did not take the fast path."""

    def encode_ordinary(self, text: str) -> list[int]:
        raise AssertionError(f"tiktoken counted a text of {len(text)} characters")


def test_texts_up_to_the_limit_take_the_fast_path_and_larger_ones_tiktoken() -> None:
    counter = TiktokenCounter("cl100k_base")
    counter._encoding = _NoTiktoken()
    limit = TiktokenCounter.FAST_MAX_CHARS
    assert limit >= 65_536  # tool outputs of tens of kB: splintr's 0.25 vs tiktoken's 1.8 ms
    expected = _reference()(("ab cd 12 é " * limit)[:limit])
    assert counter.count(("ab cd 12 é " * limit)[:limit]) == expected
    with pytest.raises(AssertionError, match="tiktoken counted"):
        counter.count("x" * (limit + 1))


_WORDS = ["path/to/a.py", "42", "Error:", "é", "\n"]


def test_tiktoken_is_loaded_by_the_first_text_it_counts() -> None:
    """Where splintr counts, a store's connect does not pay tiktoken's ~0.1 s load."""
    counter = TiktokenCounter("cl100k_base")
    assert counter._fast is not None and counter._encoding is None
    assert counter.count("hello world") == 2
    assert counter._encoding is None
    surrogate = "a\ud800b"  # splintr refuses it: tiktoken loads and counts
    assert counter.count(surrogate) == _reference()(surrogate)
    assert counter._encoding is not None
    slow = TiktokenCounter("cl100k_base", fast=False)
    assert slow._encoding is not None  # without splintr it loads at once


@pytest.mark.slow
def test_the_fast_counter_is_exact_at_every_size_up_to_megabytes() -> None:
    """splintr itself, whatever the routing limit: large texts of every kind of piece."""
    fast = make_counter(None)._fast
    slow = _reference()
    rng = random.Random(11)
    kinds: list[Callable[[int], str]] = [
        lambda n: base64.b64encode(rng.randbytes(n)).decode()[:n],
        lambda n: " ".join(rng.choice(_WORDS) for _ in range(n // 6))[:n],
        lambda n: "a" * n,
        lambda n: " " * n,
        lambda n: "\n" * n,
        lambda n: "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(n)),
    ]
    for n in (16_385, 40_000, 65_536, 300_000):
        for kind in kinds:
            text = kind(n)
            assert fast.count(text) == slow(text), (n, text[:20])


@pytest.mark.slow
def test_fast_and_tiktoken_agree_on_large_and_odd_inputs() -> None:
    rng = random.Random(5)
    texts = [
        base64.b64encode(rng.randbytes(1_500_000)).decode(),  # a tool output of ~2 MB
        " ".join(rng.choice(["alpha", "beta", "x1", "42", "\n"]) for _ in range(200_000)),
        " " * 100_000 + "x",
        "7" * 500_000,
        "a\ud800b \udfff",  # lone surrogates: the fast path refuses them, tiktoken counts them
        "".join(_SPECIALS) * 50,
        "",
    ]
    fast, slow = make_counter(None), _reference()
    for text in texts:
        assert fast.count(text) == slow(text), text[:40]


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
