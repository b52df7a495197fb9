"""Format version 2 of ``shardstore.jsonl``: an export carries a session's agent state
(checkpoints, runs, chunk summaries, where its history starts and its fork lineage) and,
for a tenant or subject scope, the facts with every version; the import restores them
exactly (ids and times), compared table by table with SQL. A version 1 file still imports;
hostile state lines are refused naming their line with nothing of their session written;
asyncio parity; an import SIGKILLed mid-run then run again gives the same database."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.errors import ImportRejected
from shardstore.models import Turn

SMALL: dict[str, Any] = {"chunk_tokens": 300, "default_tail_turns": 1, "background_fold": False}
TENANT = "acme"


def stub(turns: list[Turn]) -> str:
    return f"turns {turns[0].turn_seq}..{turns[-1].turn_seq}"


def say(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i} " * 3}


def build(store: shardstore.Store) -> dict[str, uuid.UUID]:
    """A rich tenant: a plain session with checkpoints (one holding an artifact reference),
    runs (one awaiting approval, one done, one failed) and summaries; a fork of it; a
    rewound session; a range-purged one; facts with history."""
    main = store.create_session(TENANT, "alice", "agent-1", metadata={"app": "demo", "n": 1.5})
    store.append_turns(main, [say(i) for i in range(40)])
    first = store.checkpoint(main, {"step": 1, "plan": ["a", "b"]}, idempotency_key="cp-1")
    store.checkpoint(
        main,
        {"step": 2, "report": {"artifact_id": str(uuid.uuid4()), "sha256": "ab" * 32}},
        tool_calls=[{"name": "search", "args": {"q": "x\u00e9"}}],
        tool_results=[{"ok": True}],
        sub_step=3,
        parent_id=first.checkpoint_id,
        metadata={"who": "planner"},
    )
    waiting = store.open_run(main, framework="langgraph", thread_key="t-1", metadata={"k": 1})
    store.record_step(waiting.run_id, steps=3, usd_cost=0.125)
    store.mark_awaiting(waiting.run_id, {"question": "approve the refund?"})
    done = store.open_run(main, framework="custom", thread_key="t-2")
    store.close_run(done.run_id, "done")
    failed = store.open_run(main, framework="custom", thread_key="t-3")
    store.close_run(failed.run_id, "failed", error="tool timed out")
    store.drain_folds()
    assert store.summarize(stub, session_id=main) > 0

    fork = store.fork(main, at_turn_seq=19, metadata={"branch": "b"})
    store.append_turns(fork, [say(100 + i) for i in range(5)])
    store.checkpoint(fork, {"branch": True})

    rewound = store.create_session(TENANT, "bob")
    store.append_turns(rewound, [say(i) for i in range(12)])
    store.checkpoint(rewound, {"at": 11})
    store.rewind(rewound, 6)
    store.checkpoint(rewound, {"after": "rewind"})

    purged = store.create_session(TENANT, "alice")
    store.append_turns(purged, [say(i) for i in range(30)])
    store.checkpoint(purged, {"early": True})
    store.purge_range(purged, 10)
    store.checkpoint(purged, {"late": True})
    store.drain_folds()
    store.summarize(stub, session_id=purged)

    store.remember(TENANT, "alice", "city", "Paris", source=(main, 3), confidence=0.9)
    store.remember(TENANT, "alice", "city", "Lyon", source=(main, 5))
    store.remember(TENANT, "alice", "likes", ["tea", {"x": None}], source=None)
    store.remember(TENANT, "bob", "city", "Rome", source=(rewound, 2))
    return {"main": main, "fork": fork, "rewound": rewound, "purged": purged}


TABLES = {
    "sessions": "SELECT session_id, tenant_id, subject_id, agent_id, metadata, created_at, "
    "first_turn_seq FROM shardstore.sessions ORDER BY session_id",
    "checkpoints": "SELECT session_id, checkpoint_id, tenant_id, turn_seq, sub_step, parent_id, "
    "idempotency_key, created_at, state, tool_calls, tool_results, metadata, "
    "rank() OVER (PARTITION BY session_id ORDER BY seq) FROM shardstore.checkpoints "
    "ORDER BY session_id, seq",
    "runs": "SELECT session_id, run_id, tenant_id, framework, thread_key, status, awaiting, "
    "awaiting_since, steps, usd_cost, error, metadata, created_at, updated_at, closed_at "
    "FROM shardstore.runs ORDER BY session_id, run_id",
    "facts": "SELECT tenant_id, fact_id, subject, key, value, confidence, source_session_id, "
    "source_turn_seq, valid_from, valid_to, recorded_at FROM shardstore.facts "
    "ORDER BY tenant_id, fact_id",
    "chunk_summaries": "SELECT session_id, chunk_seq, tenant_id, chunk_start, first_turn_seq, "
    "last_turn_seq, summary, tokens, model, created_at, message_tokens, counted_by "
    "FROM shardstore.chunk_summaries ORDER BY session_id, chunk_seq",
}


def tables(dsn: str) -> dict[str, list[Any]]:
    with psycopg.connect(dsn) as conn:
        return {name: conn.execute(sql).fetchall() for name, sql in TABLES.items()}


def turns(store: shardstore.Store, sids: dict[str, uuid.UUID]) -> dict[str, list[Any]]:
    return {
        name: [(t.turn_seq, t.created_at, t.idempotency_key, t.message) for t in store.history(sid)]
        for name, sid in sids.items()
    }


def export(store: shardstore.Store) -> str:
    out = io.StringIO()
    store.export_sessions(tenant_id=TENANT, out=out)
    return out.getvalue()


@pytest.fixture
def rich(new_database: Callable[[], str]) -> tuple[str, dict[str, uuid.UUID], str]:
    src = new_database()
    with shardstore.connect(src, **SMALL) as a:
        sids = build(a)
        text = export(a)
    return src, sids, text


@pytest.mark.slow
def test_round_trip_table_by_table(
    rich: tuple[str, dict[str, uuid.UUID], str], new_database: Callable[[], str]
) -> None:
    src, sids, text = rich
    kinds = [json.loads(line)["kind"] for line in text.splitlines()]
    assert {"session", "turn", "checkpoint", "run", "summary", "end", "fact"} <= set(kinds)
    head = {
        json.loads(line)["session_id"]: json.loads(line)
        for line in text.splitlines()
        if '"kind":"session"' in line
    }
    assert head[str(sids["fork"])]["fork"] == {"parent": str(sids["main"]), "at": 19}
    assert head[str(sids["purged"])]["first_turn_seq"] == 10
    assert head[str(sids["main"])]["version"] == 4

    dst = new_database()
    started = time.perf_counter()
    with shardstore.connect(dst, **SMALL) as b:
        report = b.import_jsonl(io.StringIO(text))
        seconds = time.perf_counter() - started
        assert report.sessions == 4
        # a range purge left the purged session's first chunk short: chunked afresh here,
        # no chunk holds exactly the turns its summaries cover, and the report says so
        unmatched = [s for s in report.skipped if "summary" in s.reason]
        assert len(unmatched) == 2 and all(str(sids["purged"]) in s.reason for s in unmatched)
        with shardstore.connect(src, **SMALL) as a:
            assert turns(b, sids) == turns(a, sids)
        # the fork is a fork again: its parent came first in the file
        assert b.session(sids["fork"]).turn_count == 25 and report.forks == 1
        # a re-run skips every session and every fact
        again = b.import_jsonl(io.StringIO(text), on_existing="skip")
        assert again.sessions == 0 and len(again.skipped) == 4
    print(f"round trip: {len(kinds)} records imported in {seconds:.2f}s")
    want = tables(src)
    got = tables(dst)
    assert [r for r in want["chunk_summaries"] if r[0] == sids["purged"]]
    want["chunk_summaries"] = [r for r in want["chunk_summaries"] if r[0] != sids["purged"]]
    for name in want:
        assert got[name] == want[name], name
    assert want["checkpoints"] and want["runs"] and want["facts"] and want["chunk_summaries"]
    assert any(r[5] == "awaiting_human" for r in want["runs"])
    assert len([r for r in want["facts"] if r[3] == "city" and r[2] == "alice"]) == 2
    # the copy exports the same file, fork lineage included, but for the summaries not
    # carried
    with shardstore.connect(dst, **SMALL) as b:
        assert no_summaries(export(b)) == no_summaries(text)


def no_summaries(text: str) -> list[Any]:
    """The lines of an export less its summaries and the export line (its id and time are
    each export's own)."""
    return [
        json.loads(line)
        for line in text.splitlines()
        if '"kind":"summary"' not in line and '"kind":"export"' not in line
    ]


@pytest.mark.slow
def test_version_1_still_imports(new_database: Callable[[], str]) -> None:
    sid = uuid.uuid4()
    lines = [
        {
            "kind": "session",
            "format": "shardstore.jsonl",
            "version": 1,
            "session_id": str(sid),
            "tenant_id": TENANT,
            "subject_id": None,
            "agent_id": None,
            "metadata": {},
            "created_at": "2026-05-01T10:00:00+00:00",
        },
        {
            "kind": "turn",
            "turn_seq": 0,
            "created_at": "2026-05-01T10:00:01+00:00",
            "idempotency_key": None,
            "tokens": 3,
            "message": {"role": "user", "content": "hi"},
        },
        {"kind": "end", "session_id": str(sid), "turns": 1},
    ]
    text = "".join(json.dumps(x) + "\n" for x in lines)
    with shardstore.connect(new_database()) as b:
        assert b.import_jsonl(io.StringIO(text)).turns == 1
        assert [t.message for t in b.history(sid)] == [{"role": "user", "content": "hi"}]
        # a state line is not part of version 1
        bad = text.replace(str(sid), str(uuid.uuid4()))
        rows = bad.splitlines(keepends=True)
        rows.insert(2, json.dumps({"kind": "run"}) + "\n")
        with pytest.raises(ImportRejected, match="line 3"):
            b.import_jsonl(io.StringIO("".join(rows)))


def _session_block(text: str, sid: uuid.UUID) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    inside = False
    for line in text.splitlines():
        doc = json.loads(line)
        if doc["kind"] == "session":
            inside = doc["session_id"] == str(sid)
        if inside:
            out.append(doc)
        if doc["kind"] == "end":
            inside = False
    return out


def _first(block: list[dict[str, Any]], kind: str) -> int:
    return next(i for i, d in enumerate(block) if d["kind"] == kind)


def _edit(kind: str, change: Callable[[dict[str, Any]], None]) -> Any:
    def apply(block: list[dict[str, Any]]) -> list[dict[str, Any]]:
        i = _first(block, kind)
        doc = dict(block[i])
        change(doc)
        return [*block[:i], doc, *block[i + 1 :]]

    return apply


def _deep(doc: dict[str, Any]) -> None:
    value: Any = 1
    for _ in range(400):
        value = [value]
    doc["state"] = value


HOSTILE = {
    "unknown kind": (_edit("run", lambda d: d.update(kind="rocket")), "a 'rocket' line"),
    "other tenant": (_edit("checkpoint", lambda d: d.update(tenant_id="evil")), "tenant"),
    "other session": (
        _edit("run", lambda d: d.update(session_id=str(uuid.uuid4()))),
        "another session",
    ),
    "turn past the end": (_edit("checkpoint", lambda d: d.update(turn_seq=40)), "past"),
    "wrong type": (_edit("run", lambda d: d.update(steps="3")), "steps"),
    "negative": (_edit("run", lambda d: d.update(usd_cost=-1)), "usd_cost"),
    "huge int": (_edit("checkpoint", lambda d: d.update(sub_step=2**40)), "sub_step"),
    "deep": (_edit("checkpoint", _deep), "nests"),
    "bad status": (_edit("run", lambda d: d.update(status="paused")), "status"),
    "bad uuid": (_edit("checkpoint", lambda d: d.update(checkpoint_id="x")), "checkpoint_id"),
    "awaiting mismatch": (
        _edit("run", lambda d: d.update(status="running", closed_at=None, error=None)),
        "awaiting",
    ),
    "summary out of range": (_edit("summary", lambda d: d.update(last_turn_seq=99)), "outside"),
    "turn after state": (
        lambda b: [*b[:-1], {**b[1], "turn_seq": 40}, b[-1]],
        "turn line after",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_state_lines_write_nothing_of_their_session(
    name: str, rich: tuple[str, dict[str, uuid.UUID], str], new_database: Callable[[], str]
) -> None:
    _, sids, text = rich
    change, says = HOSTILE[name]
    block = _session_block(text, sids["main"])
    if name == "awaiting mismatch":  # the waiting run is the first
        assert block[_first(block, "run")]["status"] == "awaiting_human"
    bad = change(block)
    edited = next(i for i, (x, y) in enumerate(zip(bad, block, strict=False)) if x != y)
    body = "".join(json.dumps(d) + "\n" for d in bad)
    dst = new_database()
    with shardstore.connect(dst, **SMALL) as b:
        with pytest.raises(ImportRejected, match=f"line {edited + 1}") as err:
            b.import_jsonl(io.StringIO(body))
        assert says in str(err.value)
    got = tables(dst)
    assert not any(got.values()), got


@pytest.mark.slow
def test_a_fact_naming_a_session_of_another_tenant_is_refused(
    rich: tuple[str, dict[str, uuid.UUID], str], new_database: Callable[[], str]
) -> None:
    _, _sids, text = rich
    facts = [json.loads(x) for x in text.splitlines() if '"kind":"fact"' in x]
    sourced = next(f for f in facts if f["source_session_id"])
    dst = new_database()
    with shardstore.connect(dst, **SMALL) as b:
        b.import_jsonl(io.StringIO(text))
        evil = {**sourced, "tenant_id": "evil", "fact_id": str(uuid.uuid4())}
        with pytest.raises(ImportRejected, match="line 1: its source session"):
            b.import_jsonl(io.StringIO(json.dumps(evil) + "\n"))
        # a second current version of a key that has one is refused, naming the line
        clash = {**sourced, "fact_id": str(uuid.uuid4()), "valid_to": None}
        current = next(f for f in facts if f["key"] == sourced["key"] and not f["valid_to"])
        clash.update(subject=current["subject"], valid_from=current["valid_from"])
        with pytest.raises(ImportRejected, match="line 1: the subject and key"):
            b.import_jsonl(io.StringIO(json.dumps(clash) + "\n"))
    assert len(tables(dst)["facts"]) == len(facts)


@pytest.mark.slow
def test_async_parity(
    rich: tuple[str, dict[str, uuid.UUID], str], new_database: Callable[[], str]
) -> None:
    _src, _sids, text = rich
    dst, ref = new_database(), new_database()
    with shardstore.connect(ref, **SMALL) as b:
        b.import_jsonl(io.StringIO(text))

    async def go() -> str:
        astore = await shardstore.connect_async(dst, **SMALL)
        try:
            await astore.import_jsonl(io.StringIO(text))
            out = io.StringIO()
            await astore.export_sessions(tenant_id=TENANT, out=out)
            return out.getvalue()
        finally:
            await astore.close()

    assert no_summaries(asyncio.run(go())) == no_summaries(text)
    assert tables(dst) == tables(ref)


@pytest.mark.slow
def test_import_killed_then_rerun(
    rich: tuple[str, dict[str, uuid.UUID], str], new_database: Callable[[], str], tmp_path: Path
) -> None:
    """SIGKILL the importing process at once, then after its first session, then run it
    again to the end: the database is the one a single import gives."""
    src, _sids, text = rich
    # more sessions, so that a kill lands between two
    with shardstore.connect(src, **SMALL) as a:
        for n in range(6):
            extra = a.create_session(TENANT, f"s{n}")
            a.append_turns(extra, [say(i) for i in range(300)])
            a.checkpoint(extra, {"n": n})
        a.drain_folds()
        text = export(a)
    path = tmp_path / "export.jsonl"
    path.write_text(text)
    dst = new_database()
    args = [
        sys.executable,
        "-m",
        "shardstore",
        "--dsn",
        dst,
        "import",
        "jsonl",
        str(path),
        "--on-existing",
        "skip",
        "--quiet",
    ]
    with psycopg.connect(dst, autocommit=True) as conn:
        for wait_for in (0, 1, 3):
            proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            deadline = time.monotonic() + 120
            while proc.poll() is None and time.monotonic() < deadline:
                (n,) = conn.execute("SELECT count(*) FROM shardstore.sessions").fetchone()  # type: ignore[misc]
                if n >= wait_for:
                    break
                time.sleep(0.005)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            # every session is whole or absent
            for (sid,) in conn.execute("SELECT session_id FROM shardstore.sessions").fetchall():
                (cps,) = conn.execute(  # type: ignore[misc]
                    "SELECT count(*) FROM shardstore.checkpoints WHERE session_id = %s", (sid,)
                ).fetchone()
                assert cps > 0, sid
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()
    ref = new_database()
    with shardstore.connect(ref) as b:  # the CLI's settings
        b.import_jsonl(io.StringIO(text))
    assert tables(dst) == tables(ref)
