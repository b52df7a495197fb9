"""A writer for tests/crash/test_fork_writer_killed.py, run in its own process and SIGKILLed at
random: it appends to a root session, forks it, rewinds the root below the forks' points (copy-on-
write into them) and appends to the forks, logging each acknowledged fork with a digest of
the history it must keep (fsync'd before the next call).

``python -m tests.fork_writer DSN ROOT LOG SEED``
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import uuid

import shardstore


def digest(turns: list[tuple[int, object]]) -> str:
    """The fingerprint of a history: its (turn_seq, message) pairs as JSON."""
    return hashlib.sha256(json.dumps(turns, sort_keys=True).encode()).hexdigest()


def main() -> None:
    dsn, root, log, seed = sys.argv[1], uuid.UUID(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    rng = random.Random(seed)
    store = shardstore.connect(dsn, chunk_tokens=40, premake=0)
    out = open(log, "a")  # noqa: SIM115 - kept open until the process is killed
    forks: list[uuid.UUID] = []
    print("ready", flush=True)  # the test times its kill from here
    while True:
        n = store.session(root).turn_count
        store.append_turns(
            root,
            [
                {"role": "user", "content": f"s{seed} r{n + i} " + "ocean " * rng.randint(0, 9)}
                for i in range(4)
            ],
        )
        if rng.random() < 0.3:
            store.flush(root)
        n = store.session(root).turn_count
        at = rng.randint(-1, n - 1)
        want = [(t.turn_seq, t.message) for t in store.history(root, 0, at + 1)]
        child = store.fork(root, at_turn_seq=at)
        out.write(json.dumps({"fork": str(child), "at": at, "digest": digest(want)}) + "\n")
        out.flush()
        os.fsync(out.fileno())
        forks.append(child)
        target = rng.choice(forks)
        store.append_turn(target, {"role": "assistant", "content": f"own {rng.random()}"})
        store.rewind(root, rng.randint(0, store.session(root).turn_count))


if __name__ == "__main__":
    main()
