"""The crash-test agent of tests/state/test_checkpoints.py and scripts/soak_checkpoints.py.

``python -m tests.checkpoint_writer DSN SESSION ACK_FILE SLEEP`` starts a zygote: it imports
shardstore once, then for every ``go`` line on stdin forks an agent, prints its pid, waits
for it (the test SIGKILLs it at a random moment) and prints ``reaped``. So a kill costs a
fork and a connect, not an interpreter start.

The agent resumes from ``restore()`` and loops: append the user turn of step i with a
checkpoint ``{"step": i}`` (one statement) → the model call (a sleep) → append the
assistant reply with the key ``a:<checkpoint id>``. It appends each acknowledgement to
ACK_FILE with one ``write`` before its next step:

    R <checkpoint id | -> <turns restored>
    U <step> <checkpoint id> <turn_seq> <duplicate 0/1>
    A <step> <turn_seq> <duplicate 0/1>
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo

import shardstore

REPO = Path(__file__).resolve().parent.parent


def user_message(step: int) -> dict[str, Any]:
    return {"role": "user", "content": f"question {step} " + "words " * (step % 17)}


def reply(step: int) -> dict[str, Any]:
    return {"role": "assistant", "content": f"reply {step} " + "tokens " * (step % 23)}


def agent(dsn: str, sid: str, ack_path: str, sleep: float) -> None:
    fd = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def ack(line: str) -> None:
        os.write(fd, (line + "\n").encode())

    store = shardstore.connect(dsn, chunk_tokens=300)
    restored = store.restore(sid)
    cp = restored.checkpoint
    ack(f"R {cp.checkpoint_id if cp else '-'} {len(restored.turns)}")
    if cp is None:
        step = 0
    else:
        # the user turn of this step is in; its reply may be too (then this is a no-op)
        step = int(cp.state["step"])
        time.sleep(sleep)  # the model call, again
        a = store.append_turn(sid, reply(step), idempotency_key=f"a:{cp.checkpoint_id}")
        ack(f"A {step} {a.turn_seq} {int(a.duplicate)}")
        step += 1
    while True:
        u = store.append_turn(
            sid, user_message(step), idempotency_key=f"u{step}", checkpoint={"step": step}
        )
        ack(f"U {step} {u.checkpoint_id} {u.turn_seq} {int(u.duplicate)}")
        time.sleep(sleep)  # the model call
        a = store.append_turn(sid, reply(step), idempotency_key=f"a:{u.checkpoint_id}")
        ack(f"A {step} {a.turn_seq} {int(a.duplicate)}")
        step += 1


@dataclass
class CrashRun:
    """What a run of kills saw: restores checked, acknowledgements, kills."""

    kills: int = 0
    restores: int = 0
    acks: list[list[str]] = field(default_factory=list)


def _newest(dsn: str, sid: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT checkpoint_id FROM shardstore.checkpoints WHERE session_id = %s"
            " ORDER BY seq DESC LIMIT 1",
            (sid,),
        ).fetchone()
    return "-" if row is None else str(row[0])


def _settle(dsn: str, app: str, timeout: float = 20.0) -> None:
    """Wait until the killed agent's backend is gone: whatever it was running has
    committed or rolled back by then."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (app,)
        ).fetchone() != (0,):
            if time.monotonic() > deadline:
                raise AssertionError("the killed agent's backend did not go away")
            time.sleep(0.002)


def _read_acks(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line]


def run_kills(
    dsn: str,
    sid: str,
    ack_path: Path,
    kills: int,
    *,
    seed: int,
    sleep: float = 0.002,
    max_delay: float = 0.03,
    deadline: float | None = None,
) -> CrashRun:
    """SIGKILL ``kills`` agents at random moments (up to ``max_delay`` after each one's
    restore); before each restart, note the newest committed checkpoint, and check that the
    agent's restore() returned exactly it."""
    rng = random.Random(seed)
    app = f"cpwriter-{uuid.uuid4().hex[:8]}"
    agent_dsn = make_conninfo(dsn, application_name=app)
    zygote = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.checkpoint_writer",
            agent_dsn,
            sid,
            str(ack_path),
            str(sleep),
        ],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert zygote.stdin is not None and zygote.stdout is not None
    run = CrashRun()
    try:
        while run.kills < kills and (deadline is None or time.monotonic() < deadline):
            expected = _newest(dsn, sid)
            seen = len(_read_acks(ack_path))
            zygote.stdin.write("go\n")
            zygote.stdin.flush()
            pid = int(zygote.stdout.readline())
            limit = time.monotonic() + 30
            while True:  # its restore, then a random moment
                acks = _read_acks(ack_path)[seen:]
                if acks:
                    break
                if time.monotonic() > limit:
                    raise AssertionError("the agent never restored")
                time.sleep(0.001)
            assert acks[0][0] == "R" and acks[0][1] == expected, (acks[0], expected)
            run.restores += 1
            time.sleep(rng.uniform(0.0, max_delay))
            os.kill(pid, signal.SIGKILL)
            status = zygote.stdout.readline().split()
            assert status[0] == "reaped" and os.WIFSIGNALED(int(status[1])), status
            run.kills += 1
            _settle(dsn, app)
    finally:
        zygote.stdin.close()
        zygote.wait(30)
    run.acks = _read_acks(ack_path)
    return run


def check(store: shardstore.Store, dsn: str, sid: str, run: CrashRun) -> int:
    """The invariants after the kills; returns the steps completed."""
    turns = list(store.history(sid))
    messages = [t.message for t in turns]
    # the history is exactly user 0, reply 0, user 1, reply 1, ... (the last reply may miss):
    # no acknowledged user turn lost, no reply stored twice, nothing half-written
    expected: list[dict[str, Any]] = []
    step = 0
    while len(expected) < len(messages):
        expected.append(user_message(step))
        expected.append(reply(step))
        step += 1
    assert messages == expected[: len(messages)]
    for line in run.acks:
        if line[0] == "U":
            i, seq = int(line[1]), int(line[3])
            assert seq == 2 * i and messages[seq] == user_message(i), line
        elif line[0] == "A":
            i, seq = int(line[1]), int(line[2])
            assert seq == 2 * i + 1 and messages[seq] == reply(i), line
    with psycopg.connect(dsn) as conn:
        positions = conn.execute(
            "SELECT turn_seq, state FROM shardstore.checkpoints WHERE session_id = %s ORDER BY seq",
            (sid,),
        ).fetchall()
    assert positions, "no checkpoint was written"
    for turn_seq, state in positions:
        assert turn_seq <= len(turns) - 1
        assert turn_seq == 2 * state["step"]  # positioned at its user turn
    steps = [state["step"] for _, state in positions]
    assert steps == list(range(len(steps)))  # one checkpoint per user turn, none twice
    return len(messages) // 2


def _warm_up() -> None:
    """Load in the zygote what every agent's first append would load (the token counter,
    shared by every store of a process, and its first merge): each forked agent then
    connects and resumes in milliseconds instead of spending a third of a second on it."""
    from shardstore.history.tokens import make_counter

    counter = make_counter(None)
    for step in range(3):
        counter.count(json.dumps(user_message(step)))
        counter.count(json.dumps(reply(step)))


def main() -> None:
    dsn, sid, ack_path, sleep = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    _warm_up()
    for line in sys.stdin:
        if line.strip() != "go":
            break
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                agent(dsn, sid, ack_path, sleep)
            except BaseException as exc:
                sys.stderr.write(f"agent failed: {exc!r}\n")
                code = 1
            finally:
                os._exit(code)
        print(pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print(f"reaped {status}", flush=True)


if __name__ == "__main__":
    main()
