"""ShardstoreSaver against LangGraph's own savers and its delta-encoded messages channel.

    python -m benchmarks langgraph-delta [--quick] [--lengths 50,200,1000] [--rounds 3]
                                         [--corpus both] [--dsn DSN] [--out FILE]

One one-node graph (each step: a user message in, the node answers with one AI message, so
a thread of N turns holds 2N messages), the same messages for every saver: turns of about
1,600 characters cut from the synthetic corpus (``benchmarks.lib.corpus.text``) or from the
real-text corpus (``benchmarks.lib.realtext``: its messages' text run together and cut into
1,600-character pieces). Savers, each on a fresh database of ONE server, run one after the
other in a rotated order per round (interleaved, so a drifting load hits all alike):

* ``shardstore``: ``ShardstoreSaver`` on a store at defaults (full-text search on), the
  graph's ``messages`` channel the usual ``add_messages`` one;
* ``postgres``: LangGraph's ``PostgresSaver``, the same graph;
* ``postgres+delta``: ``PostgresSaver`` with ``messages`` declared
  ``Annotated[list, DeltaChannel(reducer)]`` (the reducer folds ``add_messages`` over the
  batch, so it is batching-invariant as DeltaChannel requires);
* ``postgres exit``: ``PostgresSaver``, ``durability="exit"`` (one checkpoint per invoke);
* ``shallow``: ``ShallowPostgresSaver`` (the newest checkpoint of a thread only).

Reported per corpus and thread length: bytes on disk per payload byte (the growth of
``pg_total_relation_size`` summed over the saver's schema, ``shardstore`` or ``public``,
against the migrated empty database, after the run and the folds it started), WAL per
payload byte (``pg_current_wal_lsn`` before and after the saver's run, alone on the server;
the shardstore run includes draining its background folds), and the step (one ``invoke``)
p50 with its p10-p90 range; at the longest length also the last 50 steps. The payload is
the messages as LangChain serializes them (``message_to_dict`` as compact JSON, UTF-8):
what any saver must keep to give the messages back exactly; the content alone is reported
beside it.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Annotated, Any, TypedDict

import psycopg
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, message_to_dict
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from psycopg.conninfo import make_conninfo

import shardstore
from benchmarks.lib import realtext
from benchmarks.lib.corpus import CORPUS_CHOICES, CORPUS_LABELS, corpus_sources
from benchmarks.lib.corpus import text as corpus_text
from benchmarks.lib.report import Report, command, progress, quick, write_results
from benchmarks.lib.server import lsn, lsn_diff, open_server
from benchmarks.lib.stats import pct, spread
from shardstore.integrations.langgraph import ShardstoreSaver

TURN_CHARS = 1600
TAIL = 50
SAVERS = ("shardstore", "postgres+delta", "postgres", "postgres exit", "shallow")


# ---------------------------------------------------------------- messages


def turn_texts(source: str, count: int) -> list[str]:
    """``count`` distinct texts of about TURN_CHARS characters from corpus ``source``."""
    if source != "real":
        rng = random.Random(41)
        return [corpus_text(rng, TURN_CHARS) for _ in range(count)]
    out: list[str] = []
    pool = realtext.messages(max(64, count * 3), seed=41)
    stream = "\n\n".join(
        str(m.get("content") or json.dumps(m.get("tool_calls"), ensure_ascii=False)) for m in pool
    )
    # run the pool's text together and cut it in pieces; cycle with a changing offset
    # if a long thread needs more than the pool holds (never the same piece twice)
    offset = 0
    while len(out) < count:
        for lo in range(offset, len(stream) - TURN_CHARS, TURN_CHARS):
            out.append(stream[lo : lo + TURN_CHARS])
            if len(out) == count:
                break
        offset += 97
    return out


def message_bytes(message: Any) -> int:
    return len(
        json.dumps(message_to_dict(message), ensure_ascii=False, separators=(",", ":")).encode()
    )


# ---------------------------------------------------------------- graphs


def messages_delta(state: list[Any], writes: Sequence[Any]) -> list[Any]:
    """add_messages folded over a batch of writes: applying two batches one after the other
    gives what their concatenation gives (DeltaChannel's batching invariance)."""
    out = list(state)
    for write in writes:
        out = add_messages(out, write)  # type: ignore[assignment]
    return out


class PlainState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


class DeltaState(TypedDict):
    messages: Annotated[list[AnyMessage], DeltaChannel(messages_delta)]


def build(checkpointer: Any, answers: Sequence[str], delta: bool) -> Any:
    """The one-node graph: the node answers the n-th user message with ``answers[n]``."""

    def agent(state: Any) -> dict[str, Any]:
        n = sum(1 for m in state["messages"] if isinstance(m, HumanMessage)) - 1
        return {"messages": [AIMessage(answers[n], id=f"a{n}")]}

    graph = StateGraph(DeltaState if delta else PlainState)
    graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    return graph.compile(checkpointer=checkpointer)


# ---------------------------------------------------------------- savers


@contextmanager
def open_saver(name: str, dsn: str) -> Iterator[Any]:
    if name == "shardstore":
        with shardstore.connect(dsn) as store:
            yield ShardstoreSaver(store, tenant_id="bench")
        return
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.shallow import ShallowPostgresSaver
    from psycopg.rows import dict_row

    cls = ShallowPostgresSaver if name == "shallow" else PostgresSaver
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        yield cls(conn)


def schema_of(name: str) -> str:
    return "shardstore" if name == "shardstore" else "public"


def schema_size(dsn: str, schema: str) -> int:
    """pg_total_relation_size of every table and materialized view of ``schema``
    (partitions included: each is a table of its own)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def templates(admin: str) -> dict[str, str]:
    """Migrated empty databases to clone: shardstore's, PostgresSaver's and the shallow
    saver's (their setup(); the two LangGraph savers' tables share names)."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.shallow import ShallowPostgresSaver

    out = {}
    with psycopg.connect(admin, autocommit=True) as c:
        for kind in ("shardstore", "langgraph", "shallow"):
            db = f"lgdelta_tpl_{kind}_{uuid.uuid4().hex[:6]}"
            c.execute(f'CREATE DATABASE "{db}"')
            out[kind] = db
    with shardstore.connect(make_conninfo(admin, dbname=out["shardstore"])):
        pass
    with psycopg.connect(make_conninfo(admin, dbname=out["langgraph"]), autocommit=True) as conn:
        PostgresSaver(conn).setup()  # type: ignore[arg-type]
    with psycopg.connect(make_conninfo(admin, dbname=out["shallow"]), autocommit=True) as conn:
        ShallowPostgresSaver(conn).setup()  # type: ignore[arg-type]
    return out


