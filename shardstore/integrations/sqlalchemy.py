"""SQLAlchemy and Alembic (``pip install 'shardstore[sqlalchemy]'``).

* ``shardstore.connect(engine)`` / ``shardstore.connect(connection)`` take SQLAlchemy
  objects on the psycopg 3 driver (``postgresql+psycopg://``) directly (the connector,
  :mod:`shardstore.core.connector`): a ``Connection`` joins the application's transaction,
  an ``Engine`` lends its pooled connections.
* :func:`metadata` gives ``Table`` objects of shardstore's public tables, for analytics and
  joins with the application's own tables.
* :func:`run_migrations` applies shardstore's schema from an Alembic ``env.py``;
  :func:`include_name` keeps shardstore's schema out of ``alembic revision --autogenerate``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from ..errors import ConfigurationError, MissingDependency

try:
    from sqlalchemy import (
        BigInteger,
        Column,
        Connection,
        Double,
        Integer,
        MetaData,
        Table,
        Text,
        Uuid,
    )
    from sqlalchemy.dialects.postgresql import ARRAY, JSONB, TIMESTAMP
except ImportError as exc:  # the extra is not installed
    raise MissingDependency(
        "shardstore.integrations.sqlalchemy needs SQLAlchemy 2: "
        "pip install 'shardstore[sqlalchemy]'"
    ) from exc

from ..core.connector import Connector
from ..core.executor import run_sync
from ..schema.migrate import migrate_op
from ..settings import Settings

SCHEMA = "shardstore"


def _at(name: str, nullable: bool = False) -> Column[Any]:
    return Column(name, TIMESTAMP(timezone=True), nullable=nullable)


def _build() -> MetaData:
    meta = MetaData(schema=SCHEMA, info={"read_only": True})
    Table(
        "sessions",
        meta,
        Column("session_id", Uuid, primary_key=True),
        Column("tenant_id", Text, nullable=False),
        Column("subject_id", Text),
        Column("agent_id", Text),
        Column("metadata", JSONB, nullable=False),
        _at("created_at"),
        _at("closed_at", nullable=True),
        _at("purged_at", nullable=True),
        # the write head: next_turn_seq is the turn count (turns ever appended, less
        # those a rewind removed)
        Column("next_turn_seq", BigInteger, nullable=False),
        Column("open_chunk_seq", BigInteger, nullable=False),
        _at("open_chunk_start", nullable=True),
        Column("open_turns", Integer, nullable=False),
        Column("open_tokens", BigInteger, nullable=False),
        Column("open_bytes", BigInteger, nullable=False),
        _at("last_turn_at", nullable=True),
        # a fork's lineage (docs/fork.md): the session owning its last inherited turn,
        # that turn, and the first chunk the fork owns; NULL for a session that is no fork
        Column("fork_parent", Uuid),
        Column("fork_at", BigInteger),
        Column("fork_chunk", BigInteger),
        # the first turn the session still holds (0 unless a range purge cut its start)
        Column("first_turn_seq", BigInteger, nullable=False),
        Column("rewind_epochs", ARRAY(BigInteger)),
        comment="one row per session; purged sessions keep a tombstone (purged_at set)",
    )
    Table(
        "checkpoints",
        meta,
        Column("session_id", Uuid, primary_key=True),
        Column("checkpoint_id", Uuid, primary_key=True),
        Column("seq", BigInteger, nullable=False),
        Column("tenant_id", Text, nullable=False),
        Column("turn_seq", BigInteger, nullable=False),
        Column("sub_step", Integer),
        Column("parent_id", Uuid),
        Column("idempotency_key", Text),
        _at("created_at"),
        Column("state", JSONB, nullable=False),
        Column("tool_calls", JSONB),
        Column("tool_results", JSONB),
        Column("metadata", JSONB, nullable=False),
    )
    Table(
        "runs",
        meta,
        Column("session_id", Uuid, primary_key=True),
        Column("run_id", Uuid, primary_key=True),
        Column("tenant_id", Text, nullable=False),
        Column("framework", Text, nullable=False),
        Column("thread_key", Text, nullable=False),
        Column("status", Text, nullable=False),
        Column("awaiting", JSONB),
        _at("awaiting_since", nullable=True),
        Column("steps", BigInteger, nullable=False),
        Column("usd_cost", Double, nullable=False),
        Column("error", Text),
        Column("metadata", JSONB, nullable=False),
        _at("created_at"),
        _at("updated_at"),
        _at("closed_at", nullable=True),
    )
    Table(
        "facts",
        meta,
        Column("tenant_id", Text, primary_key=True),
        Column("fact_id", Uuid, primary_key=True),
        Column("subject", Text, nullable=False),
        Column("key", Text, nullable=False),
        Column("value", JSONB, nullable=False),
        Column("confidence", Double),
        Column("source_session_id", Uuid),
        Column("source_turn_seq", BigInteger),
        _at("valid_from"),
        _at("valid_to", nullable=True),
        _at("recorded_at"),
    )
    Table(
        "turns",
        meta,
        # a view (docs/integrations.md): one row per turn a session holds, folded or buffered;
        # a fork's inherited turns are rows of the session holding them
        Column("session_id", Uuid),
        Column("tenant_id", Text),
        Column("turn_seq", BigInteger),
        Column("chunk_seq", BigInteger),
        _at("created_at", nullable=True),
        Column("tokens", Integer),
        Column("idempotency_key", Text),
        Column("message", JSONB),
        comment="view: one row per stored turn; messages as stored (jsoncodec escapes)",
    )
    return meta


@cache
def metadata() -> MetaData:
    """A ``MetaData`` holding shardstore's public tables, declared (no round trip, typed
    columns), keyed ``"shardstore.sessions"``, ``"shardstore.checkpoints"``,
    ``"shardstore.runs"``, ``"shardstore.facts"`` and the view ``"shardstore.turns"`` (one
    row per turn a session holds, folded or buffered: session_id, tenant_id, turn_seq,
    chunk_seq, created_at, tokens, idempotency_key, message; a fork's inherited turns are
    rows of the session holding them); a test holds them equal to the migrated schema.
    The same object on every call.

    For reading only (``select``, joins with the application's tables): writes through
    them would bypass what shardstore's functions keep true (write heads, locks, tenants,
    purges); write through the store. The chunked tables the turns are stored in are not
    public: read turns with ``turns`` (filtered by session_id: every chunk it reads is
    decoded) or ``store.history`` / ``store.tail`` (the fork lineage, originals). JSONB values
    are as shardstore stores them: ordinary JSON unchanged, but strings JSONB cannot hold
    (NUL, lone surrogates) and floats it would alter carry shardstore's escapes
    (:mod:`shardstore.core.jsoncodec`). Under Row-Level Security a tenant's connection sees
    only that tenant's rows, as through the store."""
    return _build()


