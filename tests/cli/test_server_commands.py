"""``shardstore server (status | start | stop | path)`` and the "starting" line, on an
embedded Postgres in a temporary data directory (never the user's own)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardstore import embedded_server as embedded
from shardstore.cli.app import Runner, build_parser, main


class Tty(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def data_dir(pg_data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = pg_data_dir
    monkeypatch.setenv("SHARDSTORE_DATA_DIR", str(path))
    monkeypatch.delenv("SHARDSTORE_DSN", raising=False)
    yield path
    embedded.stop_server(path)  # whatever a failing test left running


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(list(argv))
    return rc, capsys.readouterr().out


@pytest.mark.slow
def test_start_status_stop_status(data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out = _cli(capsys, "server", "path")
    assert (rc, out.strip()) == (0, str(data_dir.resolve()))
    assert json.loads(_cli(capsys, "server", "path", "--json")[1]) == {
        "data_dir": str(data_dir.resolve())
    }

    rc, out = _cli(capsys, "server", "status")
    assert rc == 0 and "not created yet" in out and str(data_dir.resolve()) in out

    rc, out = _cli(capsys, "server", "start")
    assert rc == 0 and out.startswith("started the embedded Postgres"), out
    assert "running (pid " in out and "shardstore server stop" in out

    doc = json.loads(_cli(capsys, "--json", "server", "status")[1])
    assert doc["running"] is True and doc["initialized"] is True and doc["in_use"] is True
    assert doc["data_dir"] == str(data_dir.resolve())
    assert doc["dsn"] and str(data_dir.resolve()) in doc["dsn"]
    assert doc["size_bytes"] > 1_000_000 and isinstance(doc["pid"], int)
    # a command connects to exactly that server
    doc2 = json.loads(_cli(capsys, "server", "start", "--json")[1])
    assert doc2["started"] is False and doc2["pid"] == doc["pid"]

    rc, out = _cli(capsys, "server", "stop")
    assert rc == 0 and out.startswith("stopped the embedded Postgres"), out
    doc = json.loads(_cli(capsys, "server", "status", "--json")[1])
    assert doc["running"] is False and doc["dsn"] is None and doc["initialized"] is True
    rc, out = _cli(capsys, "server", "status")
    assert "not running" in out
    rc, out = _cli(capsys, "server", "stop")
    assert rc == 0 and "not running" in out and "nothing to stop" in out
    assert json.loads(_cli(capsys, "server", "stop", "--json")[1])["stopped"] is False


@pytest.mark.slow
def test_starting_line_only_when_it_really_starts(data_dir: Path) -> None:
    args = build_parser().parse_args(["stats"])
    err = Tty()
    run = Runner(args, io.StringIO(), err)
    with run.connect():
        pass
    with run.connect():  # a second connect of the same command (the demo has two)
        pass
    assert err.getvalue().count("starting the embedded Postgres") == 1, err.getvalue()
    assert str(data_dir.resolve()) in err.getvalue()

    again = Tty()
    with Runner(args, io.StringIO(), again).connect():  # the next command: it runs already
        pass
    assert again.getvalue() == ""

    assert embedded.stop_server(data_dir) is True
    restarted = Tty()
    with Runner(args, io.StringIO(), restarted).connect():  # stopped: really starts again
        pass
    assert restarted.getvalue().count("starting the embedded Postgres") == 1


def test_status_says_when_another_server_is_in_use(
    data_dir: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHARDSTORE_DSN", "postgresql://elsewhere/db")
    doc = json.loads(_cli(capsys, "server", "status", "--json")[1])
    assert doc["in_use"] is False and doc["not_used_because"] == "$SHARDSTORE_DSN is set"
    assert doc["running"] is False
    rc, out = _cli(capsys, "server", "status")
    assert rc == 0 and "$SHARDSTORE_DSN is set" in out
