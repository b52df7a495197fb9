"""``shardstore sealed-vectors``: shows whether encrypted turns get vectors and switches it
(``--off`` deletes them, ``--on`` queues the skipped turns), in text and ``--json``; the two
switches together are an argument error. In-process (``main([...])``), a real PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import shardstore
from shardstore.cli import main
from shardstore.encryption import LocalKeyProvider
from tests.embedders import HashEmbedder
from tests.encryption.conftest import raw


def test_show_switch_off_and_on(
    dsn: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    store = shardstore.connect(dsn, encryption=keys, embedding_model=HashEmbedder())
    try:
        sid = store.create_session("cli-sv", subject_id="pat")
        store.append_turns(sid, [{"role": "user", "content": f"note {i}"} for i in range(4)])
        store.embed()
    finally:
        store.close()
    count = "SELECT count(*) FROM shardstore.chunk_vectors WHERE session_id = %s"
    assert raw(dsn, count, (sid,))[0][0] > 0

    def cli(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main(["--dsn", dsn, *argv])
        out = capsys.readouterr()
        return rc, out.out, out.err

    assert cli("sealed-vectors") == (0, "vectors of encrypted turns: on\n", "")
    rc, out, _ = cli("--json", "sealed-vectors", "--off")
    doc = json.loads(out)
    assert rc == 0 and doc["sealed_vectors"] is False and doc["changed"] > 0
    assert raw(dsn, count, (sid,))[0][0] == 0
    rc, out, _ = cli("sealed-vectors")
    assert rc == 0 and out.strip().endswith("off")
    rc, _, err = cli("sealed-vectors", "--on", "--off")
    assert rc == 2 and "not allowed with" in err
    rc, out, _ = cli("sealed-vectors", "--on")
    assert rc == 0 and out.startswith("vectors of encrypted turns: on (1 chunks or sessions")
    ((queued_or_unmarked,),) = raw(
        dsn,
        "SELECT NOT EXISTS (SELECT 1 FROM shardstore.embed_marks WHERE session_id = %s)",
        (sid,),
    )
    assert queued_or_unmarked is True  # the next embed gives the sealed turns vectors again
