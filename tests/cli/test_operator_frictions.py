"""The command-line frictions a new user met (issue 37, section 2), each held by a test: one
time parser for every time option, argument errors as JSON under ``--json``, hints in the
CLI's own terms, clear errors instead of tracebacks, and output that says why it is empty
or short. Run in-process (``main([...])``) against a real PostgreSQL."""

from __future__ import annotations

import io
import json
import re
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from shardstore.cli import main


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def error(self) -> dict[str, Any]:
        """The one JSON error object on stderr (``--json``)."""
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, self.err
        doc = json.loads(lines[0])
        assert set(doc) == {"error"}, doc
        assert set(doc["error"]) == {"type", "message", "exit_code", "retryable"}, doc
        error: dict[str, Any] = doc["error"]
        return error


Cli = Callable[..., Result]


@pytest.fixture
def cli(dsn: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """``cli("tail", sid, stdin=...)`` runs ``main(["--dsn", dsn, ...])`` and captures it."""

    def run(*argv: str, stdin: str | None = None) -> Result:
        capsys.readouterr()
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        rc = main(["--dsn", dsn, *argv])
        captured = capsys.readouterr()
        return Result(rc, captured.out, captured.err)

    return run


def _session(cli: Cli, tenant: str = "acme") -> str:
    made = cli("create-session", "--tenant", tenant)
    assert made.rc == 0, made.err
    return made.out.strip()


def _append(cli: Cli, sid: str, *messages: dict[str, Any]) -> None:
    done = cli("append", sid, json.dumps(list(messages)))
    assert done.rc == 0, done.err


def _count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(f"SELECT count(*) FROM shardstore.{table}").fetchone()
    assert row is not None
    return int(row[0])


# ---------------------------------------------------------------- 8. one time parser


# every time option of the command line, as (argv before TIME, argv after it)
TIME_OPTIONS: list[tuple[list[str], list[str]]] = [
    (["search", "anything", "--tenant", "acme", "--mode", "text", "--since"], []),
    (["search", "anything", "--tenant", "acme", "--mode", "text", "--until"], []),
    (["sessions", "--since"], []),
    (["facts", "--tenant", "acme", "--subject", "user:1", "--as-of"], []),
    (["purge", "before"], ["--dry-run"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("text", ["2030-01-01", "7 days", "2026-01-31T12:00:00+01:00", "90s"])
def test_every_time_option_takes_the_same_forms(cli: Cli, text: str) -> None:
    sid = _session(cli)
    _append(cli, sid, {"role": "user", "content": "hello"})
    options = [*TIME_OPTIONS, (["purge", "range", sid, "--dry-run", "--before"], [])]
    for before, after in options:
        result = cli(*before, text, *after)
        assert result.rc == 0, (before, text, result.err)


def test_every_time_option_refuses_the_same_way(cli: Cli) -> None:
    for before, after in [*TIME_OPTIONS, (["purge", "range", str(uuid.uuid4()), "--before"], [])]:
        result = cli(*before, "last tuesday", *after, "--json")
        assert result.rc == 2, (before, result.err)
        error = result.error()
        assert error["type"] == "UsageError" and error["exit_code"] == 2
        assert "cannot read time 'last tuesday'" in error["message"], error
        assert "'90 days'" in error["message"]  # says what it takes


@pytest.mark.slow
def test_search_since_and_until_filter_by_the_parsed_time(cli: Cli) -> None:
    sid = _session(cli)
    _append(cli, sid, {"role": "user", "content": "the staging port is 8443"})
    common = ["search", "staging port", "--tenant", "acme", "--mode", "text", "--json"]
    assert len(cli(*common, "--since", "1 hour").json()) == 1
    assert cli(*common, "--since", "2999-01-01").json() == []
    assert cli(*common, "--until", "1 hour").json() == []
    assert len(cli(*common, "--until", "2999-01-01").json()) == 1


# ---------------------------------------------------------------- 10. --json argument errors


@pytest.mark.parametrize(
    "argv",
    [
        ["--json", "no-such-command"],
        ["tail", "--json"],  # a required positional missing
        ["tail", str(uuid.uuid4()), "-n", "0", "--json"],  # a bad value
        ["--json", "search", "q", "--mode", "telepathy"],  # not a choice
        ["purge", "range", str(uuid.uuid4()), "--json"],  # a required group missing
        ["sessions", "--no-such-option", "--json"],
    ],
)
def test_json_covers_argument_errors(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    captured = capsys.readouterr()
    result = Result(2, captured.out, captured.err)
    assert result.out == ""
    error = result.error()
    assert error["type"] == "UsageError" and error["exit_code"] == 2
    assert error["retryable"] is False and error["message"].startswith("shardstore")
    assert "usage:" not in result.err


def test_argument_errors_without_json_keep_argparse_usage_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    capsys.readouterr()
    assert main(["tail"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: shardstore tail")
    assert "shardstore tail: error: the following arguments are required" in err
    # after "--" the word is an argument, not the option: no JSON
    assert main(["tail", "--", "--json", "extra"]) == 2
    assert "usage:" in capsys.readouterr().err


# ---------------------------------------------------------------- 9. hints in the CLI's terms

# Python spellings no CLI error may show (the library's own wording, for API users)
PYTHON_HINTS = ("on_existing=", "artifacts=", "configure_text_search(", "embedding_model=")


def _cli_error(result: Result) -> str:
    assert result.rc != 0 and result.out == "", result
    message = result.error()["message"]
    assert isinstance(message, str)
    assert not any(hint in message for hint in PYTHON_HINTS), message
    return message


def test_text_search_off_names_the_text_search_command(cli: Cli) -> None:
    assert cli("text-search", "--off").rc == 0
    result = cli("search", "anything", "--tenant", "acme", "--mode", "text", "--json")
    message = _cli_error(result)
    assert result.rc == 2 and "'shardstore text-search --language english'" in message


@pytest.mark.slow
def test_another_embedding_model_names_the_model_flag(cli: Cli, dsn: str) -> None:
    # the database records a model (as its first embedding would), then a search asks for
    # another one: refused at connect, before any model is loaded
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT shardstore.vec_configure_v2('all-MiniLM-L6-v2', 384, 256, false)")
    result = cli("search", "q", "--tenant", "acme", "--model", "other/model", "--json")
    message = _cli_error(result)
    assert result.rc == 2 and result.error()["type"] == "EmbeddingModelMismatch"
    assert "Leave --model out" in message
    assert "shardstore reembed --model other/model" in message


def test_import_of_an_existing_session_names_the_on_existing_flag(cli: Cli, tmp_path: Any) -> None:
    sid = _session(cli)
    _append(cli, sid, {"role": "user", "content": "hi"})
    path = tmp_path / "export.jsonl"
    assert cli("export", sid, "-o", str(path), "--quiet").rc == 0
    message = _cli_error(cli("import", "jsonl", str(path), "--quiet", "--json"))
    assert "--on-existing skip leaves it as it is" in message
    assert cli("import", "jsonl", str(path), "--quiet", "--on-existing", "skip").rc == 0


def test_artifact_backend_errors_name_the_store_flag(cli: Cli, tmp_path: Any) -> None:
    bogus = cli("artifacts", "--store", "ftp://x", "ls", "--tenant", "acme", "--json")
    assert bogus.rc == 2 and _cli_error(bogus).startswith("--store 'ftp://x': use 'postgres'")
    relative = cli("artifacts", "--store", "file://relative/dir", "ls", "--tenant", "a", "--json")
    assert relative.rc == 2 and _cli_error(relative).startswith("--store 'file://relative/dir'")
    # an artifact kept in a directory, read through the database backend
    data = tmp_path / "data.bin"
    data.write_bytes(b"payload")
    store = f"file://{tmp_path / 'objects'}"
    put = cli("artifacts", "--store", store, "put", str(data), "--tenant", "acme", "--json")
    assert put.rc == 0, put.err
    artifact = put.json()["artifact_id"]
    wrong = cli("artifacts", "get", artifact, "--tenant", "acme", "--json")
    assert wrong.rc == 2 and "give --store pointing at it" in _cli_error(wrong)


def test_sessions_before_an_unknown_session_names_the_flag(cli: Cli) -> None:
    unknown = str(uuid.uuid4())
    result = cli("sessions", "--before", unknown, "--json")
    assert result.rc == 4
    assert _cli_error(result) == f"session {unknown} (given as --before) does not exist"


@pytest.mark.slow
def test_rewind_refusals_name_the_to_flag(cli: Cli) -> None:
    sid = _session(cli)
    _append(cli, sid, {"role": "user", "content": "one"})
    result = cli("rewind", sid, "--to", "5", "--json")
    assert result.rc == 2
    assert _cli_error(result).startswith(f"--to 5 is past the end: session {sid} has 1 turn ")
    done = cli("rewind", sid, "--to", "1")
    assert done.rc == 0 and done.out.strip() == "nothing to remove: the session has 1 turn"


def test_the_library_keeps_its_python_wording(make_store: Callable[..., Any]) -> None:
    """The same errors raised through the Python API name the Python arguments."""
    import shardstore

    store = make_store()
    store.configure_text_search(None)
    with pytest.raises(shardstore.ConfigurationError) as off:
        store.search("anything", tenant_id="acme", mode="text")
    assert "store.configure_text_search('english')" in str(off.value)
    assert "shardstore text-search" in str(off.value.cli_message)
    with pytest.raises(shardstore.SessionNotFound) as before:
        store.sessions(before=uuid.uuid4())
    assert "(given as before=)" in str(before.value)


# ---------------------------------------------------------------- 7. artifacts put, no file


@pytest.mark.parametrize("as_json", [False, True])
def test_artifacts_put_of_a_missing_file_is_a_usage_error(
    cli: Cli, dsn: str, tmp_path: Any, as_json: bool
) -> None:
    missing = tmp_path / "no-such-file.bin"
    for path in (missing, tmp_path):  # a missing file, a directory
        result = cli("artifacts", "put", str(path), "--tenant", "acme", *(["--json"] * as_json))
        assert result.rc == 2 and result.out == ""
        assert "Traceback" not in result.err and "unexpected" not in result.err
        message = result.error()["message"] if as_json else result.err
        assert f"cannot open FILE '{path}'" in message, message
        if not as_json:
            assert result.err.startswith("error: cannot open FILE")
    assert _count(dsn, "artifacts") == 0  # nothing written


# ---------------------------------------------------------------- 13. no text hits


@pytest.mark.slow
def test_text_search_without_hits_does_not_suggest_embedding(cli: Cli) -> None:
    sid = _session(cli)
    _append(cli, sid, {"role": "user", "content": "the staging port is 8443"})
    found = cli("search", "staging port", "--tenant", "acme", "--mode", "text")
    assert found.rc == 0 and "1. score" in found.out
    none = cli("search", "kubernetes", "--tenant", "acme", "--mode", "text")
    assert none.rc == 0
    assert none.out.startswith("no matches: no turn in this scope has these words")
    assert "embed" not in none.out and "shardstore text-search" in none.out


# ---------------------------------------------------------------- 12, 14. the demo


class _Events:
    """What a command wrote to stdout and stderr, in one list in the order written."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str]] = []

    def stream(self, name: str, *, tty: bool) -> io.StringIO:
        events = self

        class Stream(io.StringIO):
            def write(self, text: str) -> int:
                events.writes.append((name, text))
                return super().write(text)

            def isatty(self) -> bool:
                return tty

        return Stream()

    def first(self, name: str, text: str) -> int:
        return next(i for i, (n, t) in enumerate(self.writes) if n == name and text in t)


def _demo(dsn: str, *argv: str) -> tuple[int, _Events, str]:
    from shardstore.cli.app import Runner, build_parser
    from shardstore.cli.commands.demo import cmd_demo

    events = _Events()
    out = events.stream("out", tty=False)
    err = events.stream("err", tty=True)  # the progress bar draws, as at a terminal
    run = Runner(build_parser().parse_args(["--dsn", dsn, "demo", *argv]), out, err)
    rc = cmd_demo(run)
    return rc, events, out.getvalue()


def test_demo_prints_its_header_before_the_append_bar(dsn: str) -> None:
    rc, events, out = _demo(dsn, "--turns", "30", "--no-search")
    assert rc == 0
    header = events.first("out", "database")
    bar = events.first("err", "appending")
    assert header < bar < events.first("out", "append rate")
    assert out.splitlines()[2].startswith("appending    30 synthetic turns, one commit each")
    assert "appended     30 turns" in out  # one key column for the header and the figures


@pytest.mark.slow
def test_demo_no_search_says_nothing_is_left_to_remove(cli: Cli) -> None:
    result = cli("demo", "--turns", "20", "--tenant", "fresh", "--no-search")
    assert result.rc == 0, result.err
    assert re.search(r"kept\s+nothing of this run", result.out), result.out
    assert "fresh holds no session now: nothing to remove" in result.out
    assert "purge tenant" not in result.out
    doc = cli("demo", "--turns", "5", "--tenant", "fresh", "--json").json()
    assert doc["left"]["tenant_has_sessions"] is False
    # a tenant that still holds sessions (kept by an earlier run) gets the remove command
    assert cli("demo", "--turns", "5", "--tenant", "fresh", "--no-search", "--keep").rc == 0
    again = cli("demo", "--turns", "5", "--tenant", "fresh", "--no-search")
    assert re.search(r"kept\s+nothing of this run", again.out), again.out
    assert "shardstore purge tenant --tenant fresh --yes  (every session of tenant fresh)" in (
        again.out
    )


@pytest.mark.slow
def test_demo_says_what_it_does_before_the_model_loads(dsn: str) -> None:
    rc, events, out = _demo(dsn, "--turns", "5")
    assert rc == 0
    loading = events.first("out", "search: loading the embedding model")
    assert loading < events.first("out", "search (")
    assert "-turn session (the first load takes a while on a CPU)…" in out


# ---------------------------------------------------------------- 14. the small ones

CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    ],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}
REPLY = {"role": "assistant", "content": "there is one file, a.txt"}


def test_history_from_past_to_is_refused(cli: Cli) -> None:
    sid = _session(cli)
    _append(cli, sid, *[{"role": "user", "content": str(i)} for i in range(6)])
    result = cli("history", sid, "--from", "5", "--to", "3")
    assert result.rc == 2 and result.out == ""
    assert result.err.startswith("error: --from 5 is past --to 3: the range")
    assert cli("history", sid, "--from", "5", "--to", "3", "--json").error()["exit_code"] == 2
    assert len(cli("history", sid, "--from", "3", "--to", "5", "--json").out.splitlines()) == 2


def test_restore_help_and_text_agree_on_the_token_budget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    capsys.readouterr()
    assert main(["restore", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--max-tokens T" in text and "within T tokens" in text
    assert "MAX_TOKENS" not in text and "--n N" in text


@pytest.mark.slow
def test_restore_says_why_fewer_turns_came_back(cli: Cli) -> None:
    sid = _session(cli)
    _append(cli, sid, {"role": "user", "content": "list the files"}, CALL, RESULT, REPLY)
    # the window of 2 is [tool result, reply]: the result's call is outside it
    held = cli("restore", sid, "--n", "2")
    assert held.rc == 0
    lines = held.out.splitlines()
    assert [line.split()[0] for line in lines[2:-1]] == ["3"]  # the reply alone
    assert lines[0] == "no checkpoint: the newest turns up to now"
    assert lines[-1] == (
        "held back 1 turn: a tool result whose call is before the window, which never opens "
        "on one (use --n/--max-tokens to widen it)"
    )
    doc = cli("restore", sid, "--n", "2", "--json").json()
    assert [t["turn_seq"] for t in doc["turns"]] == [3]
    assert doc["held_back_turn_seqs"] == [2] and doc["note"].startswith("held back 1 turn")
    short = cli("restore", sid, "--n", "10")
    assert short.out.splitlines()[-1] == "4 of --n 10 turns: the history up to now holds no more"
    tight = cli("restore", sid, "--max-tokens", "1")
    assert tight.out.splitlines()[-1] == (
        "no turns: the newest turn up to now alone is over --max-tokens 1"
    )
    whole = cli("restore", sid, "--n", "3")  # [call, result, reply]: nothing to explain
    assert whole.rc == 0 and "held back" not in whole.out and " of --n " not in whole.out


def test_restore_api_reports_what_it_held_back(make_store: Callable[..., Any]) -> None:
    store = make_store()
    sid = store.create_session("acme")
    store.append_turns(sid, [{"role": "user", "content": "list"}, CALL, RESULT, REPLY])
    got = store.restore(sid, n=2)
    assert [t.turn_seq for t in got.turns] == [3]
    assert [t.turn_seq for t in got.held_back] == [2]
    assert store.restore(sid, n=3).held_back == [] and store.restore(sid).held_back == []


@pytest.mark.slow
def test_context_says_why_it_has_no_recent_turns(cli: Cli) -> None:
    sid = _session(cli)
    empty = cli("context", sid, "--max-tokens", "5")
    assert empty.rc == 0
    assert empty.out.splitlines() == [
        "0 of 5 tokens in 0 messages",
        "no recent turns: the session holds none",
    ]
    _append(cli, sid, {"role": "user", "content": "a message of more than five tokens, surely"})
    tight = cli("context", sid, "--max-tokens", "5")
    assert tight.out.splitlines()[-1] == (
        "no recent turns: the newest turn, with the turns it cannot be sent without (the "
        "call a tool result answers), is over --max-tokens 5"
    )
    doc = cli("context", sid, "--max-tokens", "5", "--json").json()
    assert doc["messages"] == [] and doc["note"].startswith("no recent turns")
    fits = cli("context", sid, "--max-tokens", "1000", "--json").json()
    assert fits["note"] is None and len(fits["messages"]) == 1


def test_a_rewound_session_shows_its_last_append_not_a_last_turn(cli: Cli) -> None:
    sid = _session(cli)
    before = cli("session", sid).out
    assert re.search(r"last append\s+-", before), before
    _append(cli, sid, {"role": "user", "content": "one"}, {"role": "user", "content": "two"})
    assert cli("rewind", sid, "--to", "0").rc == 0
    shown = cli("session", sid).out
    # the time of the last append stays (later turns are ordered after it), and it is
    # called what it is
    assert re.search(r"last append\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", shown), shown
    assert "last turn" not in shown
    assert "last append (UTC)" in cli("sessions", "--tenant", "acme").out


def test_the_readme_lists_every_command_group() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## The command line", 1)[1].split("```", 2)[1]
    listed = {line.split()[1] for line in section.splitlines() if line.startswith("shardstore ")}
    wanted = {"fork", "context", "summarize", "artifacts", "import", "export", "distribute"}
    assert wanted <= listed, wanted - listed
