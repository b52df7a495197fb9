"""A ``purge_subject`` SIGKILLed mid-way, many times, on each backend, then re-run as
docs/purge.md says: afterwards no row and no object holds the subject's bytes, and an
artifact another subject still references is intact.

Each round gives a fresh subject three sessions with artifacts whose references went
different ways before the purge (still referenced, rewound, unreferenced), plus one it
shares with another subject. A child process (forked from a preloaded fork server, so a
round costs a connect, not an interpreter start) purges the subject one session per
transaction and is killed:

* ``batch:N``: right after the N-th batch committed (its row deletions are durable, the
  erasure of objects not begun; ``batch:3`` is after the last one);
* ``object:N``: right after its N-th object delete, inside the transaction that holds the
  artifact row (object gone, row still there);
* ``random``: as soon as the parent sees one of the subject's sessions purged, wherever the
  child then is.

A child waits at its kill point (it writes a marker and blocks) until the parent, which
waits for that marker, kills it: the kills land where they are meant to on any machine,
without a timing assumption."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

import shardstore
from shardstore.artifacts.config import config_of
from tests.artifacts.support import BACKENDS, backend_contents, backend_url, held_shas

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

TENANT = "t"
SESSIONS = 3
OBJECT_POINTS = ("batch:1", "batch:3", "object:1", "object:4", "random")
ROW_POINTS = ("batch:1", "batch:2", "batch:3", "random")
ROUNDS = 24
MIN_KILLS = 20


def _child(dsn: str, url: str, env: dict[str, str], subject: str, point: str, mark: str) -> None:
    """The purger: ``purge_subject`` with a stop at ``point`` (see the module docstring)."""
    os.environ.update(env)
    what, _, nth = point.partition(":")
    seen = [0]

    def reached(*_args: Any) -> None:
        seen[0] += 1
        if seen[0] == int(nth):
            Path(mark).write_text(point)
            while True:  # the parent kills us here
                signal.pause()

    store = shardstore.connect(dsn, artifacts=url, background_fold=False)
    progress: Callable[[int, int], None] | bool = False
    if what == "batch":
        progress = reached
    elif what == "object":
        cls: Any = type(config_of(store).backend)
        plain = cls.delete

        def delete(self: Any, key: str) -> bool:
            removed = plain(self, key)
            reached()
            return bool(removed)

        cls.delete = delete  # in this child only
    store.purge_subject(TENANT, subject, batch_size=1, progress=progress)
    os._exit(0)  # nothing of the fork server's state to clean up


def _wait(condition: Callable[[], bool], what: str, limit: float = 120.0) -> None:
    """Poll ``condition`` until it holds (the limit only stops a hung test)."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.005)


def _subject(store: shardstore.Store, subject: str, other: uuid.UUID) -> tuple[list[str], Any]:
    """A subject's sessions and artifacts; returns the sha256 of each of its artifacts and
    the ref of the one it shares with ``other`` (another subject's session)."""
    marker = f"{subject}-{uuid.uuid4().hex}"
    shas = []

    def put(what: str) -> Any:
        ref = store.put_artifact(TENANT, f"{marker} {what} " * 40, content_type="text/plain")
        shas.append(ref.sha256)
        return ref

    shared = store.put_artifact(TENANT, f"shared {uuid.uuid4().hex}", content_type="x/y")
    for i in range(SESSIONS):
        sid = store.create_session(TENANT, subject_id=subject)
        store.append_turn(sid, {"role": "user", "content": f"{marker} {i}"})
        store.append_turn(sid, {"role": "user", "content": "and then"})
        store.ref_artifact(TENANT, put(f"held {i}").artifact_id, "turn", f"{sid}:0")
        store.ref_artifact(TENANT, put(f"rewound {i}").artifact_id, "turn", f"{sid}:1")
        store.rewind(sid, 1)
        unrefd = put(f"unrefd {i}")
        store.ref_artifact(TENANT, unrefd.artifact_id, "turn", f"{sid}:0")
        store.unref_artifact(TENANT, unrefd.artifact_id, "turn", f"{sid}:0")
        store.ref_artifact(TENANT, shared.artifact_id, "turn", f"{sid}:0")
    store.ref_artifact(TENANT, shared.artifact_id, "turn", f"{other}:0")
    return shas, shared


def _tombstones(dsn: str) -> int:
    """Purged sessions of the tenant so far."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM shardstore.sessions WHERE tenant_id = %s"
            " AND purged_at IS NOT NULL",
            (TENANT,),
        ).fetchone()
    return int(row[0]) if row else 0


def _left(dsn: str) -> tuple[int, int]:
    """(queued erasures, 'deleting' rows) left in the database."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM shardstore.artifact_erasures),"
            " (SELECT count(*) FROM shardstore.artifacts WHERE state = 'deleting')"
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


@pytest.mark.parametrize("kind", BACKENDS)
def test_purge_killed_anywhere_then_rerun_leaves_no_byte_of_the_subject(
    make_store: Any, kind: str, tmp_path: Path, dsn: str
) -> None:
    url = backend_url(kind, tmp_path)
    store = make_store(artifacts=url)
    env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["shardstore", "tests.crash.test_artifact_purge_killed"])
    other = store.create_session(TENANT, subject_id="bystander")
    store.append_turn(other, {"role": "user", "content": "hi"})
    points = ROW_POINTS if kind == "postgres" else OBJECT_POINTS
    kills = 0
    for round_no in range(ROUNDS):
        subject = f"person-{round_no}"
        shas, shared = _subject(store, subject, other)
        point = points[round_no % len(points)]
        mark = tmp_path / f"mark-{round_no}"
        proc = ctx.Process(
            target=_child, args=(dsn, url, env, subject, point, str(mark)), daemon=True
        )
        if point == "random":
            before = _tombstones(dsn)
            proc.start()
            _wait(
                lambda: _tombstones(dsn) > before or not proc.is_alive(),  # noqa: B023
                "a session purged",
            )
        else:
            proc.start()
            _wait(lambda: mark.exists() or not proc.is_alive(), f"the child at {point}")  # noqa: B023
        if proc.is_alive() and proc.pid is not None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(60)
        assert proc.exitcode in (0, -signal.SIGKILL), f"the child failed at {point}"
        kills += proc.exitcode == -signal.SIGKILL
        # the documented re-run
        store.purge_subject(TENANT, subject)
        assert _left(dsn) == (0, 0), point
        assert not set(shas) & held_shas(store, dsn, TENANT), point
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                "SELECT count(*) FROM shardstore.artifacts WHERE sha256 = ANY (%s)", (shas,)
            ).fetchone()
        assert rows == (0,), point
        assert store.get_artifact(TENANT, shared.artifact_id).startswith(b"shared ")
    assert kills >= MIN_KILLS, f"only {kills} kills landed mid-purge"
    # every byte the backend still holds: none is any subject's (their content starts so)
    left = backend_contents(store, dsn)
    assert left and not [data[:40] for data in left if data.startswith(b"person-")]
