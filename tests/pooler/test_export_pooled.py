"""Export format version 3 behind a real PgBouncer in transaction mode: a tenant's export
with artifact bytes and an access report, a remapped import beside the original data and
its re-run, all through the pooler; the copy holds what the original holds."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest

import shardstore
from tests.pgbouncer import Pooler


@pytest.mark.slow
def test_export_and_remapped_import_through_the_pooler(pgbouncer: Pooler, pooled_dsn: str) -> None:
    with shardstore.connect(pooled_dsn, offload_over=1024) as store:
        assert store.connector.pooler is True
        sid = store.create_session("acme", "alice")
        store.append_turns(sid, [{"role": "user", "content": f"hello {i}"} for i in range(30)])
        store.append_turn(sid, {"role": "user", "content": "long text " * 300})  # offloaded
        doc = store.put_artifact("acme", b"%PDF" * 50_000, content_type="application/pdf")
        store.checkpoint(sid, {"doc": doc.to_json()})
        store.remember("acme", "alice", "city", "Paris", source=(sid, 1))
        out, md = io.StringIO(), io.StringIO()
        exported = store.export_sessions(subject_id="alice", out=out, report=md)
        assert (exported.artifacts, exported.artifact_refs) == (2, 2)
        assert "| shardstore.artifact_refs | 2 |" in md.getvalue()
        report = store.import_jsonl(io.StringIO(out.getvalue()), remap_ids=True)
        assert (report.sessions, report.turns, report.artifact_refs) == (1, 31, 2)
        again = store.import_jsonl(io.StringIO(out.getvalue()), remap_ids=True)
        assert (again.sessions, again.unchanged) == (0, 1)
        copy = next(s.session_id for s in store.sessions(tenant_id="acme") if s.session_id != sid)
        assert (
            list(store.history(copy, expand=True))[-1].message
            == list(store.history(sid, expand=True))[-1].message
        )
        restored = store.restore(copy)
        assert [a.artifact_id for a in restored.artifacts] == [doc.artifact_id]


@pytest.mark.slow
def test_export_all_and_import_the_directory_through_the_pooler(
    pgbouncer: Pooler, pooled_dsn: str, new_database: Callable[[], str], tmp_path: Path
) -> None:
    from shardstore.cli import main

    with shardstore.connect(pooled_dsn) as store:
        for tenant in ("acme", "globex"):
            sid = store.create_session(tenant, "u")
            store.append_turns(
                sid, [{"role": "user", "content": f"{tenant} {i}"} for i in range(5)]
            )
    out = tmp_path / "all"
    assert main(["--dsn", pooled_dsn, "export", "--all", "-o", str(out), "--quiet"]) == 0
    target = pgbouncer.dsn(new_database())
    assert main(["--dsn", target, "import", "jsonl", str(out), "--quiet"]) == 0
    with shardstore.connect(target) as copy:
        assert sorted(s.tenant_id for s in copy.sessions()) == ["acme", "globex"]
        assert all(len(copy.tail(s.session_id)) == 5 for s in copy.sessions())
