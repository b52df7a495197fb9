"""Portability round trip: ``export_sessions`` of a whole tenant to a JSONL file and
``import_jsonl`` of it into a fresh database, at several sizes, with records/s and the
peak memory each side adds (resident set size, sampled every 20 ms by a thread, above
the process's size when the step starts): an export that streams keeps it flat as the
tenant grows tenfold.

    python -m benchmarks portability [--dsn DSN] [--turns 100000,1000000] [--quick]
                                     [--no-import] [--out FILE.md]

The tenant: sessions of 1,000 turns (~400 B messages, benchmarks.lib.corpus), each with
3 checkpoints and a run; every 50th session also references a 256 KiB artifact from a
checkpoint (its bytes go into the file, base64). A record is a line of the file (turns,
checkpoints, runs, artifacts and their parts, references, session and end lines).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import shardstore
from benchmarks.lib.corpus import make_messages
from benchmarks.lib.report import progress, write_results
from benchmarks.lib.server import create_database, drop_database, open_server

SESSION_TURNS = 1_000
TENANT = "bench"
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


class PeakRss:
    """The peak resident size above the size at start, sampled every 20 ms."""

    def __init__(self) -> None:
        self.base = _rss()
        self.peak = self.base
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            self.peak = max(self.peak, _rss())

    def __enter__(self) -> PeakRss:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()
        self.peak = max(self.peak, _rss())

    @property
    def added(self) -> int:
        return self.peak - self.base


def build(store: shardstore.Store, turns: int, say: Callable[[str], None]) -> None:
    """The tenant: ``turns`` turns in sessions of 1,000, with their state."""
    messages = make_messages(SESSION_TURNS, target_bytes=400)
    blob = os.urandom(256 * 1024)
    sessions = -(-turns // SESSION_TURNS)
    for n in range(sessions):
        count = min(SESSION_TURNS, turns - n * SESSION_TURNS)
        sid = store.create_session(TENANT, f"user-{n % 97}", "agent")
        for at in range(0, count, 500):
            store.append_turns(sid, messages[at : min(at + 500, count)])
        for step in range(3):
            state: dict[str, Any] = {"step": step, "plan": ["search", "answer"]}
            if step == 0 and n % 50 == 0:
                ref = store.put_artifact(TENANT, blob + n.to_bytes(4, "big"), content_type="x/bin")
                state["report"] = ref.to_json()
            store.checkpoint(sid, state)
        run = store.open_run(sid, framework="custom", thread_key=f"t-{n}")
        store.close_run(run.run_id, "done")
        if n % 100 == 0:
            say(f"  built {n * SESSION_TURNS + count:,} turns")
    store.drain_folds()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", default=None, help="server to use (default: embedded)")
    parser.add_argument("--turns", default="100000,1000000", help="tenant sizes, comma-separated")
    parser.add_argument("--quick", action="store_true", help="2,000 turns")
    parser.add_argument("--no-import", action="store_true", help="export only")
    parser.add_argument("--out", default=None, help="write the results table here")
    args = parser.parse_args(argv)
    sizes = [2_000] if args.quick else [int(x) for x in args.turns.split(",") if x]
    lines = [
        "# Portability: export and import of a whole tenant",
        "",
        f"Sessions of {SESSION_TURNS:,} turns (~400 B messages) with 3 checkpoints and a run "
        "each, a 256 KiB artifact every 50th session; `python -m benchmarks portability"
        f"{' --quick' if args.quick else ''} --turns {','.join(map(str, sizes))}`. Memory: "
        "the peak resident size the step added (sampled every 20 ms).",
        "",
        "| turns | step | records | file MB | seconds | records/s | turns/s | peak RSS added MB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    pid = os.getpid()
    with open_server(args.dsn, keep=False) as server, tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            src_name, dst_name = (
                f"shardstore_port_src_{pid}_{size}",
                f"shardstore_port_dst_{pid}_{size}",
            )
            source = create_database(server.admin_dsn, src_name)
            path = os.path.join(tmp, f"tenant-{size}.jsonl")
            try:
                progress(f"{size:,} turns: building")
                with shardstore.connect(source) as store:
                    t0 = time.perf_counter()
                    build(store, size, progress)
                    progress(f"  built in {time.perf_counter() - t0:.0f} s; exporting")
                    with PeakRss() as mem:
                        t0 = time.perf_counter()
                        done = store.export_sessions(tenant_id=TENANT, out=path)
                        seconds = time.perf_counter() - t0
                with open(path, "rb") as f:
                    records = sum(1 for _ in f)
                mb = os.path.getsize(path) / 1e6
                assert done.turns == size, done
                lines.append(
                    f"| {size:,} | export | {records:,} | {mb:,.1f} | {seconds:.1f} | "
                    f"{records / seconds:,.0f} | {size / seconds:,.0f} | {mem.added / 1e6:.1f} |"
                )
                progress(lines[-1])
                if not args.no_import:
                    target = create_database(server.admin_dsn, dst_name)
                    try:
                        with shardstore.connect(target) as copy:
                            progress(f"{size:,} turns: importing")
                            with PeakRss() as mem:
                                t0 = time.perf_counter()
                                back = copy.import_jsonl(path, batch_size=500)
                                seconds = time.perf_counter() - t0
                        assert back.turns == size and back.checkpoints == done.checkpoints, back
                        lines.append(
                            f"| {size:,} | import | {records:,} | {mb:,.1f} | {seconds:.1f} | "
                            f"{records / seconds:,.0f} | {size / seconds:,.0f} | "
                            f"{mem.added / 1e6:.1f} |"
                        )
                        progress(lines[-1])
                    finally:
                        drop_database(server.admin_dsn, dst_name)
            finally:
                if os.path.exists(path):
                    os.unlink(path)
                drop_database(server.admin_dsn, src_name)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
