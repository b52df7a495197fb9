"""Format version 3 of ``shardstore.jsonl``, a complete and portable export: artifacts with
their bytes (or references only), artifact references, remapped ids beside existing data,
on_error="skip", every record kind counted, and the subject's access report.

One rich source database is built once for the module (forks, rewinds, range purges,
checkpoints with artifact references, an offloaded turn, facts with history, a run awaiting
approval, summaries, and a second tenant that must never leak) and exported once, with
and without artifact bytes; each test imports those files into databases of its own."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.errors import ImportRejected, InvalidInput
from tests.importers.test_export_v2_round_trip import SMALL, TABLES, TENANT, build, say

ARTIFACT_TABLES = {
    "artifacts": "SELECT tenant_id, artifact_id, sha256, size_bytes, content_type, state, tokens, "
    "required_for_resume FROM shardstore.artifacts ORDER BY tenant_id, artifact_id",
    # the reference's created_at is the import's
    "artifact_refs": "SELECT tenant_id, artifact_id, owner_type, owner_id, session_id, turn_seq, "
    "required_for_resume, expires_at FROM shardstore.artifact_refs "
    "ORDER BY tenant_id, artifact_id, owner_type, owner_id",
    "artifact_links": "SELECT tenant_id, session_id, artifact_id FROM shardstore.artifact_links "
    "ORDER BY tenant_id, session_id, artifact_id",
}
ALL_TABLES = {**TABLES, **ARTIFACT_TABLES}
OFFLOAD = {**SMALL, "offload_over": 2048}
BIG = bytes(range(256)) * 3000  # 768,000 bytes: two parts


def tables(dsn: str, only_tenant: str | None = TENANT) -> dict[str, list[Any]]:
    """Every compared table's rows (of one tenant, when given)."""
    out = {}
    with psycopg.connect(dsn) as conn:
        for name, sql in ALL_TABLES.items():
            rows = conn.execute(sql).fetchall()
            if only_tenant is not None and name != "sessions":
                rows = [r for r in rows if only_tenant in r]
            out[name] = rows
        if only_tenant is not None:
            out["sessions"] = [r for r in out["sessions"] if r[1] == only_tenant]
    return out


@dataclass
class Source:
    dsn: str
    sids: dict[str, uuid.UUID]
    full: str  # the tenant's export, artifact bytes included
    refs_only: str  # the same without artifact bytes
    export: Any  # the ExportReport of ``full``
    artifact: uuid.UUID
    offloaded: str  # the offloaded turn's text


@pytest.fixture(scope="module")
def databases(_databases: Any, server_dsn: str) -> Iterator[Callable[[], str]]:
    """Fresh migrated databases for this module, dropped at its end."""
    made: list[str] = []

    def make() -> str:
        made.append(_databases.take())
        return make_conninfo(server_dsn, dbname=made[-1])

    yield make
    _databases.drop_later(made)


@pytest.fixture(scope="module")
def source(databases: Callable[[], str]) -> Source:
    dsn = databases()
    with shardstore.connect(dsn, **OFFLOAD) as a:
        sids = build(a)
        main = sids["main"]
        ref = a.put_artifact(TENANT, BIG, content_type="application/pdf", required_for_resume=True)
        a.checkpoint(main, {"pdf": ref.to_json(), "note": "required to resume"})
        page = "cleaned page text " * 300  # over offload_over: a card and a turn reference
        a.append_turns(main, [{"role": "tool", "tool_call_id": "c1", "content": page}])
        # another tenant, the same subject and content: never in acme's export
        other = a.create_session("globex", "alice")
        a.append_turns(other, [say(i) for i in range(3)])
        a.checkpoint(other, {"pdf": a.put_artifact("globex", BIG, content_type="x/y").to_json()})
        a.remember("globex", "alice", "city", "Oslo", source=(other, 1))
        sids["globex"] = other
        full, refs_only = io.StringIO(), io.StringIO()
        export = a.export_sessions(tenant_id=TENANT, out=full)
        a.export_sessions(tenant_id=TENANT, out=refs_only, no_artifact_bytes=True)
    return Source(dsn, sids, full.getvalue(), refs_only.getvalue(), export, ref.artifact_id, page)


