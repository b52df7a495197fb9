"""Full-text windows of buffered turns written ahead of their fold (decision 0010).

The invariant: every stored turn has at most one set of windows in ``turn_text``, equal to
what ``text_windows`` makes of its message (what a fold writes); every folded turn has
them; no window belongs to a turn the session no longer holds. And the ranking of a scope
small enough to be ranked exactly is the same whether a buffered turn was indexed ahead or
is indexed on the fly (compared on one snapshot, with the pass's rows deleted in a
rolled-back transaction)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.conninfo import make_conninfo

import shardstore
from shardstore.history.ops import TEXT_INDEX_EVERY
from shardstore.search.text_index import index_buffered_op

WORDS = ["invoice", "refund", "timeout", "gateway", "ledger", "QX-4471", "billing", "retry"]
QUERIES = ("refund invoice", "timeout gateway retry", "QX-4471", "ledger billing")


def say(rng: random.Random, i: int) -> dict[str, Any]:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12)))
    return {"role": "user" if i % 2 else "assistant", "content": f"turn {i}: {words}"}


def check_windows(conn: psycopg.Connection[Any]) -> None:
    """The invariant above, for the whole database."""
    orphans = conn.execute(
        "SELECT count(*) FROM shardstore.turn_text t WHERE NOT EXISTS (SELECT 1 FROM"
        " shardstore.turns x WHERE x.session_id = t.session_id AND x.turn_seq = t.turn_seq)"
    ).fetchone()
    assert orphans == (0,), "windows of a turn the session no longer holds"
    wrong = conn.execute(
        "WITH want AS (SELECT x.session_id, x.turn_seq, x.chunk_seq, x.created_at, w.r_window,"
        "                     w.r_tsv"
        "                FROM shardstore.turns x,"
        "                     LATERAL shardstore.text_windows(shardstore.text_config_read_v1(),"
        "                                                        x.message) w)"
        " SELECT count(*) FROM shardstore.turn_text t"
        "  WHERE NOT EXISTS (SELECT 1 FROM want w WHERE w.session_id = t.session_id"
        "                       AND w.turn_seq = t.turn_seq AND w.r_window = t.window_no"
        "                       AND w.r_tsv = t.tsv AND w.chunk_seq = t.chunk_seq"
        "                       AND w.created_at = t.created_at)"
    ).fetchone()
    assert wrong == (0,), "a window that is not what a fold would write"
    unindexed = conn.execute(
        "SELECT count(*) FROM shardstore.agent_history h,"
        " jsonb_array_elements(h.conversation_chunk) e(v)"
        " WHERE shardstore.text_config_read_v1() IS NOT NULL"
        "   AND EXISTS (SELECT 1 FROM shardstore.text_windows(shardstore.text_config_read_v1(),"
        "                                                        e.v->'m'))"
        "   AND NOT EXISTS (SELECT 1 FROM shardstore.turn_text t WHERE"
        "                   t.session_id = h.session_id AND t.turn_seq = (e.v->>'s')::bigint)"
    ).fetchone()
    assert unindexed == (0,), "a folded turn without windows"


RANK = (
    "SELECT r_session_id, r_chunk_seq, r_turn_seq, round(r_score::numeric, 9)"
    "  FROM shardstore.text_rank_v2(%s, %s, NULL, NULL, NULL, %s, 20, 1000, 500)"
)


def rankings(conn: psycopg.Connection[Any], tenant: str | None, sids: list[uuid.UUID]) -> list[Any]:
    out = []
    for q in QUERIES:
        if tenant is not None:
            out.append(conn.execute(RANK, (None, tenant, q)).fetchall())
        for sid in sids:
            out.append(conn.execute(RANK, (sid, None, q)).fetchall())
    return out


def same_ranking_without_the_pass(dsn: str, tenant: str | None, sids: list[uuid.UUID]) -> None:
    """What the ranking says now equals what it says with every buffered turn indexed on the
    fly (the pass's rows deleted in a transaction that is rolled back), on one snapshot."""
    with psycopg.connect(dsn) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        now = rankings(conn, tenant, sids)
        conn.execute(
            "DELETE FROM shardstore.turn_text t USING shardstore.turn_buffer b"
            " WHERE t.session_id = b.session_id AND t.turn_seq = b.turn_seq"
        )
        assert rankings(conn, tenant, sids) == now
        conn.rollback()


def buffered_counts(dsn: str, session_id: uuid.UUID | None = None) -> tuple[int, int]:
    """(buffered turns, buffered turns with windows), of one session or of all."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE EXISTS (SELECT 1 FROM shardstore.turn_text t"
            " WHERE t.session_id = b.session_id AND t.turn_seq = b.turn_seq))"
            " FROM shardstore.turn_buffer b WHERE %s::uuid IS NULL OR b.session_id = %s",
            (session_id, session_id),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 1), st.integers(1, 6)),
        st.tuples(st.just("batch"), st.integers(0, 1), st.integers(2, 15)),
        st.tuples(st.just("rewind"), st.integers(0, 1), st.integers(0, 100)),
        st.tuples(st.just("purge_range"), st.integers(0, 1), st.integers(0, 100)),
        st.tuples(st.just("flush"), st.integers(0, 1), st.just(0)),
        st.tuples(st.just("pass"), st.integers(0, 1), st.just(0)),
        st.tuples(st.just("maintain"), st.just(0), st.just(0)),
    ),
    min_size=3,
    max_size=14,
)


@pytest.mark.slow
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS, seed=st.integers(0, 2**16))
def test_windows_and_rankings_under_every_operation(
    make_store: Any, dsn: str, ops: list[tuple[str, int, int]], seed: int
) -> None:
    """Random appends (single, so seals fold with the keep rule and index what they keep;
    batches), rewinds, range purges, flushes and passes over two sessions of one tenant:
    after every step the invariant holds and the ranking equals the on-the-fly one."""
    rng = random.Random(seed)
    store = make_store(chunk_tokens=120, background_fold=False)
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    sids = [store.create_session(tenant, "user:1", "agent"), store.create_session(tenant)]
    made = [0, 0]
    try:
        for op, which, n in ops:
            sid = sids[which]
            if op == "append":
                for _ in range(n):
                    store.append_turn(sid, say(rng, made[which]))
                    made[which] += 1
            elif op == "batch":
                store.append_turns(sid, [say(rng, made[which] + i) for i in range(n)])
                made[which] += n
            elif op == "rewind":
                head = store.session(sid).turn_count
                if head:
                    with contextlib.suppress(shardstore.InvalidInput):
                        store.rewind(sid, n % head)  # below a range purge's cut: refused
            elif op == "purge_range":
                head = store.session(sid).turn_count
                if head:
                    store.purge_range(sid, before_turn_seq=n % head)
            elif op == "flush":
                store.flush(sid)
            elif op == "pass":
                assert store._run(index_buffered_op(sid)) >= 0
            else:
                report = store.maintain(embed=False)
                assert report.text_turns_indexed is not None
                assert buffered_counts(dsn)[0] == buffered_counts(dsn)[1]
            with psycopg.connect(dsn) as conn:
                check_windows(conn)
            same_ranking_without_the_pass(dsn, tenant, sids)
    finally:
        store.close()


def test_a_seal_indexes_the_chunks_kept_for_tail_and_maintain_the_rest(
    make_store: Any, dsn: str
) -> None:
    rng = random.Random(7)
    store = make_store(chunk_tokens=150, background_fold=False)  # folds at the seal, inline
    sid = store.create_session("t1")
    chunks = [store.append_turn(sid, say(rng, i)).chunk_seq for i in range(60)]
    while chunks[-1] != chunks[-2]:  # two turns since the last seal: the second waits
        chunks.append(store.append_turn(sid, say(rng, len(chunks))).chunk_seq)
    buffered, indexed = buffered_counts(dsn)
    assert buffered >= 20  # the keep rule holds the newest 20 turns buffered
    assert 0 < indexed < buffered  # kept chunks indexed by the seal's fold; the open one not
    report = store.maintain(embed=False)
    assert report.text_turns_indexed == buffered - indexed
    assert report.text_sessions_indexed == 1
    assert buffered_counts(dsn) == (buffered, buffered)
    assert store.maintain(embed=False).text_turns_indexed == 0  # nothing left: idempotent
    # the indexed buffered turns are found, once each, and folding them indexes nothing twice
    hits = store.search("QX-4471", session_id=sid, mode="text", k=50)
    before = sorted(t.turn_seq for h in hits for t in h.turns)
    store.flush(sid)
    after = sorted(
        t.turn_seq
        for h in store.search("QX-4471", session_id=sid, mode="text", k=50)
        for t in h.turns
    )
    assert before == after and len(set(after)) == len(after)
    with psycopg.connect(dsn) as conn:
        check_windows(conn)
    doc = report.to_json()
    assert doc["text_turns_indexed"] == buffered - indexed
    assert ("text indexed", f"{buffered - indexed} buffered turns (1 sessions)") in (
        report.detail_rows()
    )


def test_text_indexing_off_writes_no_windows(make_store: Any, dsn: str) -> None:
    rng = random.Random(3)
    store = make_store(chunk_tokens=150)
    store.configure_text_search(None)
    sid = store.create_session("t1")
    for i in range(40):
        store.append_turn(sid, say(rng, i))
    store.drain_folds()
    assert store._run(index_buffered_op(sid)) == 0
    assert store.maintain(embed=False).text_turns_indexed == 0
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM shardstore.turn_text").fetchone() == (0,)
    store.configure_text_search("english")  # on again: the pass indexes the buffer
    assert store.maintain(embed=False).text_turns_indexed == buffered_counts(dsn)[0]


def test_gone_and_purged_sessions_index_nothing(make_store: Any, dsn: str) -> None:
    rng = random.Random(5)
    store = make_store()
    sid = store.create_session("t1", "user:9")
    store.append_turn(sid, say(rng, 0))
    assert store._run(index_buffered_op(uuid.uuid4())) == 0
    store.purge_subject("t1", "user:9")
    assert store._run(index_buffered_op(sid)) == 0
    with psycopg.connect(dsn) as conn:
        check_windows(conn)


def test_asyncio_store_indexes_the_same(make_store: Any, dsn: str) -> None:
    """AsyncStore's folds (inline, and as an asyncio task) and maintain() index what Store's
    do: the same messages give the same buffered and indexed counts, turn for turn."""
    rng = random.Random(11)
    messages = [say(rng, i) for i in range(60)]
    store = make_store(chunk_tokens=150, background_fold=False)
    sync_sid = store.create_session("t1")
    for m in messages:
        store.append_turn(sync_sid, m)
    want = buffered_counts(dsn, sync_sid)
    assert 0 < want[1] < want[0]  # the kept chunks indexed, the open chunk's newest not
    store.maintain(embed=False)  # maintain is global: leave only what the runs below append

    async def run(background: bool) -> tuple[tuple[int, int], int | None]:
        astore = await shardstore.connect_async(dsn, chunk_tokens=150, background_fold=background)
        try:
            sid = await astore.create_session("t1")
            for m in messages:
                await astore.append_turn(sid, m)
            await astore.drain_folds()
            got = buffered_counts(dsn, sid)
            report = await astore.maintain(embed=False)
            return got, report.text_turns_indexed
        finally:
            await astore.close()

    got, by_maintain = asyncio.run(run(background=False))
    assert got == want and by_maintain == want[0] - want[1]
    got, by_maintain = asyncio.run(run(background=True))  # the task indexes at least as much
    assert got[0] == want[0] and want[1] <= got[1] <= got[0]
    assert by_maintain == got[0] - got[1]
    assert buffered_counts(dsn)[0] == buffered_counts(dsn)[1]
    with psycopg.connect(dsn) as conn:
        check_windows(conn)


def test_passes_racing_rewinds_purges_and_folds_leave_no_stray_window(
    make_store: Any, dsn: str
) -> None:
    """One thread indexes the session's buffer in a loop while another appends, rewinds,
    range-purges and flushes it: a window is never left for a turn that is gone."""
    store = make_store(chunk_tokens=120, background_fold=False)
    sid = store.create_session("t1")
    stop = threading.Event()
    errors: list[BaseException] = []

    def indexer() -> None:
        passes = shardstore.connect(dsn)
        try:
            while not stop.is_set():
                passes._run(index_buffered_op(sid))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            passes.close()

    thread = threading.Thread(target=indexer)
    thread.start()
    rng = random.Random(1)
    made = 0
    try:
        for step in range(100):
            for _ in range(rng.randint(1, 5)):
                store.append_turn(sid, say(rng, made))
                made += 1
            head = store.session(sid).turn_count
            kind = step % 4
            if kind == 1:
                store.rewind(sid, max(head - rng.randint(1, 6), 0))
            elif kind == 2 and head > 4:
                store.purge_range(sid, before_turn_seq=rng.randint(0, head // 4))
            elif kind == 3:
                store.flush(sid)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    with psycopg.connect(dsn) as conn:
        check_windows(conn)
    same_ranking_without_the_pass(dsn, "t1", [sid])


PASS_SCRIPT = """
import sys, shardstore
store = shardstore.connect(sys.argv[1])
print("start", flush=True)
store.maintain(embed=False)
print("done", flush=True)
"""


@pytest.mark.slow
def test_a_pass_killed_midway_leaves_whole_sessions_and_the_next_run_finishes(
    make_store: Any, dsn: str
) -> None:
    """maintain()'s pass over 120 sessions is SIGKILLed partway: each session's windows
    were written by one statement, so every session is indexed wholly or not at all; the
    invariant holds; the next run indexes the rest, and nothing twice."""
    rng = random.Random(2)
    # nothing seals and nothing folds in the background: every turn waits for the pass
    store = make_store(chunk_tokens=100_000, background_fold=False)
    sids = [store.create_session("t1", f"user:{i}") for i in range(120)]
    for sid in sids:
        store.append_turns(sid, [say(rng, j) for j in range(25)])
    buffered, indexed = buffered_counts(dsn)
    assert indexed == 0
    env = {**os.environ, "PGAPPNAME": "killed-text-pass"}
    proc = subprocess.Popen(
        [sys.executable, "-c", PASS_SCRIPT, dsn], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "start"
    deadline = time.monotonic() + 60
    while buffered_counts(dsn)[1] == 0:  # kill it once it has written something
        assert time.monotonic() < deadline and proc.poll() is None, "the pass never started"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # the dead client's backend may still finish the statement it had received (and commit
    # it): count what the pass wrote once no backend of it is left
    deadline = time.monotonic() + 60
    with psycopg.connect(dsn, autocommit=True) as conn:
        while conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'killed-text-pass'"
        ).fetchone() != (0,):
            assert time.monotonic() < deadline, "the killed pass's backend lingers"
            time.sleep(0.02)
    _, part = buffered_counts(dsn)
    assert 0 < part < buffered, "the kill came before or after the whole pass"
    with psycopg.connect(dsn) as conn:
        check_windows(conn)
        per = conn.execute(
            "SELECT count(*) FILTER (WHERE EXISTS (SELECT 1 FROM shardstore.turn_text t"
            " WHERE t.session_id = b.session_id AND t.turn_seq = b.turn_seq))"
            " FROM shardstore.turn_buffer b GROUP BY b.session_id"
        ).fetchall()
    assert {n for (n,) in per} <= {0, 25}, "a session indexed in part"
    report = store.maintain(embed=False)
    assert report.text_turns_indexed == buffered - part
    assert buffered_counts(dsn) == (buffered, buffered)
    # sessions of 25 turns are ranked exactly (the tenant's 3,000 are sampled)
    same_ranking_without_the_pass(dsn, None, sids[:3])


def test_the_background_folder_indexes_open_chunks_every_16_turns(
    make_store: Any, dsn: str
) -> None:
    """Without a seal, every TEXT_INDEX_EVERY-th turn hands the session to the background
    folder, which indexes its buffer; inline folds add no such work to an append."""
    from shardstore.history.ops import TEXT_INDEX_EVERY

    assert TEXT_INDEX_EVERY == 16
    rng = random.Random(4)
    store = make_store(chunk_tokens=100_000)  # nothing seals
    sid = store.create_session("t1")
    for i in range(40):
        store.append_turn(sid, say(rng, i))
    store.drain_folds()
    buffered, indexed = buffered_counts(dsn, sid)
    assert buffered == 40 and 32 <= indexed <= 40  # handed over at turns 15 and 31
    inline = make_store(chunk_tokens=100_000, background_fold=False)
    other = inline.create_session("t1")
    for i in range(40):
        inline.append_turn(other, say(rng, i))
    assert buffered_counts(dsn, other) == (40, 0)
    with psycopg.connect(dsn) as conn:
        check_windows(conn)


class _Handovers:
    """Appends turn by turn through a store (sync, or asyncio run to completion) and notes,
    per turn, whether it sealed a chunk, whether it was due a text pass, and whether it
    handed its session to the background folder."""

    def __init__(self, store: Any, run: Callable[[Any], Any]) -> None:
        self.store, self.run, self.calls = store, run, 0
        folder = store.background_folder
        submit = folder.submit

        def counted(session_id: uuid.UUID) -> None:
            self.calls += 1
            submit(session_id)

        folder.submit = counted
        self.sid = run(store.create_session("t1"))
        self.chunk = -1

    def append(self, rng: random.Random, n: int) -> list[tuple[bool, bool, bool]]:
        rows = []
        for _ in range(n):
            before = self.calls
            r = self.run(self.store.append_turn(self.sid, say(rng, 0)))
            sealed, self.chunk = self.chunk not in (-1, r.chunk_seq), r.chunk_seq
            due = r.turn_seq % TEXT_INDEX_EVERY == TEXT_INDEX_EVERY - 1
            rows.append((sealed, due, self.calls > before))
        self.run(self.store.drain_folds())
        return rows


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_no_text_passes_while_text_search_is_off(
    new_database: Callable[[], str], flavour: str
) -> None:
    """With text search off a text pass indexes nothing: the folder's pass says so, and the
    turns due one are no longer handed over (only seals are); switched on again from
    elsewhere, the next seal's fold says so and the passes resume."""
    dsn = new_database()
    rng = random.Random(8)
    loop = asyncio.new_event_loop()
    if flavour == "sync":
        store: Any = shardstore.connect(dsn, chunk_tokens=300)
        run: Callable[[Any], Any] = lambda value: value  # noqa: E731
    else:
        store = loop.run_until_complete(shardstore.connect_async(dsn, chunk_tokens=300))
        run = loop.run_until_complete
    try:
        run(store.configure_text_search(None))
        turns = _Handovers(store, run)
        turns.append(rng, TEXT_INDEX_EVERY)  # the first due turn goes: the folder knew nothing
        assert store.background_folder.text_search is False
        off = turns.append(rng, 80)
        assert sum(due and not sealed for sealed, due, _ in off) >= 2  # the check below bites
        assert all(sealed for sealed, _, handed in off if handed)
        assert any(sealed for sealed, _, _ in off)
        with shardstore.connect(dsn) as other:
            other.configure_text_search("english")
        # up to the first seal, whose fold tells the folder that text search is on again;
        # each call waits for the folds it caused, so no later turn races that fold
        rows: list[tuple[bool, bool, bool]] = []
        while not any(sealed for sealed, _, _ in rows):
            rows += turns.append(rng, 1)
        assert store.background_folder.text_search is True
        after = turns.append(rng, 60)
        assert any(due and not sealed and handed for sealed, due, handed in after)
        assert all(handed for sealed, due, handed in after if due or sealed)
    finally:
        if flavour == "sync":
            store.close()
        else:
            loop.run_until_complete(store.close())
        loop.close()


def _append_until_a_fold(store: Any, sid: uuid.UUID, rng: random.Random) -> None:
    first = store.append_turn(sid, say(rng, 1000)).chunk_seq
    for i in range(1001, 1200):
        if store.append_turn(sid, say(rng, i)).chunk_seq != first:
            return  # sealed: the inline fold of that seal ran in this call
    raise AssertionError("no seal in 200 turns")


@pytest.mark.slow
@pytest.mark.parametrize("language", ["simple", None])
@pytest.mark.parametrize("writer", ["fold", "pass", "import"])
def test_a_writer_during_a_language_change_waits_and_writes_the_new_language(
    make_store: Any,
    dsn: str,
    new_database: Callable[[], str],
    writer: str,
    language: str | None,
) -> None:
    """A fold, a text pass or an import that starts while a change of the
    configuration is open waits for it, then writes windows of the new configuration (none
    when it switched text indexing off); before, it wrote old-language windows the change
    never removed."""
    rng = random.Random(11)
    store = make_store(chunk_tokens=150, background_fold=False)  # folds inline, at the seal
    sid = store.create_session("t1")
    for i in range(30):
        store.append_turn(sid, say(rng, i))
    exported = io.StringIO()
    if writer == "import":  # a session of another database, imported into this one
        with shardstore.connect(new_database(), chunk_tokens=150) as source:
            other = source.create_session("t1")
            source.append_turns(other, [say(rng, i) for i in range(60)])
            source.export_sessions([other], out=exported)
        exported.seek(0)
    change = psycopg.connect(dsn)  # a transaction left open: the change is not committed yet
    change.execute("SELECT shardstore.text_configure_v1(%s::regconfig)", (language,))
    done = threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            if writer == "fold":
                _append_until_a_fold(store, sid, rng)
            elif writer == "pass":
                store._run(index_buffered_op(sid))
            else:
                assert store.import_jsonl(exported).sessions == 1
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)
        finally:
            done.set()

    thread = threading.Thread(target=write)
    thread.start()
    try:
        assert not done.wait(1.0), "the writer went ahead of an open change of the language"
    finally:
        change.commit()
        change.close()
        thread.join(60)
    assert not errors, errors
    with psycopg.connect(dsn) as conn:
        check_windows(conn)  # every window is what the new configuration makes of its turn
        row = conn.execute("SELECT count(*) FROM shardstore.turn_text").fetchone()
    assert row is not None and (row[0] > 0) == (language is not None)
    assert store.text_search_language() == language


def test_a_search_during_a_language_change_does_not_wait_for_it(make_store: Any, dsn: str) -> None:
    """Readers never take the writers' lock: a search while a change is open ranks
    the old windows, as before; the change's own rows appear when it commits."""
    rng = random.Random(13)
    store = make_store(chunk_tokens=150, background_fold=False)
    sid = store.create_session("t1")
    for i in range(40):
        store.append_turn(sid, say(rng, i))
    before = [(h.chunk_seq, h.score) for h in store.search("QX-4471", session_id=sid, mode="text")]
    assert before
    # a second store whose statements give up after 2 s on any lock they wait for
    impatient = shardstore.connect(make_conninfo(dsn, options="-c lock_timeout=2000"))
    change = psycopg.connect(dsn)
    try:
        change.execute("SELECT shardstore.text_configure_v1('simple'::regconfig)")
        during = [
            (h.chunk_seq, h.score) for h in impatient.search("QX-4471", session_id=sid, mode="text")
        ]
        assert during == before
        assert impatient.text_search_language() == "english"
        change.commit()
        assert impatient.text_search_language() == "simple"
    finally:
        change.close()
        impatient.close()
