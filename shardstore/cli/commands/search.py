"""``shardstore search``, ``embed`` and ``reembed``."""

from __future__ import annotations

import argparse
import time
from typing import Any

from ...errors import ConfigurationError
from ..app import Runner
from ..args import TIME_HELP, interval_seconds, optional_time, positive_int
from ..declare import arg, command, flag
from ..output import hit_json, print_hits

MODEL_HELP = (
    "embedding model: 'all-MiniLM-L6-v2', a hub name in the local cache (e.g. "
    "BAAI/bge-m3) or a local directory (default: the model recorded in the database)"
)


def _model_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {} if args.model is None else {"embedding_model": args.model}


@command(
    "search",
    "find the chunks nearest to a text, with their best-matching turns",
    arg("query", metavar="QUERY", help="what to look for, in words"),
    arg("--tenant", help="search this tenant's sessions (HNSW per partition)"),
    arg("--session", metavar="SESSION_ID", help="search one session exactly"),
    arg("--agent", help="only this agent's sessions"),
    arg("--since", metavar="TIME", help=f"turns at or after TIME: {TIME_HELP}"),
    arg("--until", metavar="TIME", help=f"turns before TIME: {TIME_HELP}"),
    arg("-k", type=positive_int, default=5, metavar="K", help="chunks to return (5)"),
    arg("--model", help=MODEL_HELP),
    arg(
        "--mode",
        choices=("vector", "text", "hybrid"),
        default="vector",
        help="vector (embeddings), text (full-text, no embeddings needed) or hybrid (both, "
        "fused by reciprocal rank fusion); default vector",
    ),
)
def cmd_search(run: Runner) -> int:
    """Print the ``-k`` chunks nearest to the query within one tenant or one session
    (never across tenants: neither given is a usage error); 0 on success."""
    args = run.args
    if args.session is None and args.tenant is None:
        raise ConfigurationError("give --tenant (or --session): a search never spans tenants")
    since, until = optional_time(args.since), optional_time(args.until)
    with run.connect(**_model_settings(args)) as store:
        hits = store.search(
            args.query,
            session_id=args.session,
            tenant_id=args.tenant,
            agent_id=args.agent,
            since=since,
            until=until,
            k=args.k,
            mode=args.mode,
        )
    if run.json:
        run.emit([hit_json(h) for h in hits])
    else:
        print_hits(run.out, hits, mode=args.mode)
    return 0


@command(
    "embed",
    "embed chunks that have no vectors yet or changed (safe to run several at once)",
    flag("--watch", help="keep embedding new chunks until ^C"),
    arg(
        "--interval",
        type=interval_seconds,
        default=10.0,
        metavar="INTERVAL",
        help="with --watch: pause between rounds, e.g. '10s' (default 10 s)",
    ),
    arg("--batch", type=positive_int, default=16, metavar="N", help="chunks per transaction (16)"),
    arg(
        "--limit",
        type=positive_int,
        metavar="N",
        help="stop after N chunks (per round)",
    ),
    arg("--model", help=MODEL_HELP),
)
def cmd_embed(run: Runner) -> int:
    """Embed chunks without current vectors (``--watch``: round after round until ^C) and
    print how many; 0 on success."""
    args = run.args
    progress = not run.json and run.err.isatty()
    total = 0
    with run.connect(**_model_settings(args)) as store:
        while True:
            started = time.perf_counter()
            done = store.embed(limit=args.limit, batch_size=args.batch, progress=progress)
            total += done
            if done and not run.json:
                elapsed = time.perf_counter() - started
                rate = f" ({done / elapsed:,.1f} chunks/s)" if elapsed > 0 else ""
                run.line(f"embedded {done} chunks in {elapsed:.1f} s{rate}")
            if not args.watch:
                break
            try:
                time.sleep(args.interval)
            except KeyboardInterrupt:  # ^C between rounds ends a watch normally
                break
    if run.json:
        run.emit({"embedded": total})
    elif total == 0:
        run.line("nothing to embed: every folded chunk has its vectors")
    return 0


@command(
    "reembed",
    "switch to another embedding model: drop all vectors and embed every chunk again",
    arg("--model", required=True, help=MODEL_HELP),
    arg("--batch", type=positive_int, default=16, metavar="N", help="chunks per transaction (16)"),
    flag("--yes", help="confirm dropping the stored vectors"),
)
def cmd_reembed(run: Runner) -> int:
    """Switch to ``--model`` and embed every chunk again; refuses (exit 2) without
    ``--yes``, since the stored vectors are dropped first."""
    args = run.args
    if not args.yes:
        raise ConfigurationError(
            "reembed drops every stored vector and embeds all chunks again with "
            f"{args.model}; searches find less until it is done. Add --yes to go ahead"
        )
    progress = not run.json and run.err.isatty()
    with run.connect() as store:
        done = store.reembed(args.model, progress=progress, batch_size=args.batch)
    if run.json:
        run.emit({"model": args.model, "embedded": done})
    else:
        run.line(f"switched to {args.model}; embedded {done} chunks")
    return 0


COMMANDS = (
    cmd_search,
    cmd_embed,
    cmd_reembed,
)