def clone(admin: str, template: str) -> tuple[str, str]:
    db = f"lgdelta_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{db}" TEMPLATE "{template}"')
    return db, make_conninfo(admin, dbname=db)


def drop(admin: str, db: str) -> None:
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def one_run(
    admin: str, tpl: dict[str, str], name: str, users: list[str], answers: list[str]
) -> dict[str, Any]:
    """One saver, one fresh database, one thread of len(users) turns."""
    db, dsn = clone(admin, tpl[name if name in ("shardstore", "shallow") else "langgraph"])
    try:
        schema = schema_of(name)
        empty = schema_size(dsn, schema)
        steps: list[float] = []
        payload = content = 0
        with psycopg.connect(admin, autocommit=True) as mon:
            mon.execute("CHECKPOINT")
            start = lsn(mon)
            with open_saver(name, dsn) as saver:
                graph = build(saver, answers, delta=name == "postgres+delta")
                config: dict[str, Any] = {"configurable": {"thread_id": "bench-thread"}}
                kw: dict[str, Any] = {"durability": "exit"} if name == "postgres exit" else {}
                for n, text in enumerate(users):
                    t0 = time.perf_counter()
                    graph.invoke({"messages": [HumanMessage(text, id=f"u{n}")]}, config, **kw)
                    steps.append(time.perf_counter() - t0)
                state = graph.get_state(config).values["messages"]
                if len(state) != 2 * len(users):
                    raise AssertionError(f"{name}: {len(state)} messages, not {2 * len(users)}")
                for m in state:
                    payload += message_bytes(m)
                    content += len(str(m.content).encode())
                store = getattr(saver, "store", None)
                if isinstance(store, shardstore.Store):
                    store.drain_folds()
            wal = lsn_diff(mon, start, lsn(mon))
        size = schema_size(dsn, schema) - empty
    finally:
        drop(admin, db)
    return {
        "saver": name,
        "turns": len(users),
        "steps": steps,
        "payload": payload,
        "content": content,
        "bytes": size,
        "wal": wal,
    }


