"""Exports that decrypt only when asked, and imports that re-seal (encryption at rest).

One module database holds the source (tenant ``exp``: a session with folded and buffered
turns, a checkpoint with tool calls and results, a fact with two versions, a summary, and a
fork of it); a second database with ANOTHER key store is the target. Every test uses the
exports made once, and sessions or tenants of its own."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.errors import (
    ConfigurationError,
    DecryptionFailed,
    EncryptionRequired,
    InvalidInput,
    KeyShredded,
)
from shardstore.importers.remap import IdMap
from tests.encryption.conftest import raw

MARKER = "okapi-cipher-8830"
TENANT = "exp"


@pytest.fixture(scope="module")
def source(enc_store: shardstore.Store) -> dict[str, Any]:
    """The source data, written sealed: ids of the session and its fork."""
    sid = enc_store.create_session(TENANT, "bea", metadata={"m": 1})
    messages = [{"role": "user", "content": f"{MARKER} {i} " + "w " * 20} for i in range(10)]
    enc_store.append_turns(sid, messages)
    enc_store.checkpoint(
        sid, {"plan": MARKER}, tool_calls=[f"{MARKER} call"], tool_results={"r": MARKER}
    )
    enc_store.remember(TENANT, "bea", "likes", f"{MARKER} v1", source=(sid, 1))
    enc_store.remember(TENANT, "bea", "likes", {"v": f"{MARKER} v2"}, source=(sid, 2))
    enc_store.flush(sid)
    enc_store.drain_folds()
    assert enc_store.summarize(lambda turns: f"{MARKER} summary", session_id=sid) >= 1
    child = enc_store.fork(sid, at_turn_seq=4)
    enc_store.append_turn(child, {"role": "assistant", "content": f"{MARKER} child"})
    return {"sid": sid, "child": child}


@pytest.fixture(scope="module")
def exports(enc_store: shardstore.Store, source: dict[str, Any]) -> dict[str, str]:
    """The tenant's export as stored (sealed) and decrypted, made once."""
    sealed, plain = io.StringIO(), io.StringIO()
    enc_store.export_sessions(tenant_id=TENANT, out=sealed)
    enc_store.export_sessions(tenant_id=TENANT, out=plain, decrypt=True)
    return {"sealed": sealed.getvalue(), "plain": plain.getvalue()}


@pytest.fixture(scope="module")
def target_dsn(server_dsn: str, _databases: Any) -> Iterator[str]:
    name = _databases.take()
    yield make_conninfo(server_dsn, dbname=name)
    _databases.drop_later([name])


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory: pytest.TempPathFactory) -> LocalKeyProvider:
    """A key store of its own, with another key-encryption key."""
    where = tmp_path_factory.mktemp("other-keys")
    return LocalKeyProvider(where / "store", key_file=where / "kek")


@pytest.fixture(scope="module")
def target(target_dsn: str, other_keys: LocalKeyProvider) -> Iterator[shardstore.Store]:
    # a short tail window: the import folds the older chunks, so summaries find theirs
    store = shardstore.connect(
        target_dsn, encryption=other_keys, chunk_tokens=60, default_tail_turns=2
    )
    yield store
    store.close()


def _dump_text(dsn: str) -> str:
    """Every row of every shardstore table as text."""
    tables = raw(
        dsn,
        "SELECT format('%I.%I', schemaname, tablename) FROM pg_tables"
        " WHERE schemaname = 'shardstore'",
    )
    return "\n".join(
        str(row) for (table,) in tables for row in raw(dsn, f"SELECT t::text FROM {table} t")
    )


def _values(store: shardstore.Store, sid: uuid.UUID) -> dict[str, Any]:
    """What a session's readers return: turns and checkpoints."""
    return {
        "turns": [(t.turn_seq, t.message, t.tokens) for t in store.history(sid)],
        "checkpoints": [
            (c.state, c.tool_calls, c.tool_results, c.turn_seq) for c in store.checkpoints(sid)
        ],
    }


