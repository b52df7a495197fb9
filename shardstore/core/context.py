"""What operations need besides their arguments: the store's settings, its tokenizer and
the database's partitioning."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from ..history.tokens import TokenCounter
from ..settings import DEFAULT_PARTITION_INTERVAL, Settings

if TYPE_CHECKING:  # types only: core imports no feature module at run time
    from ..encryption.envelope import Sealer


@dataclass(frozen=True, slots=True)
class Context:
    """Settings and tokenizer, plus the partitioning recorded in ``shardstore.config``
    (known after the store's setup), and the sealer of a store connected with
    ``encryption=`` (None: values are stored in plaintext)."""

    settings: Settings
    counter: TokenCounter
    partition_interval: timedelta = DEFAULT_PARTITION_INTERVAL
    partition_origin: datetime = datetime(2001, 1, 1, tzinfo=UTC)
    sealer: Sealer | None = None
