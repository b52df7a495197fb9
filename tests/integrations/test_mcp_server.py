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
import tempfile
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
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
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


def post(url: str, payload: Any, headers: dict[str, str]) -> tuple[int, Any]:
    """POST one JSON-RPC message as its JSON text (``payload`` may be text already, for
    what the real client refuses to serialise); the status and the JSON answer."""
    body = payload if isinstance(payload, str) else json.dumps(payload)
    request = urllib.request.Request(
        url,
        data=body.encode(),
        method="POST",
        headers={
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2025-11-25",
            **headers,
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return int(response.status), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            return int(exc.code), json.loads(text or b"null")
        except ValueError:
            return int(exc.code), text.decode(errors="replace")


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}


def tool_call(name: str, arguments: Any) -> dict[str, Any]:
    """A raw ``tools/call`` request."""
    return {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


@contextmanager
def http_server(dsn: str, *args: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """``shardstore mcp --http 127.0.0.1:PORT ARGS`` in a subprocess; yields its URL once
    it answers (401 to a request without a token, or 200 where it takes none)."""
    port = free_port()
    command = [sys.executable, "-m", "shardstore", "--dsn", dsn, "mcp"]
    # the server's log goes to a file: a pipe no one drains blocks the server once it holds
    # 64 KiB of log lines
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            [*command, "--http", f"127.0.0.1:{port}", *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"the server exited: {log.read().decode()}")
                try:
                    post(url, INITIALIZE, {})
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


# ---------------------------------------------------------------- the data


TOOL_PAIR = [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "order", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "shipped"},
]


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
        tools = store.create_session(tenant, subject_id="user:3")
        store.append_turns(tools, [{"role": "user", "content": "order status?"}, *TOOL_PAIR])
        ids[tenant] = {"first": str(first), "second": str(second), "tools": str(tools)}
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
    assert seen[0]["message"] == {
        "role": "user",
        "content": "my acme blue kettle leaks, I want a refund",
    }


def test_tail_never_opens_on_a_cut_off_tool_result(acme: McpClient, ids: dict[str, Any]) -> None:
    """The newest turn alone is a tool result: the page is empty and pages back from the
    head; the page before is the exact range, call and result together."""
    sid = ids["acme"]["tools"]
    newest = acme.ok("tail", session_id=sid, n=1)
    assert newest["turns"] == [] and newest["next_before"] == 3
    older = acme.ok("tail", session_id=sid, n=2, before=3)
    assert [t["message"] for t in older["turns"]] == TOOL_PAIR
    assert older["next_before"] == 1
    assert [t["turn_seq"] for t in acme.ok("tail", session_id=sid, n=5)["turns"]] == [0, 1, 2]


def test_get_context_keeps_the_budget(acme: McpClient, ids: dict[str, Any]) -> None:
    sid = ids["acme"]["first"]
    whole = acme.ok("get_context", session_id=sid, max_tokens=10_000)
    assert [m["content"] for m in whole["messages"]][-1] == "Two years on every kettle."
    assert [p["kind"] for p in whole["parts"]] == ["recent"] * 4
    small = acme.ok("get_context", session_id=sid, max_tokens=whole["parts"][-1]["tokens"])
    assert small["tokens"] <= whole["parts"][-1]["tokens"]
    assert len(small["messages"]) == 1


def test_list_sessions_pages(acme: McpClient, ids: dict[str, Any]) -> None:
    page = acme.ok("list_sessions", limit=2)
    listed = [s["session_id"] for s in page["sessions"]]
    while page["next"] is not None:
        page = acme.ok("list_sessions", limit=2, cursor=page["next"])
        listed += [s["session_id"] for s in page["sessions"]]
    assert len(listed) == len(set(listed)) == 3
    assert set(listed) == set(ids["acme"].values())
    only = acme.ok("list_sessions", subject="user:2")["sessions"]
    assert [s["session_id"] for s in only] == [ids["acme"]["second"]]
    assert only[0]["turns"] == 1 and only[0]["subject_id"] == "user:2"


def test_facts_remember_recall_forget(acme: McpClient, ids: dict[str, Any]) -> None:
    facts = acme.ok("recall_facts", subject="user:1")["facts"]
    assert {f["key"]: f["value"] for f in facts} == {"city": "Lyon", "plan": "acme-gold"}
    plan = next(f for f in facts if f["key"] == "plan")
    assert plan["source"] == {"session_id": ids["acme"]["first"], "turn_seq": 0}
    source = {"session_id": ids["acme"]["first"], "turn_seq": 2}
    made = acme.ok(
        "remember_fact", subject="user:9", key="pet", value={"cat": [1, 2]}, source=source
    )
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


# ---------------------------------------------------------------- hostile arguments


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"a": value}
    return value


SID = "00000000-0000-4000-8000-000000000000"
HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("search_history", {"query": "x", "k": -1}, "k"),
    ("search_history", {"query": "x", "k": 0}, "k"),
    ("search_history", {"query": "x", "k": MAX_K + 1}, "k"),
    ("search_history", {"query": "x", "k": 10**40}, "k"),
    ("search_history", {"query": "x", "k": "5"}, "k"),
    ("search_history", {"query": "x", "k": 2.5}, "k"),
    ("search_history", {"query": "x", "k": True}, "k"),
    ("search_history", {"query": ""}, "query"),
    ("search_history", {"query": "x" * 200_000}, "query"),
    ("search_history", {"query": ["kettle"]}, "query"),
    ("search_history", {"query": None}, "query"),
    ("search_history", {}, "query"),
    ("search_history", {"query": "x", "since": "yesterday"}, "since"),
    ("search_history", {"query": "x", "since": "2026-01-01T00:00:00"}, "timezone"),
    ("search_history", {"query": "x", "since": 1700000000}, "since"),
    ("search_history", {"query": "x", "since": "0001-01-01T00:00:00+14:00"}, "since"),
    ("recall_facts", {"subject": "u", "as_of": "9999-12-31T23:59:59-14:00"}, "as_of"),
    ("search_history", {"query": "x", "session_id": "not-a-uuid"}, "session_id"),
    ("search_history", {"query": "x\x00y"}, "NUL"),
    ("tail", {"session_id": SID, "n": -1}, "n"),
    ("tail", {"session_id": SID, "n": 10**6}, "n"),
    ("tail", {"session_id": SID, "before": 0}, "before"),
    ("tail", {"session_id": "x" * 100_000}, "session_id"),
    ("tail", {"session_id": 12345}, "session_id"),
    ("tail", {"session_id": {"$ne": None}}, "session_id"),
    ("tail", {"session_id": _nested(50)}, "session_id"),
    ("get_context", {"session_id": SID, "max_tokens": 0}, "max_tokens"),
    ("get_context", {"session_id": SID, "max_tokens": 10**12}, "max_tokens"),
    ("get_context", {"session_id": SID}, "max_tokens"),
    ("list_sessions", {"limit": 0}, "limit"),
    ("list_sessions", {"limit": 10_000}, "limit"),
    ("list_sessions", {"cursor": "garbage"}, "UUID"),
    ("list_sessions", {"subject": "s" * 100_000}, "subject"),
    ("recall_facts", {"subject": "u", "keys": ["k"] * 101}, "keys"),
    ("recall_facts", {"subject": "u", "keys": "plan,city"}, "keys"),
    ("recall_facts", {"subject": "u", "keys": [["nested"]]}, "keys"),
    ("recall_facts", {"subject": "u", "offset": -1}, "offset"),
    ("recall_facts", {"subject": "u", "as_of": "10000-01-01T00:00:00Z"}, "as_of"),
    ("recall_facts", {"subject": ""}, "subject"),
    ("remember_fact", {"subject": "u", "key": "k", "value": "v" * (2 << 20)}, "larger than"),
    (
        "remember_fact",
        {"subject": "u", "key": "k", "value": 1, "source": {"session_id": SID}},
        "turn_seq",
    ),
    (
        "remember_fact",
        {"subject": "u", "key": "k", "value": 1, "source": {"session_id": SID, "turn_seq": -1}},
        "turn_seq",
    ),
    (
        "remember_fact",
        {
            "subject": "u",
            "key": "k",
            "value": 1,
            "source": {"session_id": SID, "turn_seq": 0, "tenant": "globex"},
        },
        "tenant",
    ),
    ("remember_fact", {"subject": "u", "key": "", "value": 1}, "key"),
    ("forget_fact", {"subject": "u", "key": 7}, "key"),
    ("append_turn", {"session_id": "{sid}", "message": {"content": "no role"}}, "role"),
    ("append_turn", {"session_id": "{sid}", "message": ["not", "a", "dict"]}, "message"),
    ("append_turn", {"session_id": "{sid}", "message": "hi"}, "message"),
]


