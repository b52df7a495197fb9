"""An MCP server that gives a model one tenant's shardstore memory (``pip install
'shardstore[mcp]'``): search its history, read a session's context or newest turns, list
its sessions, recall, remember and forget facts, and (only when started writable) append
turns. Built on the official ``mcp`` SDK (``MCPServer``), over stdio or streamable HTTP.

    shardstore mcp --tenant acme                          # stdio, for a desktop client
    shardstore mcp --http 0.0.0.0:8765 --tokens tokens.txt   # HTTP, a tenant per bearer token

Tenancy: every tool runs as one tenant and no argument can name another. The tenant's store
comes from :func:`shardstore.rls.connect_tenant_async`, which binds the tenant in every
transaction it runs (safe behind a transaction-mode pooler; with Row-Level Security on,
PostgreSQL itself keeps tenants apart), and the server checks on top of that, in every
call, that a session it is given belongs to the tenant (so the isolation holds with RLS
off too): another tenant's session is reported exactly as a session that does not exist.
Over HTTP each request runs as the tenant of its bearer token (:class:`TokenTable`); a
request without a valid token gets HTTP 401 before any tool runs.

Errors a caller can fix (a malformed id, an out-of-range ``k``, a message the store refuses,
an unknown session) come back as tool errors (``isError``) with a one-line message; nothing
of a Python traceback ever reaches the client.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, TypeVar

from ..core import validate
from ..errors import (
    ConfigurationError,
    InvalidInput,
    MissingDependency,
    SessionNotFound,
    ShardstoreError,
)

try:
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations
    from pydantic import BaseModel, ConfigDict, Field
except ImportError as exc:  # the extra is not installed
    raise MissingDependency(
        "shardstore.integrations.mcp_server needs the MCP SDK: pip install 'shardstore[mcp]'"
    ) from exc

from ..aio import AsyncStore
from ..context.assembly import Context as StoreContext
from ..models import SearchHit, SessionInfo, Turn
from ..schema import rls
from ..state.facts import Fact

__all__ = [
    "MAX_CONTEXT_TOKENS",
    "MAX_FACTS_PAGE",
    "MAX_K",
    "MAX_QUERY_CHARS",
    "MAX_SESSIONS_PAGE",
    "MAX_TAIL_TURNS",
    "TENANT_SCOPE_KEY",
    "BearerTenants",
    "TenantStores",
    "TokenTable",
    "build_server",
    "check_http_binding",
    "serve_http",
    "serve_stdio",
]

T = TypeVar("T")

#: search hits per call at most
MAX_K = 20
#: turns per ``tail`` page at most
MAX_TAIL_TURNS = 100
#: the largest token budget ``get_context`` takes
MAX_CONTEXT_TOKENS = 200_000
#: sessions per ``list_sessions`` page at most
MAX_SESSIONS_PAGE = 100
#: facts per ``recall_facts`` page at most (and keys asked for at once)
MAX_FACTS_PAGE = 100
#: the longest search query
MAX_QUERY_CHARS = 2_000
#: the longest subject, fact key, idempotency key or cursor (the store's own limit on ids)
MAX_NAME_CHARS = validate.MAX_ID_CHARS
#: where :class:`BearerTenants` puts a request's tenant in its ASGI scope
TENANT_SCOPE_KEY = "shardstore.mcp.tenant"
#: a bearer token: printable URL-safe characters, long enough not to be guessed
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9._~+/=-]{16,512}")

LOCAL_HOST = "127.0.0.1"

INSTRUCTIONS = (
    "Memory of past conversations for one tenant, stored in shardstore. Find what was said "
    "with search_history, read a session with tail (newest turns, page back with before) or "
    "get_context (a token-budgeted view: summaries, facts, recent turns), list sessions with "
    "list_sessions (page with cursor), and keep durable facts about a subject with "
    "recall_facts / remember_fact / forget_fact. Session ids are UUIDs returned by these tools."
)

# ---------------------------------------------------------------- argument types
# (module level: the SDK builds each tool's input schema from its signature's annotations)

SessionIdArg = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        strict=True,
        description="a session id (a UUID, as list_sessions or search_history return it)",
    ),
]
OptionalSessionIdArg = Annotated[
    str | None,
    Field(
        max_length=64,
        strict=True,
        description="search only this session (a UUID); omit to search every session",
    ),
]
QueryArg = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        strict=True,
        description="what to look for, in words (full-text and, where embedded, semantic)",
    ),
]
SinceArg = Annotated[
    str | None,
    Field(
        max_length=64,
        strict=True,
        description="only turns at or after this time: ISO 8601 with a timezone, "
        "e.g. 2026-03-01T00:00:00Z",
    ),
]
KArg = Annotated[
    int, Field(ge=1, le=MAX_K, strict=True, description=f"how many hits (1 to {MAX_K})")
]
TailNArg = Annotated[
    int,
    Field(ge=1, le=MAX_TAIL_TURNS, strict=True, description=f"turns (1 to {MAX_TAIL_TURNS})"),
]
BeforeArg = Annotated[
    int | None,
    Field(
        ge=1,
        le=validate.MAX_INT64,
        strict=True,
        description="page back: only turns with turn_seq below this (the next_before of the "
        "previous page); omit for the newest turns",
    ),
]
MaxTokensArg = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_CONTEXT_TOKENS,
        strict=True,
        description=f"the token budget of the context (1 to {MAX_CONTEXT_TOKENS})",
    ),
]
SubjectArg = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_NAME_CHARS,
        strict=True,
        description="whom the facts are about, e.g. user:42",
    ),
]
OptionalSubjectArg = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=MAX_NAME_CHARS,
        strict=True,
        description="only sessions of this subject, e.g. user:42",
    ),
]
SessionsLimitArg = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_SESSIONS_PAGE,
        strict=True,
        description=f"sessions per page (1 to {MAX_SESSIONS_PAGE})",
    ),
]
CursorArg = Annotated[
    str | None,
    Field(
        max_length=64,
        strict=True,
        description="the next of the previous page, to continue after it; omit for the first",
    ),
]
KeyArg = Annotated[
    str,
    Field(min_length=1, max_length=MAX_NAME_CHARS, strict=True, description="the fact's key"),
]
KeysArg = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=MAX_NAME_CHARS, strict=True)]] | None,
    Field(
        max_length=MAX_FACTS_PAGE,
        description="only these keys (unknown ones are left out); omit for every key",
    ),
]
AsOfArg = Annotated[
    str | None,
    Field(
        max_length=64,
        strict=True,
        description="the facts valid at this time (ISO 8601 with a timezone); omit for now",
    ),
]
OffsetArg = Annotated[
    int,
    Field(
        ge=0,
        le=validate.MAX_INT32,
        strict=True,
        description="skip this many facts (the next_offset of the previous page)",
    ),
]
FactsLimitArg = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_FACTS_PAGE,
        strict=True,
        description=f"facts per page (1 to {MAX_FACTS_PAGE})",
    ),
]
ValueArg = Annotated[
    Any, Field(description="the fact's value: any JSON value (at most 1 MiB as JSON)")
]
MessageArg = Annotated[
    dict[str, Any],
    Field(
        description='the message to store, e.g. {"role": "user", "content": "hi"}: a JSON '
        "object with a non-empty string role (or type)"
    ),
]
IdempotencyKeyArg = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=MAX_NAME_CHARS,
        strict=True,
        description="a key of your own: a repeat with the same key stores nothing again",
    ),
]


class FactSource(BaseModel):
    """The turn a fact came from."""

    model_config = ConfigDict(extra="forbid")

    session_id: SessionIdArg
    turn_seq: Annotated[int, Field(ge=0, le=validate.MAX_INT64, strict=True)]


SourceArg = Annotated[
    FactSource | None,
    Field(description="the turn the fact came from, {session_id, turn_seq}; omit for none"),
]

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
CLOSING = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)

# ---------------------------------------------------------------- results


def _when(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def turn_json(turn: Turn) -> dict[str, Any]:
    """A turn as the tools return it."""
    return {
        "turn_seq": turn.turn_seq,
        "created_at": _when(turn.created_at),
        "tokens": turn.tokens,
        "message": turn.message,
    }


def session_json(info: SessionInfo) -> dict[str, Any]:
    """A session as ``list_sessions`` returns it."""
    return {
        "session_id": str(info.session_id),
        "subject_id": info.subject_id,
        "agent_id": info.agent_id,
        "created_at": _when(info.created_at),
        "last_turn_at": _when(info.last_turn_at),
        "turns": info.stored_turns,
    }


def hit_json(hit: SearchHit) -> dict[str, Any]:
    """A search hit: where it is, its score, the turns of its best window."""
    return {
        "session_id": str(hit.session_id),
        "chunk_seq": hit.chunk_seq,
        "score": hit.score,
        "turns": [turn_json(t) for t in hit.turns],
    }


def fact_json(fact: Fact) -> dict[str, Any]:
    """One version of a fact."""
    source = None
    if fact.source_session_id is not None:
        source = {"session_id": str(fact.source_session_id), "turn_seq": fact.source_turn_seq}
    return {
        "subject": fact.subject,
        "key": fact.key,
        "value": fact.value,
        "confidence": fact.confidence,
        "source": source,
        "valid_from": _when(fact.valid_from),
        "valid_to": _when(fact.valid_to),
    }


def context_json(session_id: str, view: StoreContext) -> dict[str, Any]:
    """A context view: its messages, where each came from, and their tokens."""
    return {
        "session_id": session_id,
        "tokens": view.tokens,
        "messages": view.messages,
        "parts": [
            {
                "kind": p.kind,
                "first_turn_seq": p.first_turn_seq,
                "last_turn_seq": p.last_turn_seq,
                "score": p.score,
                "tokens": p.tokens,
            }
            for p in view.parts
        ],
    }


# ---------------------------------------------------------------- tenants and their stores


class TenantStores:
    """The stores the server works through: one :class:`~shardstore.AsyncStore` per tenant,
    each made by :func:`shardstore.rls.connect_tenant_async` (bound to its tenant in every
    transaction it runs; it checks that the schema is current and runs no migration).

    Open them with :meth:`open` inside the event loop that serves, close with :meth:`close`.
    """

    def __init__(self, stores: Mapping[str, AsyncStore]) -> None:
        self._stores = dict(stores)

    @classmethod
    async def open(cls, dsn: Any, tenants: Iterable[str], **settings: Any) -> TenantStores:
        """A store per tenant on ``dsn`` (a DSN string, or None for ``$SHARDSTORE_DSN``);
        ``settings`` are :class:`shardstore.Settings` fields (default: pools of 1 to 4
        connections). On any failure the stores already opened are closed again."""
        settings.setdefault("pool_min_size", 1)
        settings.setdefault("pool_max_size", 4)
        made: dict[str, AsyncStore] = {}
        try:
            for tenant in sorted(set(tenants)):
                made[tenant] = await rls.connect_tenant_async(dsn, tenant=tenant, **settings)
        except BaseException:
            await cls(made).close()
            raise
        return cls(made)

    @property
    def tenants(self) -> list[str]:
        """The tenants served, sorted."""
        return sorted(self._stores)

    def store(self, tenant: str) -> AsyncStore:
        """The tenant's store; a tool error for a tenant not served."""
        found = self._stores.get(tenant)
        if found is None:
            raise ToolError("this server does not serve your tenant")
        return found

    async def close(self) -> None:
        """Close every store (idempotent)."""
        stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            await store.close()


