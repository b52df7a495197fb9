"""The ``shardstore`` command line, run in-process against a real PostgreSQL."""

from __future__ import annotations

import argparse
import io
import itertools
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from shardstore.cli import build_parser, main
from shardstore.demo import synthetic


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def json_lines(self) -> list[Any]:
        return [json.loads(line) for line in self.out.splitlines()]


Cli = Callable[..., Result]


@pytest.fixture
def cli(dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``cli("tail", sid, stdin=...)`` runs ``main(["--dsn", dsn, ...])`` and captures it."""

    def run(*argv: str, stdin: str | None = None) -> Result:
        capsys.readouterr()  # drop anything printed before
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        rc = main(["--dsn", dsn, *argv])
        captured = capsys.readouterr()
        return Result(rc, captured.out, captured.err)

    return run


def _new_session(cli: Cli, tenant: str = "acme") -> str:
    result = cli("create-session", "--tenant", tenant, "--subject", "user:1")
    assert result.rc == 0, result.err
    sid = result.out.strip()
    assert str(uuid.UUID(sid)) == sid
    return sid


USER = {"role": "user", "content": "where is the config file?"}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "list_directory", "arguments": '{"path": "/etc"}'},
        }
    ],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "hosts\npasswd\nshardstore.toml"}


@pytest.mark.slow
def test_append_then_read_back_in_text_and_json(cli: Cli) -> None:
    sid = _new_session(cli)

    first = cli("append", sid, json.dumps(USER), "--key", "m-1", "--json")
    assert first.rc == 0, first.err
    assert first.json() == {
        "turn_seq": 0,
        "chunk_seq": 0,
        "tokens": first.json()["tokens"],
        "duplicate": False,
    }
    assert first.json()["tokens"] > 0

    again = cli("append", sid, json.dumps(USER), "--key", "m-1", "--json")
    assert again.rc == 0
    assert again.json() == {**first.json(), "duplicate": True}

    batch = cli("append", sid, "-", "--json", stdin=json.dumps([CALL, RESULT]))
    assert batch.rc == 0, batch.err
    assert [r["turn_seq"] for r in batch.json()] == [1, 2]

    text = cli("append", sid, "--role", "assistant", "--content", "It is /etc/shardstore.toml.")
    assert text.rc == 0, text.err
    assert text.out.startswith("turn 3  chunk 0  ")

    stdin_plain = cli("append", sid, stdin=json.dumps({"role": "user", "content": "thanks"}))
    assert stdin_plain.rc == 0, stdin_plain.err
    assert stdin_plain.out.startswith("turn 4  ")

    expected = [
        USER,
        CALL,
        RESULT,
        {"role": "assistant", "content": "It is /etc/shardstore.toml."},
        {"role": "user", "content": "thanks"},
    ]

    # history --json: one JSON object per line, every turn exactly as appended
    history = cli("history", sid, "--json")
    assert history.rc == 0, history.err
    turns = history.json_lines()
    assert [t["message"] for t in turns] == expected
    assert [t["turn_seq"] for t in turns] == [0, 1, 2, 3, 4]
    assert {t["chunk_seq"] for t in turns} == {0}
    assert turns[0]["idempotency_key"] == "m-1"
    assert turns[0]["tokens"] == first.json()["tokens"]
    assert all(t["tokens"] > 0 and t["created_at"] for t in turns)

    window = cli("history", sid, "--from", "1", "--to", "3", "--json").json_lines()
    assert [t["turn_seq"] for t in window] == [1, 2]

    # tail: JSON document, and the newest-first window never starts with a cut-off tool result
    tail = cli("tail", sid, "-n", "3", "--json")
    assert tail.rc == 0
    assert tail.json()["session_id"] == sid
    assert [t["message"] for t in tail.json()["turns"]] == expected[2:][1:]  # drops RESULT
    tail4 = cli("tail", sid, "-n", "4", "--json").json()["turns"]
    assert [t["turn_seq"] for t in tail4] == [1, 2, 3, 4]
    budget = turns[3]["tokens"] + turns[4]["tokens"]
    by_tokens = cli("tail", sid, "--max-tokens", str(budget), "--json").json()["turns"]
    assert [t["turn_seq"] for t in by_tokens] == [3, 4]

    tail_text = cli("tail", sid, "-n", "4")
    lines = tail_text.out.splitlines()
    assert lines[0].split() == ["turn", "chunk", "tokens", "created", "(UTC)", "role", "content"]
    assert len(lines) == 5
    assert '→ list_directory({"path": "/etc"})' in lines[1]
    assert "hosts passwd shardstore.toml" in lines[2]  # newlines folded in the summary
    assert lines[4].split()[:3] == ["4", "0", str(turns[4]["tokens"])]
    assert lines[4].endswith("user       thanks")

    full = cli("tail", sid, "-n", "2", "--full").out
    assert "── turn 3 · chunk 0 ·" in full and "It is /etc/shardstore.toml." in full

    history_text = cli("history", sid).out.splitlines()
    assert len(history_text) == 6 and "where is the config file?" in history_text[1]

    # chunks: everything is still in the one open chunk
    chunks = cli("chunks", sid, "--json")
    assert chunks.rc == 0
    (chunk,) = chunks.json()["chunks"]
    assert chunk["chunk_seq"] == 0 and chunk["is_open"] is True
    assert (chunk["first_turn_seq"], chunk["last_turn_seq"], chunk["turn_count"]) == (0, 4, 5)
    assert chunk["token_count"] == sum(t["tokens"] for t in turns)
    assert chunk["byte_count"] > 0
    chunk_text = cli("chunks", sid).out.splitlines()
    assert chunk_text[0].split()[:3] == ["chunk", "turn", "range"]
    assert chunk_text[1].split()[:3] == ["0", "0-4", "5"] and chunk_text[1].endswith("open")

    # session and stats
    info = cli("session", sid, "--json").json()
    assert (info["tenant_id"], info["subject_id"], info["agent_id"]) == ("acme", "user:1", None)
    assert info["turn_count"] == 5 and info["purged"] is False

    stats = cli("--json", "stats")
    assert stats.rc == 0
    doc = stats.json()
    assert (doc["sessions"], doc["turns"]) == (1, 5)
    assert doc["partition_interval_seconds"] == 7 * 86400
    assert doc["chunks"] == sum(p["rows"] for p in doc["partitions"])
    assert 0 <= doc["buffered_turns"] <= 5
    assert doc["partitions"], "connect() premakes partitions"
    stats_text = cli("stats").out
    assert "sessions            1" in stats_text and "turns               5" in stats_text
    assert "partition interval  7 days" in stats_text
    assert doc["partitions"][0]["name"] in stats_text


def test_create_session_options_and_idempotency(cli: Cli) -> None:
    fixed = str(uuid.uuid4())
    args = [
        "create-session",
        "--tenant",
        "t1",
        "--agent",
        "bot",
        "--session-id",
        fixed,
        "--metadata",
        '{"team": "search"}',
    ]
    made = cli(*args, "--json")
    assert made.rc == 0 and made.json() == {"session_id": fixed}
    assert cli(*args).out.strip() == fixed  # repeating is idempotent
    info = cli("session", fixed, "--json").json()
    assert info["metadata"] == {"team": "search"} and info["agent_id"] == "bot"

    conflict = cli("create-session", "--tenant", "other", "--session-id", fixed)
    assert conflict.rc == 2
    assert conflict.err.startswith("error: session ") and "already exists" in conflict.err


@pytest.mark.slow
def test_demo_stores_a_long_conversation(cli: Cli) -> None:
    result = cli("demo", "--turns", "200", "--seed", "5", "--keep")
    assert result.rc == 0, result.err
    out = result.out
    assert "appended     200 turns" in out
    assert "identical to what was appended" in out
    assert "tail (newest" in out
    assert "chunks (" in out and "sealed" in out
    assert "partitions of agent_history (every 7 days" in out
    assert "agent_history_p" in out
    # the recall part: a short session embedded with MiniLM, a fact found by a paraphrase
    from shardstore.demo import DEMO_FACTS, DEMO_QUESTION

    memory = re.search(r"of a (\d+)-turn session", out)
    assert memory, out
    assert repr(DEMO_QUESTION) in out and "1. score" in out
    assert DEMO_FACTS[0][:40] in out

    stats = cli("stats", "--json").json()
    assert (stats["sessions"], stats["turns"]) == (2, 200 + int(memory.group(1)))
    assert stats["chunks"] >= 1
    plain = cli("demo", "--turns", "20", "--tenant", "t3", "--no-search", "--keep")
    assert plain.rc == 0 and "search (" not in plain.out

    doc = cli(
        "demo",
        "--turns",
        "200",
        "--seed",
        "5",
        "--tenant",
        "t2",
        "--batch",
        "7",
        "--json",
        "--keep",
    ).json()
    assert doc["turns"] == 200 and doc["history"] == {
        "turns": 200,
        "identical": True,
        "seconds": doc["history"]["seconds"],
    }
    chunks = doc["chunks"]
    assert len(chunks) >= 5  # ~80k tokens at ~8k tokens per chunk
    assert sum(c["turn_count"] for c in chunks) == 200
    assert sum(c["token_count"] for c in chunks) == doc["tokens"]
    for before, after in itertools.pairwise(chunks):
        assert after["first_turn_seq"] == before["last_turn_seq"] + 1
        assert after["chunk_seq"] == before["chunk_seq"] + 1
    assert all(not c["is_open"] for c in chunks[:-1])
    # only chunks holding the newest default_tail_turns turns at the last seal stay buffered
    newer = 0
    for c in reversed(chunks[:-1]):
        assert c["partition"] or newer < 20, c
        newer += c["turn_count"]
    assert doc["tail"][-1]["turn_seq"] == 199
    assert doc["tail"][-1]["message"] == synthetic.messages(5, 200)[-1]
    assert doc["tokens_per_second"] > 0 and doc["append_latency_ms"]["p50"] > 0
    assert sum(p["rows"] for p in doc["partitions"]) == cli("stats", "--json").json()["chunks"]

    # the demo session's history is exactly the synthetic conversation
    history = cli("history", doc["session_id"], "--json").json_lines()
    assert [t["message"] for t in history] == synthetic.messages(5, 200)
    assert cli("stats", "--json").json()["turns"] == 420 + int(memory.group(1))  # + --no-search run


@pytest.mark.slow
def test_demo_cleans_up_and_says_what_it_left(cli: Cli) -> None:
    result = cli("demo", "--turns", "30", "--tenant", "t4")
    assert result.rc == 0, result.err
    out = result.out
    assert "what the demo left" in out
    purged = re.search(r"purged\s+the 30-turn session (\S+) ", out)
    kept = re.search(r"kept\s+session (\S+) \((\d+) turns, embedded\)", out)
    assert purged and kept, out
    assert re.search(r"embedding\s+nothing queued", out), out
    assert "shardstore purge tenant --tenant t4 --yes" in out
    # purged: nothing of it is left to embed
    assert re.search(r"purged\s+yes", cli("session", purged.group(1)).out)
    assert re.search(r"purged\s+no", cli("session", kept.group(1)).out)
    hits = cli("search", "refund reference", "--tenant", "t4", "-k", "1", "--json").json()
    assert hits and hits[0]["session_id"] == kept.group(1)
    # the same with --json: nothing kept without the search part; one command removes it all
    doc = cli("demo", "--turns", "10", "--tenant", "t5", "--json").json()
    left = doc["left"]
    assert left["purged"] == {"session_id": doc["session_id"], "turns": 10}
    assert left["kept"] == [] and left["embedding_backlog"] == 0
    assert left["remove_command"] == "shardstore purge tenant --tenant t5 --yes"
    assert cli("purge", "tenant", "--tenant", "t4", "--yes").rc == 0
    assert re.search(r"purged\s+yes", cli("session", kept.group(1)).out)


@pytest.mark.slow
def test_errors_exit_with_distinct_statuses(cli: Cli) -> None:
    """4 not found, 2 bad input or usage (the documented exit codes)."""
    unknown = str(uuid.uuid4())
    for argv in (
        ["tail", unknown],
        ["history", unknown],
        ["chunks", unknown],
        ["session", unknown],
        ["append", unknown, json.dumps(USER)],
    ):
        result = cli(*argv)
        assert result.rc == 4, argv
        assert result.err == f"error: session {unknown} does not exist\n", argv
        assert result.out == ""

    sid = _new_session(cli)
    bad_json = cli("append", sid, "{'role': 'user'}")
    assert bad_json.rc == 2
    assert bad_json.err.startswith("error: the message is not valid JSON")
    not_object = cli("append", sid, "[1, 2]")
    assert not_object.rc == 2 and not_object.err.startswith("error: ")
    no_role = cli("append", sid, '{"content": "hi"}')
    assert no_role.rc == 2 and "role" in no_role.err
    empty_stdin = cli("append", sid, stdin="")
    assert empty_stdin.rc == 2 and "no message given" in empty_stdin.err
    both = cli("append", sid, json.dumps(USER), "--content", "x")
    assert both.rc == 2
    bad_id = cli("tail", "not-a-uuid")
    assert bad_id.rc == 2 and "UUID" in bad_id.err
    assert cli("stats", "--json").json()["turns"] == 0  # nothing was written

    # usage errors are argparse's (status 2)
    assert cli("create-session").rc == 2
    assert cli("tail", sid, "-n", "0").rc == 2
    assert cli("no-such-command").rc == 2
    assert main([]) == 2


def test_unreachable_database_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "--dsn",
            "postgresql://nobody@/x?host=/nonexistent-dir",
            "--connect-timeout",
            "0.5",
            "stats",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 6  # database unavailable (retryable)
    assert err.startswith("error: cannot connect to the database") and "Traceback" not in err


def test_version_and_json_errors(capsys: pytest.CaptureFixture[str]) -> None:
    import shardstore
    from shardstore.cli.app import exit_code

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("shardstore ")
    unreachable = "postgresql://nobody@/x?host=/nonexistent-dir"
    assert main(["stats", "--json", "--dsn", unreachable, "--connect-timeout", "0.5"]) == 6
    error = json.loads(capsys.readouterr().err)["error"]
    assert error["type"] == "DatabaseUnavailable" and error["retryable"] is True
    assert error["exit_code"] == 6 and "cannot connect" in error["message"]
    # the table of exit codes, one error of each kind
    assert exit_code(shardstore.InvalidInput("x")) == 2
    assert exit_code(shardstore.SessionConflict("x")) == 2
    assert exit_code(shardstore.RunClosed("x")) == 2
    assert exit_code(shardstore.RunNotFound("x")) == 4
    assert exit_code(shardstore.CheckpointNotFound("x")) == 4
    assert exit_code(shardstore.SessionNotFound("x")) == 4
    assert exit_code(shardstore.SessionPurged("x")) == 5
    assert exit_code(shardstore.DatabaseUnavailable("x")) == 6
    assert exit_code(shardstore.Conflict("x")) == 7
    assert exit_code(shardstore.DatabaseError("x")) == 1


def test_init_reports_schema_and_fixes_partition_interval(cli: Cli) -> None:
    doc = cli("init", "--partition-interval", "1 day", "--json").json()
    assert doc["schema_version"] >= 1
    assert doc["partition_interval_seconds"] == 86400
    bounds = [(p["lower"], p["upper"]) for p in doc["partitions"]]
    assert len(bounds) >= 5  # the current one and the premade ones
    assert all(lo < hi for lo, hi in bounds)

    text = cli("init")
    assert text.rc == 0
    assert "partition interval  1 day" in text.out and "schema" in text.out
    changed = cli("init", "--partition-interval", "7 days")
    assert changed.rc == 2 and "cannot change" in changed.err
    bad = cli("init", "--partition-interval", "soon")
    assert bad.rc == 2 and "cannot read interval" in bad.err


@pytest.mark.slow
def test_python_dash_m_runs_the_cli(dsn: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "shardstore", "--dsn", dsn, "stats", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["sessions"] == 0


def _command_parsers(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every parser of the command tree below ``parser``, nested ones included, by path."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(((*path, name), sub))
                found.extend(_command_parsers(sub, (*path, name)))
    return found


def test_global_options_are_accepted_after_every_command() -> None:
    commands = _command_parsers(build_parser())
    paths = {path for path, _ in commands}
    assert {("stats",), ("purge",), ("purge", "session"), ("purge", "before")} <= paths
    for path, sub in commands:
        options = {opt for action in sub._actions for opt in action.option_strings}
        assert {"--dsn", "--json", "--connect-timeout"} <= options, path


@pytest.mark.parametrize(
    ("argv", "dsn", "as_json", "timeout"),
    [
        (["stats"], None, False, 10.0),
        (["--dsn", "A", "--json", "--connect-timeout", "3", "stats"], "A", True, 3.0),
        (["stats", "--dsn", "B", "--json", "--connect-timeout", "4"], "B", True, 4.0),
        (["--dsn", "A", "stats", "--dsn", "B"], "B", False, 10.0),  # the later one wins
        (["purge", "session", "S", "--connect-timeout", "5"], None, False, 5.0),
        (["purge", "before", "30 days", "--dsn", "D", "--json"], "D", True, 10.0),
        (["purge", "--json", "tenant", "--tenant", "t", "--dsn", "D"], "D", True, 10.0),
        (
            [
                *("--dsn", "A", "--json", "--connect-timeout", "2"),
                *("purge", "range", "S", "--before-turn", "1"),
            ],
            "A",
            True,
            2.0,
        ),
        (["maintain", "--dry-run", "--connect-timeout", "1.5", "--dsn", "M"], "M", False, 1.5),
    ],
)
def test_global_options_before_or_after_nested_commands(
    argv: list[str], dsn: str | None, as_json: bool, timeout: float
) -> None:
    args = build_parser().parse_args(argv)
    assert (args.dsn, args.json, args.connect_timeout) == (dsn, as_json, timeout)


def test_global_options_after_the_command_reach_the_database(
    dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["stats", "--json", "--dsn", dsn, "--connect-timeout", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["sessions"] == 0
    unreachable = "postgresql://nobody@/x?host=/nonexistent-dir"
    rc = main(["--connect-timeout", "0.5", "stats", "--dsn", unreachable])
    assert rc == 6 and capsys.readouterr().err.startswith("error: cannot connect")


# ---------------------------------------------------------------- synthetic conversations


def test_synthetic_conversation_is_deterministic_and_well_formed() -> None:
    first = synthetic.messages(11, 600)
    assert first == synthetic.messages(11, 600)
    assert synthetic.messages(11, 50) == first[:50]
    assert synthetic.messages(12, 600) != first
    assert len(first) == 600 and synthetic.messages(3, 0) == []
    assert first[0]["role"] == "system"
    assert {m["role"] for m in first[1:]} == {"user", "assistant", "tool"}

    ids: set[str] = set()
    i = 0
    while i < len(first):
        message = first[i]
        i += 1
        if message["role"] == "tool":
            pytest.fail(f"tool message {i - 1} does not follow its call")
        calls = message.get("tool_calls")
        if not calls:
            continue
        assert message["role"] == "assistant"
        for call in calls:
            assert call["type"] == "function" and call["function"]["name"] in synthetic.TOOL_NAMES
            assert isinstance(json.loads(call["function"]["arguments"]), dict)
            assert call["id"] not in ids
            ids.add(call["id"])
            if i == len(first):
                break  # cut off by the turn limit
            assert first[i] == {
                "role": "tool",
                "tool_call_id": call["id"],
                "content": first[i]["content"],
            }
            i += 1
    assert len(ids) > 50

    sizes = sorted(len(json.dumps(m)) for m in first)
    assert sizes[0] < 200 and sizes[-1] > 8000  # from a few tokens to thousands
    tool_sizes = [len(m["content"]) for m in first if m["role"] == "tool"]
    assert max(tool_sizes) > 5000


# ---------------------------------------------------------------- tail: held-back turns


def test_tail_explained_matches_tail_and_says_what_it_held(dsn: str) -> None:
    import shardstore
    from shardstore.history.pairing import HELD_ORPHAN_RESULT, HELD_OVER_MAX_TOKENS

    with shardstore.connect(dsn) as store:
        sid = store.create_session("acme")
        store.append_turns(sid, [USER, CALL, RESULT])
        for n in (1, 2, 3, 10, None):
            window = store.tail_explained(sid, n=n)
            assert window.turns == store.tail(sid, n=n), n
        held = store.tail_explained(sid, n=1)
        assert held.turns == [] and held.reason == HELD_ORPHAN_RESULT
        assert [t.turn_seq for t in held.held_back] == [2]
        assert store.tail_explained(sid, n=2).held_back == []  # call and result together
        whole = store.tail_explained(sid)
        assert whole.reason is None and len(whole.turns) == 3
        big = store.create_session("acme")
        store.append_turn(big, {"role": "user", "content": "w " * 300})
        over = store.tail_explained(big, max_tokens=10)
        assert over.turns == store.tail(big, max_tokens=10) == []
        assert over.reason == HELD_OVER_MAX_TOKENS and over.held_back[0].turn_seq == 0
        assert over.held_back[0].tokens > 10
        empty = store.create_session("acme")
        assert store.tail_explained(empty, max_tokens=10) == shardstore.TailWindow([])
        with pytest.raises(shardstore.SessionNotFound):
            store.tail_explained(uuid.uuid4())
        with pytest.raises(shardstore.InvalidInput):
            store.tail_explained(sid, n=0)


@pytest.mark.slow
def test_tail_says_why_turns_were_held_back(cli: Cli) -> None:
    sid = _new_session(cli)
    assert cli("append", sid, json.dumps([USER, CALL, RESULT])).rc == 0
    text = cli("tail", sid, "-n", "1")
    assert text.rc == 0
    lines = text.out.splitlines()
    assert lines[0].split()[:2] == ["turn", "chunk"] and len(lines) == 2
    assert lines[1] == (
        "held back 1 turn: a tool result whose call is outside the window "
        "(use -n/--max-tokens to widen the window, or --show-held to show it)"
    )
    doc = cli("tail", sid, "-n", "1", "--json").json()
    assert doc["turns"] == []
    assert doc["held_back"] == {
        "count": 1,
        "reason": "orphan_tool_result",
        "message": lines[1],
        "turn_seqs": [2],
    }
    shown = cli("tail", sid, "-n", "1", "--show-held")
    assert shown.out.splitlines()[1].split()[0] == "2"  # turn 2 is printed
    assert shown.out.splitlines()[-1].endswith("(shown with --show-held)")
    shown_json = cli("tail", sid, "-n", "1", "--show-held", "--json").json()
    assert shown_json["turns"] == [] and shown_json["held_back"]["turns"][0]["message"] == RESULT
    # nothing held back: no note, and held_back is null
    plain = cli("tail", sid, "-n", "2")
    assert "held back" not in plain.out and len(plain.out.splitlines()) == 3
    assert cli("tail", sid, "--json").json()["held_back"] is None
    # the newest turn alone over --max-tokens
    over = cli("tail", sid, "--max-tokens", "3")
    assert over.rc == 0 and "held back 1 turn: the newest turn alone has" in over.out
    assert "over --max-tokens (raise --max-tokens, or --show-held to show it)" in over.out
    assert cli("tail", sid, "--max-tokens", "3", "--json").json()["held_back"]["reason"] == (
        "over_max_tokens"
    )


# ---------------------------------------------------------------- issue 15, point 8


def test_refused_connection_reason_is_printed_once(capsys: pytest.CaptureFixture[str]) -> None:
    dsn = "postgresql://nobody@/x?host=/nonexistent-dir"
    assert main(["--dsn", dsn, "--connect-timeout", "0.5", "stats"]) == 6
    err = capsys.readouterr().err
    assert err.count("No such file or directory") == 1, err
    assert err.count("\n") == 1 and err.startswith("error: cannot connect to the database")


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_connect_timeout_must_be_positive_at_parse_time(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    unreachable = "postgresql://nobody@/x?host=/nonexistent-dir"
    assert main(["--dsn", unreachable, "--connect-timeout", value, "stats"]) == 2
    assert "--connect-timeout" in capsys.readouterr().err
    assert main(["stats", "--dsn", unreachable, "--connect-timeout", value]) == 2
    assert "--connect-timeout" in capsys.readouterr().err


def test_init_refuses_an_interval_change_in_cli_terms(cli: Cli) -> None:
    assert cli("init", "--partition-interval", "1 day").rc == 0
    same = cli("init", "--partition-interval", "24h")
    assert same.rc == 0
    changed = cli("init", "--partition-interval", "7 days")
    assert changed.rc == 2
    assert changed.err == (
        "error: this database partitions every 1 day; --partition-interval 7 days cannot "
        "change it once partitions exist (run init without --partition-interval to keep "
        "the recorded one)\n"
    )
    doc = json.loads(cli("init", "--partition-interval", "1 hour", "--json").err)
    assert doc["error"]["type"] == "ConfigurationError" and doc["error"]["exit_code"] == 2


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.slow
def test_append_hints_at_a_terminal_and_says_when_nothing_was_appended(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = _new_session(cli)
    monkeypatch.setattr(sys, "stdin", _Terminal(json.dumps(USER)))
    typed = cli("append", sid)
    assert typed.rc == 0 and typed.out.startswith("turn 0")
    assert "reading the message from stdin" in typed.err and "Ctrl-D" in typed.err
    piped = cli("append", sid, stdin=json.dumps(USER))  # not a terminal: no hint
    assert piped.rc == 0 and piped.err == ""
    empty = cli("append", sid, "[]")
    assert empty.rc == 0 and empty.out == "appended nothing: the array is empty\n"
    assert cli("append", sid, "[]", "--json").json() == []
    assert cli("stats", "--json").json()["turns"] == 2