def kinds(text: str) -> list[str]:
    return [json.loads(line)["kind"] for line in text.splitlines()]


@pytest.mark.slow
def test_round_trip_with_artifacts_table_by_table(
    source: Source, databases: Callable[[], str]
) -> None:
    text = source.full
    seen = kinds(text)
    assert seen[0] == "export" and {"artifact", "artifact_part", "artifact_ref"} <= set(seen)
    assert "globex" not in text  # a tenant's export holds nothing of another tenant
    export = source.export
    assert (export.artifacts, export.artifact_refs) == (
        seen.count("artifact"),
        seen.count("artifact_ref"),
    )
    assert export.checkpoints == seen.count("checkpoint") and export.runs == seen.count("run")
    dst = databases()
    with shardstore.connect(dst, **OFFLOAD) as b:
        report = b.import_jsonl(io.StringIO(text))
        # the fork is a fork again: its 20 inherited turns are read through its parent
        assert (report.sessions, report.forks) == (export.sessions, export.forks) == (4, 1)
        assert report.turns == export.turns - 20
        assert (report.checkpoints, report.runs, report.facts) == (
            export.checkpoints,
            export.runs,
            export.facts,
        )
        assert (report.artifacts, report.artifact_refs) == (export.artifacts, export.artifact_refs)
        # the purged session's summaries cover chunks a range purge cut: listed, not stored
        assert report.summaries == export.summaries - len(report.skipped)
        assert b.get_artifact(TENANT, source.artifact) == BIG
        last = list(b.history(source.sids["main"], expand=True))[-1].message
        assert last["content"] == source.offloaded
        restored = b.restore(source.sids["main"])  # its checkpoint's required artifact is there
        assert restored.checkpoint is not None and "pdf" in restored.checkpoint.state
        assert [r.artifact_id for r in restored.artifacts] == [source.artifact]
    want, got = tables(source.dsn), tables(dst)
    want["chunk_summaries"] = [r for r in want["chunk_summaries"] if r[0] != source.sids["purged"]]
    for name in want:
        assert got[name] == want[name], name
    assert want["artifacts"] and want["artifact_refs"] and want["artifact_links"]


@pytest.mark.slow
def test_references_only_and_remap_beside_existing_data(
    source: Source, databases: Callable[[], str]
) -> None:
    """Without bytes, an import into a database lacking the artifacts lists the references
    it could not make; a remapped import beside the original data (which holds the
    artifacts) restores them, under new ids, and a re-run adds nothing."""
    lacking = databases()
    with shardstore.connect(lacking, **SMALL) as b:
        report = b.import_jsonl(io.StringIO(source.refs_only))
        assert report.sessions == source.export.sessions and report.artifacts == 0
        missing = [s for s in report.skipped if "without its bytes" in s.reason]
        assert len(missing) == source.export.artifact_refs > 0
    assert not tables(lacking)["artifacts"]

    dst = databases()
    with shardstore.connect(dst, **SMALL) as b:
        b.import_jsonl(io.StringIO(source.full))  # the original data
        before = tables(dst)
        with pytest.raises(InvalidInput, match="import_id"):
            b.import_jsonl(io.StringIO(body(source.full)), remap_ids=True)
        report = b.import_jsonl(io.StringIO(source.refs_only), remap_ids=True)
        assert report.sessions == source.export.sessions
        assert report.artifact_refs == source.export.artifact_refs  # held here: restored
        # current facts clash with the original's current ones: left out, listed
        clashes = [s for s in report.skipped if "current fact" in s.reason]
        assert report.facts + len(clashes) == source.export.facts and clashes
        after = tables(dst)
        copies = {r[0] for r in after["sessions"]} - {r[0] for r in before["sessions"]}
        assert len(copies) == len(before["sessions"])
        for name in ("checkpoints", "runs", "artifact_refs"):
            assert len(after[name]) == 2 * len(before[name]), name
        # each copy holds the original's turns, state and expansions
        for name, sid in source.sids.items():
            if name == "globex":
                continue
            copy = next(
                c
                for c in copies
                if b.session(c).created_at == b.session(sid).created_at
                and b.session(c).subject_id == b.session(sid).subject_id
                and b.session(c).turn_count == b.session(sid).turn_count
            )
            assert [t.message for t in b.history(copy, expand=True)] == [
                t.message for t in b.history(sid, expand=True)
            ]
            assert [c.state for c in b.checkpoints(copy)] == [c.state for c in b.checkpoints(sid)]
        # a re-run of the same import finds every session there and writes nothing
        again = b.import_jsonl(io.StringIO(source.refs_only), remap_ids=True)
        assert (again.sessions, again.unchanged) == (0, source.export.sessions)
        assert again.checkpoints == again.runs == again.artifact_refs == again.facts == 0
        assert tables(dst) == after
        # another import id: another copy
        third = b.import_jsonl(io.StringIO(source.full), remap_ids=True, import_id="third")
        assert third.sessions == source.export.sessions