def _summaries(store: shardstore.Store, sid: uuid.UUID) -> list[Any]:
    return [(s.first_turn_seq, s.last_turn_seq, s.text) for s in store.summaries(sid)]


def _facts(store: shardstore.Store) -> list[Any]:
    return [(f.value, f.valid_to is None) for f in store.fact_history(TENANT, "bea", "likes")]


def test_decrypt_writes_plaintext_and_says_so(exports: dict[str, str]) -> None:
    plain, sealed = exports["plain"], exports["sealed"]
    header = json.loads(plain.splitlines()[0])
    assert (header["decrypted"], header["sealed"]) == (True, False)
    assert '"ss_enc"' not in plain
    for what in (f"{MARKER} 3", f"{MARKER} call", f"{MARKER} v1", f"{MARKER} summary", "child"):
        assert what in plain, what
    assert MARKER not in sealed
    assert json.loads(sealed.splitlines()[0])["sealed"] is True


def test_plaintext_export_is_sealed_under_another_key_store(
    enc_store: shardstore.Store,
    target: shardstore.Store,
    target_dsn: str,
    source: dict[str, Any],
    exports: dict[str, str],
) -> None:
    report = target.import_jsonl(io.StringIO(exports["plain"]))  # the same ids
    assert (report.sessions, report.facts, report.forks) == (2, 2, 1)
    for sid in source.values():
        assert _values(target, sid) == _values(enc_store, sid)
    assert _facts(target) == _facts(enc_store)
    # the summaries of the chunks the import folded (the newest stay buffered: skipped)
    summaries = _summaries(target, source["sid"])
    assert len(summaries) == report.summaries >= 7
    assert set(summaries) <= set(_summaries(enc_store, source["sid"]))
    # stored sealed: no table holds the plaintext, and a store without the key store
    # refuses every value
    assert MARKER not in _dump_text(target_dsn)
    with shardstore.connect(target_dsn) as plain:
        for read in (
            lambda: plain.tail(source["child"]),
            lambda: plain.checkpoints(source["sid"]),
            lambda: plain.summaries(source["sid"]),
            lambda: plain.recall(TENANT, "bea"),
        ):
            with pytest.raises(EncryptionRequired):
                read()


def test_remapped_import_reseals_sealed_records(
    enc_store: shardstore.Store, module_dsn: str, source: dict[str, Any], exports: dict[str, str]
) -> None:
    import_id = str(uuid.uuid4())
    report = enc_store.import_jsonl(
        io.StringIO(exports["sealed"]), remap_ids=True, import_id=import_id
    )
    assert (report.sessions, report.checkpoints) == (2, 1)
    ids = IdMap(import_id)
    for old in source.values():
        new = ids.session(old)
        assert new != old
        assert _values(enc_store, new) == _values(enc_store, old)
    # a re-run (a resumed import) finds its sessions complete and writes nothing twice
    again = enc_store.import_jsonl(
        io.StringIO(exports["sealed"]), remap_ids=True, import_id=import_id
    )
    assert (again.sessions, again.unchanged) == (0, 2)


def test_a_rewound_session_exported_sealed_imports_and_reads_the_same(
    enc_store: shardstore.Store,
) -> None:
    # turns written after a rewind are sealed for their epoch; the import opens them so
    tenant = "exp-rewound"
    sid = enc_store.create_session(tenant, "cy")
    enc_store.append_turns(sid, [{"role": "user", "content": f"{MARKER} r{i}"} for i in range(4)])
    assert enc_store.rewind(sid, 2) == 2
    enc_store.append_turns(sid, [{"role": "user", "content": f"{MARKER} a{i}"} for i in range(2)])
    out = io.StringIO()
    enc_store.export_sessions(tenant_id=tenant, out=out)
    import_id = str(uuid.uuid4())
    report = enc_store.import_jsonl(
        io.StringIO(out.getvalue()), remap_ids=True, import_id=import_id
    )
    assert report.sessions == 1
    new = IdMap(import_id).session(sid)
    assert [t.message["content"] for t in enc_store.history(new)] == [
        f"{MARKER} r0",
        f"{MARKER} r1",
        f"{MARKER} a0",
        f"{MARKER} a1",
    ]
    assert _values(enc_store, new) == _values(enc_store, sid)


