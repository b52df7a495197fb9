"""LangGraph agent on ShardstoreSaver against LangGraph's PostgresSaver, same server.

    python -m benchmarks langgraph [--dsn DSN] [--turns 1000] [--out FILE.md]

A StateGraph(MessagesState) agent (an offline scripted chat model; every third user turn
makes a tool call answered by a ToolNode; messages of 150 to 1,200 characters of the
benchmarks' synthetic text) runs ``--turns`` user turns, one ``invoke`` each,
on one thread, once with each checkpointer, on one embedded (or given) PostgreSQL server
and one database. Reported:

* bytes on disk: ``pg_total_relation_size`` of every table each saver uses (shardstore's
  partitions summed), after the run, as they are (dead row versions included) and after a
  plain VACUUM;
* per-step latency: one step is one ``invoke`` (a user turn: input, agent, maybe tools and
  agent again), wall time, and the part of it spent inside the checkpointer's methods;
  medians of the first and of the last 50 steps, with their p10-p90 ranges;
* the same checkpointer step done by hand (get_tuple, put with one more message,
  put_writes) on the long thread and on a one-turn thread, interleaved in rounds so that
  both see the same load (a shared machine's load drifts over a long run);
* resume time: a new connection and a new saver (nothing cached) reading the thread's
  state (``get_state``), and the first ``invoke`` after it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

import shardstore
from benchmarks.lib.corpus import text as corpus_text
from benchmarks.lib.report import progress, quick, write_results
from benchmarks.lib.server import open_server
from benchmarks.lib.stats import pct
from shardstore.integrations.langgraph import ShardstoreSaver

WINDOW = 50
PROBE_ROUNDS = 50
# message sizes (characters of content): a user turn, an answer, tool arguments, a tool's
# output; text from the benchmarks' synthetic corpus (benchmarks.lib.corpus), distinct per message
USER_CHARS, ANSWER_CHARS, ARGS_CHARS, TOOL_CHARS = 400, 1000, 150, 1200


def _text(rng: random.Random, chars: int) -> str:
    return corpus_text(rng, chars)


class ScriptedModel(BaseChatModel):
    """Offline model: every third user turn asks for a tool, a tool result gets an answer."""

    @property
    def _llm_type(self) -> str:
        return "scripted-bench"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        n = len(messages)
        rng = random.Random(n)
        last = messages[-1]
        if isinstance(last, HumanMessage) and last.additional_kwargs.get("tool"):
            reply = AIMessage(
                content="",
                id=f"ai-{n}",
                tool_calls=[
                    {"name": "search", "args": {"q": _text(rng, ARGS_CHARS)}, "id": f"c{n}"}
                ],
            )
        else:
            reply = AIMessage(
                content=_text(rng, ANSWER_CHARS),
                id=f"ai-{n}",
                response_metadata={"model": "scripted", "finish_reason": "stop"},
                usage_metadata={"input_tokens": n * 40, "output_tokens": 120, "total_tokens": 0},
            )
        return ChatResult(generations=[ChatGeneration(message=reply)])


@tool
def search(q: str) -> str:
    """Search the knowledge base."""
    return _text(random.Random(q), TOOL_CHARS)


def build(checkpointer: Any) -> Any:
    model = ScriptedModel()

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([search]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile(checkpointer=checkpointer)


def timed(cls: type) -> type:
    """``cls`` whose checkpointer methods add their wall time to ``self.spent``."""

    def wrap(name: str) -> Callable[..., Any]:
        inner = getattr(cls, name)

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                out = inner(self, *args, **kwargs)
                return list(out) if name == "list" else out
            finally:
                self.spent += time.perf_counter() - t0

        return method

    body = {n: wrap(n) for n in ("get_tuple", "list", "put", "put_writes")}
    body["spent"] = 0.0
    return type(f"Timed{cls.__name__}", (cls,), body)


def user(turn: int) -> HumanMessage:
    rng = random.Random(turn * 7919)
    return HumanMessage(
        _text(rng, USER_CHARS), id=f"u{turn}", additional_kwargs={"tool": turn % 3 == 0}
    )


def run(graph: Any, saver: Any, turns: int, label: str) -> tuple[list[float], list[float]]:
    config = {"configurable": {"thread_id": "bench-thread"}}
    steps, inside = [], []
    for turn in range(turns):
        saver.spent = 0.0
        t0 = time.perf_counter()
        graph.invoke({"messages": [user(turn)]}, config)
        steps.append(time.perf_counter() - t0)
        inside.append(saver.spent)
        if (turn + 1) % 100 == 0:
            progress(f"{label}: {turn + 1} turns, last step {steps[-1] * 1000:.1f} ms")
    return steps, inside


def probe(saver: Any, big: str, small: str, rounds: int) -> dict[str, list[float]]:
    """One checkpointer step done by hand (get_tuple of the newest checkpoint, put of the
    next one with one more message, put_writes of that message), alternating between the
    long thread and a one-turn thread, so that both see the same server load."""
    from langgraph.checkpoint.base import copy_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    times: dict[str, list[float]] = {big: [], small: []}
    rng = random.Random(5)
    for r in range(rounds):
        for thread in (big, small) if r % 2 == 0 else (small, big):
            config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            msg = AIMessage(_text(rng, ANSWER_CHARS), id=f"probe-{thread}-{r}")
            t0 = time.perf_counter()
            tup = saver.get_tuple(config)
            cp = copy_checkpoint(tup.checkpoint)
            cp["id"] = str(uuid6(clock_seq=r))
            messages = tup.checkpoint["channel_values"]["messages"]
            version = saver.get_next_version(cp["channel_versions"].get("messages"), None)
            cp["channel_values"] = {**cp["channel_values"], "messages": [*messages, msg]}
            cp["channel_versions"] = {**cp["channel_versions"], "messages": version}
            meta = {"source": "loop", "step": 10_000 + r, "parents": {}}
            stored = saver.put(tup.config, cp, meta, {"messages": version})
            saver.put_writes(stored, [("messages", [msg])], f"probe-task-{r}")
            times[thread].append(time.perf_counter() - t0)
    return times


def sizes(dsn: str, tables: list[str]) -> int:
    """Total bytes of tables with their indexes and TOAST (a partitioned table: the sum of
    its partitions)."""
    sql = (
        "SELECT coalesce(sum(CASE WHEN c.relkind = 'p' THEN"
        "   (SELECT sum(pg_total_relation_size(t.relid)) FROM pg_partition_tree(c.oid) t)"
        "   ELSE pg_total_relation_size(c.oid) END), 0)"
        "  FROM unnest(%s::regclass[]) AS r(tab) JOIN pg_class c ON c.oid = r.tab"
    )
    with psycopg.connect(dsn) as conn:
        return int(conn.execute(sql, (tables,)).fetchone()[0])  # type: ignore[index]


def vacuum(dsn: str, tables: list[str]) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables:
            conn.execute(f"VACUUM {table}")


SHARDSTORE_TABLES = [
    "shardstore.sessions",
    "shardstore.turn_buffer",
    "shardstore.agent_history",
    "shardstore.chunk_map",
    "shardstore.turn_keys",
    "shardstore.checkpoints",
    "shardstore.langgraph_checkpoints",
    "shardstore.langgraph_writes",
]
POSTGRES_TABLES = [
    "public.checkpoints",
    "public.checkpoint_blobs",
    "public.checkpoint_writes",
    "public.checkpoint_migrations",
]


def summary(values: list[float]) -> str:
    """Median and p10-p90 range, in ms."""
    ms = [v * 1000 for v in values]
    return f"{statistics.median(ms):.2f} ({pct(ms, 10):.2f}-{pct(ms, 90):.2f})"


def ratio(values: list[float], window: int) -> float:
    return statistics.median(values[-window:]) / statistics.median(values[:window])


@contextmanager
def shard_saver(dsn: str) -> Iterator[Any]:
    with shardstore.connect(dsn) as store:
        yield timed(ShardstoreSaver)(store, tenant_id="bench")


@contextmanager
def pg_saver(dsn: str) -> Iterator[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    with psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
        yield timed(PostgresSaver)(conn)


def measure(name: str, opener: Any, dsn: str, turns: int, tables: list[str]) -> dict[str, Any]:
    progress(f"{name}: {turns} turns")
    with opener(dsn) as saver:
        if hasattr(saver, "setup"):
            saver.setup()
        graph = build(saver)
        steps, inside = run(graph, saver, turns, name)
        messages = len(
            graph.get_state({"configurable": {"thread_id": "bench-thread"}}).values["messages"]
        )
        graph.invoke({"messages": [user(1)]}, {"configurable": {"thread_id": "one-turn"}})
        probed = probe(saver, "bench-thread", "one-turn", PROBE_ROUNDS)
        store = getattr(saver, "store", None)
        if isinstance(store, shardstore.Store):
            store.drain_folds()
    before = sizes(dsn, tables)
    vacuum(dsn, tables)
    after = sizes(dsn, tables)
    config = {"configurable": {"thread_id": "bench-thread"}}
    t0 = time.perf_counter()
    with opener(dsn) as fresh:
        graph = build(fresh)
        state = graph.get_state(config)
        t1 = time.perf_counter()
        graph.invoke({"messages": [user(turns)]}, config)
        t2 = time.perf_counter()
    return {
        "name": name,
        "steps": steps,
        "inside": inside,
        "bytes": before,
        "bytes_vacuumed": after,
        "messages": messages,
        "resumed_messages": len(state.values["messages"]),
        "resume_read": t1 - t0,
        "resume_invoke": t2 - t1,
        "probe_big": probed["bench-thread"],
        "probe_small": probed["one-turn"],
    }


def report(results: list[dict[str, Any]], turns: int, window: int) -> list[str]:
    ours, theirs = results
    lines = [
        "## LangGraph agent: ShardstoreSaver against PostgresSaver",
        "",
        f"A StateGraph(MessagesState) agent with a tool node, {turns:,} user turns on one"
        f" thread ({ours['messages']:,} messages after the run; the interleaved step below"
        f" adds {PROBE_ROUNDS} more), one invoke per step, the same embedded PostgreSQL server"
        " and database (the langgraph suite).",
        "",
        "| | ShardstoreSaver | PostgresSaver | PostgresSaver / shardstore |",
        "|---|---:|---:|---:|",
        f"| bytes on disk (pg_total_relation_size) | {ours['bytes']:,} | {theirs['bytes']:,} |"
        f" {theirs['bytes'] / ours['bytes']:,.1f}x |",
        f"| bytes after VACUUM | {ours['bytes_vacuumed']:,} | {theirs['bytes_vacuumed']:,} |"
        f" {theirs['bytes_vacuumed'] / ours['bytes_vacuumed']:,.1f}x |",
    ]
    for key, what in (("steps", "step"), ("inside", "checkpointer part of a step")):
        w = min(window, len(ours[key]) // 2)
        lines.append(
            f"| {what}, first {w}: median (p10-p90) ms | {summary(ours[key][:w])} |"
            f" {summary(theirs[key][:w])} | |"
        )
        lines.append(
            f"| {what}, last {w}: median (p10-p90) ms | {summary(ours[key][-w:])} |"
            f" {summary(theirs[key][-w:])} | |"
        )
        lines.append(
            f"| {what}: last / first {w} (medians) | {ratio(ours[key], w):.2f}x |"
            f" {ratio(theirs[key], w):.2f}x | |"
        )
    lines += [
        f"| checkpointer step by hand on a 1-turn thread, interleaved: median (p10-p90) ms |"
        f" {summary(ours['probe_small'])} | {summary(theirs['probe_small'])} | |",
        f"| the same step on the {turns:,}-turn thread: median (p10-p90) ms |"
        f" {summary(ours['probe_big'])} | {summary(theirs['probe_big'])} | |",
        f"| {turns:,} turns / 1 turn (medians) |"
        f" {statistics.median(ours['probe_big']) / statistics.median(ours['probe_small']):.2f}x |"
        f" {statistics.median(theirs['probe_big']) / statistics.median(theirs['probe_small']):.2f}x"
        " | |",
        f"| resume: new connection + saver, get_state (ms) | {ours['resume_read'] * 1000:.1f} |"
        f" {theirs['resume_read'] * 1000:.1f} | |",
        f"| resume: the first invoke after it (ms) | {ours['resume_invoke'] * 1000:.1f} |"
        f" {theirs['resume_invoke'] * 1000:.1f} | |",
        "",
        "Tables: shardstore's sessions, turn_buffer, agent_history (partitions), chunk_map,"
        " turn_keys, checkpoints, langgraph_checkpoints, langgraph_writes; PostgresSaver's"
        " checkpoints, checkpoint_blobs, checkpoint_writes, checkpoint_migrations.",
    ]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="a server whose user may create databases")
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--out", help="write the markdown table here (else stdout)")
    parser.add_argument("--keep", action="store_true", help="keep the benchmark database")
    parser.add_argument("--quick", action="store_true", help="20 turns")
    args = parser.parse_args(argv)
    quick(args, parser, turns=20)
    with open_server(args.dsn, args.keep) as server:
        with shardstore.connect(server.dsn):
            pass  # migrations
        results = [
            measure("shardstore", shard_saver, server.dsn, args.turns, SHARDSTORE_TABLES),
            measure("postgres", pg_saver, server.dsn, args.turns, POSTGRES_TABLES),
        ]
    text = "\n".join(report(results, args.turns, WINDOW)) + "\n"
    if args.out:
        progress(f"wrote {write_results(args.out, text)}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