# ---------------------------------------------------------------- report


def ms_range(values: Sequence[float]) -> str:
    v = [x * 1000 for x in values]
    return f"{statistics.median(v):.1f} ({pct(v, 10):.1f}-{pct(v, 90):.1f})"


def f2(x: float) -> str:
    return f"{x:.2f}"


def f1(x: float) -> str:
    return f"{x:.1f}"


def cell_rounds(runs: list[dict[str, Any]], fn: Callable[[dict[str, Any]], float], fmt: Any) -> str:
    return spread([fn(r) for r in runs], fmt)


def report(
    out: Report, results: list[dict[str, Any]], sources: list[str], lengths: list[int]
) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    longest = max(lengths)
    for source in sources:
        out.add(f"### {CORPUS_LABELS[source]} corpus", "")
        rows = []
        for turns in lengths:
            for saver in SAVERS:
                runs = [
                    r
                    for r in results
                    if r["source"] == source and r["turns"] == turns and r["saver"] == saver
                ]
                if not runs:
                    continue
                step50 = [statistics.median(r["steps"]) for r in runs]
                tail = [statistics.median(r["steps"][-TAIL:]) for r in runs]
                all_steps = [s for r in runs for s in r["steps"]]
                rows.append(
                    [
                        f"{turns:,}",
                        saver,
                        cell_rounds(runs, lambda r: r["bytes"] / r["payload"], f2),
                        cell_rounds(runs, lambda r: r["wal"] / r["payload"], f2),
                        spread([s * 1000 for s in step50], f1),
                        ms_range(all_steps),
                        spread([s * 1000 for s in tail], f1) if turns == longest else "",
                        f"{runs[0]['payload']:,}"
                        f" ({runs[0]['payload'] / runs[0]['content']:.2f}x content)",
                    ]
                )
                summary.setdefault(source, {}).setdefault(str(turns), {})[saver] = {
                    "bytes_per_payload": [r["bytes"] / r["payload"] for r in runs],
                    "wal_per_payload": [r["wal"] / r["payload"] for r in runs],
                    "step_p50_ms": [s * 1000 for s in step50],
                    "last50_p50_ms": [s * 1000 for s in tail],
                    "step_p10_ms": pct(all_steps, 10) * 1000,
                    "step_p90_ms": pct(all_steps, 90) * 1000,
                    "payload": runs[0]["payload"],
                    "content": runs[0]["content"],
                    "rounds": len(runs),
                }
        out.table(
            [
                "turns",
                "saver",
                "bytes on disk / payload",
                "WAL / payload",
                "step p50 ms (rounds' range)",
                "step p50 (p10-p90) ms, all rounds",
                f"last {TAIL} steps p50 ms",
                "payload bytes",
            ],
            rows,
        )
        goals = []
        for turns in lengths:
            cell = summary.get(source, {}).get(str(turns), {})
            ours, delta = cell.get("shardstore"), cell.get("postgres+delta")
            if not ours or not delta:
                continue
            b = statistics.median(ours["bytes_per_payload"])
            w = statistics.median(ours["wal_per_payload"])
            speed = statistics.median(delta["step_p50_ms"]) / statistics.median(ours["step_p50_ms"])
            goals.append(
                [
                    f"{turns:,}",
                    f"{b:.2f}x ({'met' if b <= 2 else 'missed'})",
                    f"{w:.2f}x ({'met' if w <= 2 else 'missed'})",
                    f"{speed:.2f}x",
                ]
            )
        out.add("Goal 6, ShardstoreSaver (medians of rounds):", "")
        out.table(
            [
                "turns",
                "bytes / payload (goal <= 2)",
                "WAL / payload (goal <= 2)",
                "DeltaChannel's step p50 / ShardstoreSaver's (goal >= 1 at 50, >= 2 at 1,000)",
            ],
            goals,
        )
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server whose user may create databases")
    parser.add_argument("--lengths", default="50,200,1000", help="thread lengths in turns")
    parser.add_argument("--rounds", type=int, default=3, help="rounds below the longest length")
    parser.add_argument("--long-rounds", type=int, default=1, help="rounds at the longest")
    parser.add_argument("--corpus", choices=CORPUS_CHOICES, default="both")
    parser.add_argument("--savers", default=",".join(SAVERS))
    parser.add_argument("--out", help="results path (NAME.md and NAME.json)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    parser.add_argument("--quick", action="store_true", help="50 and 200 turns, one round")
    args = parser.parse_args(argv)
    quick(args, parser, lengths="50,200", rounds=1)
    lengths = [int(x) for x in args.lengths.split(",")]
    savers = [s for s in args.savers.split(",") if s]
    unknown = set(savers) - set(SAVERS)
    if unknown:
        parser.error(f"unknown savers: {', '.join(sorted(unknown))}")
    sources = corpus_sources(args.corpus)
    results: list[dict[str, Any]] = []
    started = time.time()
    with open_server(args.dsn, args.keep) as server:
        tpl = templates(server.admin_dsn)
        try:
            for source in sources:
                texts = turn_texts(source, 2 * max(lengths))
                users, answers = texts[0::2], texts[1::2]
                for turns in lengths:
                    rounds = args.long_rounds if turns == max(lengths) > 200 else args.rounds
                    for r in range(rounds):
                        order = savers[r % len(savers) :] + savers[: r % len(savers)]
                        for name in order:
                            res = one_run(
                                server.admin_dsn, tpl, name, users[:turns], answers[:turns]
                            )
                            res["source"], res["round"] = source, r
                            results.append(res)
                            progress(
                                f"{source} {turns} turns round {r + 1}/{rounds} {name}: "
                                f"bytes {res['bytes'] / res['payload']:.2f}x, WAL "
                                f"{res['wal'] / res['payload']:.2f}x, step p50 "
                                f"{statistics.median(res['steps']) * 1000:.1f} ms"
                            )
        finally:
            for db in tpl.values():
                drop(server.admin_dsn, db)
    out = Report()
    out.add(
        "## LangGraph: ShardstoreSaver against PostgresSaver, DeltaChannel, durability=exit"
        " and the shallow saver",
        "",
        f"`{command('langgraph-delta', argv)}`; {time.time() - started:.0f} s. A one-node graph"
        f" (a user message in, one AI message out per step, ~{TURN_CHARS:,}-character"
        " messages), each saver on a fresh database of one embedded server, savers rotated"
        " per round. Bytes: growth of pg_total_relation_size over the saver's schema. WAL:"
        " pg_current_wal_lsn around the saver's run alone (shardstore's includes draining"
        " its folds). Payload: the messages as message_to_dict JSON. Ranges: [min-max] of"
        " rounds' medians; (p10-p90) of every step.",
        "",
    )
    summary = report(out, results, sources, lengths)
    data = {"lengths": lengths, "sources": sources, "summary": summary}
    if args.out:
        progress(f"wrote {write_results(args.out, out.text(), data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
