"""A LangGraph agent process SIGKILLed mid-run, again and again, and restarted on the same
thread: the thread's state is always readable, no turn exists without the checkpoint that
appended it, no message is stored twice, and the finished conversation equals the one an
uninterrupted run produces (LangGraph's InMemorySaver as the reference)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langchain_core.messages import HumanMessage, ToolMessage, message_to_dict
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

import shardstore
from shardstore.integrations.langgraph import ShardstoreSaver
from tests.integrations.test_langgraph_checkpointer import TENANT, build_graph

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TURNS = 12
THREAD = "crashy"


def drive(graph: Any, config: dict[str, Any], turns: int, report: bool = False) -> None:
    """Bring the thread to ``turns`` answered user turns, from wherever it stands: finish
    an interrupted or half-run step first (approving every tool call with "ok")."""
    while True:
        state = graph.get_state(config)
        if report:
            print("step", flush=True)  # the test kills the process between these
        # tasks, not next: a task whose writes were saved before the kill is not in
        # `next`, yet its step is not applied until the graph runs again
        if state.tasks:
            graph.invoke(Command(resume="ok") if state.interrupts else None, config)
            continue
        asked = sum(isinstance(m, HumanMessage) for m in state.values.get("messages", []))
        if asked >= turns:
            return
        graph.invoke({"messages": [HumanMessage(f"question {asked}", id=f"h{asked}")]}, config)


def writer(dsn: str, turns: int) -> None:
    """The process the test kills: an agent on a fresh store and saver."""
    with shardstore.connect(dsn) as store:
        graph = build_graph(ShardstoreSaver(store, tenant_id=TENANT))
        drive(graph, {"configurable": {"thread_id": THREAD}}, turns, report=True)
    print("done", flush=True)


def normal(messages: list[Any]) -> list[Any]:
    out = []
    for m in messages:
        d = message_to_dict(m)
        if isinstance(m, ToolMessage):
            d["data"]["id"] = None  # drawn at random by add_messages
        out.append(d)
    return out


def check(dsn: str) -> list[Any]:
    """Invariants of the thread as a fresh process sees it; returns its messages."""
    with shardstore.connect(dsn) as store:
        saver = ShardstoreSaver(store, tenant_id=TENANT)
        sid = saver.session_id(THREAD)
        if sid is None:
            return []
        newest = saver.get_tuple({"configurable": {"thread_id": THREAD, "checkpoint_ns": ""}})
        assert newest is not None
        messages = newest.checkpoint["channel_values"].get("messages", [])
        turns = [t.message for t in store.history(sid)]
        ids = [t["data"]["id"] for t in turns]
        assert len(ids) == len(set(ids)), "a message was stored twice"
        # the newest checkpoint holds every turn: no turn without its checkpoint
        assert [message_to_dict(m) for m in messages] == turns
        with psycopg.connect(dsn) as conn:
            (positions,) = conn.execute(
                "SELECT max(turn_seq) FROM shardstore.langgraph_checkpoints WHERE session_id = %s",
                (sid,),
            ).fetchone() or (None,)
        assert positions == len(turns) - 1
        # every checkpoint reads back, its messages a prefix of the turns
        for tup in saver.list({"configurable": {"thread_id": THREAD}}):
            held = tup.checkpoint["channel_values"].get("messages", [])
            assert [message_to_dict(m) for m in held] == turns[: len(held)]
        return messages


@pytest.mark.slow
def test_agent_killed_mid_run_resumes_exactly(dsn: str) -> None:
    rng = random.Random(12)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = f"from tests.crash.test_langgraph_agent_killed import writer; writer({dsn!r}, {TURNS})"
    kills = 0
    for _round in range(60):
        proc = subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        # kill it after a few steps, a little into the next one (its statements in flight)
        wanted, seen, done = rng.randint(1, 4), 0, False
        for line in proc.stdout:
            done = done or line.startswith("done")
            seen += line.startswith("step")
            if seen >= wanted:
                time.sleep(rng.uniform(0.0, 0.03))
                break
        if proc.poll() is None and not done:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        rest = proc.communicate()[0]
        check(dsn)
        if done or "done" in rest:
            break
    print(f"writer SIGKILLed {kills} times")
    assert kills >= 3, "the writer was never killed mid-run: tune the timings"
    final = check(dsn)
    reference = InMemorySaver()
    graph = build_graph(reference)
    config = {"configurable": {"thread_id": THREAD}}
    drive(graph, config, TURNS)
    assert normal(final) == normal(graph.get_state(config).values["messages"])
    assert sum(isinstance(m, HumanMessage) for m in final) == TURNS
    json.dumps([message_to_dict(m) for m in final])  # plain data all the way
