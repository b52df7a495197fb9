"""summarize() works on a scope: one session, one tenant's sessions, else the tenant the
store is bound to, else (an operator's store) every session. A scoped call never writes a
summary outside its scope; the CLI's --session and --tenant say the same."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.cli.app import main
from shardstore.models import Turn
from shardstore.schema import rls
from tests.tenancy import as_tenant

SMALL = {"chunk_tokens": 300, "default_tail_turns": 1}


def stub(turns: list[Turn]) -> str:
    return f"turns {turns[0].turn_seq}..{turns[-1].turn_seq}"


def _sealed_sessions(store: shardstore.Store) -> dict[str, list[uuid.UUID]]:
    """Two sessions of each of two tenants, each with sealed chunks queued."""
    made: dict[str, list[uuid.UUID]] = {"acme": [], "globex": []}
    for tenant, sids in made.items():
        for _ in range(2):
            sid = store.create_session(tenant)
            store.append_turns(
                sid, [{"role": "user", "content": f"note {i} " * 12} for i in range(30)]
            )
            sids.append(sid)
    store.drain_folds()
    return made


def _summarised(dsn: str) -> dict[uuid.UUID, int]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT session_id, count(*) FROM shardstore.chunk_summaries GROUP BY 1"
        ).fetchall()
    return {r[0]: int(r[1]) for r in rows}


def test_a_session_or_a_tenant_scope_writes_nothing_outside_it(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    store = make_store(**SMALL)
    made = _sealed_sessions(store)
    one = made["acme"][0]
    assert store.summarize(stub, session_id=one) > 0
    assert set(_summarised(dsn)) == {one}
    assert store.summarize(stub, tenant_id="acme") > 0
    assert set(_summarised(dsn)) == set(made["acme"])
    # the operator's unscoped pass takes what is left: globex's sessions
    assert store.summarize(stub) > 0
    assert set(_summarised(dsn)) == set(made["acme"] + made["globex"])
    assert store.summarize(stub) == 0


@pytest.mark.slow
def test_a_tenant_bound_store_defaults_to_its_tenant(
    make_store: Callable[..., shardstore.Store], dsn: str, tenant_role: str
) -> None:
    made = _sealed_sessions(make_store(**SMALL))
    conn = as_tenant(dsn, tenant_role, "acme")
    try:
        tenant = rls.connect_tenant(conn, **SMALL)
        assert tenant.summarize(stub) > 0
        assert tenant.summarize(stub, tenant_id="globex") == 0  # RLS hides it anyway
    finally:
        conn.close()
    assert set(_summarised(dsn)) == set(made["acme"])


def test_async_summarize_takes_the_same_scope(
    make_store: Callable[..., shardstore.Store], dsn: str
) -> None:
    made = _sealed_sessions(make_store(**SMALL))

    async def scenario() -> int:
        store = await shardstore.connect_async(dsn, **SMALL)
        try:
            return await store.summarize(stub, tenant_id="globex")
        finally:
            await store.close()

    assert asyncio.run(scenario()) > 0
    assert set(_summarised(dsn)) == set(made["globex"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tenant_id": ""}, "tenant_id"),
        ({"tenant_id": "a\x00b"}, "tenant_id"),
        ({"tenant_id": "x" * 100_000}, "tenant_id"),
        ({"tenant_id": ["acme"]}, "tenant_id"),
        ({"tenant_id": {"nested": [[[["deep"]]]]}}, "tenant_id"),
    ],
)
def test_hostile_scopes_are_refused(
    store: shardstore.Store, kwargs: dict[str, Any], match: str, dsn: str
) -> None:
    with pytest.raises(shardstore.InvalidInput, match=match):
        store.summarize(stub, **kwargs)
    assert _summarised(dsn) == {}


@pytest.mark.slow
def test_cli_tenant_scope(
    make_store: Callable[..., shardstore.Store], dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    made = _sealed_sessions(make_store(**SMALL))
    command = "python3 -c \"import sys, json; t = json.load(sys.stdin); print(len(t), 'turns')\""
    rc = main(["--dsn", dsn, "summarize", "--command", command, "--tenant", "globex"])
    assert rc == 0, capsys.readouterr().err
    assert set(_summarised(dsn)) == set(made["globex"])
    assert (
        main(
            [
                "--dsn",
                dsn,
                "summarize",
                "--command",
                "true",
                "--tenant",
                "a",
                "--session",
                str(made["acme"][0]),
            ]
        )
        == 2
    )  # one scope at a time
