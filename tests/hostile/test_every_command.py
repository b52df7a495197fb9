"""Every CLI command, called with hostile values: each invocation exits with a status from
the CLI's documented set (0, 2-7; never 1, the status of an unexpected exception), prints
no traceback, and a refused invocation writes nothing.

The leaf commands (``purge session``, ``import jsonl``, ``server status``...) and their
options and positionals are enumerated from :func:`shardstore.cli.app.build_parser`, so a
new command fails :func:`test_every_command_has_valid_arguments` until
:func:`valid_args` gives it a valid invocation (or :data:`EXCLUDED` says why it cannot run
in a test). Hypothesis then takes one valid invocation against a loaded store and replaces
ONE argument (an option given or not, a positional, or a global option) with a hostile
value: JSON nested 5,000 levels, 5,000-digit and out-of-range numbers, NaN, dates at year 1
and 9999 at +/-14:00, surrogate-escaped bytes (what argv can carry: NUL cannot be in argv),
empty and 100k-character strings, paths that do not exist or are directories. Where a
command reads JSON or bytes from stdin, a file or a table, the hostile value is that
content instead (NUL, lone surrogates and invalid UTF-8 included). Complements
tests/hostile/test_every_method.py (the Python API) and tests/hostile/test_input_values.py
(helpers)."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

import shardstore
from shardstore.cli import main as cli_main
from shardstore.cli.app import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PURGED,
    EXIT_REJECTED,
    EXIT_UNAVAILABLE,
    EXIT_UNHEALTHY,
    EXIT_USAGE,
    build_parser,
)
from tests.hostile.test_every_method import HOSTILE_HISTORY, HOSTILE_JSON_TEXT, World
from tests.hostile.test_input_values import FIXTURE_OK, db_state

# every status main() documents for a command that did not crash: 1 is "anything else" (an
# unexpected exception, printed with a traceback) and 130 an interrupt; a declined purge
# also exits 1, but every purge here says --yes or --dry-run
DOCUMENTED = {
    EXIT_OK,
    EXIT_USAGE,  # also argparse's own usage errors
    EXIT_UNHEALTHY,
    EXIT_NOT_FOUND,
    EXIT_PURGED,
    EXIT_UNAVAILABLE,
    EXIT_CONFLICT,
    EXIT_REJECTED,  # a --dsn the server or libpq refuses
}

# commands that must not run in a test, with why (everything else is walked)
EXCLUDED = {
    "demo": "writes thousands of synthetic turns and loads (or downloads) an embedding model",
    "server start": "starts the user's embedded Postgres",
    "server stop": "stops the user's embedded Postgres",
    "mcp": "serves until its client closes stdin or it is interrupted;"
    " tests/integrations/test_mcp_server.py sends it hostile arguments through the real MCP client",
    "keys rotate": "needs the global key store, which would make every command of the walk read"
    " the plaintext world as an encrypted store; tests/encryption/test_rotation.py"
    "::test_the_keys_commands gives it bad arguments",
    "keys rotate-kek": "needs the global key store (as keys rotate);"
    " tests/encryption/test_rotation.py::test_the_keys_commands runs it",
}
# options never given a hostile value, with why (the command is still walked without them)
EXCLUDED_OPTIONS = {
    ("maintain", "archive_command"): "runs its value as a shell command",
    ("summarize", "command"): "runs its value as a shell command (kept a harmless echo)",
    ("metrics", "serve"): "serves until interrupted (tests/integrations/test_metrics.py"
    " gives it bad addresses)",
}
GLOBAL = ("dsn", "json", "connect_timeout", "key_store", "key_file")
# the embedding model of embed and reembed: shipped with the test dependencies, so that it
# loads without the network
MODEL = "all-MiniLM-L6-v2"


# ---------------------------------------------------------------- the command tree


def leaf_commands(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> dict[str, argparse.ArgumentParser]:
    """Every runnable command, by its words ("purge session"), from the parser tree."""
    out: dict[str, argparse.ArgumentParser] = {}
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {" ".join(prefix): parser}
    for sub in subs:
        for name, child in sub.choices.items():
            out.update(leaf_commands(child, (*prefix, name)))
    return out


def arguments(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """A command's own options and positionals, by dest (help and global options left out)."""
    return {
        a.dest: a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction) and a.dest not in GLOBAL
    }


def takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


LEAVES = leaf_commands(build_parser())
WALKED = sorted(set(LEAVES) - set(EXCLUDED))


# ---------------------------------------------------------------- valid invocations


class Cli(World):
    """The World of tests/hostile/test_every_method.py (a session with turns, a checkpoint, a run,
    an artifact and a fact of tenant acme) plus the files a command reads."""

    def __init__(self, dsn: str, tmp: Path) -> None:
        super().__init__(dsn)
        self.tmp = tmp

    def file(self, data: bytes) -> str:
        path = self.tmp / f"in-{self.fresh()}"
        path.write_bytes(data)
        return str(path)


def valid_args(w: Cli) -> dict[str, dict[str, Any]]:
    """A valid invocation of every walked command: its arguments by dest (a string, a list
    for a repeatable or ``*`` argument, True for a flag). Every required argument named."""
    sid, tenant = str(w.sid), w.tenant
    msg = '{"role": "user", "content": "hi"}'
    return {
        "append": {"session_id": sid, "message": msg},
        "artifacts get": {"id": str(w.ref.artifact_id), "tenant": tenant, "output": w.file(b"")},
        "artifacts ls": {"tenant": tenant},
        "artifacts put": {"file": w.file(b"bytes"), "tenant": tenant},
        "artifacts sweep": {"dry_run": True},
        "checkpoints": {"session_id": sid},
        "chunks": {"session_id": sid},
        "context": {"session_id": sid, "max_tokens": "1000"},
        "create-session": {"tenant": tenant, "metadata": '{"k": 1}'},
        "distribute": {},
        "embed": {"model": MODEL},
        "export": {"session_ids": [sid], "output": str(w.tmp / f"out-{w.fresh()}.jsonl")},
        "facts": {"tenant": tenant, "subject": "u"},
        "fork": {"session_id": sid},
        "history": {"session_id": sid},
        "import jsonl": {"file": w.file(w.jsonl().getvalue().encode())},
        "import langgraph": {"source_dsn": w.dsn, "tenant": tenant},
        "import single-row": {
            "source_dsn": w.dsn,
            "table": w.table(),
            "id_column": "id",
            "history_column": "history",
            "tenant": tenant,
        },
        "init": {},
        "maintain": {"dry_run": True},
        "metrics": {},
        "purge before": {"time": "2001-01-01", "dry_run": True, "yes": True},
        "purge range": {"session_id": sid, "before_turn": "1", "dry_run": True},
        "purge session": {"session_id": sid, "dry_run": True},
        "purge subject": {"tenant": tenant, "subject": "u", "dry_run": True},
        "purge tenant": {"tenant": tenant, "dry_run": True},
        "reembed": {"model": MODEL, "yes": True},
        "restore": {"session_id": sid},
        "rewind": {"session_id": sid, "to": "4"},
        "runs": {"tenant": tenant},
        "search": {"query": "turn", "session": sid, "mode": "text"},
        "server path": {},
        "server status": {},
        "session": {"session_id": sid},
        "sessions": {"tenant": tenant},
        "stats": {},
        "summarize": {"command": "echo summary", "session": sid},
        "tail": {"session_id": sid},
        "text-search": {},
        "sealed-vectors": {},
    }


def argv_of(command: str, named: dict[str, Any]) -> list[str]:
    """The argv of ``command`` with ``named`` (by dest): positionals in the parser's
    order, then options under their first spelling."""
    actions = arguments(LEAVES[command])
    positional: list[str] = []
    optional: list[str] = []
    for dest, action in actions.items():
        if dest not in named:
            continue
        value = named[dest]
        if not action.option_strings:
            positional += value if isinstance(value, list) else [value]
        elif value is True:
            optional.append(action.option_strings[0])
        else:
            for item in value if isinstance(value, list) else [value]:
                # --opt=value keeps a value that starts with '-' a value
                optional.append(f"{action.option_strings[-1]}={item}")
    # "--" ends the options, so that a positional starting with '-' stays one
    return (
        [*command.split(), *optional, "--", *positional]
        if positional
        else [
            *command.split(),
            *optional,
        ]
    )


