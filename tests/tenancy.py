"""Tenant roles for the row-level security tests: made, used and dropped the same way."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg

from shardstore.schema import rls


def make_tenant_role(dsn: str, *, grant: bool = True) -> str:
    """A new NOLOGIN role; with ``grant``, given the tenant grants and RLS switched on."""
    role = f"ss_tenant_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" NOLOGIN')
        if grant:
            rls.grant_tenant_role(admin, role)
            rls.enable_rls(admin)
    return role


def drop_tenant_role(dsn: str, role: str) -> None:
    """RLS switched off again, the role and what it owns dropped."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        rls.disable_rls(admin)
        admin.execute(f'DROP OWNED BY "{role}"')
        admin.execute(f'DROP ROLE "{role}"')


def as_tenant(dsn: str, role: str, tenant: str) -> psycopg.Connection[Any]:
    """An autocommit connection acting as ``role`` for ``tenant``."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f'SET ROLE "{role}"')
    rls.set_session_tenant(conn, tenant)
    return conn
