"""Replay after a rewind: a rewind frees positions, so every encrypted turn is sealed for its
rewind epoch too (docs/decisions/0022-encryption-key-store.md). A ciphertext saved before a
rewind and written back by raw SQL into the same session and position is DecryptionFailed
on every read, with nothing returned; honest turns, after any sequence of appends, rewinds
and folds, all open; a fork reads what it inherited whatever its parent rewinds later."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.encryption import LocalKeyProvider
from shardstore.encryption.turns import open_turns_op
from shardstore.errors import Conflict, DecryptionFailed
from shardstore.history.ops import window_op
from tests.encryption.conftest import raw


@pytest.fixture(scope="module")
def store(module_dsn: str, keys: LocalKeyProvider) -> Iterator[shardstore.Store]:
    """Chunks of ~30 turns: the turns stay buffered (where a test rewrites them) until a
    test folds them on purpose."""
    s = shardstore.connect(module_dsn, encryption=keys, chunk_tokens=400)
    yield s
    s.close()


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def stored(dsn: str, sid: uuid.UUID) -> dict[int, str]:
    """The session's buffered turns as stored: seq -> the sealed message's JSON text."""
    rows = raw(
        dsn,
        "SELECT turn_seq, message::text FROM shardstore.turn_buffer WHERE session_id = %s",
        (sid,),
    )
    return {int(seq): text for seq, text in rows}


def write_back(dsn: str, sid: uuid.UUID, seq: int, message: str) -> None:
    (n,) = raw(
        dsn,
        "WITH u AS (UPDATE shardstore.turn_buffer SET message = %s::jsonb"
        " WHERE session_id = %s AND turn_seq = %s RETURNING 1) SELECT count(*) FROM u",
        (message, sid, seq),
    )[0]
    assert n == 1


def refused_everywhere(s: shardstore.Store, sid: uuid.UUID, seq: int) -> None:
    """Every read that reaches the turn at ``seq`` raises DecryptionFailed."""
    with pytest.raises(DecryptionFailed):
        s.tail(sid, n=1000)
    with pytest.raises(DecryptionFailed):
        list(s.history(sid, from_seq=seq, to_seq=seq + 1))
    with pytest.raises(DecryptionFailed):
        s.tail_explained(sid, n=1000)
    with pytest.raises(DecryptionFailed):
        s.context(sid, max_tokens=100_000)
    with pytest.raises(DecryptionFailed):
        s.restore(sid, n=1000)


def test_a_ciphertext_from_before_a_rewind_written_back_is_refused(
    store: shardstore.Store, module_dsn: str
) -> None:
    sid = store.create_session(tenant_id="t1", subject_id="replay")
    store.append_turns(sid, [msg(f"old {i}") for i in range(5)])
    store.checkpoint(sid, {"at": 4})
    before = stored(module_dsn, sid)
    assert all('"e"' not in text for text in before.values())  # epoch 0: no "e" recorded
    assert store.rewind(sid, 3) == 2
    store.append_turns(sid, [msg("new 3"), msg("new 4")])
    after = stored(module_dsn, sid)
    assert json.loads(after[3])["e"] == 1 and json.loads(after[0]).get("e") is None
    assert [t.message["content"] for t in store.history(sid)] == [
        "old 0",
        "old 1",
        "old 2",
        "new 3",
        "new 4",
    ]
    # search hits are opened with the epochs read in the hits' own snapshot: the text pass
    # indexes the honest turns, then a search reaching the replayed position is refused
    assert store.search("new", session_id=sid, mode="text", k=5)
    write_back(module_dsn, sid, 3, before[3])
    refused_everywhere(store, sid, 3)
    with pytest.raises(DecryptionFailed):
        store.search("new", session_id=sid, mode="text", k=5)
    # the position, not the session: the turns around it still read
    assert [t.message["content"] for t in store.history(sid, to_seq=3)] == [
        "old 0",
        "old 1",
        "old 2",
    ]
    write_back(module_dsn, sid, 3, after[3])
    assert store.tail(sid, n=2)[0].message["content"] == "new 3"

    # a second rewind at a later cut keeps the first's epoch for the turns below it, and a
    # turn of the second epoch written back after a third rewind at an earlier cut fails
    store.rewind(sid, 4)
    store.append_turn(sid, msg("newer 4"))
    second = stored(module_dsn, sid)
    assert json.loads(second[3])["e"] == 1 and json.loads(second[4])["e"] == 2
    store.rewind(sid, 2)
    store.append_turns(sid, [msg("newest 2"), msg("newest 3"), msg("newest 4")])
    write_back(module_dsn, sid, 4, second[4])
    refused_everywhere(store, sid, 4)
    write_back(module_dsn, sid, 3, second[3])
    with pytest.raises(DecryptionFailed):
        list(store.history(sid, from_seq=3, to_seq=4))


@pytest.mark.parametrize(
    "epoch", ["1", True, -1, 0, 2**70, 1.5, None, [1]], ids=lambda e: f"e={e!r}"
)
def test_a_malformed_or_forged_epoch_is_refused(
    store: shardstore.Store, module_dsn: str, epoch: Any
) -> None:
    sid = store.create_session(tenant_id="t1", subject_id="forger")
    store.append_turns(sid, [msg("a"), msg("b")])
    store.rewind(sid, 1)
    store.append_turn(sid, msg("c"))
    honest = stored(module_dsn, sid)
    for seq in (0, 1):  # a turn of epoch 0 and one of epoch 1, each given a forged "e"
        forged = {**json.loads(honest[seq]), "e": epoch}
        write_back(module_dsn, sid, seq, json.dumps(forged))
        with pytest.raises(DecryptionFailed):
            store.tail(sid, n=5)
        write_back(module_dsn, sid, seq, honest[seq])
    assert [t.message["content"] for t in store.tail(sid, n=5)] == ["a", "c"]


def test_a_rewind_between_the_read_of_turns_and_of_epochs_is_a_conflict(
    store: shardstore.Store,
) -> None:
    """An honest turn that a rewind removed after it was read is no replay: the read is
    refused as retryable Conflict, never DecryptionFailed, and never returned."""
    sid = store.create_session(tenant_id="t1", subject_id="racer")
    store.append_turns(sid, [msg(str(i)) for i in range(4)])
    window = store._run(window_op(sid, 4, None))  # read, still sealed
    store.rewind(sid, 2)
    store.append_turns(sid, [msg("x"), msg("y")])
    with pytest.raises(Conflict):
        store._run(open_turns_op(store.ctx.sealer, sid, window))
    assert [t.message["content"] for t in store.tail(sid, n=4)] == ["0", "1", "x", "y"]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("rewind"), st.floats(0, 1)),
        st.tuples(st.just("fold"), st.just(0)),
    ),
    min_size=1,
    max_size=9,
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
def test_honest_turns_open_after_any_rewinds_and_stale_ones_never_do(
    store: shardstore.Store, module_dsn: str, ops: list[tuple[str, Any]]
) -> None:
    """Against an in-memory model of appends and rewinds: every read gives the model's
    turns; every ciphertext ever stored at a position, other than the one there now,
    written back into the buffer is refused."""
    sid = store.create_session(tenant_id="t1", subject_id=None)
    model: list[str] = []
    seen: dict[int, set[str]] = {}
    for n, (op, arg) in enumerate(ops):
        if op == "append":
            texts = [f"{n}.{i}" for i in range(arg)]
            store.append_turns(sid, [msg(t) for t in texts])
            model += texts
        elif op == "rewind":
            cut = int(arg * len(model))
            assert store.rewind(sid, cut) == len(model) - cut
            del model[cut:]
        else:
            store.flush(sid)
            store.drain_folds()
        for seq, text in stored(module_dsn, sid).items():
            seen.setdefault(seq, set()).add(text)
    assert [t.message["content"] for t in store.history(sid)] == model
    assert [t.message["content"] for t in store.tail(sid, n=3)] == model[-3:]
    now = stored(module_dsn, sid)
    stale = [(seq, old) for seq, text in now.items() for old in seen[seq] - {text}]
    for seq, old in stale[:2]:
        write_back(module_dsn, sid, seq, old)
        with pytest.raises(DecryptionFailed):
            list(store.history(sid, from_seq=seq, to_seq=seq + 1))
        write_back(module_dsn, sid, seq, now[seq])


def test_a_fork_reads_its_inheritance_whatever_its_parent_rewinds_later(
    store: shardstore.Store, module_dsn: str
) -> None:
    parent = store.create_session(tenant_id="t1", subject_id="family")
    store.append_turns(parent, [msg(f"p{i}") for i in range(6)])
    store.rewind(parent, 4)  # turns 4, 5 of the parent's epoch 1 are inherited too
    store.append_turns(parent, [msg("p4'"), msg("p5'")])
    inherited = ["p0", "p1", "p2", "p3", "p4'", "p5'"]
    child = store.fork(parent, at_turn_seq=5)
    store.append_turns(child, [msg("c6"), msg("c7")])
    store.rewind(parent, 2)  # the child gets its own copies of turns 2..5 first
    store.append_turn(parent, msg("p2''"))
    assert [t.message["content"] for t in store.history(child)] == [*inherited, "c6", "c7"]
    assert [t.message["content"] for t in store.history(parent)] == ["p0", "p1", "p2''"]
    assert [t.message["content"] for t in store.tail(child, n=4)] == ["p4'", "p5'", "c6", "c7"]

    # the child's own rewind: its epoch, not its parent's; its own stale turn is refused
    own = stored(module_dsn, child)
    store.rewind(child, 7)
    store.append_turn(child, msg("c7'"))
    write_back(module_dsn, child, 7, own[7])
    with pytest.raises(DecryptionFailed):
        store.tail(child, n=2)
    store.rewind(child, 7)
    # rewound below its fork point: it reads its ancestors' turns again, then its own
    store.rewind(child, 3)
    store.append_turn(child, msg("c3"))
    assert [t.message["content"] for t in store.history(child)] == ["p0", "p1", "p2", "c3"]


def test_async_parity(module_dsn: str, keys: LocalKeyProvider) -> None:
    async def scenario() -> None:
        astore = await shardstore.connect_async(module_dsn, encryption=keys, chunk_tokens=400)
        try:
            sid = await astore.create_session(tenant_id="t1", subject_id="async")
            await astore.append_turns(sid, [msg(f"a{i}") for i in range(4)])
            before = stored(module_dsn, sid)
            assert await astore.rewind(sid, 2) == 2
            await astore.append_turns(sid, [msg("b2"), msg("b3")])
            assert [t.message["content"] async for t in astore.history(sid)] == [
                "a0",
                "a1",
                "b2",
                "b3",
            ]
            write_back(module_dsn, sid, 2, before[2])
            with pytest.raises(DecryptionFailed):
                await astore.tail(sid, n=4)
            with pytest.raises(DecryptionFailed):
                [t async for t in astore.history(sid)]
            with pytest.raises(DecryptionFailed):
                await astore.restore(sid, n=4)
        finally:
            await astore.close()

    asyncio.run(scenario())


def test_a_head_kept_by_another_store_that_moved_is_not_used(
    store: shardstore.Store, module_dsn: str, keys: LocalKeyProvider
) -> None:
    """A store appends in one statement from the head it kept after its last append; when
    another store appended or rewound meanwhile (the seq, or only the epoch, moved), that
    statement writes nothing and the append goes through the locked head read: every turn
    lands where it was sealed for and opens."""
    other = shardstore.connect(module_dsn, encryption=keys, chunk_tokens=400)
    try:
        sid = store.create_session(tenant_id="t1", subject_id="two-writers")
        store.append_turns(sid, [msg("a0"), msg("a1"), msg("a2")])  # kept: seq 3, epoch 0
        other.append_turn(sid, msg("b3"))  # the seq moved
        store.append_turn(sid, msg("a4"))  # kept: seq 5, epoch 0
        old4 = stored(module_dsn, sid)[4]
        other.rewind(sid, 3)
        other.append_turns(sid, [msg("b3'"), msg("b4'")])  # seq 5 again, only the epoch moved
        store.append_turn(sid, msg("a5"))
        store.append_turns(sid, [msg("a6"), msg("a7")], idempotency_keys=["k6", "k7"])
        other.append_turns(sid, [msg("b8")])
        store.append_turns(sid, [msg("a7 again"), msg("a9")], idempotency_keys=["k7", "k9"])
        turns = [t.message["content"] for t in store.history(sid)]
        assert turns == ["a0", "a1", "a2", "b3'", "b4'", "a5", "a6", "a7", "b8", "a9"]
        epochs = [
            json.loads(text).get("e") for _seq, text in sorted(stored(module_dsn, sid).items())
        ]
        assert epochs == [None] * 3 + [1] * 7
        write_back(module_dsn, sid, 4, old4)
        with pytest.raises(DecryptionFailed):
            store.tail(sid, n=10)
    finally:
        other.close()