def test_every_command_has_valid_arguments(dsn: str, tmp_path: Path) -> None:
    """The walk covers every command of build_parser(): a new one fails here until
    valid_args() gives it a valid invocation (or EXCLUDED names why it cannot run)."""
    w = Cli(dsn, tmp_path)
    with shardstore.connect(dsn) as store:
        w.build(store)
    table = valid_args(w)
    missing = sorted(set(WALKED) - set(table))
    assert not missing, f"add a valid invocation of {missing} to valid_args() (or EXCLUDED)"
    gone = sorted(set(table) - set(WALKED))
    assert not gone, f"valid_args() names commands that are gone or excluded: {gone}"
    assert set(EXCLUDED) <= set(LEAVES), (
        f"EXCLUDED names gone commands {set(EXCLUDED) - set(LEAVES)}"
    )
    for command, named in table.items():
        actions = arguments(LEAVES[command])
        unknown = sorted(set(named) - set(actions))
        assert not unknown, f"valid_args()[{command!r}] names unknown arguments {unknown}"
        required = sorted(d for d, a in actions.items() if a.required and d not in named)
        assert not required, f"valid_args()[{command!r}] must give {required}"
    for command, dest in EXCLUDED_OPTIONS:
        assert dest in arguments(LEAVES[command]), f"EXCLUDED_OPTIONS: {command} has no {dest}"


# ---------------------------------------------------------------- hostile values

DEEP = "[" * 5_000 + "]" * 5_000
# argv values, by name (hypothesis prints the name, not 100k characters). What argv can
# carry: no NUL; bytes that are not UTF-8 arrive as lone surrogates (surrogateescape).
HOSTILE_ARGV = {
    "json nested 5000": DEEP,
    "message nested 5000": '{"role": "user", "c": ' + DEEP + "}",
    "object nested 5000": '{"k": ' * 5_000 + "1" + "}" * 5_000,
    "json escaped NUL and surrogate": '{"role": "user", "c": "\\u0000\\ud800", "\\u0000": 1}',
    "json 5000 digits": '{"role": "user", "n": ' + "1" * 5_000 + "}",
    "json 1e309": '{"role": "user", "n": 1e309}',
    "json NaN": '{"role": "user", "n": NaN}',
    "json array of ints": "[1, 2]",
    "5000 digits": "1" * 5_000,
    "-5000 digits": "-" + "9" * 5_000,
    "-1": "-1",
    "0": "0",
    "2**31": str(2**31),
    "2**63": str(2**63),
    "1e309": "1e309",
    "-1e309": "-1e309",
    "nan": "nan",
    "inf": "inf",
    "1.5": "1.5",
    "year 1": "0001-01-01",
    "year 1 +14:00": "0001-01-01T00:00:00+14:00",
    "year 1 -14:00": "0001-01-01T00:00:00-14:00",
    "year 9999": "9999-12-31",
    "year 9999 +14:00": "9999-12-31T23:59:59+14:00",
    "year 9999 -14:00": "9999-12-31T23:59:59.999999-14:00",
    "age past year 1": "800000 days",
    "20-digit age": "99999999999999999999 days",
    "0 seconds": "0 s",
    "surrogate-escaped bytes": "a\udcff\udce9b",
    "empty": "",
    "blank": " ",
    "newline": "a\nb",
    "100k chars": "x" * 100_000,
    "sql": "'; DROP TABLE shardstore.sessions; --",
    "dash": "-",
    "option-like": "--yes",
    "zero uuid": "00000000-0000-0000-0000-000000000000",
    "missing path": "{tmp}/no/such/file",
    "directory": "{tmp}",
    "unreachable dsn": "host=/nonexistent dbname=x",
}
# what a command reads from stdin or a file (bytes), by kind and name
NUL_MESSAGE = b'{"role": "user", "c": "a\x00b"}'
HOSTILE_CONTENT: dict[str, dict[str, bytes]] = {
    "json": {
        "nested 5000": DEEP.encode(),
        "message nested 5000": HOSTILE_ARGV["message nested 5000"].encode(),
        "raw NUL": NUL_MESSAGE,
        "escaped NUL and surrogate": HOSTILE_ARGV["json escaped NUL and surrogate"].encode(),
        "encoded surrogate": b'{"role": "user", "c": "\xed\xa0\x80"}',
        "invalid UTF-8": b'{"role": "user", "c": "\xff\xfe"}',
        "5000 digits": HOSTILE_ARGV["json 5000 digits"].encode(),
        "1e309": HOSTILE_ARGV["json 1e309"].encode(),
        "NaN": HOSTILE_ARGV["json NaN"].encode(),
        "empty": b"",
        "NUL only": b"\x00",
    },
    "bytes": {
        "empty": b"",
        "NULs": b"\x00" * 1_000,
        "invalid UTF-8": b"\xff\xfe\xed\xa0\x80",
    },
    "jsonl": {
        "empty": b"",
        "NUL line": b"\x00\n",
        "invalid UTF-8": b"\xff\xfe\n",
        "encoded surrogate": b'{"kind": "\xed\xa0\x80"}\n',
        "nested 5000": DEEP.encode() + b"\n",
        "object nested 5000": HOSTILE_ARGV["object nested 5000"].encode() + b"\n",
    },
}
# a JSONL export whose turn line has one field replaced: (field,
# tests/hostile/test_every_method.py's HOSTILE_JSON_TEXT name)
JSONL_FIELDS = ["created_at", "turn_seq", "tokens", "message", "idempotency_key", "kind"]
# arguments that name what a command reads: the hostile value may be that content instead
READS = {
    ("append", "message"): "json",  # the argument itself, or '-' and stdin
    ("import jsonl", "file"): "jsonl",  # a file, or '-' and stdin
    ("artifacts put", "file"): "bytes",  # a file, or '-' and stdin
    ("import single-row", "table"): "table",  # a table in the source database
}


