"""``shardstore mcp`` (shardstore.integrations.mcp_server) driven by the real MCP client
(``ClientSession``): over stdio (a subprocess ``python -m shardstore mcp``) and over
streamable HTTP (a subprocess serving two tenants by bearer token), each started once for
the module. Every tool, hostile arguments, tenants kept apart whatever the arguments, 401
without a valid token, and append_turn only on a writable server."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import httpx2
import psycopg
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.cli import main
from shardstore.errors import ConfigurationError
from shardstore.integrations.mcp_server import MAX_K, TokenTable

ROOT = Path(__file__).resolve().parents[2]
TOKENS = {"acme": "acme-token-0123456789abcdef", "globex": "globex-token-0123456789abcdef"}
READ_TOOLS = {
    "search_history",
    "get_context",
    "tail",
    "list_sessions",
    "recall_facts",
    "remember_fact",
    "forget_fact",
}
# the tables a refused call must leave as they were
WATCHED = ("sessions", "turn_buffer", "agent_history", "facts", "turn_keys")


class McpClient:
    """A real MCP ClientSession, driven from synchronous tests through an anyio portal."""

    def __init__(self, portal: anyio.from_thread.BlockingPortal, session: ClientSession) -> None:
        self.portal = portal
        self.session = session

    def call(self, name: str, **arguments: Any) -> CallToolResult:
        result: CallToolResult = self.portal.call(self.session.call_tool, name, arguments)
        return result

    def ok(self, name: str, **arguments: Any) -> dict[str, Any]:
        """The structured result of a call that must succeed."""
        result = self.call(name, **arguments)
        assert not result.is_error, _text(result)
        assert result.structured_content is not None
        # the text block carries the same JSON, for clients that read only text
        assert json.loads(_text(result)) == result.structured_content
        return result.structured_content

    def error(self, name: str, **arguments: Any) -> str:
        """The message of a call that must be refused as a tool error."""
        result = self.call(name, **arguments)
        assert result.is_error, f"{name}({arguments}) was not refused"
        text = _text(result)
        assert "Traceback" not in text and 'File "' not in text
        return text

    def tools(self) -> dict[str, Any]:
        listed = self.portal.call(self.session.list_tools)
        return {tool.name: tool for tool in listed.tools}


def _text(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


@contextmanager
def connected(opener: Callable[[], Any]) -> Iterator[McpClient]:
    """An initialized ClientSession on the streams ``opener()`` yields, in a portal."""

    @asynccontextmanager
    async def session() -> AsyncIterator[ClientSession]:
        async with opener() as streams, ClientSession(streams[0], streams[1]) as client:
            await client.initialize()
            yield client

    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(session()) as client,
    ):
        yield McpClient(portal, client)


def stdio_opener(dsn: str, *args: str) -> Callable[[], Any]:
    """``python -m shardstore --dsn DSN mcp ARGS`` over stdio."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "shardstore", "--dsn", dsn, "mcp", *args],
        cwd=str(ROOT),
        env={"PYTHONPATH": str(ROOT)},
    )
    return lambda: stdio_client(params)


def http_opener(url: str, token: str | None) -> Callable[[], Any]:
    """Streamable HTTP at ``url`` with ``token`` as the bearer token."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}

    @asynccontextmanager
    async def opener() -> AsyncIterator[Any]:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            streamable_http_client(url, http_client=http) as streams,
        ):
            yield streams

    return opener


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post_status(url: str, headers: dict[str, str]) -> int:
    """The HTTP status of an MCP initialize POST with ``headers``."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "probe", "version": "0"},
            },
        }
    ).encode()
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            **headers,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@contextmanager
def http_server(dsn: str, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``shardstore mcp --http 127.0.0.1:PORT ARGS`` in a subprocess; yields its URL once
    it answers (401 to a request without a token, or 200 where it takes none)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "shardstore", "--dsn", dsn, "mcp", "--http", f"127.0.0.1:{port}"]
        + list(args),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited: {process.stderr.read().decode()}")  # type: ignore[union-attr]
            try:
                post_status(url, {})
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


# ---------------------------------------------------------------- the data


def seed(store: shardstore.Store) -> dict[str, Any]:
    """Sessions and facts of two tenants that look alike (same subjects, keys, words)."""
    ids: dict[str, Any] = {}
    for tenant in ("acme", "globex"):
        first = store.create_session(tenant, subject_id="user:1", agent_id="support")
        store.append_turns(
            first,
            [
                {"role": "user", "content": f"my {tenant} blue kettle leaks, I want a refund"},
                {"role": "assistant", "content": f"Sorry! The {tenant} refund is on its way."},
                {"role": "user", "content": "thanks, and the warranty?"},
                {"role": "assistant", "content": "Two years on every kettle."},
            ],
        )
        second = store.create_session(tenant, subject_id="user:2")
        store.append_turn(second, {"role": "user", "content": f"{tenant} invoice question"})
        store.remember(tenant, "user:1", "plan", f"{tenant}-gold", source=(first, 0))
        store.remember(tenant, "user:1", "city", "Lyon", source=None)
        ids[tenant] = {"first": str(first), "second": str(second)}
    return ids


