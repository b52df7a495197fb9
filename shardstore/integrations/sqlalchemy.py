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


_TYPES: dict[str, Any] = {
    "uuid": Uuid,
    "text": Text,
    "integer": Integer,
    "bigint": BigInteger,
    "bigint[]": ARRAY(BigInteger),
    "double": Double,
    "jsonb": JSONB,
    "timestamptz": TIMESTAMP(timezone=True),
}

# Each table as its DDL reads: a column a line, "name type", then "key" (part of the primary
# key) or "not null"; "--" starts a comment. A test holds them equal to the migrated schema.
_TABLES = {
    "sessions": """
        session_id        uuid         key
        tenant_id         text         not null
        subject_id        text
        agent_id          text
        metadata          jsonb        not null
        created_at        timestamptz  not null
        closed_at         timestamptz
        purged_at         timestamptz
        -- the write head: next_turn_seq is the turn count (turns ever appended, less those a
        -- rewind removed)
        next_turn_seq     bigint       not null
        open_chunk_seq    bigint       not null
        open_chunk_start  timestamptz
        open_turns        integer      not null
        open_tokens       bigint       not null
        open_bytes        bigint       not null
        last_turn_at      timestamptz
        -- a fork's lineage (docs/fork.md): the session owning its last inherited turn, that
        -- turn, and the first chunk the fork owns; NULL for a session that is no fork
        fork_parent       uuid
        fork_at           bigint
        fork_chunk        bigint
        -- the first turn the session still holds (0 unless a range purge cut its start)
        first_turn_seq    bigint       not null
        rewind_epochs     bigint[]
    """,
    "checkpoints": """
        session_id        uuid         key
        checkpoint_id     uuid         key
        seq               bigint       not null
        tenant_id         text         not null
        turn_seq          bigint       not null
        sub_step          integer
        parent_id         uuid
        idempotency_key   text
        created_at        timestamptz  not null
        state             jsonb        not null
        tool_calls        jsonb
        tool_results      jsonb
        metadata          jsonb        not null
    """,
    "runs": """
        session_id        uuid         key
        run_id            uuid         key
        tenant_id         text         not null
        framework         text         not null
        thread_key        text         not null
        status            text         not null
        awaiting          jsonb
        awaiting_since    timestamptz
        steps             bigint       not null
        usd_cost          double       not null
        error             text
        metadata          jsonb        not null
        created_at        timestamptz  not null
        updated_at        timestamptz  not null
        closed_at         timestamptz
    """,
    "facts": """
        tenant_id         text         key
        fact_id           uuid         key
        subject           text         not null
        key               text         not null
        value             jsonb        not null
        confidence        double
        source_session_id uuid
        source_turn_seq   bigint
        valid_from        timestamptz  not null
        valid_to          timestamptz
        recorded_at       timestamptz  not null
    """,
    # a view (docs/integrations.md): one row per turn a session holds, folded or buffered;
    # a fork's inherited turns are rows of the session holding them
    "turns": """
        session_id        uuid
        tenant_id         text
        turn_seq          bigint
        chunk_seq         bigint
        created_at        timestamptz
        tokens            integer
        idempotency_key   text
        message           jsonb
    """,
}
_COMMENTS = {
    "sessions": "one row per session; purged sessions keep a tombstone (purged_at set)",
    "turns": "view: one row per stored turn; messages as stored (jsoncodec escapes)",
}


def _column(line: str) -> Column[Any]:
    name, type_name, *constraint = line.split(maxsplit=2)
    if constraint not in ([], ["key"], ["not null"]):
        raise ValueError(f"a column is 'name type [key | not null]', not {line!r}")
    key = constraint == ["key"]
    return Column(name, _TYPES[type_name], primary_key=key, nullable=not key and not constraint)


def _build() -> MetaData:
    meta = MetaData(schema=SCHEMA, info={"read_only": True})
    for name, ddl in _TABLES.items():
        lines = [line.strip() for line in ddl.splitlines()]
        columns = [_column(line) for line in lines if line and not line.startswith("--")]
        Table(name, meta, *columns, comment=_COMMENTS.get(name))
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
