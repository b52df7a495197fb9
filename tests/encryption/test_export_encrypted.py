"""An export from a store with encryption on carries what is stored: sealed values, never
their plaintext, and its export line says so. A store connected without ``encryption=``
refuses such a file before writing anything (``EncryptionRequired``); a store with the key
store imports it under its own ids or remapped ones, each value re-sealed for its place."""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import EncryptionRequired

MARKER = "capybara-ledger-5521"


def test_sealed_export_needs_the_key_store_to_import(
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
    header = json.loads(text.splitlines()[0])
    assert header["sealed"] is True and header["decrypted"] is False

    target = new_database()
    with shardstore.connect(target, chunk_tokens=60) as plain:
        for options in ({}, {"remap_ids": True}, {"remap_ids": True, "on_error": "skip"}):
            with pytest.raises(EncryptionRequired, match="line 1: the export holds encrypted"):
                plain.import_jsonl(io.StringIO(text), **options)
        assert plain.sessions() == []
    with shardstore.connect(target, encryption=keys, chunk_tokens=60) as copy:
        report = copy.import_jsonl(io.StringIO(text))  # the same ids
        assert (report.sessions, report.turns, report.facts) == (1, 12, 1)
        turns = list(copy.history(sid))
        assert [t.message["content"] for t in turns] == [f"{MARKER} turn {i}" for i in range(12)]
        restored = copy.restore(sid)
        assert restored.checkpoint is not None
        assert restored.checkpoint.state == {"note": MARKER}
        assert copy.recall("acme", "alice", ["secret"])[0].value == MARKER
