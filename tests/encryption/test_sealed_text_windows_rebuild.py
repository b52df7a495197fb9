"""Sealed turns indexed before the client's keyed text pass existed kept text windows of their
ciphertext (lexemes of base64), and counted as indexed, so the keyed pass never gave them
real ones. No migration can find them in bounded time (telling a sealed turn from a plaintext
one means reading every chunk's JSON), so the documented repair is rebuilding the text index
(``configure_text_search(<its language>)``, ``shardstore text-search --language L``): it
writes windows only for plaintext turns, and the next search or maintenance run with
``encryption=`` indexes the sealed ones with keyed hashes. The stale windows are made here by
raw SQL."""

from __future__ import annotations

from pathlib import Path

import shardstore
from shardstore.encryption import LocalKeyProvider
from tests.encryption.conftest import raw

STALE = """
INSERT INTO shardstore.turn_text
       (session_id, turn_seq, window_no, chunk_seq, tenant_id, agent_id, created_at, tsv)
SELECT h.session_id, (e.v->>'s')::bigint, 0, h.chunk_seq, h.tenant_id, NULL,
       (e.v->>'at')::timestamptz, ARRAY[hashtext(left(e.v->'m'->>'c', 12))]
  FROM shardstore.agent_history h, jsonb_array_elements(h.conversation_chunk) AS e(v)
 WHERE h.session_id = %(s)s
UNION ALL
SELECT b.session_id, b.turn_seq, 0, b.chunk_seq, b.tenant_id, NULL, b.created_at,
       ARRAY[hashtext(left(b.message->>'c', 12))]
  FROM shardstore.turn_buffer b
 WHERE b.session_id = %(s)s
"""
WINDOWS = (
    "SELECT count(*), count(DISTINCT turn_seq) FROM shardstore.turn_text WHERE session_id = %s"
)


def test_rebuilding_the_text_index_drops_stale_windows_of_sealed_turns(
    dsn: str, tmp_path: Path
) -> None:
    keys = LocalKeyProvider(tmp_path / "keys", key_file=tmp_path / "kek")
    enc = shardstore.connect(dsn, encryption=keys, chunk_tokens=40)
    plain = shardstore.connect(dsn, chunk_tokens=40)
    try:
        sealed = enc.create_session("stale", subject_id="pat")
        clear = plain.create_session("stale")
        turns = [{"role": "user", "content": f"parcel number {i} arrived late"} for i in range(8)]
        enc.append_turns(sealed, turns)
        plain.append_turns(clear, turns)
        enc.drain_folds()
        plain.drain_folds()
        plain.maintain(embed=False)  # the plaintext buffered turns get their windows
        assert raw(dsn, WINDOWS, (sealed,))[0] == (0, 0)
        clear_windows = raw(dsn, WINDOWS, (clear,))[0]
        assert clear_windows[1] == 8
        raw(dsn, STALE, {"s": sealed})  # what the server wrote before the keyed pass
        assert raw(dsn, WINDOWS, (sealed,))[0] == (8, 8)
        # counted as indexed: the keyed pass leaves them, and nothing is found by its words
        assert enc.search("parcel number 5", session_id=sealed, mode="text") == []

        assert plain.text_search_language() == "english"
        plain.configure_text_search("english")  # the documented repair
        assert raw(dsn, WINDOWS, (sealed,))[0] == (0, 0)
        plain.maintain(embed=False)  # buffered plaintext turns are left to the next pass
        assert raw(dsn, WINDOWS, (clear,))[0] == clear_windows
        assert raw(dsn, WINDOWS, (sealed,))[0] == (0, 0)  # the server indexes no sealed turn

        hits = enc.search("parcel number 5", session_id=sealed, mode="text")
        assert hits and hits[0].turns[-1].message == turns[5]
        assert raw(dsn, WINDOWS, (sealed,))[0][1] == 8  # keyed windows, each turn once
    finally:
        enc.close()
        plain.close()