@pytest.mark.parametrize(("tool", "arguments", "says"), HOSTILE, ids=lambda v: str(v)[:40])
def test_hostile_arguments_are_tool_errors(
    acme: McpClient, ids: dict[str, Any], tool: str, arguments: dict[str, Any], says: str
) -> None:
    if arguments.get("session_id") == "{sid}":
        arguments = {**arguments, "session_id": ids["acme"]["second"]}
    message = acme.error(tool, **arguments)
    assert says.lower() in message.lower(), message
    assert len(message) < 4000, "the message echoes the hostile value"


def test_nesting_deeper_than_json_rpc_takes_is_a_parse_error(
    http_url: str, ids: dict[str, Any], mcp_dsn: str
) -> None:
    """The real client refuses to send such values; sent raw, the server answers a
    JSON-RPC parse error (400), writes nothing and goes on serving."""
    auth = {"Authorization": f"Bearer {TOKENS['acme']}"}
    before = fingerprint(mcp_dsn)
    for depth in (300, 100_000):
        deep = "[" * depth + "]" * depth
        for name, arguments in (
            ("remember_fact", {"subject": "u", "key": "k", "value": "@"}),
            ("search_history", {"query": "@"}),
        ):
            raw = json.dumps(tool_call(name, arguments)).replace('"@"', deep)
            status, answer = post(http_url, raw, auth)
            assert status == 400 and answer["error"]["code"] == -32700, answer
            assert "Traceback" not in json.dumps(answer)
    assert fingerprint(mcp_dsn) == before
    # a lone surrogate, which the real client cannot encode either: the SDK's parser
    # refuses it as it refuses too deep a nesting
    for name, arguments in (
        ("search_history", {"query": "@"}),
        ("recall_facts", {"subject": "@"}),
        ("list_sessions", {"subject": "@"}),
        ("tail", {"session_id": "@"}),
    ):
        raw = json.dumps(tool_call(name, arguments)).replace('"@"', '"x\\ud800y"')
        status, answer = post(http_url, raw, auth)
        assert status == 400 and answer["error"]["code"] == -32700, answer
    assert fingerprint(mcp_dsn) == before
    call = tool_call("tail", {"session_id": ids["acme"]["first"], "n": 1})
    status, answer = post(http_url, call, auth)
    assert status == 200 and answer["result"]["structuredContent"]["turns"][0]["turn_seq"] == 3