def fingerprint(dsn: str) -> dict[str, Any]:
    """Every watched table's rows, as text, to compare before and after refused calls."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return {
            table: sorted(
                str(row)
                for row in conn.execute(f"SELECT t::text FROM shardstore.{table} t").fetchall()
            )
            for table in WATCHED
        }


@pytest.fixture(scope="module")
def mcp_dsn(server_dsn: str, _databases: Any) -> Iterator[str]:
    """One database for the module's servers, seeded once."""
    name = _databases.take()
    try:
        yield make_conninfo(server_dsn, dbname=name)
    finally:
        _databases.drop_later([name])


@pytest.fixture(scope="module")
def ids(mcp_dsn: str) -> dict[str, Any]:
    with shardstore.connect(mcp_dsn) as store:
        return seed(store)


@pytest.fixture(scope="module")
def acme(mcp_dsn: str, ids: dict[str, Any]) -> Iterator[McpClient]:
    """The acme tenant's writable stdio server."""
    with connected(stdio_opener(mcp_dsn, "--tenant", "acme", "--writable")) as client:
        yield client


@pytest.fixture(scope="module")
def http_url(mcp_dsn: str, ids: dict[str, Any], tmp_path_factory: Any) -> Iterator[str]:
    """A read-only HTTP server with a token per tenant."""
    tokens = tmp_path_factory.mktemp("mcp") / "tokens.txt"
    tokens.write_text(
        "# token tenant\n" + "".join(f"{token} {tenant}\n" for tenant, token in TOKENS.items())
    )
    with http_server(mcp_dsn, "--tokens", str(tokens)) as url:
        yield url


@pytest.fixture(scope="module")
def by_token(http_url: str) -> Iterator[dict[str, McpClient]]:
    with (
        connected(http_opener(http_url, TOKENS["acme"])) as acme_client,
        connected(http_opener(http_url, TOKENS["globex"])) as globex_client,
    ):
        yield {"acme": acme_client, "globex": globex_client}


# ---------------------------------------------------------------- the tools over stdio


