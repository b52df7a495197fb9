"""``shardstore demo``: append a long synthetic agent conversation, show how it was stored,
then (unless ``--no-search``) embed a short conversation with planted facts and find one by
a paraphrase. The only command that uses :mod:`shardstore.demo`.

It cleans up after itself: at the end the long conversation is purged (embedding its ~200
chunks would keep the next ``maintain`` busy for minutes), and the short, already
embedded one is kept to try ``search``, ``tail`` and ``history`` on. ``--keep`` keeps both.
Either way the last lines say exactly what is left (sessions, the embedding backlog) and,
while the tenant holds sessions (this run's or an earlier one's), the one command that
removes them. The header (database, session) prints before appending, and a line says
what the search part does before the model loads, so that no step is silent."""

from __future__ import annotations

import shlex
import time
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ... import demo
from ...errors import MissingDependency, ShardstoreError, cli_text
from ..app import Runner
from ..args import UsageError, positive_int
from ..declare import arg, command, flag
from ..output import (
    TurnPrinter,
    chunk_json,
    display_dsn,
    format_chunks,
    format_partitions,
    interval_text,
    kv,
    num,
    partition_json,
    print_hits,
    printable,
    size,
    turn_json,
)

if TYPE_CHECKING:
    from ...store import Store


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


#: the width of the demo's key column ("append rate"), so that the header printed before
#: appending and the figures printed after it line up
_KEY_WIDTH = 11


@command(
    "demo",
    "append a long synthetic agent conversation and show how it was stored",
    arg("--turns", type=positive_int, default=2000, help="messages (default 2000)"),
    arg("--tenant", default="demo", help="tenant id (default 'demo')"),
    flag("--no-search", help="skip the embedding and search part"),
    flag(
        "--keep",
        help="keep the long conversation too (by default it is purged at the end, so that "
        "nothing is left to embed; its chunks take minutes to embed on a CPU)",
    ),
    arg("--seed", type=int, default=1, help="synthetic conversation seed (default 1)"),
    arg(
        "--batch",
        type=positive_int,
        default=1,
        help="messages per append call (default 1: one commit per message)",
    ),
)
def cmd_demo(run: Runner) -> int:
    """Append ``--turns`` synthetic messages (seed ``--seed``, ``--batch`` per call), read
    them back, and print rates, the tail, chunks and partitions (then the search part);
    0 when the history read back equals what was appended, else 1."""
    from tqdm import tqdm

    args = run.args
    if args.turns < 1:
        raise UsageError("--turns must be at least 1")
    if args.batch < 1:
        raise UsageError("--batch must be at least 1")
    messages = demo.messages(args.seed, args.turns)
    with run.connect() as store:
        sid = store.create_session(
            args.tenant,
            "user:demo",
            "synthetic-agent",
            metadata={"generator": "shardstore.demo.synthetic", "seed": args.seed},
        )
        if not run.json:
            # the header first: appending takes seconds, and the progress bar alone would
            # not say where the turns go
            _header(run, sid)
        latencies: list[float] = []
        tokens = 0
        progress = tqdm(
            total=len(messages),
            unit="turn",
            file=run.err,
            disable=None,
            desc="appending",
            dynamic_ncols=True,
        )
        started = time.perf_counter()
        try:
            for at in range(0, len(messages), args.batch):
                batch = messages[at : at + args.batch]
                keys = [f"demo-{args.seed}-{at + i}" for i in range(len(batch))]
                t0 = time.perf_counter()
                if len(batch) == 1:
                    results = [store.append_turn(sid, batch[0], keys[0])]
                else:
                    results = store.append_turns(sid, batch, keys)
                latencies.append(time.perf_counter() - t0)
                tokens += sum(r.tokens for r in results)
                progress.update(len(batch))
        finally:
            progress.close()
        elapsed = max(time.perf_counter() - started, 1e-9)

        read_started = time.perf_counter()
        read_back = [t.message for t in store.history(sid)]
        read_elapsed = max(time.perf_counter() - read_started, 1e-9)
        identical = read_back == messages

        tail = store.tail(sid, n=6)
        # the sealed chunks' background folds finish first, so that the listing shows the
        # partition every sealed chunk is stored in (on a busy machine folds lag behind)
        store.drain_folds()
        chunks = store.chunks(sid)
        stats = store.stats()

    byte_count = sum(c.byte_count for c in chunks)
    latencies.sort()
    turns_per_second = len(messages) / elapsed
    tokens_per_second = tokens / elapsed
    lat = {
        "p50": _percentile(latencies, 0.5) * 1000,
        "p99": _percentile(latencies, 0.99) * 1000,
        "max": latencies[-1] * 1000,
    }
    if run.json:
        left = _clean_up(run, sid, len(messages), None)
        run.emit(
            {
                "database": display_dsn(run.dsn),
                "embedded": run.embedded,
                "session_id": sid,
                "tenant_id": args.tenant,
                "seed": args.seed,
                "turns": len(messages),
                "tokens": tokens,
                "bytes": byte_count,
                "batch": args.batch,
                "seconds": elapsed,
                "turns_per_second": turns_per_second,
                "tokens_per_second": tokens_per_second,
                "append_latency_ms": lat,
                "history": {
                    "turns": len(read_back),
                    "identical": identical,
                    "seconds": read_elapsed,
                },
                "tail": [turn_json(t) for t in tail],
                "chunks": [chunk_json(c) for c in chunks],
                "partition_interval_seconds": stats.partition_interval_seconds,
                "partitions": [partition_json(p) for p in stats.partitions],
                "left": left,
            }
        )
        return 0 if identical else 1

    how = (
        "one append_turn() per message"
        if args.batch == 1
        else (f"append_turns() in batches of {args.batch}")
    )
    run.line(
        kv(
            [
                (
                    "appended",
                    f"{num(len(messages))} turns, {num(tokens)} tokens, {size(byte_count)} "
                    f"in {elapsed:.2f} s ({how}, each one commit)",
                ),
                (
                    "append rate",
                    f"{num(round(turns_per_second))} turns/s, "
                    f"{num(round(tokens_per_second))} tokens/s; latency "
                    f"p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, "
                    f"max {lat['max']:.2f} ms",
                ),
                (
                    "read back",
                    f"{num(len(read_back))} turns via history() in {read_elapsed:.2f} s: "
                    + ("identical to what was appended" if identical else "MISMATCH"),
                ),
            ],
            width=_KEY_WIDTH,
        )
    )
    run.line()
    run.line(f"tail (newest {len(tail)} turns)")
    printer = TurnPrinter(run.out, indent="  ")
    printer.header()
    for t in tail:
        printer.turn(t)
    run.line()
    sealed = sum(1 for c in chunks if not c.is_open)
    run.line(
        f"chunks ({len(chunks)}: {sealed} sealed"
        + (", 1 open" if len(chunks) > sealed else "")
        + ")"
    )
    run.line(format_chunks(chunks, head=3, tail=6, indent="  "))
    run.line()
    run.line(
        f"partitions of agent_history (every {interval_text(stats.partition_interval_seconds)}, "
        "store-wide)"
    )
    run.line(format_partitions(stats.partitions, indent="  "))
    memory = None if args.no_search else demo_search(run, args.tenant)
    left = _clean_up(run, sid, len(messages), memory)
    _print_left(run, left)
    return 0 if identical else 1


