"""``shardstore mcp`` behind a real PgBouncer in transaction mode (tests/pgbouncer.py): one
HTTP server serving two tenants by bearer token, through one shared role bound to no
tenant, Row-Level Security on, and server connections left with another tenant's session
setting by a client in between. Each tenant still reads and writes only its own rows: the
tenant stores bind per transaction (docs/pooling.md)."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psycopg
import pytest

import shardstore
from tests.integrations.test_mcp_server import (
    TOKENS,
    McpClient,
    connected,
    http_opener,
    http_server,
    seed,
)
from tests.pgbouncer import POOL_SIZE, Pooler

ROUNDS = 6  # per tenant thread, each round five tool calls
# one poisoner at a time (two, each holding some of the pool's server connections, would
# wait for each other), and none holds what it took for longer than this: a poisoner
# holding two server connections while it waits for the third, held by a tool call whose
# transaction is waiting on the event loop, could otherwise wait for ever
POISONING = threading.Lock()
PATIENCE = 5.0


def _poison(pooled: str, tenant: str, patience: float = PATIENCE) -> int:
    """Leave a session-level tenant setting on as many of the pool's server connections as
    it can take within ``patience`` seconds (all of them when the pool is idle); how many
    it took."""
    with POISONING:
        return _poison_all(pooled, tenant, patience)


def _poison_all(pooled: str, tenant: str, patience: float) -> int:
    release = threading.Event()
    holding = threading.Semaphore(0)
    errors: list[BaseException] = []

    def hold(conn: psycopg.Connection[Any]) -> None:
        try:
            # BEGIN holds a server connection, so each of these gets another one (or waits
            # in PgBouncer's queue until one is free)
            conn.execute("BEGIN")
            conn.execute("SELECT set_config('shardstore.tenant_id', %s, false)", (tenant,))
            holding.release()
            release.wait()
            conn.execute("COMMIT")
        except BaseException as exc:
            errors.append(exc)
        finally:
            conn.close()

    conns = [psycopg.connect(pooled, autocommit=True) for _ in range(POOL_SIZE)]
    threads = [threading.Thread(target=hold, args=(conn,)) for conn in conns]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + patience
    held = 0
    while held < POOL_SIZE and holding.acquire(timeout=max(0.0, deadline - time.monotonic())):
        held += 1
    release.set()  # a holder still queued finishes once the others give theirs back
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads), "a poisoner never got through"
    assert not errors, errors[0]
    return held


def _round(client: McpClient, tenant: str, ids: dict[str, Any], n: int) -> None:
    other = "globex" if tenant == "acme" else "acme"
    listed = client.ok("list_sessions")["sessions"]
    assert {s["session_id"] for s in listed} == set(ids[tenant].values())
    hits = client.ok("search_history", query="blue kettle refund")["hits"]
    assert {h["session_id"] for h in hits} == {ids[tenant]["first"]}
    assert other not in json.dumps(hits)
    assert "does not exist" in client.error("tail", session_id=ids[other]["first"])
    client.ok("remember_fact", subject="user:1", key=f"round-{n}", value=tenant)
    facts = client.ok("recall_facts", subject="user:1", limit=100)["facts"]
    assert {f["value"] for f in facts if f["key"].startswith("round-")} == {tenant}
    assert {f["key"]: f["value"] for f in facts}["plan"] == f"{tenant}-gold"


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_two_tenants_through_the_pooler_stay_apart(
    pgbouncer: Pooler, dsn: str, shared_role: str
) -> None:
    with shardstore.connect(dsn) as owner:
        ids = seed(owner)
    pooled = pgbouncer.dsn(dsn, user=shared_role)
    # the tokens from the environment this time (the other module reads a file)
    tokens = ", ".join(f"{token} {tenant}" for tenant, token in TOKENS.items())
    failures: list[BaseException] = []
    with (
        http_server(pooled, env={"SHARDSTORE_MCP_TOKENS": tokens}) as url,
        connected(http_opener(url, TOKENS["acme"])) as acme,
        connected(http_opener(url, TOKENS["globex"])) as globex,
    ):
        # with no call in flight the MCP server's store holds no server connection (none
        # is left in a transaction), so the poisoner takes every one of them
        assert _poison(pooled, "globex", patience=60) == POOL_SIZE

        def work(client: McpClient, tenant: str) -> None:
            try:
                for n in range(ROUNDS):
                    _round(client, tenant, ids, n)
                    _poison(pooled, "globex" if tenant == "acme" else "acme")
            except BaseException as exc:
                failures.append(exc)

        threads = [
            threading.Thread(target=work, args=(acme, "acme")),
            threading.Thread(target=work, args=(globex, "globex")),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures[0]
        # and after every call came back, no server connection stays in a transaction (a
        # leaked one would never come back: the long patience is for a loaded machine)
        assert _poison(pooled, "acme", patience=60) == POOL_SIZE
    with psycopg.connect(dsn, autocommit=True) as admin:
        written = admin.execute(
            "SELECT tenant_id, value #>> '{}', count(*) FROM shardstore.facts "
            "WHERE key LIKE 'round-%' GROUP BY 1, 2 ORDER BY 1"
        ).fetchall()
    assert written == [("acme", "acme", ROUNDS), ("globex", "globex", ROUNDS)]