def test_the_tools_say_what_they_take(acme: McpClient) -> None:
    tools = acme.tools()
    assert set(tools) == READ_TOOLS | {"append_turn"}
    for tool in tools.values():
        assert tool.description and len(tool.description) > 80
    search = tools["search_history"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["k"]["maximum"] == MAX_K
    assert tools["tail"].annotations.read_only_hint is True


def test_search_history(acme: McpClient, ids: dict[str, Any]) -> None:
    hits = acme.ok("search_history", query="kettle refund")["hits"]
    assert hits and {h["session_id"] for h in hits} == {ids["acme"]["first"]}
    words = " ".join(t["message"]["content"] for h in hits for t in h["turns"])
    assert "acme" in words and "globex" not in words
    assert hits == sorted(hits, key=lambda h: -h["score"])
    one = acme.ok("search_history", query="invoice", session_id=ids["acme"]["second"], k=1)
    assert [h["session_id"] for h in one["hits"]] == [ids["acme"]["second"]]
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert acme.ok("search_history", query="kettle", since=later) == {"hits": []}


def test_tail_pages_back_to_the_first_turn(acme: McpClient, ids: dict[str, Any]) -> None:
    sid = ids["acme"]["first"]
    page = acme.ok("tail", session_id=sid, n=2)
    assert [t["turn_seq"] for t in page["turns"]] == [2, 3]
    seen = page["turns"]
    while page["next_before"] is not None:
        page = acme.ok("tail", session_id=sid, n=1, before=page["next_before"])
        seen = page["turns"] + seen
    assert [t["turn_seq"] for t in seen] == [0, 1, 2, 3]
    assert seen[0]["message"] == {"role": "user", "content": "my acme blue kettle leaks, I want a refund"}


def test_get_context_keeps_the_budget(acme: McpClient, ids: dict[str, Any]) -> None:
    sid = ids["acme"]["first"]
    whole = acme.ok("get_context", session_id=sid, max_tokens=10_000)
    assert [m["content"] for m in whole["messages"]][-1] == "Two years on every kettle."
    assert [p["kind"] for p in whole["parts"]] == ["recent"] * 4
    small = acme.ok("get_context", session_id=sid, max_tokens=whole["parts"][-1]["tokens"])
    assert small["tokens"] <= whole["parts"][-1]["tokens"]
    assert len(small["messages"]) == 1


def test_list_sessions_pages(acme: McpClient, ids: dict[str, Any]) -> None:
    first = acme.ok("list_sessions", limit=1)
    assert len(first["sessions"]) == 1 and first["next"] is not None
    rest = acme.ok("list_sessions", limit=1, cursor=first["next"])
    listed = [s["session_id"] for s in first["sessions"] + rest["sessions"]]
    assert rest["next"] is None
    assert sorted(listed) == sorted(ids["acme"].values())
    only = acme.ok("list_sessions", subject="user:2")["sessions"]
    assert [s["session_id"] for s in only] == [ids["acme"]["second"]]
    assert only[0]["turns"] == 1 and only[0]["subject_id"] == "user:2"


def test_facts_remember_recall_forget(acme: McpClient, ids: dict[str, Any]) -> None:
    facts = acme.ok("recall_facts", subject="user:1")["facts"]
    assert {f["key"]: f["value"] for f in facts} == {"city": "Lyon", "plan": "acme-gold"}
    plan = next(f for f in facts if f["key"] == "plan")
    assert plan["source"] == {"session_id": ids["acme"]["first"], "turn_seq": 0}
    source = {"session_id": ids["acme"]["first"], "turn_seq": 2}
    made = acme.ok("remember_fact", subject="user:9", key="pet", value={"cat": [1, 2]}, source=source)
    assert made["fact"]["value"] == {"cat": [1, 2]} and made["fact"]["source"] == source
    before_forget = datetime.now(UTC).isoformat()
    forgotten = acme.ok("forget_fact", subject="user:9", key="pet")["forgotten"]
    assert forgotten["key"] == "pet" and forgotten["valid_to"] is not None
    assert acme.ok("forget_fact", subject="user:9", key="pet") == {"forgotten": None}
    assert acme.ok("recall_facts", subject="user:9")["facts"] == []
    earlier = acme.ok("recall_facts", subject="user:9", as_of=before_forget)["facts"]
    assert [f["value"] for f in earlier] == [{"cat": [1, 2]}]
    page = acme.ok("recall_facts", subject="user:1", limit=1)
    assert [f["key"] for f in page["facts"]] == ["city"] and page["next_offset"] == 1
    last = acme.ok("recall_facts", subject="user:1", limit=1, offset=1)
    assert [f["key"] for f in last["facts"]] == ["plan"] and last["next_offset"] is None
    assert acme.ok("recall_facts", subject="user:1", keys=["plan"])["facts"][0]["key"] == "plan"


def test_append_turn_on_a_writable_server(acme: McpClient, ids: dict[str, Any]) -> None:
    sid = ids["acme"]["second"]
    message = {"role": "assistant", "content": "Your invoice is attached.", "n": [1, {"x": None}]}
    made = acme.ok("append_turn", session_id=sid, message=message, idempotency_key="k-1")
    assert made == {"session_id": sid, "turn_seq": 1, "tokens": made["tokens"], "duplicate": False}
    again = acme.ok("append_turn", session_id=sid, message=message, idempotency_key="k-1")
    assert again["duplicate"] is True and again["turn_seq"] == 1
    assert acme.ok("tail", session_id=sid, n=1)["turns"][0]["message"] == message


# ---------------------------------------------------------------- tenants apart


def _other_tenant_calls(ids: dict[str, Any], sid: str) -> list[tuple[str, dict[str, Any]]]:
    """Every way a tool takes a session id, aimed at ``sid``."""
    return [
        ("tail", {"session_id": sid}),
        ("tail", {"session_id": sid, "before": 2}),
        ("get_context", {"session_id": sid, "max_tokens": 1000}),
        ("search_history", {"query": "kettle", "session_id": sid}),
        ("list_sessions", {"cursor": sid}),
        ("append_turn", {"session_id": sid, "message": {"role": "user", "content": "x"}}),
        (
            "remember_fact",
            {"subject": "s", "key": "k", "value": 1, "source": {"session_id": sid, "turn_seq": 0}},
        ),
    ]


def test_another_tenants_session_is_not_found(
    acme: McpClient, ids: dict[str, Any], mcp_dsn: str
) -> None:
    """Every tool refuses globex's sessions exactly as ids that do not exist, and an extra
    tenant argument is ignored."""
    before = fingerprint(mcp_dsn)
    theirs = ids["globex"]["first"]
    nobody = str(uuid.uuid4())
    for (name, aimed), (_, missing) in zip(
        _other_tenant_calls(ids, theirs), _other_tenant_calls(ids, nobody), strict=True
    ):
        assert acme.error(name, **aimed).replace(theirs, "ID") == acme.error(
            name, **missing
        ).replace(nobody, "ID"), name
        assert "does not exist" in acme.error(name, **aimed)
    assert fingerprint(mcp_dsn) == before
    listed = acme.ok("list_sessions", tenant_id="globex", tenant="globex")["sessions"]
    assert {s["session_id"] for s in listed} == set(ids["acme"].values())
    facts = acme.ok("recall_facts", subject="user:1", tenant_id="globex")["facts"]
    assert "globex-gold" not in json.dumps(facts)
    hits = acme.ok("search_history", query="globex kettle", k=MAX_K)["hits"]
    assert ids["globex"]["first"] not in {h["session_id"] for h in hits}
    assert "globex blue kettle" not in json.dumps(hits)
