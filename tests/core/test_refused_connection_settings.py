"""Connection settings the server refuses (an unknown database or role) or libpq cannot use
(a malformed DSN, an invalid option value) raise ConnectionRejected: a ConfigurationError,
not retryable, CLI exit 8. What retrying can fix (no server on the socket, a refused
port) stays DatabaseUnavailable (retryable, exit 6)."""

from __future__ import annotations

import asyncio
import json

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import shardstore
from shardstore.cli import main


def _with(server_dsn: str, **changes: str) -> str:
    return make_conninfo(**{**conninfo_to_dict(server_dsn), **changes})


@pytest.fixture
def refused(server_dsn: str) -> dict[str, str]:
    return {
        "unknown database": _with(server_dsn, dbname="no_such_database_here"),
        "unknown role": _with(server_dsn, user="no_such_role_here"),
        "invalid port": _with(server_dsn, port="99999"),
        "malformed": "this is not a dsn",
    }


def test_refused_settings_are_not_retryable(refused: dict[str, str]) -> None:
    for what, dsn in refused.items():
        with pytest.raises(shardstore.ConnectionRejected) as caught:
            shardstore.connect(dsn, connect_timeout=5)
        assert isinstance(caught.value, shardstore.ConfigurationError), what
        assert caught.value.retryable is False, what


def test_async_connect_refuses_the_same(refused: dict[str, str]) -> None:
    async def attempt(dsn: str) -> BaseException | None:
        try:
            store = await shardstore.connect_async(dsn, connect_timeout=5)
        except shardstore.ShardstoreError as exc:
            return exc
        await store.close()
        return None

    for what, dsn in refused.items():
        assert isinstance(asyncio.run(attempt(dsn)), shardstore.ConnectionRejected), what


def test_what_retrying_can_fix_stays_unavailable() -> None:
    for dsn in (
        "postgresql://nobody@/x?host=/nonexistent-dir",  # no server on that socket
        "postgresql://nobody@127.0.0.1:1/x",  # nothing listens on the port
    ):
        with pytest.raises(shardstore.DatabaseUnavailable) as caught:
            shardstore.connect(dsn, connect_timeout=2)
        assert caught.value.retryable is True


def test_cli_exits_8_with_a_json_error(
    refused: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    for what, dsn in refused.items():
        capsys.readouterr()
        assert main(["--json", "--dsn", dsn, "--connect-timeout", "5", "sessions"]) == 8, what
        error = json.loads(capsys.readouterr().err)["error"]
        assert error["type"] == "ConnectionRejected" and error["retryable"] is False, what
        assert error["exit_code"] == 8
