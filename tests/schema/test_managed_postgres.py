"""Managed Postgres (RDS, Cloud SQL, Azure, Supabase, Neon): the owner of the shardstore
schema is not a superuser and holds no rights beyond its database; an administrator made
the database, the pgvector extension in it and the application's login roles beforehand
(docs/pooling.md, "Deploying on managed Postgres"). Everything a deployment does then runs
as the owner: migrations, maintenance with retention, Row-Level Security with a bound
tenant role, embedding, search and purges."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.schema import rls
from tests.embedders import HashEmbedder


@dataclass
class Managed:
    owner_dsn: str
    tenant_dsn: str
    tenant_role: str


@pytest.fixture
def managed(server_dsn: str) -> Iterator[Managed]:
    tag = uuid.uuid4().hex[:8]
    owner, tenant, db = f"ss_owner_{tag}", f"ss_app_{tag}", f"ss_managed_{tag}"
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        for role in (owner, tenant):  # a password, for a test server that asks for one
            admin.execute(
                f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{tag}' NOSUPERUSER NOCREATEDB NOCREATEROLE"
            )
        admin.execute(f'CREATE DATABASE "{db}" OWNER "{owner}"')
        admin.execute(f'REVOKE ALL ON DATABASE "{db}" FROM PUBLIC')
        admin.execute(f'GRANT CONNECT ON DATABASE "{db}" TO "{tenant}"')
    with psycopg.connect(make_conninfo(server_dsn, dbname=db), autocommit=True) as admin:
        admin.execute("CREATE EXTENSION vector")
    try:
        yield Managed(
            make_conninfo(server_dsn, dbname=db, user=owner, password=tag),
            make_conninfo(server_dsn, dbname=db, user=tenant, password=tag),
            tenant,
        )
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{tenant}"')
            admin.execute(f'DROP ROLE IF EXISTS "{owner}"')


@pytest.mark.slow
def test_the_tour_as_a_non_superuser_owner(managed: Managed) -> None:
    with psycopg.connect(managed.owner_dsn) as conn:
        row = conn.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert row == (False, False, False)
    with shardstore.connect(
        managed.owner_dsn,
        embedding_model=HashEmbedder(),
        partition_interval=timedelta(seconds=1),
        premake=2,
    ) as store:
        old = store.create_session("acme", "user:old")
        store.append_turn(old, {"role": "user", "content": "an old refund question"})
        store.flush(old)
        time.sleep(3.2)  # that partition ends more than the retention below ago
        # retention before anything newer exists, so that a slow machine cannot age it too
        report = store.maintain(retention=timedelta(seconds=2), embed=False)
        assert report.errors == [] and report.healthy
        assert report.sessions_expired == 1 and report.partitions_dropped
        sid = store.create_session("acme", "user:42")
        store.append_turns(
            sid, [{"role": "user", "content": f"my refund {i} is late"} for i in range(20)]
        )
        assert store.embed() > 0
        assert store.search("refund 7", tenant_id="acme", k=3)
        assert store.search("refund", tenant_id="acme", mode="text")
        assert store.maintain().healthy
        with psycopg.connect(managed.owner_dsn, autocommit=True) as conn:
            rls.enable_rls(conn)
            rls.grant_tenant_role(conn, managed.tenant_role, tenant="acme")
        tenant = rls.connect_tenant(managed.tenant_dsn)
        try:
            assert len(tenant.tail(sid, n=5)) == 5
            tenant.append_turn(sid, {"role": "user", "content": "from the app role"})
            with pytest.raises(shardstore.ShardstoreError):
                tenant.create_session("beta")
        finally:
            tenant.close()
        assert store.purge_subject("acme", "user:42").sessions_affected == 1
        assert store.stats().sessions == 0
