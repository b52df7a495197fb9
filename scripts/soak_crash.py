"""Crash soak: SIGKILL a dedicated embedded Postgres hundreds of times under a streaming
writer process and check every invariant after each crash (tests/faults.py).

    python scripts/soak_crash.py                       # 500 crashes, at most 20 minutes
    python scripts/soak_crash.py --crashes 2000 --max-seconds 3600 --json

Loopback only: the server listens on a Unix socket in a temporary directory. Crash kinds
rotate: the whole server (postmaster and children SIGKILLed, then pg_ctl start: crash
recovery), one backend (the postmaster resets every process itself), and a chosen point
(a fold held mid-statement before it writes chunk_map). A fresh database is used every
``--per-database`` crashes so that checks stay fast. Exit status 0 when every check held.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import shardstore
from tests.faults import (
    CrashableServer,
    Expected,
    WriterConfig,
    check_api,
    check_database,
    holding,
    read_log,
    spawn_writer,
    wait_for_acks,
    wait_for_backend,
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--crashes", type=int, default=500)
    ap.add_argument("--max-seconds", type=float, default=1200)
    ap.add_argument("--per-database", type=int, default=25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    started = time.monotonic()
    kinds = {"server": 0, "backend": 0, "fold": 0}
    totals = {"acked_turns": 0, "retries": 0, "duplicates": 0}
    work = Path(tempfile.mkdtemp(prefix="shardstore-soak-"))
    server = CrashableServer()
    crashes = 0
    ok = True
    failure = ""
    try:
        while crashes < args.crashes and time.monotonic() - started < args.max_seconds:
            dsn = server.create_database()
            settings: dict[str, Any] = {"chunk_tokens": rng.choice([16, 200, 2000])}
            budget = shardstore.Settings.from_kwargs(settings).budget_tokens
            with shardstore.connect(dsn, **settings) as store:
                sessions = [str(store.create_session("soak")) for _ in range(3)]
            cfg = WriterConfig(
                dsn=dsn,
                sessions=sessions,
                log=str(work / f"w{crashes}.log"),
                stop_file=str(work / f"stop{crashes}"),
                settings=settings,
                max_batch=rng.choice([1, 8, 64]),
                sleep=0.002,  # keep each database small so that the checks stay fast
            )
            proc = spawn_writer(cfg)
            wait_for_acks(cfg.log, 2)
            expected = Expected({cfg.prefix: cfg.log}, budget)
            for _ in range(args.per_database):
                if crashes >= args.crashes or time.monotonic() - started > args.max_seconds:
                    break
                wait_for_acks(cfg.log, len(read_log(cfg.log).acked) + 1, timeout=30)
                time.sleep(rng.uniform(0.0, 0.1))
                kind = rng.choice(["server", "server", "backend", "fold"])
                if kind == "fold":
                    with holding(dsn, "LOCK TABLE shardstore.chunk_map IN EXCLUSIVE MODE"):
                        try:
                            wait_for_backend(dsn, "fold_sealed_v2(", waiting=True, timeout=2)
                        except AssertionError:
                            kind = "server"  # no fold within 2 s (large chunks): plain crash
                        server.crash()
                elif kind == "server":
                    server.crash()
                else:
                    server.kill_backend()
                kinds[kind] += 1
                crashes += 1
                check_database(dsn, expected)
            Path(cfg.stop_file or "").touch()
            if proc.wait(120) != 0:
                raise RuntimeError(Path(cfg.log + ".err").read_text()[-3000:])
            rep = check_database(dsn, expected, final=True)
            with shardstore.connect(dsn, **settings) as store:
                check_api(store, dsn, sessions)
            log = read_log(cfg.log)
            totals["acked_turns"] += rep.acked_turns
            totals["retries"] += log.retries
            totals["duplicates"] += log.duplicates
            if not args.json:
                print(
                    f"{crashes} crashes, {time.monotonic() - started:.0f} s, {totals}", flush=True
                )
    except AssertionError as exc:
        ok, failure = False, str(exc)
    finally:
        server.close()
    result = {
        "ok": ok,
        "failure": failure,
        "crashes": crashes,
        "by_kind": kinds,
        "seconds": round(time.monotonic() - started, 1),
        **totals,
    }
    print(json.dumps(result) if args.json else result)
    return 0 if ok and crashes >= min(args.crashes, 1) else 1


if __name__ == "__main__":
    sys.exit(main())
