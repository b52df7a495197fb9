"""Key rotation: the key-encryption key (every data key rewrapped, no row rewritten) and one
subject's or session's data key (every sealed value re-sealed under a new version, the old
version shredded), with appends going on, hostile arguments, the asyncio store and tenants
under row-level security."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider, Scope
from shardstore.errors import (
    AccessDenied,
    ConfigurationError,
    Conflict,
    DecryptionFailed,
    InvalidInput,
    KeyShredded,
    SessionNotFound,
)
from shardstore.schema import rls
from tests.encryption.conftest import raw
from tests.tenancy import as_tenant, drop_tenant_role, make_tenant_role

MARKER = "okapi-marker-2718"


def _sealed_rows(dsn: str, tenant: str) -> list[tuple[str, str]]:
    """Every stored value of ``tenant`` that can carry a ciphertext, as text, in a fixed order."""
    return [
        (str(a), str(b))
        for a, b in raw(
            dsn,
            "SELECT 'b' || session_id || '/' || turn_seq, message::text FROM shardstore.turn_buffer"
            " WHERE tenant_id = %(t)s"
            " UNION ALL SELECT 'h' || session_id || '/' || chunk_seq, conversation_chunk::text"
            " FROM shardstore.agent_history WHERE tenant_id = %(t)s"
            " UNION ALL SELECT 'c' || checkpoint_id, concat_ws('|', state::text,"
            " tool_calls::text, tool_results::text) FROM shardstore.checkpoints"
            " WHERE tenant_id = %(t)s"
            " UNION ALL SELECT 'f' || fact_id, value::text FROM shardstore.facts"
            " WHERE tenant_id = %(t)s"
            " UNION ALL SELECT 's' || session_id || '/' || chunk_seq, summary"
            " FROM shardstore.chunk_summaries WHERE tenant_id = %(t)s ORDER BY 1",
            {"t": tenant},
        )
    ]


def _key_ids(dsn: str, tenant: str) -> set[str]:
    """The key ids that the tenant's stored values name."""
    text = "\n".join(value for _where, value in _sealed_rows(dsn, tenant))
    found = set()
    for part in text.split('"k": "')[1:] + text.split('"k":"')[1:]:
        kid = part.split('"', 1)[0]
        if len(kid) == 65 and kid[40] == ".":
            found.add(kid)
    return found


def _fill(store: shardstore.Store, tenant: str, subject: str, turns: int = 10) -> uuid.UUID:
    """A session of ``subject`` with turns folded and buffered, a checkpoint, a fact and a
    summary, all sealed."""
    sid = store.create_session(tenant_id=tenant, subject_id=subject)
    store.append_turns(
        sid, [{"role": "user", "content": f"{MARKER} {i} " + "w " * 15} for i in range(turns)]
    )
    store.flush(sid)
    store.drain_folds()
    store.append_turn(sid, {"role": "assistant", "content": f"{MARKER} buffered"})
    store.checkpoint(sid, {"plan": MARKER}, tool_calls=[MARKER], tool_results=[MARKER])
    store.remember(tenant, subject, "likes", f"{MARKER} tea", source=(sid, 0))
    assert store.summarize(lambda ts: f"{MARKER} summary {len(ts)}", session_id=sid) >= 1
    return sid


def _reads(store: shardstore.Store, tenant: str, subject: str, sid: uuid.UUID) -> Any:
    return (
        [t.message for t in store.history(sid)],
        store.restore(sid).checkpoint,
        [f.value for f in store.recall(tenant, subject)],
        [s.text for s in store.summaries(sid)],
    )


