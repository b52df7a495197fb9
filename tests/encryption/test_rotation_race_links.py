"""The data-key rotation against the three links of sealed bytes to a session that are written
apart from the upload: a span payload's (``attach_payload`` with a session), an import's (a
session's artifacts stored in its transaction) and a later ``ref_artifact``. Each must either
be seen by the rotation's final check (which then keeps the version the bytes are sealed
under) or refuse bytes under a version the rotation made old; no link may name bytes whose
key the rotation shreds.

As in test_rotation_race_artifacts.py, the writer is stopped at a chosen key read by a hook on
the key store (threading.Event, no sleeps) while the rotation runs."""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider, Scope
from shardstore.errors import ArtifactNotFound, Conflict, InvalidInput, KeyShredded
from tests.encryption.conftest import raw
from tests.encryption.test_rotation_race_artifacts import race, sealed_kid

MARKER = b"okapi-link-race-7207"
# attach_payload's key reads: the session's key for sealing (no lock), then the one under the
# session row's lock in the reference's transaction
PAYLOAD_LOCKED_READ = 2


@pytest.fixture(scope="module")
def store(module_dsn: str, keys: LocalKeyProvider) -> Iterator[shardstore.Store]:
    made = shardstore.connect(module_dsn, encryption=keys)
    yield made
    made.close()


def _subject(store: shardstore.Store, label: str) -> tuple[str, str, uuid.UUID]:
    tenant = f"race-link-{label}-{uuid.uuid4().hex[:8]}"
    sid = store.create_session(tenant_id=tenant, subject_id="ama")
    store.append_turn(sid, {"role": "user", "content": "hello"})
    return tenant, "ama", sid


def _current_kid(keys: LocalKeyProvider, tenant: str, subject: str) -> str:
    key = keys.key_for(Scope("subject", tenant, subject), create=False)
    assert key is not None
    return key.kid


def _counts(dsn: str, tenant: str) -> list[Any]:
    """The tenant's references and session links."""
    return raw(
        dsn,
        "SELECT count(*) FROM shardstore.artifact_refs WHERE tenant_id = %s"
        " UNION ALL SELECT count(*) FROM shardstore.artifact_links WHERE tenant_id = %s",
        (tenant, tenant),
    )


# ---------------------------------------------------------------- attach_payload