@st.composite
def hostile_invocation(draw: st.DrawFn) -> tuple[str, str, tuple[str, ...], bool]:
    """(command, argument, how, --json?): the argument's value replaced by a hostile one
    (given although the valid invocation leaves it out), or, where the command reads it,
    hostile content on stdin, in a file or in a table; an argument of "global ..." is a
    global option given after the command."""
    command = draw(st.sampled_from(WALKED))
    actions = arguments(LEAVES[command])
    dests = [
        d for d, a in actions.items() if takes_value(a) and (command, d) not in EXCLUDED_OPTIONS
    ]
    dest = draw(st.sampled_from([*dests, "global dsn", "global connect_timeout"]))
    as_json = draw(st.booleans())
    kind = READS.get((command, dest))
    if kind is not None and draw(st.booleans()):
        if kind == "table":
            return command, dest, ("table", draw(st.sampled_from(sorted(HOSTILE_HISTORY)))), as_json
        where = "file" if kind != "json" else "stdin"
        if kind != "json" and draw(st.booleans()):
            where = "stdin"
        if kind == "jsonl" and draw(st.booleans()):
            field = draw(st.sampled_from(JSONL_FIELDS))
            text = draw(st.sampled_from(sorted(HOSTILE_JSON_TEXT)))
            return command, dest, (where, "jsonl field", field, text), as_json
        return (
            command,
            dest,
            (where, kind, draw(st.sampled_from(sorted(HOSTILE_CONTENT[kind])))),
            as_json,
        )
    return command, dest, ("argv", draw(st.sampled_from(sorted(HOSTILE_ARGV)))), as_json


def content(w: Cli, how: tuple[str, ...]) -> bytes:
    if how[1] == "jsonl field":
        return w.jsonl(how[2], HOSTILE_JSON_TEXT[how[3]]).getvalue().encode()
    return HOSTILE_CONTENT[how[1]][how[2]]