def test_kek_rotation_rewraps_every_key_and_rewrites_no_row(
    module_dsn: str, tmp_path: Path
) -> None:
    old_kek, new_kek = tmp_path / "old.kek", tmp_path / "new.kek"
    keys = LocalKeyProvider(tmp_path / "ks", key_file=old_kek)
    store = shardstore.connect(module_dsn, encryption=keys, chunk_tokens=60)
    try:
        sid = _fill(store, "kek-t", "ann")
        gone = store.create_session(tenant_id="kek-t", subject_id="bob")
        store.append_turn(gone, {"role": "user", "content": MARKER})
        store.rotate_data_key(tenant_id="kek-t", subject_id="ann")  # a retired version, shredded
        store.rotate_data_key(tenant_id="kek-t", subject_id="ann")
        (bob_kid,) = store.purge_subject("kek-t", "bob", shred=True).shredded_keys
        before_rows = _sealed_rows(module_dsn, "kek-t")
        before = _reads(store, "kek-t", "ann", sid)
        # another process's store, still on the old KEK, that has read before
        running = shardstore.connect(
            module_dsn, encryption=LocalKeyProvider(tmp_path / "ks", key_file=old_kek)
        )
        assert _reads(running, "kek-t", "ann", sid) == before

        report = keys.rotate_kek(new_kek)
        try:  # it goes on with the keys it holds (a key id names one key for ever)
            assert _reads(running, "kek-t", "ann", sid) == before
        finally:
            running.close()
        assert report.rewrapped == len(list((tmp_path / "ks" / "keys").glob("*.key"))) >= 1
        assert keys.rotate_kek(new_kek).rewrapped == 0  # a repeat finds nothing left to do
        assert _sealed_rows(module_dsn, "kek-t") == before_rows  # byte for byte
        for file in (tmp_path / "ks" / "keys").glob("*.key"):
            assert json.loads(file.read_text())["kek"] == keys.provider.key_id
    finally:
        store.close()

    new_keys = LocalKeyProvider(tmp_path / "ks", key_file=new_kek)
    with shardstore.connect(module_dsn, encryption=new_keys) as fresh:
        assert _reads(fresh, "kek-t", "ann", sid) == before
    with pytest.raises(KeyShredded):  # shredded before the rotation: still shredded
        new_keys.key(bob_kid)
    with shardstore.connect(
        module_dsn, encryption=LocalKeyProvider(tmp_path / "ks", key_file=old_kek)
    ) as stale:
        with pytest.raises(DecryptionFailed):
            stale.tail(sid)
        with pytest.raises(DecryptionFailed):
            stale.recall("kek-t", "ann")


def test_data_key_rotation_reseals_every_value_and_shreds_the_old_key(
    enc_store: shardstore.Store, keys: LocalKeyProvider, module_dsn: str
) -> None:
    sid = _fill(enc_store, "rot-t", "cara")
    second = enc_store.create_session(tenant_id="rot-t", subject_id="cara")
    enc_store.append_turn(second, {"role": "user", "content": MARKER})
    bystander = _fill(enc_store, "rot-t", "dan", turns=3)
    (old,) = _key_ids(module_dsn, "rot-t") - {
        keys.key_for(Scope("subject", "rot-t", "dan")).kid  # type: ignore[union-attr]
    }
    dan_rows = [r for r in _sealed_rows(module_dsn, "rot-t") if str(bystander) in r[0]]
    before = _reads(enc_store, "rot-t", "cara", sid)

    report = enc_store.rotate_data_key(tenant_id="rot-t", subject_id="cara", batch_size=2)

    new = keys.key_for(Scope("subject", "rot-t", "cara"), create=False)
    assert new is not None and report.new_key == new.kid != old
    assert report.shredded_keys == (old,)
    assert report.resealed["turns"] >= 12 and report.resealed["checkpoints"] == 1
    assert report.resealed["facts"] == 1 and report.resealed["summaries"] >= 1
    assert report.sessions == 2
    assert old not in _key_ids(module_dsn, "rot-t")
    assert new.kid in _key_ids(module_dsn, "rot-t")
    with pytest.raises(KeyShredded):
        keys.key(old)
    assert keys.retired(Scope("subject", "rot-t", "cara")) == []
    assert _reads(enc_store, "rot-t", "cara", sid) == before
    assert enc_store.tail(second)[0].message["content"] == MARKER
    # another subject's rows are untouched
    assert [r for r in _sealed_rows(module_dsn, "rot-t") if str(bystander) in r[0]] == dan_rows


def test_turns_of_a_later_rewind_epoch_are_resealed_for_it(enc_store: shardstore.Store) -> None:
    # a rewind starts an epoch: the turns after the cut are bound to it, and a rotation
    # re-seals them for the same epoch (re-sealing a turn for its bare seq would make
    # every turn written after a rewind unreadable)
    sid = enc_store.create_session(tenant_id="rot-e", subject_id="eve")
    enc_store.append_turns(sid, [{"role": "user", "content": f"{MARKER} {i}"} for i in range(4)])
    enc_store.rewind(sid, 2)
    enc_store.append_turns(
        sid, [{"role": "user", "content": f"{MARKER} new {i}"} for i in range(2)]
    )
    before = [t.message for t in enc_store.tail(sid, n=10)]
    report = enc_store.rotate_data_key(tenant_id="rot-e", subject_id="eve")
    assert report.resealed["turns"] == 4 and report.shredded_keys
    assert [t.message for t in enc_store.tail(sid, n=10)] == before
    assert [t.message["content"] for t in enc_store.history(sid)] == [
        f"{MARKER} 0",
        f"{MARKER} 1",
        f"{MARKER} new 0",
        f"{MARKER} new 1",
    ]