# ---------------------------------------------------------------- HTTP: tokens and tenants


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer "},
        {"Authorization": "Bearer wrong-token-0123456789abcdef"},
        {"Authorization": f"Bearer {TOKENS['acme']}x"},
        {"Authorization": f"Basic {TOKENS['acme']}"},
        {"Authorization": f"Bearer {TOKENS['acme'][:-1]}\u00e9"},
        {"Authorization": "Bearer " + "a" * 100_000},
    ],
    ids=range(8),
)
def test_a_request_without_a_valid_token_gets_401(http_url: str, headers: dict[str, str]) -> None:
    status, answer = post(http_url, tool_call("list_sessions", {}), headers)
    assert status == 401, answer
    assert answer == {
        "error": "invalid_token",
        "error_description": "a valid bearer token is required",
    }


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


def test_the_real_client_with_a_bad_token_gets_no_session(http_url: str) -> None:
    with (
        pytest.raises(Exception) as caught,
        connected(http_opener(http_url, "wrong-token-0123456789abcdef")),
    ):
        pass
    # the client reports the 401 as an error response (the raw requests above see the 401)
    assert [type(leaf) for leaf in _leaves(caught.value)] == [MCPError], caught.value
    status, _ = post(http_url, INITIALIZE, {"Authorization": f"Bearer {TOKENS['acme']}"})
    assert status == 200


def test_each_token_reads_its_own_tenant_only(
    by_token: dict[str, McpClient], ids: dict[str, Any]
) -> None:
    for tenant, other in (("acme", "globex"), ("globex", "acme")):
        client = by_token[tenant]
        listed = client.ok("list_sessions")["sessions"]
        assert {s["session_id"] for s in listed} == set(ids[tenant].values())
        hits = client.ok("search_history", query="blue kettle refund", k=MAX_K)["hits"]
        assert {h["session_id"] for h in hits} == {ids[tenant]["first"]}
        assert other not in json.dumps(hits)
        facts = client.ok("recall_facts", subject="user:1")["facts"]
        assert {f["key"]: f["value"] for f in facts}["plan"] == f"{tenant}-gold"
        mine = client.ok("get_context", session_id=ids[tenant]["first"], max_tokens=1000)
        assert tenant in json.dumps(mine["messages"]) and other not in json.dumps(mine)
        for sid in ids[other].values():
            assert "does not exist" in client.error("tail", session_id=sid)
            assert "does not exist" in client.error("get_context", session_id=sid, max_tokens=99)
            assert "does not exist" in client.error("search_history", query="x", session_id=sid)
            assert "does not exist" in client.error("list_sessions", cursor=sid)


