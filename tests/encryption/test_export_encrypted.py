"""An export from a store with encryption on carries what is stored: sealed values, never
their plaintext. Imported under the same ids into a database read with the same key store,
every turn, checkpoint and fact opens again; a remapped import (new ids, to which the
ciphertext is not bound) is refused line by line and writes nothing of the session."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import ImportRejected

MARKER = "capybara-ledger-5521"


def test_sealed_export_moves_only_under_its_own_ids(
    dsn: str, new_database: Callable[[], str], keys: LocalKeyProvider
) -> None:
    with shardstore.connect(dsn, encryption=keys, chunk_tokens=60) as source:
        sid = source.create_session("acme", "alice")
        source.append_turns(
            sid, [{"role": "user", "content": f"{MARKER} turn {i}"} for i in range(12)]
        )
        source.checkpoint(sid, {"note": MARKER})
        source.remember("acme", "alice", "secret", MARKER, source=(sid, 1))
        out = io.StringIO()
        source.export_sessions(tenant_id="acme", out=out)
    text = out.getvalue()
    assert MARKER not in text and '"ss_enc"' in text

    target = new_database()
    with shardstore.connect(target, chunk_tokens=60) as plain:
        refused = io.StringIO(text)
        with pytest.raises(ImportRejected, match="encrypted value"):
            plain.import_jsonl(refused, remap_ids=True)
        assert plain.sessions() == []
        skipped = plain.import_jsonl(io.StringIO(text), remap_ids=True, on_error="skip")
        assert skipped.sessions == 0 and skipped.facts == 0 and skipped.skipped
        assert plain.sessions() == []
        report = plain.import_jsonl(io.StringIO(text))  # the same ids
        assert (report.sessions, report.turns) == (1, 12)
    with shardstore.connect(target, encryption=keys, chunk_tokens=60) as copy:
        turns = list(copy.history(sid))
        assert [t.message["content"] for t in turns] == [f"{MARKER} turn {i}" for i in range(12)]
        restored = copy.restore(sid)
        assert restored.checkpoint is not None
        assert restored.checkpoint.state == {"note": MARKER}
        assert copy.recall("acme", "alice", ["secret"])[0].value == MARKER
