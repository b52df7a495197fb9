"""The data-key rotation against artifact uploads in flight, on every backend: an upload
that read its session's data key before a rotation made a new version current, and links
its bytes to the session after the rotation's final check, must not end up sealed under a
version the rotation shreds.

Each writer is stopped at a chosen key read, in its own thread, by a hook on the key store
(threading.Event, no sleeps): at its first read (it holds no lock: the rotation finishes and
shreds the old version, and the writer then meets the new version under its session row's
lock) or at the read it makes under that lock (the rotation's final check waits for it, and
keeps the version its bytes are sealed under). Afterwards every artifact opens."""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider, Scope
from shardstore.encryption.artifacts import HEADER_BYTES, MAGIC
from shardstore.errors import Conflict
from tests.artifacts.support import s3_url
from tests.encryption.conftest import raw
from tests.encryption.test_artifacts_encrypted import stored_bytes

MARKER = b"pangolin-race-5581"
RELEASE_WAIT_S = 60.0  # a safety net for a broken run, never a timing assertion
BACKENDS = ("postgres", "file", "s3")
# key reads a put with a turn owner makes up to its locked one: the owner's key, then (object
# backends) an unlocked look before the claim, then the read under the session row's lock
LOCKED_READ = {"postgres": 2, "file": 3, "s3": 3}


class Run(threading.Thread):
    """``fn()`` in a thread, keeping its result or error."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as exc:
            self.error = exc


class PausedKeyRead:
    """Wraps the key store's ``key_for`` so that the writer's ``nth`` key read stops there
    until released. Reads of the test's own thread and of threads marked ``quiet`` (the
    rotation's) are not counted; the writer's may come from worker threads (asyncio)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, keys: Any, nth: int) -> None:
        self.read, self.go = threading.Event(), threading.Event()
        self.quiet = {threading.get_ident()}
        self.count = 0
        self.nth = nth
        original = keys.key_for

        def key_for(*args: Any, **kwargs: Any) -> Any:
            key = original(*args, **kwargs)
            if threading.get_ident() not in self.quiet and not self.read.is_set():
                self.count += 1
                if self.count == self.nth:
                    self.read.set()
                    self.go.wait(RELEASE_WAIT_S)
            return key

        monkeypatch.setattr(keys, "key_for", key_for)

    def start(self, write: Callable[[], Any]) -> Run:
        writer = Run(write)
        writer.start()
        assert self.read.wait(RELEASE_WAIT_S), "the writer never made that key read"
        return writer

    def rotation(self, rotate: Callable[[], Any]) -> Run:
        def quietly() -> Any:
            self.quiet.add(threading.get_ident())
            return rotate()

        run = Run(quietly)
        run.start()
        return run


def lock_waiters(dsns: list[str]) -> int:
    """Backends waiting on a lock in the databases ``dsns`` name (one per node)."""
    total = 0
    for dsn in dsns:
        ((n,),) = raw(
            dsn,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND wait_event_type = 'Lock'",
        )
        total += int(n)
    return total


def until(condition: Callable[[], bool]) -> None:
    """Poll a state of the database or of a thread (not a timing): a broken run fails after
    the safety net instead of hanging."""
    deadline = time.monotonic() + RELEASE_WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the rotation neither waited nor finished"
        time.sleep(0.01)


def race(
    monkeypatch: pytest.MonkeyPatch,
    keys: Any,
    dsns: list[str],
    write: Callable[[], Any],
    rotate: Callable[[], Any],
    nth: int = 1,
) -> tuple[Run, Any, bool]:
    """``write`` stopped at its ``nth`` key read while ``rotate`` runs until it finishes or
    waits on a lock; returns the finished writer (its error kept), the rotation's report and
    whether the rotation had to wait for the writer."""
    paused = PausedKeyRead(monkeypatch, keys, nth)
    writer = paused.start(write)
    rotation = paused.rotation(rotate)
    until(lambda: not rotation.is_alive() or lock_waiters(dsns) > 0)
    waited = rotation.is_alive()
    paused.go.set()
    writer.join(RELEASE_WAIT_S)
    rotation.join(RELEASE_WAIT_S)
    assert not writer.is_alive() and not rotation.is_alive()
    if rotation.error is not None:
        raise rotation.error
    return writer, rotation.result, waited


def sealed_kid(store: shardstore.Store, dsn: str, tenant: str, aid: uuid.UUID) -> str:
    """The key id in a sealed artifact's header, read as its backend stores it."""
    head = stored_bytes(store, dsn, tenant, aid)[:HEADER_BYTES]
    return str(json.loads(head[len(MAGIC) :].rstrip(b" "))["k"])


def _url(kind: str, root: Path) -> str:
    if kind == "postgres":
        return "postgres"
    if kind == "file":
        return (root / "objects").as_uri()
    return s3_url()


@pytest.fixture(scope="module")
def stores(
    module_dsn: str, keys: LocalKeyProvider, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, shardstore.Store]]:
    """An encrypted store per backend, over one database and one key store."""
    root = tmp_path_factory.mktemp("race-artifacts")
    made: dict[str, shardstore.Store] = {}
    try:
        for kind in BACKENDS:
            made[kind] = shardstore.connect(
                module_dsn, encryption=keys, artifacts=_url(kind, root), offload_over=512
            )
        yield made
    finally:
        for store in made.values():
            store.close()


def _current_kid(keys: LocalKeyProvider, tenant: str, subject: str) -> str:
    key = keys.key_for(Scope("subject", tenant, subject), create=False)
    assert key is not None
    return key.kid