def test_appends_during_a_rotation_are_all_kept(
    enc_store: shardstore.Store, keys: LocalKeyProvider, module_dsn: str, key_dir: Path
) -> None:
    sid = enc_store.create_session(tenant_id="busy-t", subject_id="eli")
    expected = [{"role": "user", "content": f"{MARKER} {i}"} for i in range(30)]
    enc_store.append_turns(sid, expected)
    # a second store with its own key store object: as another process would be
    writer = shardstore.connect(
        module_dsn,
        encryption=LocalKeyProvider(key_dir / "store", key_file=key_dir / "kek"),
        chunk_tokens=60,
    )
    started, rotated = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def append() -> None:
        try:
            i = 0
            while not rotated.is_set() or i < 5:
                message = {"role": "assistant", "content": f"during {i}"}
                writer.append_turn(sid, message)
                expected.append(message)
                i += 1
                started.set()
        except BaseException as exc:
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=append)
    thread.start()
    try:
        started.wait()
        report = enc_store.rotate_data_key(tenant_id="busy-t", subject_id="eli", batch_size=1)
    finally:
        rotated.set()
        thread.join()
        writer.close()
    assert not errors
    assert [t.message for t in enc_store.history(sid)] == expected
    assert _key_ids(module_dsn, "busy-t") == {report.new_key}


def test_hostile_arguments_are_typed_errors_and_change_nothing(
    enc_store: shardstore.Store, plain_store: shardstore.Store, keys: LocalKeyProvider
) -> None:
    sid = enc_store.create_session(tenant_id="bad-t", subject_id="fay")
    enc_store.append_turn(sid, {"role": "user", "content": MARKER})
    loose = enc_store.create_session(tenant_id="bad-t")
    enc_store.append_turn(loose, {"role": "user", "content": MARKER})
    scope = Scope("subject", "bad-t", "fay")
    kid = keys.key_for(scope, create=False).kid  # type: ignore[union-attr]
    bad: list[tuple[dict[str, Any], type[Exception]]] = [
        ({}, InvalidInput),
        ({"tenant_id": "bad-t", "subject_id": "fay", "session_id": sid}, InvalidInput),
        ({"tenant_id": "bad-t", "subject_id": 5}, InvalidInput),
        ({"tenant_id": ["bad-t"], "subject_id": "fay"}, InvalidInput),
        ({"subject_id": "fay"}, InvalidInput),  # no tenant
        ({"tenant_id": "bad-t", "subject_id": "x" * 100_000}, InvalidInput),
        ({"tenant_id": "bad-t", "subject_id": "f\x00y"}, InvalidInput),
        ({"tenant_id": "bad-t", "subject_id": "nobody"}, InvalidInput),
        ({"session_id": "not-a-uuid"}, InvalidInput),
        ({"session_id": {"deep": [[[[1]]]]}}, InvalidInput),
        ({"session_id": uuid.uuid4()}, SessionNotFound),
        ({"session_id": sid}, InvalidInput),  # has a subject: rotate the subject
        ({"session_id": loose, "tenant_id": "other-t"}, SessionNotFound),
    ]
    for size in (0, -1, 10_001, 2**70, True, "5", 1.5, None):
        bad.append(({"tenant_id": "bad-t", "subject_id": "fay", "batch_size": size}, InvalidInput))
    for kwargs, error in bad:
        with pytest.raises(error):
            enc_store.rotate_data_key(**kwargs)
    with pytest.raises(ConfigurationError):
        plain_store.rotate_data_key(tenant_id="bad-t", subject_id="fay")
    # a rotation of the same scope in progress (here: its lock held) refuses a second one
    with keys.rotating(scope), pytest.raises(Conflict):
        enc_store.rotate_data_key(tenant_id="bad-t", subject_id="fay")
    assert keys.key_for(scope, create=False).kid == kid  # type: ignore[union-attr]
    assert keys.retired(scope) == []
    # a subject-less session's own key rotates by session id
    report = enc_store.rotate_data_key(session_id=str(loose))
    assert report.scope == "session" and report.resealed["turns"] == 1
    assert enc_store.tail(loose)[0].message["content"] == MARKER

    with pytest.raises(ConfigurationError):
        keys.rewrap("new kek")  # type: ignore[arg-type]
    for wrong in (5, "", None):
        with pytest.raises(ConfigurationError):
            keys.rotate_kek(wrong)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        LocalKeyProvider(keys.path, previous_key_files="old.kek")