@dataclass(frozen=True)
class TokenTable:
    """Bearer tokens and the tenant each one acts as, from entries ``TOKEN TENANT`` one a
    line or separated by commas (a file given with ``--tokens``, or
    ``$SHARDSTORE_MCP_TOKENS``). Blank lines and ``#`` comments are skipped. A token is 16 to 512
    URL-safe characters (``A-Z a-z 0-9 . _ ~ + / = -``); a token listed twice, a malformed
    line or an empty table is a :class:`~shardstore.errors.ConfigurationError`, never a
    server that lets in fewer (or more) callers than meant. Only the tokens' SHA-256
    digests are kept."""

    by_digest: Mapping[bytes, str]

    @classmethod
    def parse(cls, text: str, origin: str) -> TokenTable:
        """The table in ``text``; ``origin`` names where it came from in errors."""
        found: dict[bytes, str] = {}
        entries = [
            (number, entry.strip())
            for number, line in enumerate(text.splitlines(), 1)
            for entry in line.split("#", 1)[0].split(",")
        ]
        for number, entry in entries:
            if not entry:
                continue
            fields = entry.split()
            if len(fields) != 2:
                raise ConfigurationError(
                    f"{origin}, line {number}: expected 'TOKEN TENANT', got {len(fields)} fields"
                )
            token, tenant = fields
            if not TOKEN_PATTERN.fullmatch(token):
                raise ConfigurationError(
                    f"{origin}, line {number}: a token must be 16 to 512 characters of "
                    "A-Z a-z 0-9 . _ ~ + / = -"
                )
            try:
                tenant = validate.text(tenant, "tenant")
            except InvalidInput as exc:
                raise ConfigurationError(f"{origin}, line {number}: {exc}") from None
            digest = _digest(token)
            if digest in found:
                raise ConfigurationError(f"{origin}, line {number}: this token is listed twice")
            found[digest] = tenant
        if not found:
            raise ConfigurationError(f"{origin} holds no token")
        return cls(found)

    @property
    def tenants(self) -> list[str]:
        """Every tenant a token acts as, sorted."""
        return sorted(set(self.by_digest.values()))

    def tenant_for(self, token: str | None) -> str | None:
        """The tenant ``token`` acts as; None for a missing or unknown token."""
        if token is None or not TOKEN_PATTERN.fullmatch(token):
            return None
        return self.by_digest.get(_digest(token))


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("ascii")).digest()


