"""A small deterministic embedder for tests that need no model: bag of hashed words.

Texts that share words get similar vectors, so search behaviour (ranking, scoping,
windows) can be tested fast; the real model is tested in tests/search/test_minilm.py."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

import numpy as np

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
        self._directions: dict[str, np.ndarray] = {}

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

    def _direction(self, word: str) -> np.ndarray:
        key = word.lower()
        cached = self._directions.get(key)
        if cached is not None:
            return cached
        raw = b"".join(
            hashlib.sha256(f"{block}:{key}".encode()).digest()
            for block in range(self._dimension // 32 + 1)
        )[: self._dimension]
        direction = (np.frombuffer(raw, dtype=np.uint8).astype(np.float64) - 127.5) / 127.5
        self._directions[key] = direction
        return direction

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        self.texts_embedded += len(texts)
        out = []
        for text in texts:
            # one vector add per word, in word order: the same float sums as adding element
            # by element in Python, at a fraction of the cost (the concurrency test embeds
            # every turn it wrote, and that loop was most of its run)
            acc = np.zeros(self._dimension)
            for word in WORD.findall(text):
                acc += self._direction(word)
            values = acc.tolist()
            norm = math.sqrt(sum(x * x for x in values)) or 1.0
            if not any(values):
                values[0] = 1.0
            out.append([x / norm for x in values])
        return out