def test_the_async_store_rotates_the_same_way(module_dsn: str, keys: LocalKeyProvider) -> None:
    async def scenario() -> None:
        store = await shardstore.connect_async(module_dsn, encryption=keys, chunk_tokens=60)
        try:
            sid = await store.create_session(tenant_id="aio-t", subject_id="gus")
            await store.append_turns(sid, [{"role": "user", "content": MARKER}] * 3)
            await store.remember("aio-t", "gus", "k", MARKER, source=None)
            report = await store.rotate_data_key(tenant_id="aio-t", subject_id="gus")
            assert report.resealed["turns"] == 3 and report.resealed["facts"] == 1
            assert len(report.shredded_keys) == 1
            assert [t.message["content"] for t in await store.tail(sid)] == [MARKER] * 3
            with pytest.raises(InvalidInput):
                await store.rotate_data_key(tenant_id="aio-t", subject_id="gus", batch_size=0)
        finally:
            await store.close()

    asyncio.run(scenario())
    assert _key_ids(module_dsn, "aio-t") == {
        keys.key_for(Scope("subject", "aio-t", "gus")).kid  # type: ignore[union-attr]
    }


def test_a_tenant_rotates_only_its_own_keys(
    enc_store: shardstore.Store, module_dsn: str, keys: LocalKeyProvider
) -> None:
    role = make_tenant_role(module_dsn)
    try:
        own = enc_store.create_session(tenant_id="acme-r", subject_id="hal")
        other = enc_store.create_session(tenant_id="globex-r", subject_id="hal")
        for sid in (own, other):
            enc_store.append_turn(sid, {"role": "user", "content": MARKER})
        theirs = keys.key_for(Scope("subject", "globex-r", "hal"), create=False)
        assert theirs is not None
        globex_rows = _sealed_rows(module_dsn, "globex-r")
        with as_tenant(module_dsn, role, "acme-r") as conn:
            store = rls.connect_tenant(conn, encryption=keys)
            try:
                report = store.rotate_data_key(subject_id="hal")
                assert report.tenant_id == "acme-r" and report.resealed["turns"] == 1
                assert store.tail(own)[0].message["content"] == MARKER
                with pytest.raises(AccessDenied):
                    store.rotate_data_key(tenant_id="globex-r", subject_id="hal")
                with pytest.raises(SessionNotFound):
                    store.rotate_data_key(session_id=other)
                # its raw SQL re-seals nothing of another tenant's either
                cur = conn.execute(
                    "UPDATE shardstore.turn_buffer SET message = message WHERE session_id = %s",
                    (other,),
                )
                assert cur.rowcount == 0
            finally:
                store.close()
        assert keys.key_for(Scope("subject", "globex-r", "hal"), create=False) == theirs
        assert _sealed_rows(module_dsn, "globex-r") == globex_rows
        assert enc_store.tail(other)[0].message["content"] == MARKER
    finally:
        drop_tenant_role(module_dsn, role)


def test_langgraph_rows_are_resealed_and_artifact_keys_kept(
    enc_store: shardstore.Store, keys: LocalKeyProvider, module_dsn: str
) -> None:
    pytest.importorskip("langgraph.checkpoint.base")
    from langchain_core.messages import HumanMessage

    from shardstore.integrations.langgraph import ShardstoreSaver
    from tests.integrations.test_langgraph_checkpointer import build_graph

    # a graph interrupted for approval: its checkpoint states and pending writes are sealed
    # under the thread session's own key (the saver's sessions have no subject)
    config: Any = {"configurable": {"thread_id": "rot-thread"}}
    graph = build_graph(ShardstoreSaver(enc_store, tenant_id="lg-t"))
    graph.invoke({"messages": [HumanMessage(MARKER, id="h1")]}, config)
    before = graph.get_state(config)
    ((sid,),) = raw(
        module_dsn,
        "SELECT DISTINCT session_id FROM shardstore.langgraph_writes WHERE tenant_id = 'lg-t'",
    )
    (old,) = _key_ids(module_dsn, "lg-t")
    report = enc_store.rotate_data_key(session_id=sid)
    assert report.resealed["checkpoints"] >= 1 and report.resealed["langgraph_writes"] >= 1
    assert report.shredded_keys == (old,)
    left = raw(
        module_dsn,
        "SELECT count(*) FROM shardstore.langgraph_writes WHERE tenant_id = 'lg-t'"
        " AND position(%s::bytea in value) > 0",
        (old.encode(),),
    )
    assert left == [(0,)]
    again = build_graph(ShardstoreSaver(enc_store, tenant_id="lg-t")).get_state(config)
    assert again.values == before.values and again.next == before.next

    # artifact bytes are not re-keyed: the version that seals them is kept
    owner = enc_store.create_session(tenant_id="art-t", subject_id="nia")
    enc_store.append_turn(owner, {"role": "user", "content": MARKER})
    ref = enc_store.put_artifact(
        "art-t", f"{MARKER} bytes", content_type="text/plain", owner=("turn", f"{owner}:0")
    )
    scope = Scope("subject", "art-t", "nia")
    art_kid = keys.key_for(scope, create=False).kid  # type: ignore[union-attr]
    report = enc_store.rotate_data_key(tenant_id="art-t", subject_id="nia")
    assert report.kept_keys == (art_kid,) and report.shredded_keys == ()
    assert keys.retired(scope) == [art_kid]
    assert enc_store.get_artifact("art-t", ref.artifact_id) == f"{MARKER} bytes".encode()
    assert enc_store.tail(owner)[0].message["content"] == MARKER