def _bearer(scope: Mapping[str, Any]) -> str | None:
    """The token of the request's ``Authorization: Bearer ...`` header, if it has one."""
    for name, value in scope.get("headers") or ():
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").strip().partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


ASGIApp = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


class BearerTenants:
    """ASGI middleware in front of the MCP endpoint: an HTTP request whose bearer token is
    in the :class:`TokenTable` goes on with its tenant in the scope
    (:data:`TENANT_SCOPE_KEY`, which the tools read); any other gets ``401`` and reaches
    nothing behind; a WebSocket handshake is refused. Lifespan events pass through."""

    def __init__(self, app: Any, tokens: TokenTable) -> None:
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":  # MCP has no WebSocket transport: refuse the handshake
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        tenant = self.tokens.tenant_for(_bearer(scope))
        if tenant is None:
            await _unauthorized(send)
            return
        await self.app({**scope, TENANT_SCOPE_KEY: tenant}, receive, send)


async def _unauthorized(send: Any) -> None:
    body = b'{"error": "invalid_token", "error_description": "a valid bearer token is required"}'
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b'Bearer error="invalid_token"'),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# ---------------------------------------------------------------- the tools


def _instant(text: str | None, what: str) -> datetime | None:
    """An ISO 8601 time with a timezone, or None."""
    if text is None:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ToolError(f"{what} must be an ISO 8601 time, e.g. 2026-03-01T00:00:00Z") from None
    if at.tzinfo is None:
        raise ToolError(f"{what} needs a timezone, e.g. 2026-03-01T00:00:00Z")
    return at