def body(text: str) -> str:
    """An export less its export line (a file as format version 2 wrote it)."""
    return text.partition("\n")[2]


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def _first(docs: list[dict[str, Any]], kind: str) -> int:
    return next(i for i, d in enumerate(docs) if d["kind"] == kind)


def _edit(kind: str, **change: Any) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    def apply(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        i = _first(docs, kind)
        return [*docs[:i], {**docs[i], **change}, *docs[i + 1 :]]

    return apply


def _deep(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The artifact's content type 3,000 lists deep (spliced into the text below: json
    cannot write it)."""
    i = _first(docs, "artifact")
    return [*docs[:i], {**docs[i], "content_type": "__DEEP__"}, *docs[i + 1 :]]


def _other_bytes(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first part's bytes replaced by as many others."""
    i = _first(docs, "artifact_part")
    size = len(base64.b64decode(docs[i]["data"]))
    data = base64.b64encode(b"x" * size).decode()
    return [*docs[:i], {**docs[i], "data": data}, *docs[i + 1 :]]


def _drop_part(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    i = _first(docs, "artifact_part")
    return [*docs[:i], *docs[i + 1 :]]


HOSTILE: dict[str, tuple[Callable[[list[dict[str, Any]]], list[dict[str, Any]]], str]] = {
    "not base64": (_edit("artifact_part", data="@@@"), "base64"),
    "other bytes": (lambda docs: _other_bytes(docs), "do not match"),
    "wrong id": (_edit("artifact", artifact_id=str(uuid.uuid4())), "address"),
    "bad sha": (_edit("artifact", sha256="AB" * 32), "sha256"),
    "huge size": (_edit("artifact", size_bytes=2**70), "size_bytes"),
    "negative parts": (_edit("artifact", parts=-1), "parts"),
    "part missing": (_drop_part, "part 0"),
    "deep": (_deep, "nests"),
    "ref owner": (_edit("artifact_ref", owner_type="business_output"), "owner_type"),
    "ref other session's turn": (
        _edit("artifact_ref", owner_id=f"{uuid.uuid4()}:3", owner_type="turn", turn_seq=3),
        "owner_id",
    ),
    "ref other tenant": (_edit("artifact_ref", tenant_id="globex"), "tenant"),
    "ref in a version 2 file": (_edit("session", version=2), "version 2"),
}


@pytest.mark.slow
def test_hostile_artifact_lines_are_refused_and_write_nothing(
    source: Source, databases: Callable[[], str]
) -> None:
    """Each broken line raises ImportRejected naming it, with nothing of its session or
    artifact written; with on_error='skip' the rest of the file imports, the broken
    record listed."""
    main = _lines(source.full)
    # the main session's block: its artifacts, session line ... end line
    start = _first(main, "artifact")
    end = next(i for i in range(start, len(main)) if main[i]["kind"] == "end")
    block = main[start : end + 1]
    dst = databases()
    with shardstore.connect(dst, **SMALL) as b:
        empty = tables(dst)
        for name, (change, says) in HOSTILE.items():
            bad = change(block)
            text = "".join(json.dumps(d) + "\n" for d in bad)
            if name == "deep":
                text = text.replace('"__DEEP__"', "[" * 3000 + "1" + "]" * 3000)
            with pytest.raises(ImportRejected) as err:
                b.import_jsonl(io.StringIO(text))
            assert says in str(err.value), (name, str(err.value)[:300])
            assert str(err.value).startswith("line "), name
            assert tables(dst) == empty, name
        # skip: the broken session goes, the next one imports
        bad = _edit("artifact_ref", owner_type="business_output")(block)
        text = "".join(json.dumps(d) + "\n" for d in [*main[:start], *bad, *main[end + 1 :]])
        report = b.import_jsonl(io.StringIO(text), on_error="skip")
        assert report.sessions == source.export.sessions - 1
        assert any("owner_type" in s.reason for s in report.skipped)
        broken = uuid.UUID(block[_first(block, "session")]["session_id"])
        stored = tables(dst)
        assert broken not in {r[0] for r in stored["sessions"]}
        assert len(stored["sessions"]) == source.export.sessions - 1


@pytest.mark.slow
def test_access_report_of_a_subject(source: Source, tmp_path: Any) -> None:
    """Everything held about a subject, in every table, with a Markdown summary; the
    same subject in another tenant only when no tenant is named."""
    out, md = tmp_path / "alice.jsonl", tmp_path / "alice.md"
    with shardstore.connect(source.dsn, **SMALL) as a:
        report = a.export_sessions(subject_id="alice", tenant_id=TENANT, out=out, report=md)
        everywhere = io.StringIO()
        a.export_sessions(subject_id="alice", out=io.StringIO(), report=everywhere)
    text = out.read_text()
    docs = _lines(text)
    sessions = {d["session_id"] for d in docs if d["kind"] == "session"}
    assert str(source.sids["main"]) in sessions and str(source.sids["rewound"]) not in sessions
    assert all(d["subject"] == "alice" for d in docs if d["kind"] == "fact")
    assert "globex" not in text
    page = md.read_text()
    assert page.startswith("# Access report: subject alice in tenant acme")
    assert f"| sessions | {report.sessions} |" in page and f"| turns | {report.turns} |" in page
    assert f"| artifacts | {report.artifacts} (" in page
    assert "| shardstore.turn_keys |" in page and "| shardstore.artifact_refs |" in page
    assert str(source.sids["main"]) in page and "Lyon" in page and "Oslo" not in page
    assert "Oslo" in everywhere.getvalue()  # all tenants: the subject's facts everywhere


@pytest.mark.slow
def test_async_parity(source: Source, databases: Callable[[], str]) -> None:
    sync_dst, async_dst = databases(), databases()
    with shardstore.connect(sync_dst, **SMALL) as b:
        want = b.import_jsonl(io.StringIO(source.full), remap_ids=True, import_id="x")

    async def go() -> Any:
        astore = await shardstore.connect_async(async_dst, **SMALL)
        try:
            got = await astore.import_jsonl(io.StringIO(source.full), remap_ids=True, import_id="x")
            md = io.StringIO()
            await astore.export_sessions(
                subject_id="alice", out=io.StringIO(), report=md, no_artifact_bytes=True
            )
            assert "# Access report" in md.getvalue()
            return got
        finally:
            await astore.close()

    got = asyncio.run(go())
    assert got.skipped == want.skipped and got.artifacts == want.artifacts > 0
    assert tables(async_dst) == tables(sync_dst)
