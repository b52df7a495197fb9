"""Soak the checkpoint crash flow: SIGKILL the agent of tests/checkpoint_writer.py many
times at random points and check every invariant at the end.

    python scripts/soak_checkpoints.py [--kills 2000] [--dsn DSN] [--seed 1] [--max-delay 0.05]

Without ``--dsn`` an embedded Postgres is started in a temporary directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import shardstore
from tests.checkpoint_writer import check, run_kills
from tests.faults import CrashableServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=2000)
    parser.add_argument("--dsn")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-delay", type=float, default=0.05)
    args = parser.parse_args()
    server = None
    if args.dsn is None:
        server = CrashableServer()
        dsn = server.create_database()
    else:
        dsn = args.dsn
    try:
        with shardstore.connect(dsn) as store:
            sid = str(store.create_session("soak", "user:1"))
        started = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            run = run_kills(
                dsn, sid, Path(tmp) / "acks", args.kills, seed=args.seed, max_delay=args.max_delay
            )
            with shardstore.connect(dsn) as store:
                steps = check(store, dsn, sid, run)
        print(
            f"{run.kills} kills, {run.restores} restores checked, {steps} steps, "
            f"{time.monotonic() - started:.0f} s: all invariants held"
        )
    finally:
        if server is not None:
            server.close()


if __name__ == "__main__":
    main()