@pytest.mark.parametrize("held", [False, True], ids=["rotated-first", "link-held"])
def test_a_payload_is_sealed_again_or_its_link_keeps_the_version(
    held: bool,
    store: shardstore.Store,
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant, subject, sid = _subject(store, "span")
    old = _current_kid(keys, tenant, subject)
    writer, report, waited = race(
        monkeypatch,
        keys,
        [module_dsn],
        lambda: store.attach_payload(
            None,
            MARKER,
            name="prompt",
            content_type="text/plain",
            tenant_id=tenant,
            session_id=sid,
        ),
        lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
        nth=PAYLOAD_LOCKED_READ if held else 1,
    )
    assert writer.error is None and waited is held
    ref = writer.result
    if held:
        # the reference held the session row: the final check waited, saw the link, kept
        assert report.kept_keys == (old,) and report.shredded_keys == ()
        assert sealed_kid(store, module_dsn, tenant, ref.artifact_id) == old
    else:
        # nothing linked when the rotation looked: it shredded the old version, and the
        # reference then met the new one and the payload was sealed again under it
        assert report.shredded_keys == (old,) and report.kept_keys == ()
        assert sealed_kid(store, module_dsn, tenant, ref.artifact_id) == report.new_key
    assert store.get_artifact(tenant, ref.artifact_id) == MARKER
    assert _counts(module_dsn, tenant) == [(1,), (1,)]


def test_a_payload_stream_whose_key_was_rotated_is_refused_and_referenced_nowhere(
    store: shardstore.Store,
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant, subject, sid = _subject(store, "stream")
    writer, report, _waited = race(
        monkeypatch,
        keys,
        [module_dsn],
        lambda: store.attach_payload(
            None,
            io.BytesIO(MARKER),
            name="tool",
            content_type="text/plain",
            tenant_id=tenant,
            session_id=sid,
        ),
        lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
    )
    # a file object is read once and cannot be sealed again: Conflict (retryable), and no
    # reference or link names the bytes under the shredded version (the sweep takes them)
    assert isinstance(writer.error, Conflict) and writer.error.retryable
    assert report.shredded_keys and report.kept_keys == ()
    assert _counts(module_dsn, tenant) == [(0,), (0,)]


def test_async_payload_whose_key_was_rotated_is_sealed_again(
    store: shardstore.Store,
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant, subject, sid = _subject(store, "async")
    old = _current_kid(keys, tenant, subject)

    async def attach() -> Any:
        async with await shardstore.connect_async(module_dsn, encryption=keys) as astore:
            return await astore.attach_payload(
                None,
                MARKER,
                name="prompt",
                content_type="text/plain",
                tenant_id=tenant,
                session_id=sid,
            )

    writer, report, waited = race(
        monkeypatch,
        keys,
        [module_dsn],
        lambda: asyncio.run(attach()),
        lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
    )
    assert not waited and report.shredded_keys == (old,)
    assert writer.error is None
    assert sealed_kid(store, module_dsn, tenant, writer.result.artifact_id) == report.new_key
    assert store.get_artifact(tenant, writer.result.artifact_id) == MARKER


# ---------------------------------------------------------------- import


def test_an_import_whose_subject_key_was_rotated_is_refused_and_a_rerun_imports_it(
    store: shardstore.Store,
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant, subject, sid = _subject(store, "import")
    original = store.put_artifact(
        tenant, MARKER, content_type="text/plain", owner=("turn", f"{sid}:0")
    )
    out = io.StringIO()
    store.export_sessions([sid], out=out, decrypt=True)
    export = out.getvalue()

    def run_import() -> Any:
        return store.import_jsonl(io.StringIO(export), remap_ids=True, import_id="race")

    def sessions() -> list[Any]:
        return raw(
            module_dsn, "SELECT count(*) FROM shardstore.sessions WHERE tenant_id = %s", (tenant,)
        )

    old = _current_kid(keys, tenant, subject)
    # stopped at the import's first key read, which it makes holding the subject's lock:
    # the rotation's final check waits for the session's transaction, whose check then
    # finds the version replaced and refuses the session (nothing of it written)
    writer, report, waited = race(
        monkeypatch,
        keys,
        [module_dsn],
        run_import,
        lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
    )
    assert waited and isinstance(writer.error, Conflict) and writer.error.retryable
    assert report.kept_keys == (old,)  # the exported session's own artifact keeps it
    assert sessions() == [(1,)]
    assert [a.ref.artifact_id for a in store.list_artifacts(tenant)] == [original.artifact_id]
    monkeypatch.undo()
    # the same import again: the session and its artifact, under the current version
    again = run_import()
    assert again.sessions == 1 and again.artifacts == 1
    assert sessions() == [(2,)]
    (imported,) = [
        a.ref.artifact_id
        for a in store.list_artifacts(tenant)
        if a.ref.artifact_id != original.artifact_id
    ]
    assert sealed_kid(store, module_dsn, tenant, imported) == report.new_key
    assert store.get_artifact(tenant, imported) == MARKER


def test_an_import_checked_before_the_rotation_started_keeps_its_artifacts_readable(
    store: shardstore.Store,
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant, subject, sid = _subject(store, "window")
    store.put_artifact(tenant, MARKER, content_type="text/plain", owner=("turn", f"{sid}:0"))
    out = io.StringIO()
    store.export_sessions([sid], out=out, decrypt=True)
    # nothing of the source session keeps the version: only the import's link could
    raw(module_dsn, "DELETE FROM shardstore.artifact_links WHERE tenant_id = %s", (tenant,))
    export = out.getvalue()
    # stopped at the check's key read (the version still current): the rotation starts
    # after it, and its final check waits for the import's subject lock
    writer, _report, waited = race(
        monkeypatch,
        keys,
        [module_dsn],
        lambda: store.import_jsonl(io.StringIO(export), remap_ids=True, import_id="window"),
        lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
        nth=2,
    )
    assert waited and writer.error is None
    # the imported session links the artifact (the same content under the same version is
    # stored once): it must still open
    (artifact,) = store.list_artifacts(tenant)
    assert store.get_artifact(tenant, artifact.ref.artifact_id) == MARKER


# ---------------------------------------------------------------- ref_artifact


def _abandoned(
    store: shardstore.Store, dsn: str, tenant: str, sid: uuid.UUID, data: bytes
) -> uuid.UUID:
    """An artifact sealed under the session's key that no link names, as an offloading
    append leaves the strings it uploaded before its Conflict."""
    ref = store.put_artifact(tenant, data, content_type="text/plain", owner=("turn", f"{sid}:0"))
    for table in ("artifact_refs", "artifact_links"):
        raw(dsn, f"DELETE FROM shardstore.{table} WHERE tenant_id = %s", (tenant,))
    return ref.artifact_id


@pytest.mark.parametrize("held", [False, True], ids=["rotated-first", "ref-held"])
def test_a_reference_to_bytes_under_a_rotated_version_is_refused_or_seen(
    held: bool,
    store: shardstore.Store,
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant, subject, sid = _subject(store, "ref")
    aid = _abandoned(store, module_dsn, tenant, sid, MARKER + b" ref")
    old = _current_kid(keys, tenant, subject)
    writer, report, waited = race(
        monkeypatch,
        keys,
        [module_dsn],
        lambda: store.ref_artifact(tenant, aid, "turn", f"{sid}:0"),
        lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
        # ref_artifact's key reads: the owner's key (no lock), then under the row's lock
        nth=2 if held else 1,
    )
    assert waited is held
    if held:
        # the reference held the session row: the final check saw its link and kept
        assert writer.error is None
        assert report.kept_keys == (old,) and report.shredded_keys == ()
        assert store.get_artifact(tenant, aid) == MARKER + b" ref"
    else:
        # the rotation saw no link and shredded the version: the reference is refused
        assert isinstance(writer.error, KeyShredded)
        assert report.shredded_keys == (old,)
        assert _counts(module_dsn, tenant) == [(0,), (0,)]


def test_ref_artifact_refuses_a_retired_version_and_takes_the_current_one(
    store: shardstore.Store, keys: LocalKeyProvider, module_dsn: str
) -> None:
    tenant, subject, sid = _subject(store, "retired")
    other = store.create_session(tenant_id=tenant, subject_id=subject)
    store.append_turn(other, {"role": "user", "content": "there"})
    kept = store.put_artifact(
        tenant, MARKER + b" kept", content_type="text/plain", owner=("turn", f"{sid}:0")
    )
    report = store.rotate_data_key(tenant_id=tenant, subject_id=subject)
    assert report.kept_keys  # the link of ``sid`` keeps the version the bytes are under
    with pytest.raises(InvalidInput, match="retired version"):
        store.ref_artifact(tenant, kept.artifact_id, "turn", f"{other}:0")
    fresh = store.put_artifact(
        tenant, MARKER + b" fresh", content_type="text/plain", owner=("turn", f"{sid}:0")
    )
    store.ref_artifact(tenant, fresh.artifact_id, "turn", f"{other}:0")
    # the tenant's key is never rotated: its bytes may be referenced from any session
    loose = store.put_artifact(tenant, MARKER + b" loose", content_type="text/plain")
    store.ref_artifact(tenant, loose.artifact_id, "turn", f"{other}:0")
    refs = raw(
        module_dsn,
        "SELECT artifact_id FROM shardstore.artifact_refs WHERE tenant_id = %s"
        " AND owner_id = %s ORDER BY 1",
        (tenant, f"{other}:0"),
    )
    assert sorted(r[0] for r in refs) == sorted([fresh.artifact_id, loose.artifact_id])


@pytest.mark.parametrize(
    "owner",
    [
        ("turn", f"{uuid.uuid4()}:0"),
        ("checkpoint", str(uuid.uuid4())),
        ("turn", "not-a-session:0"),
        ("turn", "x" * 100_000),
    ],
    ids=["no-session", "no-checkpoint", "bad-session-id", "oversized"],
)
def test_ref_artifact_on_an_encrypted_store_refuses_owners_it_does_not_have(
    owner: tuple[str, str], store: shardstore.Store, module_dsn: str
) -> None:
    tenant, _subject_id, sid = _subject(store, "hostile")
    ref = store.put_artifact(tenant, MARKER, content_type="text/plain", owner=("turn", f"{sid}:0"))
    with pytest.raises((ArtifactNotFound, InvalidInput)):
        store.ref_artifact(tenant, ref.artifact_id, *owner)
    # another tenant naming this tenant's session is refused too, and sees nothing
    with pytest.raises(ArtifactNotFound):
        store.ref_artifact("race-link-intruder", ref.artifact_id, "turn", f"{sid}:0")
    assert _counts(module_dsn, tenant) == [(1,), (1,)]
