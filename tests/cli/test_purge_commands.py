"""``shardstore purge``, run in-process."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import shardstore
from shardstore.cli import UsageError, main
from shardstore.cli.args import parse_time
from tests.purge_support import converse, hits, table_rows


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@pytest.fixture
def cli(dsn: str, capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def run(*argv: str) -> Result:
        capsys.readouterr()
        rc = main(["--dsn", dsn, *argv])
        captured = capsys.readouterr()
        return Result(rc, captured.out, captured.err)

    return run


@pytest.fixture
def store(make_store: Callable[..., shardstore.Store]) -> shardstore.Store:
    return make_store(chunk_tokens=200)


@pytest.mark.slow
def test_purge_session_text_json_and_dry_run(
    cli: Callable[..., Result], store: shardstore.Store, dsn: str
) -> None:
    sid = store.create_session("acme", "user:1")
    converse(store, sid, "CLIMARK", 20)
    store.drain_folds()
    keyed = sum(1 for t in store.history(sid) if t.idempotency_key is not None)

    dry = cli("purge", "session", str(sid), "--dry-run")
    assert dry.rc == 0, dry.err
    assert dry.out.startswith(f"dry run, nothing removed: would purge session {sid}")
    assert "shardstore.agent_history" in dry.out and "tombstoned" in dry.out
    assert hits(table_rows(dsn), "CLIMARK")

    real = cli("purge", "session", str(sid), "--json", "--vacuum", "--yes")
    assert real.rc == 0, real.err
    doc = real.json()
    assert doc["kind"] == "session" and doc["dry_run"] is False
    assert doc["session_ids"] == [str(sid)] and doc["tombstoned"] == 1
    assert doc["tables"]["shardstore.turn_keys"]["rows"] == keyed
    assert doc["vacuumed"] and doc["rows"] > 0 and doc["bytes"] > 0
    assert hits(table_rows(dsn), "CLIMARK") == []

    late = cli("append", str(sid), "--content", "late")
    assert late.rc == 5 and "purged" in late.err
    missing = cli("purge", "session", str(uuid.uuid4()), "--yes")
    assert missing.rc == 4 and "does not exist" in missing.err


@pytest.mark.slow
def test_purge_subject_tenant_range_and_before(
    cli: Callable[..., Result], store: shardstore.Store, dsn: str
) -> None:
    a = [store.create_session("acme", "user:a") for _ in range(3)]
    b = store.create_session("acme", "user:b")
    c = store.create_session("other", "user:c")
    for sid in [*a, b, c]:
        converse(store, sid, f"M{sid.hex}", 12)
    store.drain_folds()

    subject = cli(
        "--json",
        "purge",
        "subject",
        "--tenant",
        "acme",
        "--subject",
        "user:a",
        "--batch-size",
        "2",
        "--no-progress",
        "--yes",
    )
    assert subject.rc == 0, subject.err
    assert sorted(subject.json()["session_ids"]) == sorted(str(s) for s in a)
    assert subject.json()["batches"] == 2

    ranged = cli("purge", "range", str(b), "--before-turn", "5", "--yes")
    assert ranged.rc == 0, ranged.err
    assert "history now  starts at turn 5" in ranged.out
    assert [t.turn_seq for t in store.history(b)][:1] == [5]

    by_time = cli("purge", "range", str(b), "--before", "2001-01-01", "--json", "--yes")
    assert by_time.rc == 0 and by_time.json()["rows"] == 0

    before = cli(
        "purge",
        "before",
        (datetime.now(UTC) + timedelta(minutes=1)).isoformat(),
        "--tenant",
        "other",
        "--json",
        "--yes",
    )
    assert before.rc == 0, before.err
    assert before.json()["session_ids"] == [str(c)]
    assert list(store.history(c)) == []

    tenant = cli("purge", "tenant", "--tenant", "acme", "--yes")
    assert tenant.rc == 0, tenant.err
    assert "purged every session of tenant 'acme'" in tenant.out
    rows = table_rows(dsn)
    assert all(hits(rows, f"M{sid.hex}") == [] for sid in [*a, b, c])

    old = cli("purge", "before", "30 days", "--dry-run", "--json")
    assert old.rc == 0 and old.json()["dry_run"] is True and old.json()["rows"] == 0


@pytest.mark.slow
def test_purge_usage_errors(cli: Callable[..., Result]) -> None:
    assert cli("purge").rc == 2
    assert cli("purge", "range", str(uuid.uuid4())).rc == 2  # needs a cut
    assert cli("purge", "range", str(uuid.uuid4()), "--before-turn", "1", "--before", "x").rc == 2
    bad = cli("purge", "before", "last tuesday")
    assert bad.rc == 2 and "cannot read time" in bad.err
    assert cli("purge", "subject", "--tenant", "acme").rc == 2


def test_parse_time() -> None:
    now = datetime(2026, 3, 1, tzinfo=UTC)
    assert parse_time("90 days", now=now) == now - timedelta(days=90)
    assert parse_time("2026-01-31") == datetime(2026, 1, 31, tzinfo=UTC)
    offset = parse_time("2026-01-31T12:00:00+01:00")
    assert offset == datetime(2026, 1, 31, 11, tzinfo=UTC)
    with pytest.raises(UsageError):
        parse_time("soon")


@pytest.mark.slow
def test_global_options_after_nested_purge_forms(
    store: shardstore.Store, dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sid = store.create_session("acme", "user:g")
    converse(store, sid, "GLOBALMARK", 6)
    store.drain_folds()
    capsys.readouterr()

    # every global option after the nested form (this used to fail: "unrecognized arguments")
    rc = main(
        ["purge", "session", str(sid), "--yes", "--dsn", dsn, "--json", "--connect-timeout", "5"]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    doc = json.loads(captured.out)
    assert doc["kind"] == "session" and doc["session_ids"] == [str(sid)]
    assert hits(table_rows(dsn), "GLOBALMARK") == []

    # --dsn and --connect-timeout after the form are the ones used
    unreachable = "postgresql://nobody@/x?host=/nonexistent-dir"
    form = ["purge", "tenant", "--tenant", "acme", "--yes"]
    rc = main([*form, "--dsn", unreachable, "--connect-timeout", "0.5"])
    err = capsys.readouterr().err
    assert rc == 6
    assert err.startswith("error: cannot connect to the database") and "Traceback" not in err

    # --json between ``purge`` and its form, --dsn after it
    missing = str(uuid.uuid4())
    rc = main(["purge", "--json", "range", missing, "--before-turn", "1", "--dsn", dsn, "--yes"])
    captured = capsys.readouterr()
    error = json.loads(captured.err)["error"]  # with --json the error is one JSON object
    assert rc == 4 and error["type"] == "SessionNotFound" and error["exit_code"] == 4
    assert error["message"] == f"session {missing} does not exist" and not error["retryable"]


def test_purge_without_a_terminal_needs_yes(dsn: str, cli: Callable[..., Result]) -> None:
    """A script or cron job cannot answer the prompt: without --yes the purge is refused
    (exit 2) and nothing is removed; --dry-run needs no confirmation."""
    store = shardstore.connect(dsn)
    try:
        sid = store.create_session("acme", "user:a")
        converse(store, sid, "KEEPME", 4)
        refused = cli("purge", "session", str(sid))
        assert refused.rc == 2 and "--yes" in refused.err
        refused = cli("purge", "subject", "--tenant", "acme", "--subject", "user:a", "--json")
        assert refused.rc == 2 and json.loads(refused.err)["error"]["type"] == "UsageError"
        assert [t.turn_seq for t in store.history(sid)] == [0, 1, 2, 3]
        assert cli("purge", "session", str(sid), "--dry-run").rc == 0
        assert cli("purge", "session", str(sid), "-y").rc == 0
        with pytest.raises(shardstore.SessionPurged):
            store.tail(sid)
    finally:
        store.close()


@pytest.mark.slow
def test_purge_text_names_the_cutoff_and_an_already_purged_session(
    cli: Callable[..., Result], store: shardstore.Store
) -> None:
    sid = store.create_session("acme", "user:1")
    converse(store, sid, "CUT", 6)
    started = datetime.now(UTC)
    old = cli("purge", "before", "30 days", "--dry-run")
    assert old.rc == 0, old.err
    assert old.out.startswith("dry run, nothing removed: would purge every turn written before")
    line = next(x for x in old.out.splitlines() if x.startswith("cutoff"))
    cutoff = datetime.strptime(line.split("before ")[1], "%Y-%m-%d %H:%M:%S UTC")
    expected = (started - timedelta(days=30)).replace(tzinfo=None, microsecond=0)
    assert abs((cutoff - expected).total_seconds()) <= 5
    ranged = cli("purge", "range", str(sid), "--before", "2001-01-01", "--yes")
    assert ranged.rc == 0 and "turns written before 2001-01-01 00:00:00 UTC" in ranged.out
    by_turn = cli("purge", "range", str(sid), "--before-turn", "2", "--yes")
    assert "cutoff" not in by_turn.out  # a cut by turn has no time

    assert cli("purge", "session", str(sid), "--yes").rc == 0
    again = cli("purge", "session", str(sid), "--yes")
    assert again.rc == 0
    assert again.out == f"session {sid} was already purged: nothing left to remove\n"
    dry = cli("purge", "session", str(sid), "--dry-run")
    assert dry.out == f"dry run: session {sid} was already purged: nothing left to remove\n"
    assert cli("purge", "session", str(sid), "--yes", "--json").json()["session_ids"] == []
