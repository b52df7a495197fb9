"""A delegated append or tail on the worker holding its session reads and writes that
worker's shards directly (``citus_local_shards``; docs/decisions/0027-citus-append-and-tail.md):
the coordinator forwards one call, nothing on the worker goes through Citus's executor, and
what the calls return and leave behind is what the coordinator's own path (a call inside a
transaction block, not delegated) gives. Skipped unless ``SHARDSTORE_CITUS_DSN`` is set (see
test_citus.py); tenant isolation on this path is test_citus.py's
``test_rls_bound_role_sees_only_its_tenant`` (a role-bound tenant's calls are delegated).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.core import jsoncodec
from shardstore.core.sql import query
from shardstore.errors import SessionNotFound, SessionPurged

CITUS_DSN = os.environ.get("SHARDSTORE_CITUS_DSN")
pytestmark = pytest.mark.skipif(not CITUS_DSN, reason="SHARDSTORE_CITUS_DSN is not set")


def _msg(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "w " * 40}


@pytest.fixture(scope="module")
def citus() -> Iterator[tuple[str, shardstore.Store]]:
    """The distributed database and one store on it (small chunks: folds and seals come
    within a few dozen turns)."""
    assert CITUS_DSN
    store = shardstore.connect(CITUS_DSN, chunk_tokens=300, background_fold=False)
    try:
        assert store.distribute().citus_version is not None
        yield CITUS_DSN, store
    finally:
        store.close()


def _placements(dsn: str, sid: uuid.UUID) -> tuple[str, list[str]]:
    """The DSN of the worker holding ``sid`` and those of the other workers."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        holder = conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_shard_placement WHERE shardid ="
            " get_shard_id_for_distribution_column('shardstore.sessions', %s)",
            (sid,),
        ).fetchone()
        nodes = conn.execute(
            "SELECT nodename, nodeport FROM pg_dist_node WHERE groupid <> 0 AND isactive"
        ).fetchall()
    assert holder is not None
    others = [make_conninfo(dsn, host=h, port=str(p)) for h, p in nodes if (h, p) != holder]
    return make_conninfo(dsn, host=holder[0], port=str(holder[1])), others


def _logged(conn: psycopg.Connection[Any], prefix: str) -> list[str]:
    seen: list[str] = []
    conn.add_notice_handler(
        lambda d: (
            seen.append(d.message_primary or "")
            if (d.message_primary or "").startswith(prefix)
            else None
        )
    )
    return seen


def _append_params(store: shardstore.Store, sid: uuid.UUID, i: int) -> tuple[Any, ...]:
    """append_one's parameters as the store sends them, for turn ``i``."""
    ctx = store.ctx
    text = jsoncodec.encode_message(_msg(i))
    return (
        sid,
        text,
        ctx.counter.count(text),
        len(text.encode()),
        None,
        ctx.settings.budget_tokens,
        ctx.settings.chunk_max_bytes,
        ctx.partition_interval.total_seconds(),
        ctx.partition_origin,
    )


def test_the_shards_are_named_only_on_the_worker_holding_the_session(
    citus: tuple[str, shardstore.Store],
) -> None:
    dsn, store = citus
    sid = store.create_session("t_local", "s", "a")
    holder, others = _placements(dsn, sid)
    lookup = "SELECT * FROM shardstore.citus_local_shards(%s)"
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute(lookup, (sid,)).fetchone() == (None, None, None)  # coordinator
        # the shards are the ones Citus routes the session to
        wanted = conn.execute(
            "SELECT shard_name(t::regclass, get_shard_id_for_distribution_column(t, %s))"
            " FROM unnest(ARRAY['shardstore.sessions', 'shardstore.turn_buffer',"
            " 'shardstore.turn_keys']) AS t",
            (sid,),
        ).fetchall()
    with psycopg.connect(holder, autocommit=True) as conn:
        assert conn.execute(lookup, (sid,)).fetchone() == tuple(r[0] for r in wanted)
    for other in others:
        with psycopg.connect(other, autocommit=True) as conn:
            assert conn.execute(lookup, (sid,)).fetchone() == (None, None, None)


def test_one_forwarded_call_and_no_citus_statement_on_the_worker(
    citus: tuple[str, shardstore.Store],
) -> None:
    dsn, store = citus
    sid = store.create_session("t_local", "s", "a")
    store.append_turns(sid, [_msg(i) for i in range(5)])
    holder, _ = _placements(dsn, sid)
    statements = {
        "append_one": (query("append_one"), _append_params(store, sid, 5)),
        "tail_window": (query("tail_window"), (sid, 3, None)),
    }
    with psycopg.connect(dsn, autocommit=True) as conn:
        remote = _logged(conn, "issuing")
        conn.execute("SET citus.log_remote_commands = on")
        conn.execute("SET client_min_messages = log")
        for name, (sql, params) in statements.items():
            remote.clear()
            conn.execute(sql, params).fetchall()
            assert len(remote) == 1, (name, remote)  # no BEGIN, no 2PC: the call alone
    with psycopg.connect(holder, autocommit=True) as conn:
        local = _logged(conn, "executing the command locally")
        conn.execute("SET citus.log_local_commands = on")
        conn.execute("SET client_min_messages = log")
        for name, (sql, params) in statements.items():
            if name == "append_one":
                params = _append_params(store, sid, 6)
            local.clear()
            conn.execute(sql, params).fetchall()
            assert local == [], (name, local)
    assert [t.turn_seq for t in store.tail(sid, n=10)] == list(range(7))


