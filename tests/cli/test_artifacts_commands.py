"""``shardstore artifacts put | get | ls | sweep``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import shardstore
from shardstore.cli import main


@pytest.mark.slow
def test_cli_put_get_ls_sweep(
    store: shardstore.Store, dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = os.urandom(3 << 20)
    src = tmp_path / "in.bin"
    src.write_bytes(data)
    for backend in ("postgres", (tmp_path / "objs").as_uri()):
        base = ["--dsn", dsn, "artifacts", "--store", backend]
        assert main([*base, "put", str(src), "--tenant", "acme", "--json"]) == 0
        ref = json.loads(capsys.readouterr().out)
        assert ref["size_bytes"] == len(data)
        out = tmp_path / "out.bin"
        assert main([*base, "get", ref["artifact_id"], "--tenant", "acme", "-o", str(out)]) == 0
        assert out.read_bytes() == data
        assert main([*base, "ls", "--tenant", "acme", "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert [a["artifact_id"] for a in listed] == [ref["artifact_id"]]
        assert main([*base, "ls", "--tenant", "nobody"]) == 0
        assert "no artifacts" in capsys.readouterr().out
        assert main([*base, "sweep", "--dry-run", "--grace", "0s"]) == 0
        assert "would delete 1 artifacts" in capsys.readouterr().out
        assert main([*base, "sweep", "--grace", "0s", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["deleted"] == 1
        assert main([*base, "get", ref["artifact_id"], "--tenant", "acme"]) != 0
        capsys.readouterr()


def test_cli_get_to_stdout_and_put_from_stdin(
    store: shardstore.Store,
    dsn: str,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    import io
    import sys

    data = bytes(range(256)) * 5000  # every byte value, ~1.2 MB
    stdin = io.TextIOWrapper(io.BytesIO(data))
    monkeypatch.setattr(sys, "stdin", stdin)
    base = ["--dsn", dsn, "artifacts"]
    assert main([*base, "put", "-", "--tenant", "acme", "--json"]) == 0
    ref = json.loads(capsysbinary.readouterr().out)
    assert ref["size_bytes"] == len(data)
    assert main([*base, "get", ref["artifact_id"], "--tenant", "acme"]) == 0
    assert capsysbinary.readouterr().out == data
    assert main([*base, "get", ref["artifact_id"], "--tenant", "other"]) != 0
