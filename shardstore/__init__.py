"""shardstore: unbounded AI-agent conversation history in PostgreSQL.

import shardstore
store = shardstore.connect()      # $SHARDSTORE_DSN, else an embedded Postgres
sid = store.create_session(tenant_id="acme", subject_id="user:42")
store.append_turn(sid, {"role": "user", "content": "hi"}, idempotency_key="m-1")
store.tail(sid, n=20)
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from .aio import AsyncStore
from .artifacts import ArtifactInfo, ArtifactRef, SweepReport
from .artifacts.config import pop_config
from .base import setup_op
from .context.assembly import Context, ContextPart
from .context.summaries import ChunkSummary
from .core.connector import AsyncConnector, Connector
from .encryption import KeyStore, sealer_for
from .encryption.envelope import Sealer
from .errors import (
    AccessDenied,
    ArtifactCorrupt,
    ArtifactNotFound,
    CheckpointNotFound,
    ConfigurationError,
    Conflict,
    ConnectionRejected,
    DatabaseError,
    DatabaseUnavailable,
    DecryptionFailed,
    EmbeddingModelMismatch,
    EncryptionRequired,
    ImportRejected,
    InvalidInput,
    InvalidMessage,
    KeyShredded,
    MissingDependency,
    PlaintextRefused,
    RunClosed,
    RunConflict,
    RunNotFound,
    SessionConflict,
    SessionExists,
    SessionNotFound,
    SessionPurged,
    ShardstoreError,
    TurnTooLarge,
)
from .history.pairing import TailWindow
from .history.tokens import HFTokenizerCounter, TiktokenCounter, TokenCounter, make_counter
from .importers import ExportReport, ImportReport, Skipped
from .lifecycle.purge import PurgeReport, TableRemoval
from .models import AppendResult, Chunk, PartitionInfo, SearchHit, SessionInfo, Stats, Turn

# the tenant-isolation module keeps its documented place, ``from shardstore import rls``
from .schema import rls
from .search.embedding import Embedder, SentenceTransformerEmbedder
from .settings import Settings
from .state.checkpoints import Checkpoint, Restored
from .state.facts import Fact
from .state.runs import Run
from .store import Store

__all__ = [
    "AccessDenied",
    "AppendResult",
    "ArtifactCorrupt",
    "ArtifactInfo",
    "ArtifactNotFound",
    "ArtifactRef",
    "AsyncStore",
    "Checkpoint",
    "CheckpointNotFound",
    "Chunk",
    "ChunkSummary",
    "ConfigurationError",
    "Conflict",
    "ConnectionRejected",
    "Context",
    "ContextPart",
    "DatabaseError",
    "DatabaseUnavailable",
    "DecryptionFailed",
    "Embedder",
    "EmbeddingModelMismatch",
    "EncryptionRequired",
    "ExportReport",
    "Fact",
    "HFTokenizerCounter",
    "ImportRejected",
    "ImportReport",
    "InvalidInput",
    "InvalidMessage",
    "KeyShredded",
    "MaintenanceReport",
    "MissingDependency",
    "PartitionInfo",
    "PlaintextRefused",
    "PurgeReport",
    "Restored",
    "Run",
    "RunClosed",
    "RunConflict",
    "RunNotFound",
    "SearchHit",
    "SentenceTransformerEmbedder",
    "SessionConflict",
    "SessionExists",
    "SessionInfo",
    "SessionNotFound",
    "SessionPurged",
    "Settings",
    "ShardstoreError",
    "Skipped",
    "Stats",
    "Store",
    "SweepReport",
    "TableRemoval",
    "TailWindow",
    "TiktokenCounter",
    "TokenCounter",
    "Turn",
    "TurnTooLarge",
    "connect",
    "connect_async",
    "rls",
]

from .lifecycle.maintenance import MaintenanceReport

Tokenizer = TokenCounter | str | os.PathLike[str] | None


def encryption_sealer(encryption: Any, artifacts: Any) -> Sealer | None:
    """The sealer for ``connect(encryption=...)``; ``ConfigurationError`` for a value that
    is not a key store. Offloading combines with it: offloaded strings are sealed as
    artifacts under their session's key (shardstore.encryption.artifacts)."""
    return sealer_for(encryption)


def connect(
    dsn: Any = None,
    *,
    tokenizer: Tokenizer = None,
    encryption: KeyStore | None = None,
    **settings: Any,
) -> Store:
    """Open a store and make its schema current.

    ``dsn`` may be a DSN string, a ``psycopg_pool.ConnectionPool`` or a ``psycopg.Connection``
    (to join the caller's transactions), a SQLAlchemy ``Engine`` (a source of connections,
    like a pool) or a SQLAlchemy ``Connection`` (its transaction is joined: the
    application commits or rolls back shardstore's writes with its own), both on the
    psycopg 3 driver (``postgresql+psycopg://``); without it, ``$SHARDSTORE_DSN``, else the embedded
    Postgres in the user data directory (started on demand, reused by later processes).
    Migrations are applied idempotently (concurrent callers are serialised). ``tokenizer`` is
    a tiktoken encoding name (default ``cl100k_base``), a path to a ``tokenizer.json``, or a
    :class:`TokenCounter`. Other keywords are :class:`Settings` fields, and the artifact
    options: ``artifacts`` (``"postgres"``, the default; ``"file:///dir"``;
    ``"s3://bucket/prefix"``), ``offload_over`` (bytes: a longer string in an appended
    message is stored as an artifact; None, the default: never), ``artifact_grace`` (how
    long an unreferenced artifact is kept, default 1 day) and ``trajectory_retention``
    (payloads attached to spans, default 7 days).

    ``encryption``: a :class:`shardstore.encryption.LocalKeyProvider` (or any
    :class:`~shardstore.encryption.KeyStore`) turns on encryption at rest: every message,
    checkpoint state, tool calls and results, fact value and summary this store writes is
    sealed client-side under its subject's data key, bound to its tenant, session and
    position, and every read opens it (``DecryptionFailed`` for a value that does not belong
    where it is read, ``PlaintextRefused`` for a plaintext one). Off (None) by default.
    What stays clear: docs/security.md, "Encryption at rest".
    """
    artifacts = pop_config(settings)
    sealer = encryption_sealer(encryption, artifacts)
    config = Settings.from_kwargs(settings)
    counter = make_counter(tokenizer)
    connector = Connector(dsn, config)
    store = Store(connector, config, counter)
    store.artifact_config = artifacts
    store.ctx = dataclasses.replace(store.ctx, sealer=sealer)
    try:
        store._run(setup_op(store))
    except BaseException:
        connector.close()
        raise
    return store


async def connect_async(
    dsn: Any = None,
    *,
    tokenizer: Tokenizer = None,
    encryption: KeyStore | None = None,
    **settings: Any,
) -> AsyncStore:
    """asyncio version of :func:`connect` (accepts a DSN, an ``AsyncConnectionPool`` or an
    ``AsyncConnection``, or a SQLAlchemy ``AsyncEngine`` / ``AsyncConnection`` on
    ``postgresql+psycopg``) returning an :class:`AsyncStore`; ``encryption`` as there."""
    artifacts = pop_config(settings)
    sealer = encryption_sealer(encryption, artifacts)
    config = Settings.from_kwargs(settings)
    counter = make_counter(tokenizer)
    connector = await AsyncConnector.create(dsn, config)
    store = AsyncStore(connector, config, counter)
    store.artifact_config = artifacts
    store.ctx = dataclasses.replace(store.ctx, sealer=sealer)
    try:
        await store._run(setup_op(store))
    except BaseException:
        await connector.close()
        raise
    return store
