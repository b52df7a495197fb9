"""``shardstore export --all -o DIR`` writes every tenant's export, a file each, and the
manifest last; ``shardstore import jsonl DIR`` reads them back into another database, where a
second export of every tenant equals the first. Misuse is a usage error that writes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

import shardstore
from shardstore.cli import main

TENANTS = ("acme", "beta/../weird tenant", "globex")


def _cli(capsys: pytest.CaptureFixture[str], dsn: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["--dsn", dsn, *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _records(path: Path) -> list[dict[str, object]]:
    """A tenant file's records without its header line (which names the export and time)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines[1:]]


def test_every_tenant_out_and_back_in(
    dsn: str,
    new_database: Callable[[], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with shardstore.connect(dsn) as store:
        for n, tenant in enumerate(TENANTS):
            sid = store.create_session(tenant, f"user-{n}")
            store.append_turns(
                sid, [{"role": "user", "content": f"{tenant} {i}"} for i in range(n + 2)]
            )
            store.remember(tenant, f"user-{n}", "city", "Oslo", source=(sid, 0))
    out = tmp_path / "all"
    code, text, _ = _cli(capsys, dsn, "export", "--all", "-o", str(out), "--quiet")
    assert code == 0 and "3 tenants" in text
    manifest = json.loads((out / "manifest.json").read_text())
    assert [t["tenant_id"] for t in manifest["tenants"]] == sorted(TENANTS)
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        "tenant-000001.jsonl",
        "tenant-000002.jsonl",
        "tenant-000003.jsonl",
    ]
    target = new_database()
    code, text, _ = _cli(capsys, target, "import", "jsonl", str(out), "--quiet")
    assert code == 0 and text.count("imported 1 session,") == 3
    again = tmp_path / "again"
    code, _, _ = _cli(capsys, target, "export", "--all", "-o", str(again), "--quiet")
    assert code == 0
    for entry in manifest["tenants"]:
        assert _records(again / entry["file"]) == _records(out / entry["file"]), entry["tenant_id"]
    # importing the directory again changes nothing (each session is there already)
    code, text, _ = _cli(capsys, target, "import", "jsonl", str(out), "--on-existing", "skip")
    assert code == 0 and text.count("imported 0 sessions, 0 turns") == 3


def test_misuse_is_a_usage_error_that_writes_nothing(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with shardstore.connect(dsn) as store:
        store.append_turn(store.create_session("acme"), {"role": "user", "content": "hi"})
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    for argv in (
        ["export", "--all"],  # no directory
        ["export", "--all", "-o", "-"],
        ["export", "--all", "--tenant", "acme", "-o", str(tmp_path / "a")],
        ["export", "--all", "-o", str(busy)],  # not empty
        ["export", "--all", "-o", str(busy / "keep.txt")],  # a file
    ):
        code, _, err = _cli(capsys, dsn, *argv)
        assert code == 2, (argv, err)
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())
    assert sorted(p.name for p in busy.iterdir()) == ["keep.txt"]
    # a directory without a manifest (an unfinished export), or one naming a file outside it
    empty = tmp_path / "unfinished"
    empty.mkdir()
    (empty / "tenant-000001.jsonl").write_text("")
    code, _, err = _cli(capsys, dsn, "import", "jsonl", str(empty))
    assert code != 0 and "not a finished export directory" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    for manifest in (
        {"kind": "shardstore export directory", "version": 1, "tenants": [{"file": "../x.jsonl"}]},
        {"kind": "shardstore export directory", "version": 9, "tenants": []},
        [[[[]]]],
        "not json {",
    ):
        (bad / "manifest.json").write_text(
            manifest if isinstance(manifest, str) else json.dumps(manifest)
        )
        code, _, err = _cli(capsys, dsn, "import", "jsonl", str(bad))
        assert code != 0 and "manifest" in err, (manifest, err)
    with shardstore.connect(dsn) as store:
        assert len(store.sessions()) == 1
