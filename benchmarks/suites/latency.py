#!/usr/bin/env python
"""Latency per call with the database one network hop away: every call of the store's hot
paths, and one LangGraph step with ``ShardstoreSaver`` beside ``PostgresSaver``, and the
LangChain history beside ``langchain-postgres``'s ``PostgresChatMessageHistory``, through
a loopback proxy (tests/wire.py) that holds every chunk ``delay`` ms in each direction
and counts round trips.

    python -m benchmarks latency [--dsn DSN] [--delays 0,1,5] [--calls 30]

Without ``--dsn`` an embedded Postgres is started in a temporary directory. For each delay
and each call: the median and range (min-max) of ``--calls`` timed calls, and the round
trips one call makes. Every contender runs through the same proxy, in the same process,
interleaved call by call. Prints a Markdown table per delay.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.report import quick, write_results
from benchmarks.lib.server import open_server
from tests.wire import WireProxy

MESSAGE = {"role": "user", "content": "where is my refund? it was due last week. " * 10}


def _graph(saver: Any) -> Any:
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def node(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"ok {len(state['messages'])}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", node)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    return graph.compile(checkpointer=saver)


def _contenders(proxy: WireProxy) -> tuple[dict[str, Callable[[], Any]], Callable[[], None]]:
    """name -> one call; and what closes them."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_postgres import PostgresChatMessageHistory
    from langgraph.checkpoint.postgres import PostgresSaver

    from shardstore.integrations.langchain import ShardstoreChatMessageHistory
    from shardstore.integrations.langgraph import ShardstoreSaver

    store = shardstore.connect(proxy.dsn(), pool_max_size=2)
    sid = store.create_session("bench", "user:1")
    store.append_turns(sid, [MESSAGE] * 200, checkpoint={"step": 0})
    # as the peers' READMEs connect: autocommit, no server-side prepared statements kept
    peer = psycopg.connect(proxy.dsn(), autocommit=True, prepare_threshold=0)
    saver = PostgresSaver(peer)  # type: ignore[arg-type]
    saver.setup()
    lc_conn = psycopg.connect(proxy.dsn())
    PostgresChatMessageHistory.create_tables(lc_conn, "chat_history")
    lc = PostgresChatMessageHistory("chat_history", str(uuid.uuid4()), sync_connection=lc_conn)
    ours = ShardstoreChatMessageHistory("bench-chat", store, tenant_id="bench")
    g_ours = _graph(ShardstoreSaver(store, tenant_id="bench"))
    g_peer = _graph(saver)
    thread = {"configurable": {"thread_id": "bench-thread"}}
    pair = [HumanMessage("hi"), AIMessage("hello")]
    calls: dict[str, Callable[[], Any]] = {
        "append_turn": lambda: store.append_turn(sid, MESSAGE),
        "append_turn(checkpoint=...)": lambda: store.append_turn(sid, MESSAGE, checkpoint={"s": 1}),
        "tail(n=20)": lambda: store.tail(sid, n=20),
        "tail(max_tokens=4000)": lambda: store.tail(sid, max_tokens=4000),
        "restore(n=20)": lambda: store.restore(sid, n=20),
        "context(8000)": lambda: store.context(sid, 8000),
        "sessions()": lambda: store.sessions(tenant_id="bench"),
        "LangGraph step, ShardstoreSaver": lambda: g_ours.invoke({"messages": pair[:1]}, thread),
        "LangGraph step, PostgresSaver": lambda: g_peer.invoke({"messages": pair[:1]}, thread),
        "LangChain add_messages, shardstore": lambda: ours.add_messages(pair),
        "LangChain add_messages, langchain-postgres": lambda: lc.add_messages(pair),
        "LangChain messages, shardstore": lambda: ours.messages,
        "LangChain messages, langchain-postgres": lambda: lc.messages,
    }

    def close() -> None:
        store.close()
        peer.close()
        lc_conn.close()

    return calls, close


def run(dsn: str, delays: list[float], calls: int) -> str:
    out = []
    with WireProxy(dsn) as proxy:
        contenders, close = _contenders(proxy)
        try:
            for call in contenders.values():  # warm: plans, prepared statements
                for _ in range(6):
                    call()
            for delay in delays:
                proxy.delay = delay / 1000
                times: dict[str, list[float]] = {name: [] for name in contenders}
                trips: dict[str, list[int]] = {name: [] for name in contenders}
                for _ in range(calls):  # interleaved: each round calls every contender
                    for name, call in contenders.items():
                        with proxy.counting() as n:
                            t0 = time.perf_counter()
                            call()
                            times[name].append((time.perf_counter() - t0) * 1000)
                        trips[name].append(n[0])
                out.append(f"\n### {delay:g} ms each way\n")
                out.append("| call | median ms | range ms | round trips (median) |")
                out.append("|---|---|---|---|")
                for name in contenders:
                    t = times[name]
                    out.append(
                        f"| {name} | {statistics.median(t):.2f} | {min(t):.2f}-{max(t):.2f} "
                        f"| {statistics.median(trips[name]):g} |"
                    )
        finally:
            close()
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn")
    p.add_argument("--delays", default="0,1,5")
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--quick", action="store_true", help="delays 0 and 1 ms, 5 calls")
    p.add_argument("--out", help="write OUT.md")
    args = p.parse_args(argv)
    quick(args, p, delays="0,1", calls=5)
    delays = [float(d) for d in args.delays.split(",")]
    with open_server(args.dsn, keep=False) as server:  # a scratch database, dropped after
        text = run(server.dsn, delays, args.calls)
    print(text)
    if args.out:
        write_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
