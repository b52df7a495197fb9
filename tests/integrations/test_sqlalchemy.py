"""SQLAlchemy and Alembic (issue 12 §2): connect() on a SQLAlchemy Engine or Connection
(psycopg 3), the application's transaction joined; declared tables for joins; shardstore's
migrations from a real Alembic env.py. All against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from psycopg.conninfo import conninfo_to_dict
from sqlalchemy.ext.asyncio import create_async_engine

import shardstore
from shardstore.core.executor import run_sync
from shardstore.integrations.sqlalchemy import include_name, metadata, run_migrations
from shardstore.schema.migrate import all_migrations, migrate_op

USER = {"role": "user", "content": "hi"}


def engine_for(dsn: str, **kw: Any) -> sa.Engine:
    return sa.create_engine("postgresql+psycopg://", connect_args=conninfo_to_dict(dsn), **kw)


@pytest.fixture
def engine(dsn: str) -> Iterator[sa.Engine]:
    eng = engine_for(dsn)
    yield eng
    eng.dispose()


def _sessions(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM shardstore.sessions").fetchone()
        assert row is not None
        return int(row[0])


def _app_table(engine: sa.Engine) -> sa.Table:
    meta = sa.MetaData()
    orders = sa.Table(
        "orders",
        meta,
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("session_id", sa.Uuid),
    )
    meta.create_all(engine)
    return orders


# ---------------------------------------------------------------- a Connection: one transaction


def test_a_connection_joins_the_application_transaction(engine: sa.Engine, dsn: str) -> None:
    orders = _app_table(engine)
    with engine.connect() as conn:
        store = shardstore.connect(conn, chunk_tokens=200)
        conn.commit()  # connect's setup is the application's to commit too
        assert not store.connector.pooled  # folds run inline, in the same transaction
        sid = store.create_session("acme")
        conn.execute(orders.insert().values(id=1, session_id=sid))
        results = store.append_turns(sid, [{"role": "user", "content": "x " * 80}] * 12)
        assert results[-1].turn_seq == 11
        assert store.tail(sid, n=3)  # this transaction sees its own writes
        assert _sessions(dsn) == 0  # nobody else does
        conn.rollback()
        assert _sessions(dsn) == 0
        assert conn.execute(sa.select(sa.func.count()).select_from(orders)).scalar() == 0

        sid = store.create_session("acme")
        conn.execute(orders.insert().values(id=2, session_id=sid))
        store.append_turns(sid, [{"role": "user", "content": "x " * 80}] * 12)
        conn.commit()
    assert _sessions(dsn) == 1
    with shardstore.connect(dsn) as other:
        chunks = other.chunks(sid)
        assert sum(c.turn_count for c in chunks) == 12 and len(chunks) > 1
        assert [c.is_open for c in chunks][:-1] == [False] * (len(chunks) - 1)
    with engine.connect() as conn:
        assert conn.execute(sa.select(orders.c.session_id)).scalar() == sid


@pytest.mark.slow
def test_a_transaction_block_on_an_idle_connection_is_not_committed_alone(
    engine: sa.Engine, dsn: str
) -> None:
    """An operation that opens a transaction block (a purge, a rewind, a checkpoint with
    its turn) at the start of the application's transaction must not commit by itself:
    psycopg would COMMIT a block opened on an idle connection."""
    with shardstore.connect(dsn) as own:
        sid = own.create_session("acme")
        own.append_turns(sid, [USER] * 5)
    with engine.connect() as conn:
        store = shardstore.connect(conn)
        conn.commit()
        for change in (
            lambda: store.purge_session(sid),
            lambda: store.rewind(sid, 1),
            lambda: store.append_turn(sid, USER, "k", checkpoint={"s": 1}),
        ):
            assert not conn.in_transaction()
            change()
            conn.rollback()
            with shardstore.connect(dsn) as own:
                info = own.session(sid)
                assert (info.purged, info.turn_count) == (False, 5)
                assert own.checkpoints(sid) == []
        store.rewind(sid, 2)
        conn.commit()
    with shardstore.connect(dsn) as own:
        assert own.session(sid).turn_count == 2


def test_a_connection_in_autocommit_commits_each_call(engine: sa.Engine, dsn: str) -> None:
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        store = shardstore.connect(conn)
        sid = store.create_session("acme")
        store.append_turn(sid, USER)
        assert _sessions(dsn) == 1


def test_a_closed_connection_is_refused(engine: sa.Engine, dsn: str) -> None:
    conn = engine.connect()
    store = shardstore.connect(conn)
    conn.commit()
    conn.close()
    with pytest.raises(shardstore.DatabaseError) as raised:
        store.create_session("acme")
    assert not raised.value.retryable
    assert _sessions(dsn) == 0


# ---------------------------------------------------------------- an Engine: lends connections


def test_an_engine_lends_connections(engine: sa.Engine, dsn: str) -> None:
    store = shardstore.connect(engine, chunk_tokens=200)
    try:
        assert store.connector.pooled and store.dsn is None
        sid = store.create_session("acme")
        store.append_turns(sid, [{"role": "user", "content": "y " * 80}] * 20)
        store.drain_folds()  # background folds take connections from the engine too
        assert _sessions(dsn) == 1  # autocommit: committed at once
        assert len(store.chunks(sid)) > 1
        assert engine.pool.checkedout() == 0  # every connection went back
        with engine.connect() as conn:  # with its own isolation level again
            assert conn.connection.dbapi_connection.autocommit is False  # type: ignore[union-attr]
    finally:
        store.close()
    engine.dispose()  # the engine is the application's: still usable after the store
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1


def test_a_broken_engine_connection_is_invalidated(dsn: str) -> None:
    eng = engine_for(dsn, pool_size=1, max_overflow=0)
    store = shardstore.connect(eng, background_fold=False)
    try:
        sid = store.create_session("acme")
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(shardstore.DatabaseUnavailable):
            store.append_turn(sid, USER)
        # the dead connection was invalidated, not handed out again
        assert store.append_turn(sid, USER, "k1", retry=True).turn_seq >= 0
        assert store.session(sid).turn_count >= 1
    finally:
        store.close()
        eng.dispose()


def test_wrong_sqlalchemy_sources(tmp_path: Path, dsn: str) -> None:
    lite = sa.create_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with pytest.raises(shardstore.ConfigurationError, match=r"postgresql\+psycopg"):
        shardstore.connect(lite)
    with lite.connect() as conn, pytest.raises(shardstore.ConfigurationError, match="psycopg"):
        shardstore.connect(conn)
    async_engine = create_async_engine("postgresql+psycopg://", connect_args=conninfo_to_dict(dsn))
    with pytest.raises(shardstore.ConfigurationError, match="connect"):
        shardstore.connect(async_engine)  # the asyncio engine goes to connect_async
    with pytest.raises(shardstore.ConfigurationError):
        asyncio.run(shardstore.connect_async(engine_for(dsn)))
    with pytest.raises(shardstore.ConfigurationError):
        shardstore.connect(sa.MetaData())
    with pytest.raises(shardstore.ConfigurationError):
        run_migrations(engine_for(dsn))  # type: ignore[arg-type]
    assert _sessions(dsn) == 0


# ---------------------------------------------------------------- asyncio


@pytest.mark.slow
def test_async_engine_and_async_connection(dsn: str) -> None:
    async def main() -> None:
        eng = create_async_engine("postgresql+psycopg://", connect_args=conninfo_to_dict(dsn))
        try:
            store = await shardstore.connect_async(eng)
            sid = await store.create_session("acme")
            await store.append_turns(sid, [USER] * 3)
            await store.close()
            assert _sessions(dsn) == 1
            assert eng.pool.checkedout() == 0

            async with eng.connect() as conn:
                joined = await shardstore.connect_async(conn)
                await conn.commit()
                other = await joined.create_session("acme")
                await joined.append_turn(other, USER)
                await joined.purge_session(sid)  # a transaction block, joined too
                await conn.rollback()
                assert _sessions(dsn) == 1
                with shardstore.connect(dsn) as own:
                    assert not own.session(sid).purged
                third = await joined.create_session("acme")
                await joined.append_turn(third, USER)
                await conn.commit()
            assert _sessions(dsn) == 2
        finally:
            await eng.dispose()

    asyncio.run(main())


# ---------------------------------------------------------------- declared tables


def test_declared_tables_match_the_migrated_schema(engine: sa.Engine) -> None:
    declared = metadata()
    assert metadata() is declared
    assert set(declared.tables) == {
        "shardstore.sessions",
        "shardstore.checkpoints",
        "shardstore.runs",
        "shardstore.facts",
        "shardstore.turns",
    }
    inspector = sa.inspect(engine)
    for table in declared.tables.values():
        reflected = {c["name"]: c for c in inspector.get_columns(table.name, schema="shardstore")}
        assert [c.name for c in table.columns] == list(reflected), table.name
        for column in table.columns:
            found = reflected[column.name]
            assert column.nullable == found["nullable"], (table.name, column.name)
            ddl = column.type.compile(dialect=engine.dialect)
            assert ddl == found["type"].compile(dialect=engine.dialect), (table.name, column.name)
        pk = inspector.get_pk_constraint(table.name, schema="shardstore")["constrained_columns"]
        assert [c.name for c in table.primary_key] == pk, table.name


@pytest.mark.slow
def test_the_turns_view_is_what_history_holds(
    engine: sa.Engine, dsn: str, tenant_role: str
) -> None:
    """shardstore.turns: every turn a session holds, folded or buffered, once, as
    history() gives it (ordinary JSON); rewound, range-purged and purged turns gone; a
    fork's inherited turns are its parent's rows; a tenant role sees its tenant's only."""
    turns = metadata().tables["shardstore.turns"]
    store = shardstore.connect(engine, chunk_tokens=200)
    try:
        sid = store.create_session("acme")
        other = store.create_session("globex")
        messages = [{"role": "user", "content": f"turn {i} " + "w " * (i % 40)} for i in range(60)]
        store.append_turns(sid, messages[:40], idempotency_keys=[f"k{i}" for i in range(40)])
        store.flush(sid)
        store.drain_folds()
        store.append_turns(sid, messages[40:])  # some buffered
        store.append_turn(other, {"role": "user", "content": "not acme's"})
        store.rewind(sid, 55)
        store.purge_range(sid, before_turn_seq=3)
        child = store.fork(sid, at_turn_seq=50)
        store.append_turn(child, {"role": "user", "content": "the fork's own"})
        store.append_turns(sid, messages[:3])  # 55..57, buffered (the chunk is far from full)

        def view(session: uuid.UUID) -> list[tuple[Any, ...]]:
            with engine.connect() as conn:
                q = (
                    sa.select(
                        turns.c.turn_seq,
                        turns.c.chunk_seq,
                        turns.c.tokens,
                        turns.c.idempotency_key,
                        turns.c.created_at,
                        turns.c.message,
                    )
                    .where(turns.c.session_id == session)
                    .order_by(turns.c.turn_seq)
                )
                return [tuple(r) for r in conn.execute(q)]

        expected = [
            (t.turn_seq, t.chunk_seq, t.tokens, t.idempotency_key, t.created_at, t.message)
            for t in store.history(sid)
        ]
        assert [e[0] for e in expected] == list(range(3, 58))
        assert view(sid) == expected
        assert any(e[3] for e in expected)  # keyed turns keep their keys
        assert [r[0] for r in view(child)] == [51]  # its own; 0..50 are the parent's rows
        with engine.connect() as conn:
            buffered = conn.execute(
                sa.text("SELECT count(*) FROM shardstore.turn_buffer WHERE session_id = :s"),
                {"s": sid},
            ).scalar_one()
        assert 0 < buffered < len(expected)  # both places are read
        # a tenant role sees its tenant's turns only
        with psycopg.connect(dsn) as conn:
            conn.execute(f'SET ROLE "{tenant_role}"')
            conn.execute("SELECT set_config('shardstore.tenant_id', 'globex', false)")
            seen = conn.execute(
                "SELECT session_id, message->>'content' FROM shardstore.turns"
            ).fetchall()
        assert seen == [(other, "not acme's")]
        store.purge_session(other)
        assert view(other) == []
    finally:
        store.close()


