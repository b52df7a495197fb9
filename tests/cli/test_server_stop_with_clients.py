"""``shardstore server stop`` with clients connected (issue 37, section 2, point 6): it says
how many, refuses without a terminal unless ``--force``, asks at a terminal. On an embedded
Postgres of its own in a temporary data directory (never the suite's or the user's)."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from shardstore import embedded_server as embedded
from shardstore.cli.app import Runner, build_parser, main
from shardstore.cli.commands.server import cmd_stop


class Tty(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def data_dir(pg_data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("SHARDSTORE_DATA_DIR", str(pg_data_dir))
    monkeypatch.delenv("SHARDSTORE_DSN", raising=False)
    yield pg_data_dir
    embedded.stop_server(pg_data_dir)  # whatever a failing test left running


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _client(dsn: str, name: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(dsn, application_name=name, autocommit=True)


@pytest.mark.slow
def test_stop_says_how_many_clients_and_needs_force_without_a_terminal(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(capsys, "server", "start")[0] == 0
    status = embedded.server_status(data_dir)
    assert status.running and status.dsn is not None
    app = _client(status.dsn, "my-agent")
    other = _client(status.dsn, "my-agent")
    try:
        rc, out, err = _cli(capsys, "server", "stop")
        assert rc == 2 and out == ""
        assert err.startswith("error: not stopped: 2 clients (my-agent 2) are connected"), err
        assert "Give --force to stop it anyway" in err
        assert embedded.server_status(data_dir).running
        assert app.execute("SELECT 1").fetchone() == (1,)  # untouched

        rc, out, err = _cli(capsys, "server", "stop", "--json")
        error = json.loads(err)["error"]
        assert rc == 2 and error["type"] == "UsageError" and error["exit_code"] == 2
        assert "2 clients (my-agent 2) are connected" in error["message"]
        other.close()
        rc, out, err = _cli(capsys, "server", "stop")
        assert rc == 2 and "1 client (my-agent 1) is connected" in err
        assert embedded.server_status(data_dir).running

        rc, out, err = _cli(capsys, "server", "stop", "--force")
        assert rc == 0, err
        assert out.startswith("stopped the embedded Postgres") and "disconnected 1 client" in out
        assert not embedded.server_status(data_dir).running
        with pytest.raises(psycopg.OperationalError):
            app.execute("SELECT 1")
    finally:
        app.close()
        other.close()


@pytest.mark.slow
def test_stop_without_clients_needs_no_force(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _cli(capsys, "server", "start")[0] == 0
    rc, out, _ = _cli(capsys, "server", "stop", "--json")
    assert rc == 0 and json.loads(out)["stopped"] is True
    assert json.loads(out)["disconnected_clients"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(("answer", "stopped"), [("n\n", False), ("y\n", True)])
def test_stop_asks_at_a_terminal(
    data_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    answer: str,
    stopped: bool,
) -> None:
    assert _cli(capsys, "server", "start")[0] == 0
    status = embedded.server_status(data_dir)
    assert status.dsn is not None
    with _client(status.dsn, "worker"):
        monkeypatch.setattr(sys, "stdin", Tty(answer))
        err = Tty()
        out = io.StringIO()
        rc = cmd_stop(Runner(build_parser().parse_args(["server", "stop"]), out, err))
        assert "1 client (worker 1) is connected" in err.getvalue()
        assert err.getvalue().rstrip().endswith("Stop it? [y/N]")
        assert rc == (0 if stopped else 1)
        assert embedded.server_status(data_dir).running is not stopped
        assert ("not stopped" in out.getvalue()) is not stopped
