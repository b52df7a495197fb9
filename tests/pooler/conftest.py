"""Fixtures the pooler tests share."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest

from shardstore.schema import rls
from tests.pgbouncer import Pooler


@pytest.fixture
def shared_role(pgbouncer: Pooler, dsn: str) -> Iterator[str]:
    """One LOGIN role for every tenant, bound to none (the shape a cross-tenant leak through
    a pooler needs), with the tenant grants and RLS on; dropped after the test."""
    role = f"ss_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        rls.grant_tenant_role(admin, role)
        rls.enable_rls(admin)
    pgbouncer.allow(role)
    try:
        yield role
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            rls.disable_rls(admin)
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s",
                (role,),
            )
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')