def test_a_join_through_the_declared_tables(engine: sa.Engine, dsn: str) -> None:
    """Per tenant and session: turns, checkpoints, runs awaiting a human, and facts
    sourced in the session, in one query joined with the application's own table."""
    store = shardstore.connect(engine)
    try:
        expected: dict[uuid.UUID, tuple[Any, ...]] = {}
        orders = _app_table(engine)
        for i, tenant in enumerate(["acme", "acme", "globex"]):
            sid = store.create_session(tenant, subject_id=f"u{i}", metadata={"plan": f"p{i}"})
            store.append_turns(sid, [USER] * (i + 2))
            for c in range(i):
                store.checkpoint(sid, {"c": c})
            run = store.open_run(sid, framework="langgraph", thread_key=f"t{i}")
            if i != 1:
                store.mark_awaiting(run.run_id, {"question": "ok?"})
            store.remember(tenant, f"u{i}", "likes", {"v": i}, source=(sid, 0))
            with engine.begin() as conn:
                conn.execute(orders.insert().values(id=i, session_id=sid))
            expected[sid] = (tenant, i + 2, i, int(i != 1), 1, f"p{i}")
        store.purge_session(store.create_session("acme"))  # a tombstone: left out below
    finally:
        store.close()

    t = metadata().tables
    sessions, checkpoints, runs, facts = (
        t["shardstore.sessions"],
        t["shardstore.checkpoints"],
        t["shardstore.runs"],
        t["shardstore.facts"],
    )

    def count(table: sa.Table, column: str, where: Any = None) -> Any:
        return (
            sa.select(sa.func.count())
            .select_from(table)
            .where(table.c[column] == sessions.c.session_id, sa.true() if where is None else where)
            .scalar_subquery()
        )

    query = (
        sa.select(
            sessions.c.session_id,
            sessions.c.tenant_id,
            sessions.c.next_turn_seq,
            count(checkpoints, "session_id"),
            count(runs, "session_id", runs.c.status == "awaiting_human"),
            count(facts, "source_session_id"),
            sessions.c.metadata["plan"].astext,
        )
        .join(orders, orders.c.session_id == sessions.c.session_id)
        .where(sessions.c.purged_at.is_(None))
        .order_by(orders.c.id)
    )
    with engine.connect() as conn:
        rows = conn.execute(query).all()
        assert {r[0]: tuple(r[1:]) for r in rows} == expected
        assert [r[0] for r in rows] == list(expected)
        assert (
            conn.execute(
                sa.select(sa.func.count()).where(sessions.c.purged_at.is_not(None))
            ).scalar()
            == 1
        )


