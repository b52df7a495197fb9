"""A tenant exported from the embedded Postgres imports onto a Citus cluster exactly: the
export taken back from the cluster holds the same records as the one taken from the source
(sessions, turns, checkpoints with an artifact's bytes, facts with their history, a range
purge's first turn), but for the artifact's creation time, which is the import's. Skipped
unless ``SHARDSTORE_CITUS_DSN`` is set (see tests/citus/test_citus.py)."""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import shardstore

CITUS_DSN = os.environ.get("SHARDSTORE_CITUS_DSN")
pytestmark = pytest.mark.skipif(not CITUS_DSN, reason="SHARDSTORE_CITUS_DSN is not set")
SMALL = {"chunk_tokens": 300}
PDF = bytes(range(256)) * 3000  # two artifact_part lines


@pytest.fixture(scope="module")
def citus() -> Iterator[str]:
    assert CITUS_DSN
    with shardstore.connect(CITUS_DSN) as store:
        store.distribute()  # idempotent: the other Citus tests may have done it
    yield CITUS_DSN


def _say(i: int) -> dict[str, Any]:
    role = "user" if i % 2 == 0 else "assistant"
    return {"role": role, "content": f"turn {i} of the harbour story " + "w " * 40}


def _records(text: str) -> list[dict[str, Any]]:
    """The export's records without its header (which names the export and its time)."""
    records = [json.loads(line) for line in text.splitlines()]
    assert records[0]["kind"] == "export"
    return records[1:]


def test_a_tenant_moves_from_embedded_to_citus_exactly(dsn: str, citus: str) -> None:
    tenant = f"t_{uuid.uuid4().hex[:10]}"
    with shardstore.connect(dsn, **SMALL) as source:
        main = source.create_session(tenant, "alice", metadata={"channel": "web"})
        source.append_turns(main, [_say(i) for i in range(40)])
        pdf = source.put_artifact(tenant, PDF, content_type="application/pdf")
        source.checkpoint(main, {"pdf": pdf.to_json(), "step": 3})
        source.remember(tenant, "alice", "city", "Oslo", source=(main, 1))
        source.remember(tenant, "alice", "city", "Bergen", source=(main, 5))
        cut = source.create_session(tenant, "bob")
        source.append_turns(cut, [_say(i) for i in range(30)])
        source.purge_range(cut, before_turn_seq=12)
        source.flush(main)
        source.flush(cut)
        exported = io.StringIO()
        report = source.export_sessions(tenant_id=tenant, out=exported)
    assert report.sessions == 2 and report.artifacts == 1 and report.facts >= 2

    with shardstore.connect(citus, **SMALL) as cluster:
        imported = cluster.import_jsonl(io.StringIO(exported.getvalue()))
        assert (imported.sessions, imported.turns) == (report.sessions, report.turns)
        assert (imported.checkpoints, imported.facts, imported.artifacts) == (
            report.checkpoints,
            report.facts,
            report.artifacts,
        )
        assert cluster.get_artifact(tenant, pdf.artifact_id) == PDF
        assert [t.turn_seq for t in cluster.tail(cut, n=3)] == [27, 28, 29]
        assert cluster.session(cut).first_turn_seq == 12
        again = io.StringIO()
        cluster.export_sessions(tenant_id=tenant, out=again)
        # a second import changes nothing (each session is one transaction, already there)
        rerun = cluster.import_jsonl(io.StringIO(exported.getvalue()), on_existing="skip")
        assert rerun.turns == 0
    want, got = _records(exported.getvalue()), _records(again.getvalue())
    assert [r["kind"] for r in got] == [r["kind"] for r in want]
    for before, after in zip(want, got, strict=True):
        if before["kind"] == "artifact":  # an artifact's row is made by the import's put
            before, after = dict(before, created_at=None), dict(after, created_at=None)
        assert after == before, before["kind"]
