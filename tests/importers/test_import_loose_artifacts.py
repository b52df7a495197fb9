"""Artifacts outside a session's references travel too (format version 4): references
that name no session (a business output, a trajectory of no session) and a session's links
to artifacts no reference of it backs any more; with ``no_artifact_bytes`` as references
only. Under remapped ids a trajectory's or business output's owner gets a new id, so the
copy's reference is a row of its own instead of merging into the original's."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.errors import ImportRejected

TENANT = "acme"
REFS = (
    "SELECT tenant_id, artifact_id, owner_type, owner_id, session_id, turn_seq, "
    "required_for_resume, expires_at FROM shardstore.artifact_refs WHERE tenant_id = %s "
    "ORDER BY artifact_id, owner_type, owner_id"
)
LINKS = (
    "SELECT tenant_id, session_id, artifact_id FROM shardstore.artifact_links "
    "WHERE tenant_id = %s ORDER BY session_id, artifact_id"
)


@pytest.fixture(scope="module")
def databases(_databases: Any, server_dsn: str) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        made.append(_databases.take())
        return make_conninfo(server_dsn, dbname=made[-1])

    yield make
    _databases.drop_later(made)


@dataclass
class Source:
    dsn: str
    full: str
    refs_only: str
    export: Any


@pytest.fixture(scope="module")
def source(databases: Callable[[], str]) -> Source:
    dsn = databases()
    with shardstore.connect(dsn) as a:
        sid = a.create_session(TENANT, "alice")
        a.append_turns(sid, [{"role": "user", "content": f"turn {i}"} for i in range(3)])
        output = a.put_artifact(TENANT, b"quarterly report", content_type="text/plain")
        a.ref_artifact(TENANT, output.artifact_id, "business_output", "report-7")
        trace = a.put_artifact(TENANT, b"a span's payload", content_type="text/plain")
        a.ref_artifact(TENANT, trace.artifact_id, "trajectory", "trace-1:span-1:out")
        a.attach_payload(
            None,
            "the session's payload",
            name="p",
            content_type="text/plain",
            tenant_id=TENANT,
            session_id=str(sid),
        )
        linked = a.put_artifact(TENANT, b"linked, not referenced", content_type="text/plain")
        a.ref_artifact(TENANT, linked.artifact_id, "turn", f"{sid}:1")
        a.unref_artifact(TENANT, linked.artifact_id, "turn", f"{sid}:1")
        other = a.put_artifact("globex", b"another tenant's output", content_type="text/plain")
        a.ref_artifact("globex", other.artifact_id, "business_output", "report-7")
        full, refs_only = io.StringIO(), io.StringIO()
        export = a.export_sessions(tenant_id=TENANT, out=full)
        a.export_sessions(tenant_id=TENANT, out=refs_only, no_artifact_bytes=True)
    return Source(dsn, full.getvalue(), refs_only.getvalue(), export)


def rows(dsn: str) -> dict[str, list[Any]]:
    with psycopg.connect(dsn) as conn:
        return {
            "refs": conn.execute(REFS, (TENANT,)).fetchall(),
            "links": conn.execute(LINKS, (TENANT,)).fetchall(),
        }


@pytest.mark.slow
def test_loose_references_and_links_round_trip(
    source: Source, databases: Callable[[], str]
) -> None:
    docs = [json.loads(line) for line in source.full.splitlines()]
    end = max(i for i, d in enumerate(docs) if d["kind"] == "end")
    loose = [d for d in docs[end:] if d["kind"] == "artifact_ref"]
    assert sorted(d["owner_type"] for d in loose) == ["business_output", "trajectory"]
    assert [d["kind"] for d in docs].count("artifact_link") == 1
    assert "globex" not in source.full
    assert (source.export.artifacts, source.export.artifact_links) == (4, 1)
    dst = databases()
    with shardstore.connect(dst) as b:
        report = b.import_jsonl(io.StringIO(source.full))
        assert report.skipped == ()
        assert (report.artifacts, report.artifact_refs, report.artifact_links) == (4, 3, 1)
        assert b.get_artifact(TENANT, loose[0]["artifact_id"])
        rerun = b.import_jsonl(io.StringIO(source.full), on_existing="skip")
        assert (rerun.artifacts, rerun.artifact_links) == (0, 0)
    want = rows(source.dsn)
    assert want["refs"] and want["links"]
    assert rows(dst) == want


@pytest.mark.slow
def test_references_only_and_remapped_owners(source: Source, databases: Callable[[], str]) -> None:
    lacking = databases()
    with shardstore.connect(lacking) as b:
        report = b.import_jsonl(io.StringIO(source.refs_only))
        reasons = [s.reason for s in report.skipped]
        assert report.artifact_refs == report.artifact_links == 0
        assert len([r for r in reasons if "without its bytes" in r]) == 4
        assert any("business_output report-7" in r for r in reasons)
        assert any(r.startswith("link of session") for r in reasons)

    with shardstore.connect(source.dsn) as a:  # beside the original, which holds the bytes
        before = rows(source.dsn)
        report = a.import_jsonl(io.StringIO(source.refs_only), remap_ids=True)
        assert (report.artifact_refs, report.artifact_links, report.skipped) == (3, 1, ())
        after = rows(source.dsn)
        assert set(before["refs"]) <= set(after["refs"])  # the originals as they were
        added = [r for r in after["refs"] if r not in before["refs"]]
        assert len(added) == 3
        owners = {r[3] for r in before["refs"]}
        assert not {r[3] for r in added} & owners  # each copy's reference has its own owner
        assert len(after["links"]) == 2 * len(before["links"])
        again = a.import_jsonl(io.StringIO(source.refs_only), remap_ids=True)
        assert rows(source.dsn) == after and again.unchanged == 1


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, match",
    [
        ({"owner_type": "turn"}, "owner_type must be one of trajectory, business_output"),
        ({"turn_seq": 3}, "has no turn_seq"),
        ({"owner_id": ""}, "owner_id"),
        ({"owner_id": "x" * 5000}, "owner_id"),
        ({"artifact_id": "not a uuid"}, "artifact_id"),
        ({"required_for_resume": "yes"}, "required_for_resume"),
        ({"expires_at": 12}, "expires_at"),
        ({"tenant_id": ["acme"]}, "tenant_id"),
    ],
)
def test_hostile_loose_references_write_nothing(
    source: Source, databases: Callable[[], str], change: dict[str, Any], match: str
) -> None:
    docs = [json.loads(line) for line in source.refs_only.splitlines()]
    end = max(i for i, d in enumerate(docs) if d["kind"] == "end")
    at = next(i for i, d in enumerate(docs) if i > end and d["kind"] == "artifact_ref")
    docs[at] = {**docs[at], **change}
    text = "\n".join(json.dumps(d) for d in docs)
    with shardstore.connect(source.dsn) as a:
        before = rows(source.dsn)
        with pytest.raises(ImportRejected, match=match):
            a.import_jsonl(io.StringIO(text), remap_ids=True, import_id=json.dumps(change)[:80])
        skipped = a.import_jsonl(
            io.StringIO(text), remap_ids=True, import_id=json.dumps(change)[:80], on_error="skip"
        )
        assert [s.source for s in skipped.skipped] == [f"line {at + 1}"]
    assert len(rows(source.dsn)["refs"]) == len(before["refs"]) + 2
