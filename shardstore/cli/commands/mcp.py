"""``shardstore mcp``: serve one tenant's memory to a model over the Model Context Protocol
(:mod:`shardstore.integrations.mcp_server`; needs ``pip install 'shardstore[mcp]'``).

    shardstore mcp --tenant acme [--writable]                     # stdio
    shardstore mcp --tenant acme --http 127.0.0.1:8765            # local HTTP, no tokens
    shardstore mcp --http 0.0.0.0:8765 --tokens tokens.txt         # HTTP, a tenant per token

The server runs no migration: the schema must be current (``shardstore init`` as its owner).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...core.connector import resolve_dsn
from ..app import EXIT_OK, Runner
from ..args import UsageError
from ..declare import arg, command, flag

TOKENS_VARIABLE = "SHARDSTORE_MCP_TOKENS"


def _address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (an IPv6 host in brackets: ``[::1]:8765``)."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise UsageError(f"--http needs HOST:PORT (e.g. 127.0.0.1:8765), not {text!r}")
    return host, int(port)


def _dsn(run: Runner) -> str:
    """The database: --dsn, else $SHARDSTORE_DSN, else the embedded Postgres."""
    if run.embedded:
        from ...embedded_server import embedded_dsn

        return embedded_dsn()
    return resolve_dsn(run.args.dsn)


@command(
    "mcp",
    "serve a tenant's memory to a model over MCP (stdio, or streamable HTTP with --http)",
    arg("--tenant", help="the tenant served (stdio; HTTP on 127.0.0.1 without tokens)"),
    flag(
        "--writable",
        help="also offer append_turn (without it the model reads history and keeps facts, "
        "but adds no turn)",
    ),
    arg(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    ),
    arg(
        "--tokens",
        metavar="FILE",
        help=f"bearer tokens, lines 'TOKEN TENANT' (default: ${TOKENS_VARIABLE}); each "
        "request runs as its token's tenant, one without a valid token gets 401",
    ),
)
def cmd_mcp(run: Runner) -> int:
    """Serve until the client goes away (stdio) or until interrupted (HTTP); 0 then."""
    import anyio

    from ...integrations import mcp_server

    args = run.args
    settings: dict[str, Any] = {"connect_timeout": args.connect_timeout}
    keys = run.encryption()  # the key store named for every command, if any
    if keys is not None:
        settings["encryption"] = keys
    if args.http is None:
        if args.tokens is not None:
            raise UsageError("--tokens is for --http (stdio serves the one --tenant)")
        if args.tenant is None:
            raise UsageError("the stdio server needs --tenant")
        dsn = _dsn(run)
        anyio.run(
            lambda: mcp_server.serve_stdio(dsn, args.tenant, writable=args.writable, **settings)
        )
        return EXIT_OK
    host, port = _address(args.http)
    tokens = None
    if args.tokens is not None:
        try:
            text = Path(args.tokens).read_text(encoding="utf-8")
        except (OSError, UnicodeError) as exc:
            raise UsageError(f"cannot read the tokens file {args.tokens}: {exc}") from None
        tokens = mcp_server.TokenTable.parse(text, args.tokens)
    elif os.environ.get(TOKENS_VARIABLE):
        tokens = mcp_server.TokenTable.parse(os.environ[TOKENS_VARIABLE], f"${TOKENS_VARIABLE}")
    mcp_server.check_http_binding(host, args.tenant, tokens)
    dsn = _dsn(run)
    anyio.run(
        lambda: mcp_server.serve_http(
            dsn, host, port, tenant=args.tenant, tokens=tokens, writable=args.writable, **settings
        )
    )
    return EXIT_OK


COMMANDS = (cmd_mcp,)