async def _guarded(call: Awaitable[T]) -> T:
    """The store's errors as tool errors: their type and one-line message."""
    try:
        return await call
    except ShardstoreError as exc:
        raise _tool_error(exc) from None


def _tool_error(exc: ShardstoreError) -> ToolError:
    """A store error as a tool error: its type and its message on one line."""
    return ToolError(f"{type(exc).__name__}: {' '.join(str(exc).split())}")


def build_server(
    stores: TenantStores, *, tenant: str | None = None, writable: bool = False
) -> MCPServer[Any]:
    """The MCP server: its tools work on ``stores``, as ``tenant`` (stdio, or local HTTP
    without tokens) or, where ``tenant`` is None, as the tenant :class:`BearerTenants`
    put in each HTTP request's scope (a call with neither is refused). ``append_turn`` is
    registered only when ``writable``.

    Guarantees: a tool never reads or writes another tenant's sessions, turns, search hits
    or facts, whatever its arguments (another tenant's session is "not found"); results
    are JSON objects with bounded lists (``k``, ``n``, ``limit``, ``max_tokens`` have
    limits in the input schema) and a ``next``/``next_before``/``next_offset`` where
    there is more; a refused call is a tool error with a one-line message and changes
    nothing."""
    server: MCPServer[Any] = MCPServer(
        "shardstore",
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )

    def scope_of(ctx: Context) -> tuple[str, AsyncStore]:
        request = ctx.request_context.request
        request_scope = getattr(request, "scope", None)
        bound = None
        if isinstance(request_scope, Mapping):
            bound = request_scope.get(TENANT_SCOPE_KEY)
        who = bound if isinstance(bound, str) else tenant
        if who is None:
            raise ToolError("no tenant: send a valid bearer token")
        return who, stores.store(who)

    async def owned(
        store: AsyncStore, who: str, session_id: str, *, live: bool = True
    ) -> SessionInfo:
        """The session, when it is this tenant's; else "not found", exactly as for an
        id that does not exist."""
        try:
            info = await store.session(session_id)
        except SessionNotFound:
            raise ToolError(f"SessionNotFound: session {session_id} does not exist") from None
        except ShardstoreError as exc:
            raise _tool_error(exc) from None
        if info.tenant_id != who:
            raise ToolError(f"SessionNotFound: session {session_id} does not exist")
        if live and info.purged:
            raise ToolError(f"SessionPurged: session {session_id} was purged")
        return info

    async def search_history(
        query: QueryArg,
        ctx: Context,
        session_id: OptionalSessionIdArg = None,
        since: SinceArg = None,
        k: KArg = 5,
    ) -> dict[str, Any]:
        """Search past conversations for what was said about something: full-text and
        semantic ranking fused (hybrid). Returns up to k hits, best first, each with its
        session_id, score and the turns around the match (turn_seq, created_at, message).
        Give session_id to search one session, since (ISO 8601) to skip older turns. Use
        tail or get_context with a hit's session_id to read more around it."""
        who, store = scope_of(ctx)
        start = _instant(since, "since")
        if session_id is not None:
            info = await owned(store, who, session_id)
            hits = await _guarded(
                store.search(query, session_id=info.session_id, since=start, k=k, mode="hybrid")
            )
        else:
            hits = await _guarded(
                store.search(query, tenant_id=who, since=start, k=k, mode="hybrid")
            )
        return {"hits": [hit_json(h) for h in hits]}

    async def get_context(
        session_id: SessionIdArg, max_tokens: MaxTokensArg, ctx: Context
    ) -> dict[str, Any]:
        """What to send a model to continue a session, within max_tokens tokens: summaries
        of older parts (where summarized), then the newest turns verbatim, oldest first.
        Never over budget; a tool call and its result are never split. parts[i] says where
        messages[i] came from (kind: summary, facts, recall or recent)."""
        who, store = scope_of(ctx)
        info = await owned(store, who, session_id)
        view = await _guarded(store.context(info.session_id, max_tokens))
        return context_json(str(info.session_id), view)

    async def tail(
        session_id: SessionIdArg,
        ctx: Context,
        n: TailNArg = 20,
        before: BeforeArg = None,
    ) -> dict[str, Any]:
        """The newest n turns of a session, oldest first; this newest page never opens on
        a tool result whose call it left out. To read further back, call again with
        before=next_before: the turns with turn_seq in [next_before - n, next_before),
        exactly; next_before is null when the session holds nothing older."""
        who, store = scope_of(ctx)
        info = await owned(store, who, session_id)
        if before is None:
            turns = await _guarded(store.tail(info.session_id, n=n))
            # an empty page (the newest turn a result of an older call) pages back from the head
            edge = turns[0].turn_seq if turns else info.turn_count
        else:
            start = max(info.first_turn_seq, before - n)
            turns = await _guarded(_collect(store, info.session_id, start, before))
            edge = start
        return {
            "session_id": str(info.session_id),
            "turns": [turn_json(t) for t in turns],
            "next_before": edge if edge > info.first_turn_seq else None,
        }

    async def list_sessions(
        ctx: Context,
        subject: OptionalSubjectArg = None,
        limit: SessionsLimitArg = 20,
        cursor: CursorArg = None,
    ) -> dict[str, Any]:
        """Sessions, newest first, with their subject, agent, times and turn count; only
        those of subject when given. For the next page pass cursor=next; next is null on
        the last page."""
        who, store = scope_of(ctx)
        after = None if cursor is None else await owned(store, who, cursor, live=False)
        found = await _guarded(
            store.sessions(tenant_id=who, subject_id=subject, before=after, limit=limit + 1)
        )
        page = found[:limit]
        more = len(found) > limit
        return {
            "sessions": [session_json(s) for s in page],
            "next": str(page[-1].session_id) if more else None,
        }

    async def recall_facts(
        subject: SubjectArg,
        ctx: Context,
        keys: KeysArg = None,
        as_of: AsOfArg = None,
        offset: OffsetArg = 0,
        limit: FactsLimitArg = 50,
    ) -> dict[str, Any]:
        """The facts remembered about subject, one current value per key, ordered by key
        (as_of: the values valid at that ISO 8601 time). Each has its value, confidence,
        source turn and validity. next_offset continues a long list; null at the end."""
        who, store = scope_of(ctx)
        at = _instant(as_of, "as_of")
        facts = await _guarded(store.recall(who, subject, keys, as_of=at))
        page = facts[offset : offset + limit]
        more = len(facts) > offset + limit
        return {
            "facts": [fact_json(f) for f in page],
            "next_offset": offset + limit if more else None,
        }

    async def remember_fact(
        subject: SubjectArg,
        key: KeyArg,
        value: ValueArg,
        ctx: Context,
        source: SourceArg = None,
    ) -> dict[str, Any]:
        """Remember a durable fact about subject (a user, an account): key = value. A new
        value replaces the current one from now on; the old one stays in the history.
        source names the turn it came from ({session_id, turn_seq}), so that erasing the
        turn erases the fact too."""
        who, store = scope_of(ctx)
        origin = None
        if source is not None:
            info = await owned(store, who, source.session_id)
            origin = (info.session_id, source.turn_seq)
        fact = await _guarded(store.remember(who, subject, key, value, source=origin))
        return {"fact": fact_json(fact)}

    async def forget_fact(subject: SubjectArg, key: KeyArg, ctx: Context) -> dict[str, Any]:
        """Stop believing a fact: its current value ends now (its history is kept).
        forgotten is the version that ended, null if none was current."""
        who, store = scope_of(ctx)
        fact = await _guarded(store.forget(who, subject, key))
        return {"forgotten": None if fact is None else fact_json(fact)}

    async def append_turn(
        session_id: SessionIdArg,
        message: MessageArg,
        ctx: Context,
        idempotency_key: IdempotencyKeyArg = None,
    ) -> dict[str, Any]:
        """Append one message to an existing session, durably. Returns its turn_seq and
        tokens; duplicate is true when idempotency_key was used before (nothing stored
        again)."""
        who, store = scope_of(ctx)
        info = await owned(store, who, session_id)
        result = await _guarded(
            store.append_turn(info.session_id, message, idempotency_key=idempotency_key)
        )
        return {
            "session_id": str(info.session_id),
            "turn_seq": result.turn_seq,
            "tokens": result.tokens,
            "duplicate": result.duplicate,
        }

    server.add_tool(search_history, title="Search history", annotations=READ_ONLY)
    server.add_tool(get_context, title="Session context", annotations=READ_ONLY)
    server.add_tool(tail, title="Newest turns", annotations=READ_ONLY)
    server.add_tool(list_sessions, title="List sessions", annotations=READ_ONLY)
    server.add_tool(recall_facts, title="Recall facts", annotations=READ_ONLY)
    server.add_tool(remember_fact, title="Remember a fact", annotations=ADDITIVE)
    server.add_tool(forget_fact, title="Forget a fact", annotations=CLOSING)
    if writable:
        server.add_tool(append_turn, title="Append a turn", annotations=ADDITIVE)
    return server