# ---------------------------------------------------------------- Alembic


ENV_PY = """
from alembic import context

from shardstore.integrations.sqlalchemy import include_name, run_migrations

config = context.config


def run_migrations_online() -> None:
    with config.attributes["engine"].connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=None,
            include_schemas=True,
            include_name=include_name,
        )
        with context.begin_transaction():
            config.attributes["applied"] = run_migrations(connection)
            context.run_migrations()
            if config.attributes.get("fail"):
                raise RuntimeError("the application's migration failed")


run_migrations_online()
"""

REVISION = """
import sqlalchemy as sa
from alembic import op

revision = "app0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tickets",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("session_id", sa.Uuid, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("tickets")
"""


def _alembic(tmp_path: Path, eng: sa.Engine) -> Config:
    scripts = tmp_path / "migrations"
    (scripts / "versions").mkdir(parents=True)
    (scripts / "env.py").write_text(ENV_PY)
    (scripts / "script.py.mako").write_text("")
    (scripts / "versions" / "app0001_tickets.py").write_text(textwrap.dedent(REVISION))
    config = Config()
    config.set_main_option("script_location", str(scripts))
    config.attributes["engine"] = eng
    return config


def _schema_versions(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        exists = conn.execute("SELECT to_regclass('shardstore.schema_migrations')").fetchone()
        if exists is None or exists[0] is None:
            return []
        return [r[0] for r in conn.execute("SELECT version FROM shardstore.schema_migrations")]


# reflecting shardstore's schema unfiltered meets pgvector's type, which SQLAlchemy lacks
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Did not recognize type 'halfvec'")
def test_alembic_upgrade_head_runs_shardstores_migrations(tmp_path: Path, empty_dsn: str) -> None:
    eng = engine_for(empty_dsn)
    try:
        config = _alembic(tmp_path, eng)
        shipped = [m.version for m in all_migrations()]

        config.attributes["fail"] = True  # one transaction: a failure leaves nothing
        with pytest.raises(RuntimeError):
            command.upgrade(config, "head")
        assert _schema_versions(empty_dsn) == []

        config.attributes["fail"] = False
        command.upgrade(config, "head")
        assert config.attributes["applied"] == shipped
        assert sorted(_schema_versions(empty_dsn)) == shipped
        with eng.connect() as conn:
            assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == (
                "app0001"
            )
            assert sa.inspect(conn).has_table("tickets")
            # autogenerate, with shardstore's schema left out, proposes nothing about it
            context = MigrationContext.configure(
                conn, opts={"include_schemas": True, "include_name": include_name}
            )
            app_meta = sa.MetaData()
            sa.Table(
                "tickets",
                app_meta,
                sa.Column("id", sa.Integer, primary_key=True),
                sa.Column("session_id", sa.Uuid, nullable=False),
            )
            assert compare_metadata(context, app_meta) == []
            unfiltered = MigrationContext.configure(conn, opts={"include_schemas": True})
            assert compare_metadata(unfiltered, app_meta)  # the hook is what hides them

        command.upgrade(config, "head")  # again: nothing to do
        assert config.attributes["applied"] == []
        with psycopg.connect(empty_dsn) as conn:
            assert run_sync(conn, migrate_op()) == []  # connect() would apply nothing either
        with shardstore.connect(eng) as store:
            sid = store.create_session("acme")
            assert store.append_turn(sid, USER).turn_seq == 0
    finally:
        eng.dispose()


def test_run_migrations_on_a_current_schema_applies_nothing(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        assert run_migrations(conn) == []


@pytest.mark.slow
def test_imports_stay_lazy() -> None:
    """shardstore itself never imports sqlalchemy: only a SQLAlchemy source does."""
    import subprocess
    import sys

    code = (
        "import sys, shardstore; shardstore.connect; "
        "from shardstore.core import connector; "
        "connector._sqlalchemy_kind('postgresql://x'); "
        "print('sqlalchemy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_the_extra_the_import_names_the_pip_command() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['sqlalchemy'] = None\n"  # as if not installed
        "import shardstore\n"
        "try:\n"
        "    import shardstore.integrations.sqlalchemy\n"
        "except shardstore.MissingDependency as exc:\n"
        "    print(isinstance(exc, ImportError), exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("True ") and "shardstore[sqlalchemy]" in out.stdout
