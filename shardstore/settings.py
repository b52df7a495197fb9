"""Store settings, validated once at connect time."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

from .errors import ConfigurationError
from .search.embedding import is_embedder

DEFAULT_PARTITION_INTERVAL = timedelta(days=7)
JSONB_MAX_BYTES = 268_435_455


@dataclass(frozen=True, slots=True)
class Settings:
    """Tuning knobs of a store.

    - ``chunk_tokens``: a chunk holds at most this many tokens by the configured tokenizer.
      The chunker fills it only to ``chunk_tokens / (1 + token_margin)`` so that a tokenizer
      that counts up to ``token_margin`` more still sees at most ``chunk_tokens``.
    - ``chunk_max_bytes``: a chunk also rolls over before its messages exceed this many
      bytes; a single message larger than this is refused (``TurnTooLarge``).
    - ``partition_interval``: width of each ``agent_history`` partition. Recorded in the
      database on first use; None means "whatever the database has, else 7 days".
    - ``premake``: partitions kept ready ahead of now.
    - ``prepare_threshold``: psycopg's; None disables server-side prepared statements
      (needed behind a transaction-mode pooler).
    - ``background_fold``: fold sealed chunks on a worker (thread or asyncio task) so that
      no append waits for a fold; False folds right after the sealing append instead.
      A store on a caller's connection always folds inline, in the caller's transaction.
    - ``embedding_model``: the model for ``embed()`` and text ``search()``: a name
      (``"all-MiniLM-L6-v2"``, ``"BAAI/bge-m3"``), a local directory or an
      :class:`~shardstore.search.embedding.Embedder`. None: the model recorded in the database,
      else ``BAAI/bge-m3``. Loaded on first use, never downloaded.
    - ``hnsw_ef_search``: candidates a tenant search asks its leaf's HNSW index for (at
      least 4 x k; scaled up by the tenant's share of the leaf). Higher finds more of the
      true nearest neighbours and costs time; with MiniLM vectors of single turns, 40
      (pgvector's default) missed the nearest turn for 2-3 of 8 questions, and for a tenant
      of 300,000 vectors recall@10 was 0.89 at 100 and 0.97 at 400
      (docs/decisions/0017-vector-layout-hashed-by-tenant.md).
    """

    chunk_tokens: int = 10_000
    token_margin: float = 0.2
    chunk_max_bytes: int = 16 * 1024 * 1024
    partition_interval: timedelta | None = None
    premake: int = 4
    pool_min_size: int = 1
    pool_max_size: int = 10
    prepare_threshold: int | None = 5
    default_tail_turns: int = 20
    connect_timeout: float = 30.0
    background_fold: bool = True
    embedding_model: Any = None
    hnsw_ef_search: int = 400
    vector_exact_rows: int = 20_000

    def __post_init__(self) -> None:
        if not isinstance(self.chunk_tokens, int) or self.chunk_tokens < 16:
            raise ConfigurationError("chunk_tokens must be an int >= 16")
        if not (
            isinstance(self.token_margin, int | float)
            and math.isfinite(self.token_margin)
            and 0 <= self.token_margin < 1
        ):
            raise ConfigurationError("token_margin must be a number in [0, 1)")
        if not isinstance(self.chunk_max_bytes, int) or not (
            1024 <= self.chunk_max_bytes <= JSONB_MAX_BYTES // 4
        ):
            raise ConfigurationError(
                f"chunk_max_bytes must be an int between 1024 and {JSONB_MAX_BYTES // 4} "
                "(far below the 256 MB jsonb limit)"
            )
        interval = self.partition_interval
        if interval is not None and (
            not isinstance(interval, timedelta)
            or interval < timedelta(seconds=1)
            or interval % timedelta(seconds=1)
        ):
            raise ConfigurationError(
                "partition_interval must be a timedelta of whole seconds, at least 1 second"
            )
        if not isinstance(self.premake, int) or not 0 <= self.premake <= 1000:
            raise ConfigurationError("premake must be an int between 0 and 1000")
        if not (1 <= self.pool_min_size <= self.pool_max_size):
            raise ConfigurationError("need 1 <= pool_min_size <= pool_max_size")
        if self.prepare_threshold is not None and self.prepare_threshold < 0:
            raise ConfigurationError("prepare_threshold must be None or >= 0")
        model = self.embedding_model
        if model is not None and not (
            (isinstance(model, str) and model.strip())
            or isinstance(model, os.PathLike)
            or is_embedder(model)
        ):
            raise ConfigurationError(
                "embedding_model must be a model name, a local path or an Embedder"
            )
        if (
            isinstance(self.hnsw_ef_search, bool)
            or not isinstance(self.hnsw_ef_search, int)
            or not 1 <= self.hnsw_ef_search <= 1000
        ):
            raise ConfigurationError("hnsw_ef_search must be an int between 1 and 1000")
        if (
            isinstance(self.vector_exact_rows, bool)
            or not isinstance(self.vector_exact_rows, int)
            or not 0 <= self.vector_exact_rows <= 10_000_000
        ):
            raise ConfigurationError("vector_exact_rows must be an int between 0 and 10000000")
        if self.default_tail_turns < 1:
            raise ConfigurationError("default_tail_turns must be >= 1")

    @property
    def budget_tokens(self) -> int:
        """Tokens the chunker actually packs into a chunk (``chunk_tokens`` less the margin)."""
        return max(1, math.floor(self.chunk_tokens / (1 + self.token_margin)))

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> Settings:
        """Build settings from ``connect(**settings)``; unknown names are an error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ConfigurationError(
                f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        values = dict(kwargs)
        if isinstance(values.get("partition_interval"), str):
            values["partition_interval"] = parse_interval(values["partition_interval"])
        return cls(**values)


_UNITS = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "w": 604800,
    "week": 604800,
    "weeks": 604800,
}


def parse_interval(text: str) -> timedelta:
    """Parse '7 days', '1s', '12h', '2 weeks' into a timedelta; ``ConfigurationError`` for
    anything else, a number too large for a timedelta included."""
    match = re.fullmatch(r"\s*(\d{1,20})\s*([a-zA-Z]+)\s*", text)
    if match and match.group(2).lower() in _UNITS:
        try:
            return timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2).lower()])
        except OverflowError:
            pass
    raise ConfigurationError(f"cannot read interval {text[:80]!r}; write e.g. '7 days', '1h', '1s'")