async def _collect(store: AsyncStore, session_id: Any, start: int, end: int) -> list[Turn]:
    return [turn async for turn in store.history(session_id, from_seq=start, to_seq=end)]


# ---------------------------------------------------------------- serving


def check_http_binding(host: str, tenant: str | None, tokens: TokenTable | None) -> None:
    """Refuse an HTTP server anyone could reach as a tenant: without tokens it must listen
    on 127.0.0.1 only and serve the one ``tenant``; with tokens, ``tenant`` is not taken
    (each request's token names its tenant)."""
    if tokens is not None:
        if tenant is not None:
            raise ConfigurationError(
                "--tenant and tokens do not go together over HTTP: each token names its tenant"
            )
        return
    if host != LOCAL_HOST or tenant is None:
        raise ConfigurationError(
            "an MCP server over HTTP without tokens would let anyone who reaches it act as "
            "the tenant: give --tokens FILE (or $SHARDSTORE_MCP_TOKENS) with 'TOKEN TENANT' "
            f"lines, or listen on {LOCAL_HOST} with --tenant"
        )


async def serve_stdio(dsn: Any, tenant: str, *, writable: bool = False, **settings: Any) -> None:
    """Serve ``tenant``'s memory over stdio until the client closes stdin."""
    stores = await TenantStores.open(dsn, [validate.text(tenant, "tenant")], **settings)
    try:
        await build_server(stores, tenant=tenant, writable=writable).run_stdio_async()
    finally:
        await stores.close()


async def serve_http(
    dsn: Any,
    host: str,
    port: int,
    *,
    tenant: str | None = None,
    tokens: TokenTable | None = None,
    writable: bool = False,
    **settings: Any,
) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` until interrupted: as each
    request's token's tenant (``tokens``), or as ``tenant`` on 127.0.0.1 without tokens
    (:func:`check_http_binding`)."""
    import uvicorn

    check_http_binding(host, tenant, tokens)
    tenants = tokens.tenants if tokens is not None else [validate.text(tenant, "tenant")]
    stores = await TenantStores.open(dsn, tenants, **settings)
    try:
        server = build_server(stores, tenant=tenant if tokens is None else None, writable=writable)
        # stateless: every request stands alone and carries its own token; JSON answers
        app: Any = server.streamable_http_app(stateless_http=True, json_response=True, host=host)
        if tokens is not None:
            app = BearerTenants(app, tokens)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
        print(
            f"shardstore mcp: serving {', '.join(stores.tenants)} at http://{host}:{port}/mcp",
            file=sys.stderr,
            flush=True,
        )
        await uvicorn.Server(config).serve()
    finally:
        await stores.close()