def test_sealed_records_of_another_key_store_are_refused(
    target: shardstore.Store, target_dsn: str, exports: dict[str, str]
) -> None:
    before = _dump_text(target_dsn)
    with pytest.raises(KeyShredded, match=r"line .*which this key store does not hold"):
        target.import_jsonl(io.StringIO(exports["sealed"]), remap_ids=True)
    skipped = target.import_jsonl(io.StringIO(exports["sealed"]), remap_ids=True, on_error="skip")
    assert (skipped.sessions, skipped.facts) == (0, 0)
    assert len(skipped.skipped) == 4  # two sessions, two fact versions
    assert all("key store does not hold" in s.reason for s in skipped.skipped)
    assert _dump_text(target_dsn) == before  # nothing half-written


def test_shredded_subject_and_moved_ciphertext_are_refused(
    enc_store: shardstore.Store, keys: LocalKeyProvider, module_dsn: str
) -> None:
    tenant = "exp-shred"
    sid = enc_store.create_session(tenant, "zed")
    enc_store.append_turns(sid, [{"role": "user", "content": f"{MARKER} z{i}"} for i in range(3)])
    other = enc_store.create_session(tenant, "zed")
    enc_store.append_turns(other, [{"role": "user", "content": "other"} for _ in range(3)])
    out = io.StringIO()
    enc_store.export_sessions([sid, other], out=out)
    lines = out.getvalue().splitlines()
    # a turn's ciphertext moved into the other session's lines of the file
    turn_lines = [i for i, text in enumerate(lines) if json.loads(text)["kind"] == "turn"]
    first, moved = turn_lines[0], turn_lines[3]
    doc = json.loads(lines[moved])
    doc["message"] = json.loads(lines[first])["message"]
    forged = [*lines[:moved], json.dumps(doc), *lines[moved + 1 :]]
    with pytest.raises(DecryptionFailed, match="sealed for another session"):
        enc_store.import_jsonl(io.StringIO("\n".join(forged)), remap_ids=True)
    # a malformed envelope (a key id that is no key id, a ciphertext that is not base64)
    for bad in ({"ss_enc": 1, "k": 5, "c": "x"}, {"ss_enc": 1, "k": "a.b", "c": "!!"}):
        doc = json.loads(lines[moved])
        doc["message"] = bad
        hostile = "\n".join([*lines[:moved], json.dumps(doc), *lines[moved + 1 :]])
        with pytest.raises(DecryptionFailed):
            enc_store.import_jsonl(io.StringIO(hostile), remap_ids=True)
        skipped = enc_store.import_jsonl(io.StringIO(hostile), remap_ids=True, on_error="skip")
        assert len(skipped.skipped) == 1  # the forged session; the other one is imported
    enc_store.purge_subject(tenant, "zed", shred=True)
    with pytest.raises(KeyShredded, match=r"line .*shredded"):
        enc_store.import_jsonl(io.StringIO(out.getvalue()), remap_ids=True, import_id="fresh")
    assert raw(
        module_dsn,
        "SELECT count(*) FROM shardstore.sessions WHERE tenant_id = %s AND purged_at IS NULL",
        (tenant,),
    ) == [(0,)]


def test_hostile_decrypt_arguments(
    plain_store: shardstore.Store, enc_store: shardstore.Store, tmp_path: Path
) -> None:
    path = tmp_path / "never.jsonl"
    with pytest.raises(ConfigurationError, match=r"decrypt=True .* encryption="):
        plain_store.export_sessions(tenant_id=TENANT, out=path, decrypt=True)
    assert not path.exists()
    for bad in ("yes", 1, None, [True]):
        with pytest.raises(InvalidInput):
            enc_store.export_sessions(tenant_id=TENANT, out=path, decrypt=bad)  # type: ignore[arg-type]
    assert not path.exists()


