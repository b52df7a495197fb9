"""``shardstore search``, ``embed`` and ``reembed`` (registered by shardstore.cli.build_parser),
and the search part of ``shardstore demo``."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .cli import _positive_int
from .errors import ConfigurationError, MissingDependency, ShardstoreError
from .models import SearchHit
from .settings import parse_interval

if TYPE_CHECKING:
    from .cli import Runner
    from .store import Store

DEMO_MODEL = "all-MiniLM-L6-v2"


def _aware(text: str) -> datetime:
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"cannot read time {text!r}; write ISO 8601 with a zone, e.g. 2026-11-30T12:00Z"
        ) from None
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"give a time zone in {text!r} (e.g. Z or +01:00)")
    return value


def _seconds(text: str) -> float:
    try:
        return parse_interval(text).total_seconds()
    except ConfigurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _model_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {} if args.model is None else {"embedding_model": args.model}


def hit_json(hit: SearchHit) -> dict[str, Any]:
    from .cli import turn_json

    return {
        "session_id": str(hit.session_id),
        "chunk_seq": hit.chunk_seq,
        "score": round(hit.score, 6),
        "turns": [turn_json(t) for t in hit.turns],
    }


def print_hits(run: Runner, hits: list[SearchHit], indent: str = "") -> None:
    from .cli import TurnPrinter

    if not hits:
        run.line(f"{indent}no matches (is anything embedded yet? run 'shardstore embed')")
        return
    printer = TurnPrinter(run.out, indent=indent + "    ")
    for rank, hit in enumerate(hits, start=1):
        run.line(
            f"{indent}{rank}. score {hit.score:.3f}  session {hit.session_id}  "
            f"chunk {hit.chunk_seq}"
        )
        for turn in hit.turns:
            printer.turn(turn)


def cmd_search(run: Runner) -> int:
    args = run.args
    if args.session is None and args.tenant is None:
        raise ConfigurationError("give --tenant (or --session): a search never spans tenants")
    with run.connect(**_model_settings(args)) as store:
        hits = store.search(
            args.query,
            session_id=args.session,
            tenant_id=args.tenant,
            agent_id=args.agent,
            since=args.since,
            until=args.until,
            k=args.k,
        )
    if run.json:
        run.emit([hit_json(h) for h in hits])
    else:
        print_hits(run, hits)
    return 0


def cmd_embed(run: Runner) -> int:
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
                run.line(f"embedded {done} chunks in {elapsed:.1f} s")
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


def cmd_reembed(run: Runner) -> int:
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


# the demo's recall part: a short conversation with facts in it, asked about in other words
DEMO_FACTS = [
    "By the way, my refund reference is QX-4471, the duplicate charge was on March 3rd.",
    "Our staging database listens on port 6543, production on 5432.",
    "I named my dog Biscuit after the cookies my grandmother baked.",
]
DEMO_QUESTION = "which number should I quote about getting my money back?"


def demo_search(run: Runner, tenant: str) -> None:
    """Embed a short conversation with planted facts and find one with a paraphrase."""
    from .demo import synthetic

    run.line()
    try:
        store: Store = run.connect(embedding_model=DEMO_MODEL)
    except ShardstoreError as exc:
        run.line(f"search: skipped ({exc})")
        return
    with store:
        sid = store.create_session(tenant, "user:demo", "memory-demo")
        chatter = synthetic.messages(7, 60)
        messages = [m for m in chatter if isinstance(m.get("content"), str)][:40]
        for i, fact in enumerate(DEMO_FACTS):
            messages.insert(5 + i * 12, {"role": "user", "content": fact})
        store.append_turns(sid, messages)
        store.flush(sid)
        started = time.perf_counter()
        try:
            embedded = store.embed(session_id=sid)
        except MissingDependency as exc:
            run.line(f"search: skipped ({exc})")
            return
        took = time.perf_counter() - started
        t0 = time.perf_counter()
        hits = store.search(DEMO_QUESTION, tenant_id=tenant, k=1)
        search_ms = (time.perf_counter() - t0) * 1000
    run.line(
        f"search ({DEMO_MODEL}; embedded the {embedded} chunk(s) of a {len(messages)}-turn session "
        f"in {took:.1f} s)"
    )
    run.line(f"  query: {DEMO_QUESTION!r}  ({search_ms:.0f} ms, tenant {tenant!r})")
    print_hits(run, hits, indent="  ")


def register(command: Callable[..., Any]) -> None:
    """Add this module's subcommands with ``command(name, handler, help) -> parser``."""
    model_help = (
        "embedding model: 'all-MiniLM-L6-v2', a hub name in the local cache (e.g. "
        "BAAI/bge-m3) or a local directory (default: the model recorded in the database)"
    )
    p = command(
        "search",
        cmd_search,
        "find the chunks nearest to a text, with their best-matching turns",
    )
    p.add_argument("query", metavar="QUERY", help="what to look for, in words")
    p.add_argument("--tenant", help="search this tenant's sessions (HNSW per partition)")
    p.add_argument("--session", metavar="SESSION_ID", help="search one session exactly")
    p.add_argument("--agent", help="only this agent's sessions")
    p.add_argument("--since", type=_aware, metavar="TIME", help="turns at or after (ISO 8601)")
    p.add_argument("--until", type=_aware, metavar="TIME", help="turns before (ISO 8601)")
    p.add_argument("-k", type=_positive_int, default=5, metavar="K", help="chunks to return (5)")
    p.add_argument("--model", default=None, help=model_help)

    p = command(
        "embed",
        cmd_embed,
        "embed chunks that have no vectors yet or changed (safe to run several at once)",
    )
    p.add_argument("--watch", action="store_true", help="keep embedding new chunks until ^C")
    p.add_argument(
        "--interval",
        type=_seconds,
        default=10.0,
        metavar="INTERVAL",
        help="with --watch: pause between rounds, e.g. '10s' (default 10 s)",
    )
    p.add_argument(
        "--batch", type=_positive_int, default=16, metavar="N", help="chunks per transaction (16)"
    )
    p.add_argument(
        "--limit",
        type=_positive_int,
        default=None,
        metavar="N",
        help="stop after N chunks (per round)",
    )
    p.add_argument("--model", default=None, help=model_help)

    p = command(
        "reembed",
        cmd_reembed,
        "switch to another embedding model: drop all vectors and embed every chunk again",
    )
    p.add_argument("--model", required=True, help=model_help)
    p.add_argument(
        "--batch", type=_positive_int, default=16, metavar="N", help="chunks per transaction (16)"
    )
    p.add_argument("--yes", action="store_true", help="confirm dropping the stored vectors")