def test_the_worker_path_equals_the_coordinators(citus: tuple[str, shardstore.Store]) -> None:
    """Appends turn by turn (keys, seals, folds), then every window the delegated tail
    gives equals the one the coordinator's path gives (the same call in a transaction
    block, which Citus does not delegate)."""
    dsn, store = citus
    sid = store.create_session("t_local", "s", "a")
    results = [store.append_turn(sid, _msg(i), idempotency_key=f"k{i}") for i in range(40)]
    assert [r.turn_seq for r in results] == list(range(40))
    again = store.append_turn(sid, _msg(0), idempotency_key="k7")
    assert again.duplicate and again.turn_seq == 7
    store.flush(sid)  # folded chunks below the buffered ones: the walk past the buffer
    store.append_turns(sid, [_msg(i) for i in range(40, 45)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        for n, max_tokens in ((1, None), (20, None), (45, None), (100, None), (None, 500)):
            delegated = conn.execute(query("tail_window"), (sid, n, max_tokens)).fetchone()
            with conn.transaction():
                local = conn.execute(query("tail_window"), (sid, n, max_tokens)).fetchone()
            assert delegated == local, (n, max_tokens)
    assert [t.turn_seq for t in store.tail(sid, n=45)] == list(range(45))


def test_missing_purged_and_wrong_values_on_the_worker_path(
    citus: tuple[str, shardstore.Store],
) -> None:
    dsn, store = citus
    nobody = uuid.uuid4()
    with pytest.raises(SessionNotFound):
        store.tail(nobody)
    with pytest.raises(SessionNotFound):
        store.append_turn(nobody, _msg(0))
    gone = store.create_session("t_local", "s", "a")
    store.append_turns(gone, [_msg(i) for i in range(3)])
    store.purge_session(gone)
    with pytest.raises(SessionPurged):
        store.tail(gone)
    with pytest.raises(SessionPurged):
        store.append_turn(gone, _msg(3))
    # values a client would never send reach the worker's dynamic statements as values
    sid = store.create_session("t_local", "s", "a")
    store.append_turns(sid, [_msg(i) for i in range(3)])
    with psycopg.connect(dsn, autocommit=True) as conn:
        hostile = list(_append_params(store, sid, 3))
        hostile[1] = jsoncodec.encode_message({"role": "user", "content": "'); DROP TABLE x; --"})
        hostile[4] = "k'); DELETE FROM shardstore.sessions; --"
        row = conn.execute(query("append_one"), hostile).fetchone()
        assert row is not None and row[0] == 3
        over = list(_append_params(store, sid, 4))
        over[2] = 10**6  # over the chunk budget: not the fast path, a seal instead
        row = conn.execute(query("append_one"), over).fetchone()
        assert row is not None and row[0] == 4 and row[4] is True
        # out-of-range windows (the client refuses them first): the worker's path answers
        # as the coordinator's does, a value or the same error
        for bad in ((sid, -1, None), (sid, 0, None), (sid, None, -5), (sid, 2**31 - 1, None)):
            assert _outcome(conn, bad, block=False) == _outcome(conn, bad, block=True), bad
    turns = store.tail(sid, n=10)
    assert [t.turn_seq for t in turns] == list(range(5))
    assert turns[3].message["content"] == "'); DROP TABLE x; --"
    assert turns[3].idempotency_key == "k'); DELETE FROM shardstore.sessions; --"
    assert store.session(sid).turn_count == 5
    assert _one(dsn, "SELECT count(*) FROM shardstore.sessions WHERE session_id = %s", sid) == 1


def _outcome(conn: psycopg.Connection[Any], params: tuple[Any, ...], block: bool) -> Any:
    """tail_window's value, or the SQLSTATE it fails with; ``block``: inside a transaction
    block (the coordinator's path)."""
    try:
        if block:
            with conn.transaction():
                return conn.execute(query("tail_window"), params).fetchone()
        return conn.execute(query("tail_window"), params).fetchone()
    except psycopg.Error as e:
        return e.sqlstate


def _one(dsn: str, sql: str, param: Any) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(sql, (param,)).fetchone()
    assert row is not None
    return row[0]
