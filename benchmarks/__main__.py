"""The one entry point of the benchmarks::

    python -m benchmarks --list                 # every suite, one line each
    python -m benchmarks SUITE [--quick] [...]  # run one (SUITE --help: its options)

Every suite runs on ONE server from ONE process (embedded PostgreSQL 18 in a temporary
directory, or ``--dsn`` of a server of your own, where a scratch database is made and
dropped). Markdown goes to stdout, progress to stderr, and the results to ``--out OUT``
(``OUT.md``, and ``OUT.json`` where the suite has raw numbers); without ``--out`` a full
run writes ``benchmarks/results/latest/SUITE.md`` (the numbers the docs quote as current)
and a ``--quick`` run ``benchmarks/results/scratch/SUITE.md`` (ignored by git).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.lib.report import default_out, progress, tee_stdout, write_results


@dataclass(frozen=True)
class Suite:
    module: str  # under benchmarks.suites
    summary: str
    preset: tuple[str, ...] = ()  # arguments given before the caller's
    writes_out: bool = True  # takes --out itself (else its stdout is the results)


SUITES: dict[str, Suite] = {
    "adk": Suite("adk", "Google ADK get_session(num_recent_events=20) at 10 vs 10,000 events"),
    "compare": Suite(
        "compare",
        "shardstore vs naive jsonb ||, langchain-postgres, LangGraph PostgresSaver and the "
        "INSERT/COPY floor: appends (1 and 8 writers), WAL, storage, tail, reads, growth to "
        "10^5 turns, plots",
    ),
    "core": Suite(
        "core",
        "append_turn latency and WAL against a bare INSERT, storage per payload byte, tail at "
        "1k vs 100k turns, history() throughput",
    ),
    "append": Suite(
        "append",
        "append_turn p50/p99 against the bare INSERT and langchain add_message (interleaved), "
        "8-writer turns/s, tail(n=20) against LIMIT 20 (--only picks parts)",
    ),
    "tail": Suite(
        "append",
        "tail(n=20) against ORDER BY seq DESC LIMIT 20 at 10^2..10^5 turns, ~400- and "
        "~700-token turns (append --only tail,tail700)",
        preset=("--only", "tail,tail700"),
    ),
    "writers": Suite(
        "append",
        "8 concurrent writers' turns/s: shardstore, langchain-postgres, the INSERT floor "
        "(append --only writers)",
        preset=("--only", "writers"),
    ),
    "seal": Suite(
        "seal",
        "one writer's blocks of single-turn appends with background folds: p50, p99 / the "
        "INSERT's, the sealing calls; before/after a migration or a counter limit",
        writes_out=False,
    ),
    "disk": Suite(
        "disk",
        "disk bytes per payload byte: one session of 10^3..10^5 turns and N x 100-turn "
        "sessions, text search on/off, a batch's keep window on/off",
    ),
    "scale": Suite(
        "scale",
        "--scale x (100,000 sessions x 100 turns + a 10^6-turn session) over 500 hourly "
        "partitions: append/tail at start and end vs a small baseline, plans, maintain, purge",
    ),
    "long-reads": Suite(
        "long_reads",
        "the last 10 chunks of a long session and stats()' row count, old statements vs new, "
        "interleaved",
    ),
    "search": Suite(
        "search",
        "tenant-scoped store.search over 10^5 synthetic 384-d vectors in 10..100 partitions: "
        "recall@10 against exact, p50/p99, setting variants, HNSW build",
    ),
    "search-encrypted": Suite(
        "search_encrypted",
        "text, vector and hybrid search with encryption on vs off, same data, interleaved",
        writes_out=False,
    ),
    "text-buffered": Suite(
        "text_buffered",
        "tenant text search over active sessions: buffered turns indexed as appended, none "
        "indexed, after maintain(), all folded",
        writes_out=False,
    ),
    "text-hashes": Suite(
        "text_hashes",
        "text windows as lexeme hashes vs stripped tsvectors: turn_text size per payload byte "
        "and search(mode='text') latency, interleaved",
        writes_out=False,
    ),
    "text-strip": Suite(
        "text_strip",
        "turn_text as stripped tsvectors vs tsvectors with positions: size and text search "
        "latency on one session",
        writes_out=False,
    ),
    "checkpoints": Suite(
        "checkpoints",
        "checkpoint() size and latency against history length, riding on an append, against "
        "LangGraph's PostgresSaver, fork()",
    ),
    "context": Suite(
        "context",
        "context assembly: hit@1/MRR of vector, text and hybrid search on planted facts "
        "(all-MiniLM-L6-v2), context() latency at 10^5 turns",
    ),
    "latency": Suite(
        "latency",
        "every hot call with the database 0/1/5 ms away (tests/wire.py's proxy): latency and "
        "round trips, beside langchain-postgres and PostgresSaver",
    ),
    "import": Suite(
        "imports",
        "importer throughput: import_single_row, export JSONL, import_jsonl of one 10^5-turn "
        "history (turns/s, MB/s)",
    ),
    "encryption": Suite(
        "encryption",
        "encryption at rest on vs off: append_turn, tail(n=20), restore(n=20) interleaved, "
        "disk per payload byte; synthetic and real-text corpus",
    ),
    "citus": Suite(
        "citus",
        "append_turn and tail(n=20) through a Citus coordinator vs one node, interleaved, both "
        "corpora; round trips, remote commands and shard statements per call "
        "(needs SHARDSTORE_CITUS_DSN)",
    ),
    "portability": Suite("portability", "tenant export + import: records/s, peak RSS by size"),
    "langgraph": Suite(
        "langgraph_agent",
        "a LangGraph agent with ShardstoreSaver vs PostgresSaver: bytes, step time first vs "
        "last 50 steps, resume",
    ),
    "langgraph-delta": Suite(
        "langgraph_delta",
        "ShardstoreSaver vs PostgresSaver (default, DeltaChannel, durability=exit, shallow) at "
        "50/200/1,000 turns, both corpora: bytes and WAL per payload byte, step p50",
    ),
    "artifacts": Suite(
        "artifacts",
        "artifacts: a 1 MB tool output stored once vs in every PostgresSaver checkpoint, "
        "append_turn with offload, 16 MB put/get, tracing cost",
    ),
    "embedding": Suite(
        "embedding",
        "the embedding worker end to end (database -> model -> vectors committed) vs the "
        "model alone: turns/s, tokens/s by batch size; appends beside a running worker",
    ),
    "micro": Suite(
        "micro",
        "pytest-benchmark microbenchmarks of one hot path each (benchmarks/micro): append, "
        "fold, tail, token counting, history() decode",
    ),
}


def usage() -> str:
    width = max(map(len, SUITES))
    lines = [
        "usage: python -m benchmarks SUITE [--quick] [--dsn DSN] [--out OUT] [suite options]",
        "       python -m benchmarks --list | SUITE --help",
        "",
        "suites:",
    ]
    lines += [f"  {name:<{width}}  {s.summary}" for name, s in SUITES.items()]
    return "\n".join(lines)


def run(name: str, argv: Sequence[str]) -> int:
    suite = SUITES[name]
    args = [*suite.preset, *argv]
    helping = "-h" in args or "--help" in args
    out: str | None = None
    if "--out" in args:
        i = args.index("--out")
        out = args[i + 1] if i + 1 < len(args) else None
        if not suite.writes_out:
            del args[i : i + 2]
    elif not helping:
        out = str(default_out(name, "--quick" in args))
        if suite.writes_out:
            args += ["--out", out]
    module = importlib.import_module(f"benchmarks.suites.{suite.module}")
    if suite.writes_out or helping or out is None:
        return int(module.main(args) or 0)
    with tee_stdout() as printed:
        rc = int(module.main(args) or 0)
    if rc == 0:
        progress(f"wrote {write_results(out, printed.getvalue())}")
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    if args[0] == "--list":
        for name, s in SUITES.items():
            print(f"{name}: {s.summary}")
        return 0
    if args[0] not in SUITES:
        print(f"unknown suite {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    return run(args[0], args[1:])


if __name__ == "__main__":
    sys.exit(main())
