"""Google ADK: get_session of a session's newest events at 10 and 10,000 events.

    python -m benchmarks adk [--dsn DSN] [--quick] [--out FILE.md]

``ShardstoreSessionService.get_session(config=GetSessionConfig(num_recent_events=20))`` of a
10-event and a 10,000-event session (the same events, ~60 tokens each, written in batches
and folded as a long session would be), interleaved in rounds so that both see the same
server state; p50 and p90 in ms, and their ratio (the goal: ~1x, the read does not grow
with the session). ``get_session`` without a config (every event) at both sizes for scale.
Needs google-adk (``pip install 'shardstore[adk]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence

import shardstore
from benchmarks.lib.report import progress, write_results
from benchmarks.lib.server import open_server

APP = "bench"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--dsn")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    from google.adk.events.event import Event
    from google.adk.sessions.base_session_service import GetSessionConfig
    from google.genai import types

    from shardstore.integrations.google_adk import ShardstoreSessionService, _event_message

    rounds = 50 if args.quick else 300
    sizes = (10, 10_000)

    async def run(store: shardstore.Store) -> list[str]:
        service = ShardstoreSessionService(store, tenant_id="bench")
        ids = {}
        for n in sizes:
            session = await service.create_session(app_name=APP, user_id="u", state={"k": 1})
            shard = service.shardstore_session_id(APP, "u", session.id)
            words = " ".join(f"word{i}" for i in range(40))
            events = [
                _event_message(
                    Event(
                        author="user" if i % 2 == 0 else "helper",
                        invocation_id=f"inv-{i // 2}",
                        content=types.Content(
                            role="user" if i % 2 == 0 else "model",
                            parts=[types.Part(text=f"message {i}: {words}")],
                        ),
                    )
                )
                for i in range(n)
            ]
            for start in range(0, n, 1000):
                store.append_turns(shard, events[start : start + 1000])
            store.flush(shard)
            ids[n] = session.id
            progress(f"adk: {n} events written")
        config = GetSessionConfig(num_recent_events=20)
        times: dict[int, list[float]] = {n: [] for n in sizes}
        for _ in range(rounds):
            for n in sizes:
                start = time.perf_counter()
                await service.get_session(
                    app_name=APP, user_id="u", session_id=ids[n], config=config
                )
                times[n].append((time.perf_counter() - start) * 1000)
        full = {}
        for n in sizes:
            start = time.perf_counter()
            await service.get_session(app_name=APP, user_id="u", session_id=ids[n])
            full[n] = (time.perf_counter() - start) * 1000

        def q(values: list[float], p: float) -> float:
            return statistics.quantiles(values, n=100)[int(p) - 1]

        small, big = times[sizes[0]], times[sizes[1]]
        ratio = statistics.median(big) / statistics.median(small)
        return [
            "## get_session(num_recent_events=20) against the session's length",
            "",
            f"{rounds} rounds, interleaved; a Store (each call in a worker thread).",
            "",
            "| events | p50 ms | p90 ms | whole session (no config), ms |",
            "| ---: | ---: | ---: | ---: |",
            *(
                f"| {n:,} | {statistics.median(times[n]):.2f} | {q(times[n], 90):.2f} "
                f"| {full[n]:.1f} |"
                for n in sizes
            ),
            "",
            f"p50 at {sizes[1]:,} / at {sizes[0]}: {ratio:.2f}x",
        ]

    with open_server(args.dsn, keep=False) as server:
        store = shardstore.connect(server.dsn)
        try:
            out = asyncio.run(run(store))
        finally:
            store.close()
    text = "\n".join(out) + "\n"
    print(text)
    if args.out:
        write_results(args.out, text)
    return 0