def _header(run: Runner, sid: uuid.UUID) -> None:
    """The lines printed before appending: the database and the session the turns go to,
    and how many; flushed, so that they show before the progress bar."""
    args = run.args
    how = "one commit each" if args.batch == 1 else f"in batches of {args.batch}"
    rows = [
        ("database", display_dsn(run.dsn) + (" (embedded)" if run.embedded else "")),
        ("session", f"{sid}  (tenant {printable(args.tenant)}, seed {args.seed})"),
        ("appending", f"{num(args.turns)} synthetic turns, {how}…"),
    ]
    run.line(kv(rows, width=_KEY_WIDTH))
    run.out.flush()


def _clean_up(
    run: Runner, sid: uuid.UUID, turns: int, memory: tuple[uuid.UUID, int, bool] | None
) -> dict[str, object]:
    """Purge the long session unless ``--keep``; what is left, as a JSON object: the
    sessions kept, the one purged, the database's embedding backlog and the command that
    removes everything of the demo's tenant."""
    args = run.args
    with run.connect() as store:
        purged = None
        if not args.keep:
            store.purge_session(sid)
            purged = {"session_id": str(sid), "turns": turns}
        backlog = store.maintain(dry_run=True).embedding_backlog or 0
        # this run's or an earlier one's: what the remove command would still remove
        tenant_has_sessions = bool(store.sessions(tenant_id=args.tenant, limit=1))
    kept = [] if purged is not None else [{"session_id": str(sid), "turns": turns}]
    if memory is not None:
        kept.append({"session_id": str(memory[0]), "turns": memory[1], "embedded": memory[2]})
    return {
        "tenant_id": args.tenant,
        "kept": kept,
        "purged": purged,
        "embedding_backlog": backlog,
        "tenant_has_sessions": tenant_has_sessions,
        "remove_command": f"shardstore purge tenant --tenant {shlex.quote(args.tenant)} --yes",
    }


