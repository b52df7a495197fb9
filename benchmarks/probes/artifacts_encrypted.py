#!/usr/bin/env python
"""What sealing artifact bytes costs: ``put_artifact`` and ``get_artifact`` with encryption
on (``connect(encryption=LocalKeyProvider(...))``) against off, on the postgres backend and
a local directory, interleaved call by call.

    python -m benchmarks.probes.artifacts_encrypted [--dsn DSN] [--rounds 5] [--calls 8]
        [--sizes 65536,1048576,16777216] [--out benchmarks/results/latest/artifacts-encrypted]

One server, one process, one database: per round and size, ``calls`` puts of fresh random
content (never deduplicated) and a get of each, alternating on/off call by call (the order
flipped every round). Prints a markdown table: p50 per backend, size and mode, the ratio
on/off (median of the rounds' ratios), MB/s, and the stored bytes per payload byte on the
postgres backend (the header and the 16-byte tag per 1 MiB frame).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

import shardstore
from benchmarks.lib.report import progress, write_results
from benchmarks.lib.server import open_server
from shardstore.encryption import LocalKeyProvider


def _timed(call: Any) -> float:
    t0 = time.perf_counter()
    call()
    return (time.perf_counter() - t0) * 1000


def _stored_ratio(dsn: str, tenant: str) -> float:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT (SELECT sum(octet_length(c.data)) FROM shardstore.artifact_chunks c"
            "         WHERE c.tenant_id = %(t)s)::float8"
            "       / nullif((SELECT sum(a.size_bytes) FROM shardstore.artifacts a"
            "                  WHERE a.tenant_id = %(t)s AND a.backend = 'postgres'), 0)",
            {"t": tenant},
        ).fetchone()
    return float(row[0]) if row and row[0] is not None else float("nan")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--dsn")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=8)
    p.add_argument("--sizes", default="65536,1048576,16777216")
    p.add_argument("--out")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    root = Path(tempfile.mkdtemp(prefix="shardstore-bench-enc-"))
    keys = LocalKeyProvider(root / "keys", key_file=root / "kek")
    lines = [
        "# Artifact bytes with encryption on vs off",
        "",
        f"`python -m benchmarks.probes.artifacts_encrypted --rounds {args.rounds} "
        f"--calls {args.calls} --sizes {args.sizes}`; one embedded server and process, "
        "on/off interleaved call by call. p50 in ms; ratio = median over rounds of "
        "p50(on) / p50(off).",
        "",
        "| backend | size | op | off p50 | on p50 | on/off | off MB/s | on MB/s |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    data: dict[str, Any] = {}
    with open_server(args.dsn) as server:
        for backend in ("postgres", "file"):
            url = "postgres" if backend == "postgres" else (root / "objects").as_uri()
            stores = {
                "off": shardstore.connect(server.dsn, artifacts=url),
                "on": shardstore.connect(server.dsn, artifacts=url, encryption=keys),
            }
            try:
                for size in sizes:
                    times: dict[tuple[str, str], list[list[float]]] = {
                        (m, op): [] for m in stores for op in ("put", "get")
                    }
                    for rnd in range(args.rounds):
                        order = ["off", "on"] if rnd % 2 == 0 else ["on", "off"]
                        per: dict[tuple[str, str], list[float]] = {k: [] for k in times}
                        for _ in range(args.calls):
                            for mode in order:
                                store = stores[mode]
                                payload = os.urandom(size)
                                tenant = f"bench-{mode}"
                                holder: list[Any] = []
                                per[(mode, "put")].append(
                                    _timed(
                                        lambda s=store, t=tenant, b=payload, h=holder: h.append(
                                            s.put_artifact(t, b, content_type="x")
                                        )
                                    )
                                )
                                aid = holder[0].artifact_id
                                per[(mode, "get")].append(
                                    _timed(lambda s=store, t=tenant, a=aid: s.get_artifact(t, a))
                                )
                        for k, v in per.items():
                            times[k].append(v)
                        progress(f"{backend} {size} round {rnd + 1}/{args.rounds}")
                    for op in ("put", "get"):
                        off = [statistics.median(r) for r in times[("off", op)]]
                        on = [statistics.median(r) for r in times[("on", op)]]
                        ratio = statistics.median(a / b for a, b in zip(on, off, strict=True))
                        p50_off = statistics.median(off)
                        p50_on = statistics.median(on)
                        mb = size / (1 << 20)
                        lines.append(
                            f"| {backend} | {size} | {op} | {p50_off:.2f} | {p50_on:.2f} | "
                            f"{ratio:.2f}× | {mb / (p50_off / 1000):.0f} | "
                            f"{mb / (p50_on / 1000):.0f} |"
                        )
                        data[f"{backend}/{size}/{op}"] = {"off": off, "on": on, "ratio": ratio}
                if backend == "postgres":
                    ratios = {m: _stored_ratio(server.dsn, f"bench-{m}") for m in stores}
                    data["stored_per_payload_byte"] = ratios
            finally:
                for store in stores.values():
                    store.close()
    ratios = data.get("stored_per_payload_byte", {})
    lines += [
        "",
        "Stored bytes (artifact_chunks) per payload byte, postgres backend, all sizes: "
        f"off {ratios.get('off', float('nan')):.5f}, on {ratios.get('on', float('nan')):.5f} "
        "(a 512-byte header and a 16-byte tag per 1 MiB frame).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        write_results(args.out, text, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