def _subject(store: shardstore.Store) -> tuple[str, str, uuid.UUID]:
    tenant = f"race-art-{uuid.uuid4().hex[:8]}"
    sid = store.create_session(tenant_id=tenant, subject_id="ama")
    store.append_turn(sid, {"role": "user", "content": "hello"})
    return tenant, "ama", sid


@pytest.mark.parametrize("kind", BACKENDS)
def test_an_upload_whose_key_was_rotated_meanwhile_is_sealed_again(
    kind: str,
    stores: dict[str, shardstore.Store],
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = stores[kind]
    tenant, subject, sid = _subject(store)
    old = _current_kid(keys, tenant, subject)
    data = MARKER + kind.encode()
    writer, report, waited = race(
        monkeypatch,
        keys,
        [module_dsn],
        lambda: store.put_artifact(
            tenant, data, content_type="text/plain", owner=("turn", f"{sid}:0")
        ),
        lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
    )
    # stopped before any lock: nothing was linked when the rotation looked, so it shredded
    # the old version; the link then met the new version under the session row's lock and
    # the bytes (in memory) were sealed again under it
    assert not waited and report.shredded_keys == (old,) and report.kept_keys == ()
    assert writer.error is None
    ref = writer.result
    assert store.get_artifact(tenant, ref.artifact_id) == data
    assert sealed_kid(store, module_dsn, tenant, ref.artifact_id) == report.new_key


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_link_holding_its_session_row_makes_the_rotation_keep_the_version(
    kind: str,
    stores: dict[str, shardstore.Store],
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = stores[kind]
    tenant, subject, sid = _subject(store)
    old = _current_kid(keys, tenant, subject)
    data = MARKER + b" held " + kind.encode()
    writer, report, waited = race(
        monkeypatch,
        keys,
        [module_dsn],
        lambda: store.put_artifact(
            tenant, data, content_type="text/plain", owner=("turn", f"{sid}:0")
        ),
        lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
        nth=LOCKED_READ[kind],
    )
    # the writer held its session row (FOR KEY SHARE) from its last key read: the final
    # check waited, then saw the link and kept the version the bytes are sealed under
    assert waited and writer.error is None
    assert report.kept_keys == (old,) and report.shredded_keys == ()
    ref = writer.result
    assert sealed_kid(store, module_dsn, tenant, ref.artifact_id) == old
    assert store.get_artifact(tenant, ref.artifact_id) == data


def test_a_stream_whose_key_was_rotated_is_refused_and_links_nothing(
    stores: dict[str, shardstore.Store],
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = stores["file"]
    tenant, subject, sid = _subject(store)
    writer, report, _waited = race(
        monkeypatch,
        keys,
        [module_dsn],
        lambda: store.put_artifact(
            tenant, io.BytesIO(MARKER), content_type="text/plain", owner=("turn", f"{sid}:0")
        ),
        lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
    )
    # a file object is read once: it cannot be sealed again, so the put is refused with a
    # retryable Conflict, and nothing names the bytes sealed under the shredded version
    assert isinstance(writer.error, Conflict) and writer.error.retryable
    assert report.shredded_keys and report.kept_keys == ()
    assert raw(
        module_dsn,
        "SELECT count(*) FROM shardstore.artifact_refs WHERE tenant_id = %s"
        " UNION ALL SELECT count(*) FROM shardstore.artifact_links WHERE tenant_id = %s",
        (tenant, tenant),
    ) == [(0,), (0,)]
    assert store.list_artifacts(tenant, state="ready") == []


def test_an_offloading_append_whose_key_was_rotated_writes_nothing_then_retries(
    stores: dict[str, shardstore.Store],
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = stores["postgres"]
    tenant, subject, sid = _subject(store)
    big = MARKER.decode() + " " + "x" * 2000

    def rotate() -> Any:
        return store.rotate_data_key(tenant_id=tenant, subject_id=subject)

    def append(retry: bool) -> Any:
        message = {"role": "user", "content": big}
        return store.append_turn(sid, message, idempotency_key=f"k-{retry}", retry=retry)

    # stopped after reading the key for its offloaded string: the rotation shreds that
    # version; the append's link then refuses the string, and the append is rolled back
    plain, report, waited = race(monkeypatch, keys, [module_dsn], lambda: append(False), rotate)
    assert not waited and report.shredded_keys
    assert isinstance(plain.error, Conflict)
    assert [t.turn_seq for t in store.history(sid)] == [0]
    monkeypatch.undo()
    # with retry=True the append uploads the string again under the new version
    retried, report, _waited = race(monkeypatch, keys, [module_dsn], lambda: append(True), rotate)
    assert retried.error is None and report.shredded_keys
    (turn,) = store.tail(sid, 1, expand=True)
    assert turn.turn_seq == 1 and turn.message["content"] == big


def test_async_put_whose_key_was_rotated_is_sealed_again(
    stores: dict[str, shardstore.Store],
    keys: LocalKeyProvider,
    module_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = stores["postgres"]
    tenant, subject, sid = _subject(store)
    old = _current_kid(keys, tenant, subject)

    async def put() -> Any:
        async with await shardstore.connect_async(module_dsn, encryption=keys) as astore:
            return await astore.put_artifact(
                tenant, MARKER, content_type="text/plain", owner=("turn", f"{sid}:0")
            )

    writer, report, waited = race(
        monkeypatch,
        keys,
        [module_dsn],
        lambda: asyncio.run(put()),
        lambda: store.rotate_data_key(tenant_id=tenant, subject_id=subject),
    )
    assert not waited and report.shredded_keys == (old,)
    assert writer.error is None
    assert store.get_artifact(tenant, writer.result.artifact_id) == MARKER