def test_a_read_only_server_does_not_list_append_turn(
    by_token: dict[str, McpClient], ids: dict[str, Any], mcp_dsn: str
) -> None:
    client = by_token["acme"]
    assert set(client.tools()) == READ_TOOLS
    before = fingerprint(mcp_dsn)
    message = {"role": "user", "content": "let me in"}
    refused = client.error("append_turn", session_id=ids["acme"]["first"], message=message)
    assert "append_turn" in refused
    assert fingerprint(mcp_dsn) == before


# ---------------------------------------------------------------- refusing to start


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["mcp", "--http", "0.0.0.0:8765", "--tenant", "acme"], "127.0.0.1"),
        (["mcp", "--http", "127.0.0.1:8765"], "--tokens"),
        (["mcp", "--http", "localhost:8765", "--tenant", "acme"], "127.0.0.1"),
        (["mcp"], "--tenant"),
        (["mcp", "--tenant", "acme", "--tokens", "t.txt"], "--http"),
        (["mcp", "--http", "nowhere", "--tenant", "acme"], "HOST:PORT"),
        (["mcp", "--http", "127.0.0.1:99999", "--tenant", "acme"], "HOST:PORT"),
        (["mcp", "--http", "0.0.0.0:8765", "--tokens", "/nonexistent/tokens"], "cannot read"),
    ],
)
def test_the_command_refuses_what_it_cannot_serve_safely(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--dsn", "postgresql:///nowhere", *argv]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_the_server_migrates_nothing_and_says_so(
    empty_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--dsn", empty_dsn, "mcp", "--tenant", "acme"]) == 2
    assert "run 'shardstore init'" in capsys.readouterr().err
    with psycopg.connect(empty_dsn) as conn:
        assert conn.execute("SELECT to_regnamespace('shardstore')").fetchone() == (None,)


def test_tokens_with_a_tenant_or_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tokens = tmp_path / "tokens.txt"
    tokens.write_text(f"{TOKENS['acme']} acme\n")
    argv = ["--dsn", "postgresql:///nowhere", "mcp", "--http", "0.0.0.0:8765"]
    assert main([*argv, "--tokens", str(tokens), "--tenant", "acme"]) == 2
    assert "each token names its tenant" in capsys.readouterr().err
    monkeypatch.setenv("SHARDSTORE_MCP_TOKENS", f"{TOKENS['acme']} acme, short globex")
    assert main(argv) == 2
    assert "$SHARDSTORE_MCP_TOKENS, line 1: a token must be 16" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "holds no token"),
        ("# only a comment\n\n", "holds no token"),
        ("acme-token-0123456789abcdef\n", "line 1: expected 'TOKEN TENANT'"),
        ("a b c\n", "expected 'TOKEN TENANT', got 3"),
        ("short acme", "16 to 512"),
        (
            "acme-token-0123456789abcdef acme\nacme-token-0123456789abcdef globex",
            "line 2: this token is listed twice",
        ),
        ("acme-token-0123456789abcdef " + "t" * 300, "line 1: tenant"),
        ("acme-token-012345678\u00e9abcdef acme", "16 to 512"),
    ],
)
def test_a_malformed_token_table_is_refused(text: str, says: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(says)):
        TokenTable.parse(text, "tokens.txt")


def test_a_token_table_maps_tokens_to_tenants() -> None:
    table = TokenTable.parse(
        "# comment\nacme-token-0123456789abcdef acme  # trailing\n"
        "second-token-0123456789abcdef acme, globex-token-0123456789abcdef globex\n",
        "tokens",
    )
    assert table.tenants == ["acme", "globex"]
    assert table.tenant_for("globex-token-0123456789abcdef") == "globex"
    assert table.tenant_for("second-token-0123456789abcdef") == "acme"
    assert table.tenant_for("acme-token-0123456789abcdeX") is None
    assert table.tenant_for(None) is None
    assert table.tenant_for("") is None


# ---------------------------------------------------------------- the docs


@pytest.mark.slow  # two interpreters start: the example's and its server's
def test_the_docs_example_runs(mcp_dsn: str, ids: dict[str, Any], tmp_path: Path) -> None:
    """docs/integrations/mcp.md's example, as written (at most 10 lines), against the
    module's database: the installed ``shardstore`` command, the real client."""
    page = (ROOT / "docs" / "integrations" / "mcp.md").read_text(encoding="utf-8")
    (code,) = re.findall(r"^```python\n(.*?)^```$", page, re.DOTALL | re.MULTILINE)
    assert len(code.splitlines()) <= 10
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "SHARDSTORE_DSN": mcp_dsn,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("SHARDSTORE_TEST_DSN", None)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "'hits': [{" in done.stdout and ids["acme"]["first"] in done.stdout
    assert "globex" not in done.stdout