def build(
    w: Cli, command: str, dest: str, how: tuple[str, ...], as_json: bool
) -> tuple[list[str], bytes]:
    """The full argv and the stdin of one hostile invocation."""
    named = valid_args(w)[command]
    stdin = b""
    top = ["--dsn", w.dsn, "--connect-timeout", "2", *(["--json"] if as_json else [])]
    if dest.startswith("global "):
        value = HOSTILE_ARGV[how[1]].replace("{tmp}", str(w.tmp))
        option = "--" + dest.removeprefix("global ").replace("_", "-")
        words = argv_of(command, named)
        # a global option after the command words overrides the one before them
        at = len(command.split())
        return [*top, *words[:at], f"{option}={value}", *words[at:]], stdin
    action = arguments(LEAVES[command])[dest]
    for group in LEAVES[command]._mutually_exclusive_groups:
        if action in group._group_actions:  # the one named replaces the others of its group
            for other in group._group_actions:
                named.pop(other.dest, None)
    if how[0] == "argv":
        value: Any = HOSTILE_ARGV[how[1]].replace("{tmp}", str(w.tmp))
    elif how[0] == "table":
        value = w.table(HOSTILE_HISTORY[how[1]])
    elif how[0] == "stdin":
        value, stdin = "-", content(w, how)
    else:
        value = w.file(content(w, how))
    many = action.nargs in ("*", "+") or isinstance(action, argparse._AppendAction)
    named[dest] = [value] if many else value
    return [*top, *argv_of(command, named)], stdin


# ---------------------------------------------------------------- running the CLI


def invoke(argv: list[str], stdin: bytes = b"") -> tuple[int, str, str]:
    """main(argv) with stdin and stdout as a real process has them (bytes under a strict
    UTF-8 text layer; stderr escapes what it cannot encode, as Python's does)."""
    streams = sys.stdin, sys.stdout, sys.stderr
    out, err = io.BytesIO(), io.BytesIO()
    layers = (
        io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"),
        io.TextIOWrapper(out, encoding="utf-8", write_through=True),
        io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace", write_through=True),
    )
    sys.stdin, sys.stdout, sys.stderr = layers
    try:
        rc = cli_main(argv)
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        for layer in layers:
            layer.flush()
            layer.detach()  # else its collection closes the buffer before it is read
    return rc, out.getvalue().decode(errors="replace"), err.getvalue().decode(errors="replace")


