"""A small deterministic embedder for tests that need no model: bag of hashed words.

Texts that share words get similar vectors, so search behaviour (ranking, scoping,
windows) can be tested fast; the real model is tested in test_search_minilm.py."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

WORD = re.compile(r"\w+")


class HashEmbedder:
    """Each word adds a fixed pseudo-random unit direction; vectors are normalised. Tokens
    are words; a window holds ``window_tokens`` words."""

    def __init__(
        self, dimension: int = 256, window_tokens: int = 32, name: str = "test/hash-words"
    ) -> None:
        self._dimension = dimension
        self._window = window_tokens
        self._name = name
        self.calls = 0
        self.texts_embedded = 0
        self._directions: dict[str, list[float]] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def window_tokens(self) -> int:
        return self._window

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return [len(WORD.findall(t)) for t in texts]

    def split(self, text: str, max_tokens: int) -> list[str]:
        words = text.split()
        return [" ".join(words[i : i + max_tokens]) for i in range(0, len(words), max_tokens)] or [
            text
        ]

    def _direction(self, word: str) -> list[float]:
        cached = self._directions.get(word.lower())
        if cached is not None:
            return cached
        raw = b"".join(
            hashlib.sha256(f"{block}:{word.lower()}".encode()).digest()
            for block in range(self._dimension // 32 + 1)
        )[: self._dimension]
        direction = [(b - 127.5) / 127.5 for b in raw]
        self._directions[word.lower()] = direction
        return direction

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        self.texts_embedded += len(texts)
        out = []
        for text in texts:
            acc = [0.0] * self._dimension
            for word in WORD.findall(text):
                for i, x in enumerate(self._direction(word)):
                    acc[i] += x
            norm = math.sqrt(sum(x * x for x in acc)) or 1.0
            if not any(acc):
                acc[0] = 1.0
            out.append([x / norm for x in acc])
        return out
