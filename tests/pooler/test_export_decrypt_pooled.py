"""A decrypting export and a re-sealing import behind a real PgBouncer in transaction mode:
each session's export is one snapshot transaction and each imported session one
transaction, which the pooler keeps on one server connection; the values are opened and
sealed by the client between statements of those transactions."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import psycopg

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.importers.remap import IdMap
from tests.pgbouncer import Pooler

MARKER = "tapir-pooled-4471"


def test_decrypting_export_and_resealing_import_behind_the_pooler(
    pgbouncer: Pooler, pooled_dsn: str, new_database: Callable[[], str], tmp_path: Path
) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    other = LocalKeyProvider(tmp_path / "other", key_file=tmp_path / "other-kek")
    messages = [{"role": "user", "content": f"{MARKER} {i} " + "w " * 20} for i in range(8)]
    with shardstore.connect(pooled_dsn, encryption=keys, chunk_tokens=60) as store:
        assert store.connector.pooler is True
        sid = store.create_session("acme", "pat")
        store.append_turns(sid, messages)
        store.checkpoint(sid, {"plan": MARKER}, tool_calls=[MARKER])
        store.remember("acme", "pat", "k", MARKER, source=(sid, 0))
        out = io.StringIO()
        store.export_sessions(tenant_id="acme", out=out, decrypt=True)
    text = out.getvalue()
    assert json.loads(text.splitlines()[0])["decrypted"] is True and MARKER in text

    target = new_database()
    with shardstore.connect(pgbouncer.dsn(target), encryption=other, chunk_tokens=60) as copy:
        report = copy.import_jsonl(io.StringIO(text), remap_ids=True)
        assert (report.sessions, report.turns, report.checkpoints, report.facts) == (1, 8, 1, 1)
        new = IdMap(json.loads(text.splitlines()[0])["export_id"]).session(sid)
        assert [t.message for t in copy.history(new)] == messages
        restored = copy.restore(new).checkpoint
        assert restored is not None and restored.state == {"plan": MARKER}
        assert copy.recall("acme", "pat")[0].value == MARKER
    with psycopg.connect(target, autocommit=True) as conn:
        stored = conn.execute("SELECT message::text FROM shardstore.turn_buffer").fetchall()
    assert stored and all(MARKER not in row[0] for row in stored)