def test_access_report_reads_values_only_with_the_key_store(
    enc_store: shardstore.Store, plain_store: shardstore.Store, source: dict[str, Any]
) -> None:
    with_keys, without = io.StringIO(), io.StringIO()
    enc_store.export_sessions(subject_id="bea", out=io.StringIO(), report=with_keys)
    plain_store.export_sessions(subject_id="bea", out=io.StringIO(), report=without)
    assert f"{MARKER} v2" in with_keys.getvalue()
    assert MARKER not in without.getvalue()
    assert "encrypted at rest" in without.getvalue()


def test_async_decrypting_export_and_resealing_import(
    module_dsn: str, keys: LocalKeyProvider, other_keys: LocalKeyProvider, target_dsn: str
) -> None:
    async def scenario() -> None:
        store = await shardstore.connect_async(module_dsn, encryption=keys)
        copy = await shardstore.connect_async(target_dsn, encryption=other_keys)
        try:
            sid = await store.create_session("exp-async", "amy")
            await store.append_turns(sid, [{"role": "user", "content": f"{MARKER} a"}])
            out = io.StringIO()
            await store.export_sessions([sid], out=out, decrypt=True)
            assert f"{MARKER} a" in out.getvalue()
            report = await copy.import_jsonl(io.StringIO(out.getvalue()), remap_ids=True)
            assert report.sessions == 1
            (new,) = await copy.sessions(tenant_id="exp-async")
            assert [t.message async for t in copy.history(new.session_id)] == [
                {"role": "user", "content": f"{MARKER} a"}
            ]
        finally:
            await store.close()
            await copy.close()

    asyncio.run(scenario())
    with psycopg.connect(target_dsn, autocommit=True) as conn:
        stored = conn.execute(
            "SELECT message::text FROM shardstore.turn_buffer b JOIN shardstore.sessions s"
            " USING (session_id) WHERE s.tenant_id = 'exp-async'"
        ).fetchall()
    assert stored and all(MARKER not in text and "ss_enc" in text for (text,) in stored)


def test_single_row_import_into_an_encrypted_store_seals(
    enc_store: shardstore.Store, module_dsn: str
) -> None:
    messages = [{"role": "user", "content": f"{MARKER} row {i}"} for i in range(5)]
    raw(module_dsn, "CREATE TABLE public.enc_chats (id text PRIMARY KEY, history jsonb)")
    raw(module_dsn, "INSERT INTO public.enc_chats VALUES ('c1', %s)", (json.dumps(messages),))
    report = enc_store.import_single_row(
        module_dsn, "public.enc_chats", id_column="id", history_column="history", tenant_id="rows"
    )
    assert (report.sessions, report.turns) == (1, 5)
    (info,) = enc_store.sessions(tenant_id="rows")
    assert [t.message for t in enc_store.history(info.session_id)] == messages
    # folded and buffered alike: no shardstore table holds the plaintext (the source table
    # is in another schema)
    assert MARKER not in _dump_text(module_dsn)


def test_artifact_descriptions_without_bytes_hold_no_plaintext(
    enc_store: shardstore.Store,
) -> None:
    # the bytes themselves (sealed or decrypted) are covered by
    # tests/encryption/test_export_artifacts_encrypted.py
    sid = enc_store.create_session("exp-art", "cleo")
    ref = enc_store.put_artifact("exp-art", f"{MARKER} bytes".encode(), content_type="text/plain")
    enc_store.checkpoint(sid, {"report": ref.to_json()})
    out = io.StringIO()
    done = enc_store.export_sessions(sid, out=out, no_artifact_bytes=True)
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    described = [x for x in lines if x["kind"] == "artifact"]
    assert done.artifacts == 1 and len(described) == 1 and described[0]["bytes"] is False
    assert not [x for x in lines if x["kind"] == "artifact_part"]
    assert MARKER not in out.getvalue()