def test_the_keys_commands(
    enc_store: shardstore.Store,
    module_dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from shardstore.cli import main

    keys = LocalKeyProvider(tmp_path / "ks", key_file=tmp_path / "kek")
    with shardstore.connect(module_dsn, encryption=keys) as store:
        sid = store.create_session(tenant_id="cli-t", subject_id="ola")
        store.append_turn(sid, {"role": "user", "content": MARKER})
    store_args = ["--key-store", str(tmp_path / "ks")]

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main(["--dsn", module_dsn, *argv])
        out, err = capsys.readouterr()
        return rc, out, err

    rc, out, _err = run(
        "--json",
        "keys",
        "rotate",
        *store_args,
        "--key-file",
        str(tmp_path / "kek"),
        "--tenant",
        "cli-t",
        "--subject",
        "ola",
        "--batch-size",
        "1",
    )
    doc = json.loads(out)
    assert rc == 0 and doc["resealed"]["turns"] == 1 and len(doc["shredded_keys"]) == 1
    rc, out, _err = run(
        "keys",
        "rotate-kek",
        *store_args,
        "--key-file",
        str(tmp_path / "kek"),
        "--new-key-file",
        str(tmp_path / "new.kek"),
    )
    assert rc == 0 and "rewrapped" in out
    # the old KEK opens nothing now; the new one opens everything
    rc, _out, err = run(
        "keys",
        "rotate",
        *store_args,
        "--key-file",
        str(tmp_path / "kek"),
        "--tenant",
        "cli-t",
        "--subject",
        "ola",
    )
    assert rc != 0 and "Traceback" not in err
    rc, out, err = run(
        "keys",
        "rotate",
        *store_args,
        "--key-file",
        str(tmp_path / "new.kek"),
        "--tenant",
        "cli-t",
        "--subject",
        "ola",
    )
    assert rc == 0, err
    assert "re-sealed" in out and "shredded" in out and "new key" in out
    for argv in (
        ["keys", "rotate", *store_args, "--subject", "ola"],  # no tenant
        ["keys", "rotate", *store_args, "--session", str(sid), "--tenant", "cli-t"],
        [
            "keys",
            "rotate",
            *store_args,
            "--tenant",
            "cli-t",
            "--subject",
            "ola",
            "--batch-size",
            "0",
        ],
        ["keys", "rotate", "--tenant", "cli-t", "--subject", "ola"],  # no key store
    ):
        rc, _out, err = run(*argv)
        assert rc != 0 and "Traceback" not in err, argv
    with shardstore.connect(
        module_dsn, encryption=LocalKeyProvider(tmp_path / "ks", key_file=tmp_path / "new.kek")
    ) as store:
        assert store.tail(sid)[0].message["content"] == MARKER


def test_text_search_finds_a_rotated_subjects_turns(enc_store: shardstore.Store) -> None:
    # keyed lexeme hashes are derived from the data key: after a rotation the scope's turns
    # must be found by queries hashed with the new version, before and after the old one is
    # shredded
    sid = enc_store.create_session(tenant_id="rot-s", subject_id="sia")
    enc_store.append_turns(
        sid,
        [
            {"role": "user", "content": "the locker code is QX-9090"},
            {"role": "assistant", "content": "ok"},
        ],
    )

    def found() -> list[str]:
        hits = enc_store.search("QX-9090", session_id=sid, mode="text", k=3)
        by_tenant = enc_store.search("QX-9090", tenant_id="rot-s", mode="text", k=3)
        return [t.message["content"] for h in [*hits, *by_tenant] for t in h.turns]

    assert found().count("the locker code is QX-9090") == 2
    report = enc_store.rotate_data_key(tenant_id="rot-s", subject_id="sia")
    assert report.shredded_keys
    assert found().count("the locker code is QX-9090") == 2