def _print_left(run: Runner, left: dict[str, object]) -> None:
    """The last lines of the text output: exactly what the demo left behind."""
    kept = left["kept"]
    purged = left["purged"]
    backlog = left["embedding_backlog"]
    tenant = printable(str(left["tenant_id"]))
    assert isinstance(kept, list) and isinstance(backlog, int)
    rows: list[tuple[str, str]] = []
    if isinstance(purged, dict):
        rows.append(
            (
                "purged",
                f"the {num(purged['turns'])}-turn session {purged['session_id']} (so nothing "
                "of it waits for embedding; --keep keeps it)",
            )
        )
    for item in kept:
        what = f"session {item['session_id']} ({num(item['turns'] or 0)} turns"
        what += ", embedded)" if item.get("embedded") else ")"
        rows.append(("kept", what))
    if not kept:
        rows.append(("kept", "nothing of this run"))
    if any(item.get("embedded") for item in kept):
        rows.append(
            (
                "try",
                f"shardstore search 'which port does staging use' --tenant {shlex.quote(tenant)}",
            )
        )
    if backlog:
        rows.append(
            (
                "embedding",
                f"{num(backlog)} chunks queued in this database: 'shardstore maintain' embeds "
                "them (at most 300 s a run), 'shardstore embed' all at once",
            )
        )
    else:
        rows.append(("embedding", "nothing queued"))
    if left["tenant_has_sessions"]:
        # kept sessions, or sessions earlier runs left in the same tenant
        rows.append(
            ("remove it all", f"{left['remove_command']}  (every session of tenant {tenant})")
        )
    else:
        rows.append(("tenant", f"{tenant} holds no session now: nothing to remove"))
    if run.embedded:
        rows.append(
            (
                "server",
                "the embedded Postgres keeps running for later commands; "
                "'shardstore server stop' stops it",
            )
        )
    run.line()
    run.line("what the demo left")
    run.line(kv(rows, indent="  "))


def demo_search(run: Runner, tenant: str) -> tuple[uuid.UUID, int, bool] | None:
    """Embed a short conversation with planted facts (:func:`shardstore.demo.recall_messages`)
    in a new session of ``tenant`` and find one with a paraphrase, printing the hit; returns
    that session's id, turn count and whether it was embedded (None when no session was
    made). When the embedding model cannot be loaded it prints ``search: skipped
    (reason)`` instead of failing."""
    run.line()
    try:
        store: Store = run.connect(embedding_model=demo.DEMO_MODEL)
    except ShardstoreError as exc:
        run.line(f"search: skipped ({cli_text(exc)})")
        return None
    with store:
        sid = store.create_session(tenant, "user:demo", "memory-demo")
        messages = demo.recall_messages()
        store.append_turns(sid, messages)
        store.flush(sid)
        # loading the model and embedding take seconds (tens on a CPU): say so first
        run.line(
            f"search: loading the embedding model {demo.DEMO_MODEL} and embedding a "
            f"{len(messages)}-turn session (the first load takes a while on a CPU)…"
        )
        run.out.flush()
        started = time.perf_counter()
        try:
            embedded = store.embed(session_id=sid)
        except MissingDependency as exc:
            run.line(f"search: skipped ({cli_text(exc)})")
            return sid, len(messages), False
        took = time.perf_counter() - started
        t0 = time.perf_counter()
        hits = store.search(demo.DEMO_QUESTION, tenant_id=tenant, k=1)
        search_ms = (time.perf_counter() - t0) * 1000
    run.line(
        f"search ({demo.DEMO_MODEL}; embedded the {embedded} chunk(s) of a {len(messages)}-turn "
        f"session in {took:.1f} s)"
    )
    run.line(f"  query: {demo.DEMO_QUESTION!r}  ({search_ms:.0f} ms, tenant {tenant!r})")
    print_hits(run.out, hits, indent="  ")
    return sid, len(messages), True


COMMANDS = (cmd_demo,)