@pytest.fixture
def cli(dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    """A loaded store (tests/hostile/test_every_method.py's World) and a scratch directory; the
    embedded server's commands look at a scratch data directory, and a --dsn of "" falls
    back to this database (never to the user's embedded server)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SHARDSTORE_DSN", dsn)
    monkeypatch.setenv("SHARDSTORE_DATA_DIR", str(tmp_path / "embedded"))
    monkeypatch.delenv("SHARDSTORE_ARTIFACTS", raising=False)
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(dsn) as saver:
        saver.setup()  # empty LangGraph tables (schema public) for import langgraph to read
    w = Cli(dsn, tmp_path)
    with shardstore.connect(dsn) as store:
        w.build(store)
    yield w


def check(w: Cli, argv: list[str], stdin: bytes, what: str) -> int:
    before = db_state(w.dsn)
    rc, _out, err = invoke(argv, stdin)
    assert "Traceback" not in err, f"{what}: {err[-2000:]}"
    assert rc in DOCUMENTED, f"{what} exited {rc}: {err[-2000:]}"
    if rc != EXIT_OK:
        assert db_state(w.dsn) == before, f"{what} exited {rc} ({err[:300]}) but wrote"
    return rc


@pytest.mark.slow
def test_every_valid_invocation_succeeds(cli: Cli) -> None:
    """The table's invocations are valid: each exits 0 (so a hostile one that fails was
    refused for its hostile value)."""
    for command in WALKED:
        argv = ["--dsn", cli.dsn, *argv_of(command, valid_args(cli)[command])]
        rc, _out, err = invoke(argv)
        assert rc == EXIT_OK, f"{command}: {argv[2:]} exited {rc}: {err[-1000:]}"


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=FIXTURE_OK)
@given(call=hostile_invocation())
def test_every_command_refuses_hostile_values_typed_and_writes_nothing(
    cli: Cli, call: tuple[str, str, tuple[str, ...], bool]
) -> None:
    command, dest, how, as_json = call
    argv, stdin = build(cli, command, dest, how, as_json)
    check(cli, argv, stdin, f"{command} {dest}={how}")


# ---------------------------------------------------------------- holes the walk found (fixed)

# (command, argument, how[, exit status]): each exited 1 with a traceback (an unexpected
# exception) before its fix in shardstore/cli; each is a usage error (exit 2) that writes
# nothing now, unless it names another status
FOUND: dict[str, tuple[Any, ...]] = {
    # json.loads raised ValueError (Python's 4,300-digit int conversion limit)
    "append 5000-digit number": ("append", "message", ("argv", "json 5000 digits")),
    "append 5000-digit number on stdin": ("append", "message", ("stdin", "json", "5000 digits")),
    "create-session --metadata 5000 digits": (
        "create-session",
        "metadata",
        ("argv", "5000 digits"),
    ),
    # sys.stdin.read() raised UnicodeDecodeError
    "append invalid UTF-8 on stdin": ("append", "message", ("stdin", "json", "invalid UTF-8")),
    "append encoded surrogate on stdin": (
        "append",
        "message",
        ("stdin", "json", "encoded surrogate"),
    ),
    # open() raised FileNotFoundError, IsADirectoryError, OSError (name too long)
    "artifacts put missing file": ("artifacts put", "file", ("argv", "missing path")),
    "artifacts put directory": ("artifacts put", "file", ("argv", "directory")),
    "artifacts put empty path": ("artifacts put", "file", ("argv", "empty")),
    "artifacts put 100k-character path": ("artifacts put", "file", ("argv", "100k chars")),
    "artifacts get -o directory": ("artifacts get", "output", ("argv", "directory")),
    "artifacts get -o missing directory": ("artifacts get", "output", ("argv", "missing path")),
    # timedelta(seconds=-inf) raised OverflowError
    "maintain --lock-timeout -1e309": ("maintain", "lock_timeout", ("argv", "-1e309")),
    "maintain --lock-timeout 1e309": ("maintain", "lock_timeout", ("argv", "1e309")),
    # the summary printed the path, lone surrogates and all, on stdout: UnicodeEncodeError
    # (after the file was written)
    "export -o not UTF-8": ("export", "output", ("argv", "surrogate-escaped bytes"), EXIT_OK),
    # parse_time: now - (an age past year 1) raised OverflowError
    "facts --as-of 800000 days": ("facts", "as_of", ("argv", "age past year 1")),
    "sessions --since 800000 days": ("sessions", "since", ("argv", "age past year 1")),
    "purge before 800000 days": ("purge before", "time", ("argv", "age past year 1")),
    "purge range --before 800000 days": ("purge range", "before", ("argv", "age past year 1")),
    # PostgreSQL refused a lock_timeout past its int of milliseconds (an error of exit 1)
    "maintain --lock-timeout 2**31": ("maintain", "lock_timeout", ("argv", "2**31")),
    # configure_text_search (the library, fixed there): regconfig read digits as an OID
    # and "-" as OID 0, and the server failed ("cache lookup failed", exit 1); a lone
    # surrogate raised UnicodeEncodeError
    "text-search --language 0": ("text-search", "language", ("argv", "0")),
    "text-search --language 2**31": ("text-search", "language", ("argv", "2**31")),
    "text-search --language -": ("text-search", "language", ("argv", "dash")),
    "text-search --language not UTF-8": (
        "text-search",
        "language",
        ("argv", "surrogate-escaped bytes"),
    ),
    # libpq's conninfo raised UnicodeEncodeError for a DSN that argv decoded with surrogates
    "--dsn not UTF-8": (
        "stats",
        "global dsn",
        ("argv", "surrogate-escaped bytes"),
        EXIT_REJECTED,
    ),
}


@pytest.mark.slow
def test_found_holes_are_usage_errors_that_write_nothing(cli: Cli) -> None:
    for case, (command, dest, how, *status) in FOUND.items():
        for as_json in (False, True):
            argv, stdin = build(cli, command, dest, how, as_json)
            assert check(cli, argv, stdin, case) == (status or [EXIT_USAGE])[0], case
