"""Key rotation crashes: a child process SIGKILLed in the middle of a KEK rotation and in the
middle of a data-key rotation. Afterwards every value is readable (a store mid KEK rotation
opens with the old and the new KEK), and a re-run finishes: every key file under the new KEK
only, every value under exactly one data key, the older versions shredded.

Kill points, each reached by a child that writes a marker and blocks there until the parent,
which waits for the marker, kills it (no timing assumption; the pattern of
tests/crash/test_shred_killed.py):

* KEK ``second-file``: the first key file rewrapped and renamed in, the others not;
* data key ``retired``: the old version copied aside, the new one not yet renamed in;
* data key ``batches``: the new version current, three values re-sealed (one per batch),
  the rest not;
* data key ``before-shred``: every value re-sealed, the old version not yet shredded."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import shardstore
from shardstore.encryption import LocalKeyProvider, Scope, keystore, rotation
from shardstore.errors import DecryptionFailed
from tests.encryption.conftest import raw

pytestmark = pytest.mark.slow

TENANT = "t"


def _block(mark: str, point: str) -> None:
    Path(mark).write_text(point)
    while True:  # the parent kills us here
        signal.pause()


def _keys(key_dir: str, kek: str = "kek", previous: tuple[str, ...] = ()) -> LocalKeyProvider:
    root = Path(key_dir)
    return LocalKeyProvider(
        root / "store", key_file=root / kek, previous_key_files=[root / p for p in previous]
    )


def _kek_rotator(key_dir: str, mark: str) -> None:
    """``rotate_kek``, stopped before it renames its second file in."""
    replace = os.replace
    calls = []

    def held_replace(src: Any, dst: Any) -> None:
        calls.append(dst)
        if len(calls) == 2:
            _block(mark, "second-file")
        replace(src, dst)

    os.replace = held_replace  # type: ignore[assignment]  # this child only
    _keys(key_dir).rotate_kek(Path(key_dir) / "new.kek")
    os._exit(0)


def _data_key_rotator(dsn: str, key_dir: str, subject: str, point: str, mark: str) -> None:
    """``rotate_data_key`` of ``subject``, stopped at ``point``."""
    if point == "retired":

        def held_replace(src: Any, dst: Any) -> None:
            _block(mark, point)

        os.replace = held_replace  # type: ignore[assignment]  # this child only
    elif point == "batches":
        resealed = rotation._resealed
        calls = []

        def counted(*args: Any) -> Any:
            calls.append(1)
            if len(calls) > 3:
                _block(mark, point)
            return resealed(*args)

        rotation._resealed = counted  # type: ignore[assignment]
    else:
        keystore.KeyStore.shred_retired = lambda *args: _block(mark, point)  # type: ignore[method-assign,assignment]
    store = shardstore.connect(dsn, encryption=_keys(key_dir), background_fold=False)
    store.rotate_data_key(tenant_id=TENANT, subject_id=subject, batch_size=1)
    os._exit(0)


def _wait(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def _kill_at(
    forkserver: Any, target: Callable[..., None], args: tuple[Any, ...], mark: Path
) -> None:
    proc = forkserver.Process(target=target, args=(*args, str(mark)), daemon=True)
    proc.start()
    _wait(lambda: mark.exists() or not proc.is_alive(), mark.name)
    assert proc.is_alive(), f"the child ended before {mark.name}"
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL


def _kids(dsn: str, subject: str) -> set[str]:
    """The data key ids the subject's stored values name (turns, buffered and folded, and
    checkpoint states)."""
    rows = raw(
        dsn,
        "SELECT b.message->>'k' FROM shardstore.turn_buffer b"
        "  JOIN shardstore.sessions s USING (session_id)"
        " WHERE s.tenant_id = %(t)s AND s.subject_id = %(s)s"
        " UNION ALL SELECT e->'m'->>'k' FROM shardstore.agent_history h"
        "  JOIN shardstore.sessions s USING (session_id),"
        "  jsonb_array_elements(h.conversation_chunk) e"
        " WHERE s.tenant_id = %(t)s AND s.subject_id = %(s)s"
        " UNION ALL SELECT c.state->>'k' FROM shardstore.checkpoints c"
        "  JOIN shardstore.sessions s USING (session_id)"
        " WHERE s.tenant_id = %(t)s AND s.subject_id = %(s)s",
        {"t": TENANT, "s": subject},
    )
    return {kid for (kid,) in rows}


@pytest.fixture
def forkserver() -> Any:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["shardstore", "tests.crash.test_rotation_killed"])
    return ctx


def test_a_kek_rotation_killed_midway_opens_with_both_keks_and_finishes(
    dsn: str, tmp_path: Path, forkserver: Any
) -> None:
    with shardstore.connect(dsn, encryption=_keys(str(tmp_path))) as store:
        sids = []
        for name in ("a", "b", "c"):
            sid = store.create_session(TENANT, subject_id=name)
            store.append_turn(sid, {"role": "user", "content": f"said by {name}"})
            sids.append(sid)
    rows_before = raw(dsn, "SELECT message::text FROM shardstore.turn_buffer ORDER BY 1")

    _kill_at(forkserver, _kek_rotator, (str(tmp_path),), tmp_path / "mark-kek")

    keks = {json.loads(f.read_text())["kek"] for f in (tmp_path / "store/keys").glob("*.key")}
    assert len(keks) == 2, "the kill came between two files"
    with (
        pytest.raises(DecryptionFailed),
        shardstore.connect(dsn, encryption=_keys(str(tmp_path), "new.kek")) as new_only,
    ):
        for sid in sids:
            new_only.tail(sid)
    both = _keys(str(tmp_path), "new.kek", previous=("kek",))
    with shardstore.connect(dsn, encryption=both) as reader:
        assert [reader.tail(s)[0].message["content"] for s in sids] == [
            f"said by {n}" for n in "abc"
        ]
    # the re-run, as the CLI does it: the old key file, the new one; it finishes
    report = _keys(str(tmp_path)).rotate_kek(tmp_path / "new.kek")
    assert report.already == 1 and report.rewrapped == 2
    with shardstore.connect(dsn, encryption=_keys(str(tmp_path), "new.kek")) as reader:
        assert [reader.tail(s)[0].message["content"] for s in sids] == [
            f"said by {n}" for n in "abc"
        ]
    with (
        pytest.raises(DecryptionFailed),
        shardstore.connect(dsn, encryption=_keys(str(tmp_path))) as old_only,
    ):
        old_only.tail(sids[0])
    assert raw(dsn, "SELECT message::text FROM shardstore.turn_buffer ORDER BY 1") == rows_before


def test_a_data_key_rotation_killed_anywhere_is_readable_and_finishes(
    dsn: str, tmp_path: Path, forkserver: Any
) -> None:
    keys = _keys(str(tmp_path))
    store = shardstore.connect(dsn, encryption=keys, chunk_tokens=60, background_fold=False)
    try:
        for point in ("retired", "batches", "before-shred"):
            subject = f"person-{point}"
            sid = store.create_session(TENANT, subject_id=subject)
            expected = [{"role": "user", "content": f"{point} {i} " + "w " * 12} for i in range(8)]
            store.append_turns(sid, expected[:6])
            store.flush(sid)
            store.append_turns(sid, expected[6:])
            store.checkpoint(sid, {"at": point})
            (old,) = _kids(dsn, subject)

            _kill_at(
                forkserver,
                _data_key_rotator,
                (dsn, str(tmp_path), subject, point),
                tmp_path / f"mark-{point}",
            )

            named = _kids(dsn, subject)
            assert old in named or point == "before-shred", point
            assert len(named) == (2 if point == "batches" else 1), point
            # readable as it is, by this process and by a fresh key store object
            for reader_keys in (keys, _keys(str(tmp_path))):
                with shardstore.connect(dsn, encryption=reader_keys) as reader:
                    assert [t.message for t in reader.history(sid)] == expected, point
                    restored = reader.restore(sid).checkpoint
                    assert restored is not None and restored.state == {"at": point}
            # appends go on, under the current version
            store.append_turn(sid, {"role": "assistant", "content": f"after {point}"})
            expected.append({"role": "assistant", "content": f"after {point}"})

            report = store.rotate_data_key(tenant_id=TENANT, subject_id=subject)
            scope = Scope("subject", TENANT, subject)
            current = keys.key_for(scope, create=False)
            assert current is not None and _kids(dsn, subject) == {current.kid}, point
            assert keys.retired(scope) == [] and old in report.shredded_keys, point
            assert [t.message for t in store.history(sid)] == expected, point
    finally:
        store.close()
    # one key file per subject: no retired version left behind
    files = list((tmp_path / "store/keys").glob("*.key"))
    assert len(files) == 3