def run_migrations(connection: Connection) -> list[int]:
    """Apply shardstore's pending migrations on ``connection`` (a SQLAlchemy
    ``Connection`` on ``postgresql+psycopg``) and return the versions applied (none when
    the schema is current). Meant for an Alembic ``env.py``, in ``run_migrations_online``
    inside ``context.begin_transaction()`` next to ``context.run_migrations()``: the
    migrations run in Alembic's transaction and commit (or roll back) with it. Concurrent
    migrators are serialised as by ``shardstore.connect()``; partitions are made by the
    first ``connect()``. Alembic's offline (``--sql``) mode cannot run them."""
    if not isinstance(connection, Connection):
        raise ConfigurationError(
            f"run_migrations() takes a SQLAlchemy Connection, not {type(connection).__name__}"
        )
    applied: list[int] = run_sync(Connector(connection, Settings()), migrate_op())
    return applied


def include_name(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
    """An Alembic ``include_name`` hook that leaves the ``shardstore`` schema out of
    autogenerate (``context.configure(..., include_schemas=True,
    include_name=include_name)``), so that ``alembic revision --autogenerate`` never
    proposes to drop shardstore's tables; everything else is included."""
    if type_ == "schema":
        return name != SCHEMA
    return parent_names.get("schema_name") != SCHEMA
