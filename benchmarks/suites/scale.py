"""Scale run (issue 14 goal 6): does shardstore stay flat as the database grows?

    nice -n 10 python -m benchmarks scale [--scale 0.01] [--dsn DSN] [--hours 500]
                                         [--segments 10] [--rounds 5] [--out PREFIX]

At ``--scale 1`` (the default, the issue's size) it loads 100,000 sessions x 100 turns and
one session of 1,000,000 turns (about 10^7 turns, ~16 GB of message JSON) with 1-hour
partitions, the turns' times spread over ``--hours`` hours (500 by default, so ~500
partitions exist whatever the scale). ``--scale`` multiplies both the session count and the
long session's length; the partition count does not shrink with it.

Loading uses the fastest public path that keeps given timestamps: ``store.import_jsonl``
on a JSONL stream generated on the fly (no file; ``import_turns_v1`` underneath, the
``append_turns`` batch path with each turn's ``created_at``). ``append_turns`` itself stamps
every turn with the server's clock, so it cannot fill hundreds of past hours.

Measured, each as a median over ``--rounds`` rounds with its [min-max] range:

* ``append_turn`` and ``tail(n=20)`` p50 on fresh probe sessions at the start of the load
  and at its end, each time interleaved round by round with the same calls on a small
  *baseline* database of the same server (one subject, no load), so machine noise hits
  both: the goal is end/start <= 1.2, and end/baseline says how much of a change is noise;
* ``EXPLAIN (ANALYZE, SUMMARY)`` Planning and Execution Time of the hot statements
  (append_one, append, tail, and history's reads: chunk_map_from, chunk_texts,
  buffer_turns) at the start and at the end, and on the baseline database;
* ``maintain()`` (twice in a row: the first folds the idle imported sessions' open
  chunks, the second has nothing to do), ``purge_subject`` of a 100-session subject and
  ``stats()``, at half the load and at the end, each next to the same call on the baseline
  database: the goal is time bounded by the work done, not by the database size;
* the load rate of every segment (turns/s, so a slowdown with size shows), disk bytes per
  payload byte, and the seed's claim: the last 10 chunks of the long session read in < 5 ms.

Results go to ``PREFIX.json`` and ``PREFIX.md`` (default ``benchmarks/results/scale``)
after every phase, so a run that is cut short still leaves its numbers. Progress goes to
stderr. Only the public API is used, except ``EXPLAIN``, which needs the statements' text:
it takes them by name from ``shardstore.core.sql.query`` (so it follows changes to the SQL) and
reports a statement whose parameters changed as not measured.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

import shardstore
from benchmarks.lib.jsonl import (
    INTERVAL,
    POOL,
    SUBJECT_SIZE,
    LineStream,
    Messages,
    Plan,
    long_lines,
    payload_of,
    plan_lines,
    premake_past,
)
from benchmarks.lib.report import progress, quick, write_results
from benchmarks.lib.server import create_database, open_server
from benchmarks.lib.stats import med_range as med
from shardstore.core.sql import query

# ---------------------------------------------------------------- measuring


def fmt(m: dict[str, float] | None, unit: str = "ms", digits: int = 2) -> str:
    if not m:
        return "n/a"
    return f"{m['p50']:.{digits}f} [{m['min']:.{digits}f}–{m['max']:.{digits}f}] {unit}"


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


class Probe:
    """Fresh probe sessions on one store, filled with ``fill`` now-stamped turns each,
    and the timed calls on them."""

    def __init__(self, store: Any, msgs: Messages, label: str, count: int, fill: int) -> None:
        self.store = store
        self.msgs = msgs
        self.sids = []
        for k in range(count):
            sid = store.create_session(tenant_id="probe", subject_id=f"probe-{label}-{k}")
            for lo in range(0, fill, 100):
                batch = [msgs.objects[(k * 131 + i) % POOL] for i in range(lo, min(fill, lo + 100))]
                store.append_turns(sid, batch)
            self.sids.append(sid)
        store.drain_folds()
        self.next = 0

    def appends(self, calls: int) -> float:
        """p50 ms of ``calls`` append_turn calls, round-robin over the probes."""
        out = []
        for c in range(calls):
            sid = self.sids[c % len(self.sids)]
            msg = self.msgs.objects[(self.next + 7 * c) % POOL]
            dt, _ = timed(lambda sid=sid, msg=msg: self.store.append_turn(sid, msg))
            out.append(dt * 1000)
        self.next += calls
        self.store.drain_folds()
        return statistics.median(out)

    def tails(self, calls: int, sids: Sequence[Any] | None = None, n: int = 20) -> float:
        """p50 ms of ``calls`` tail(n) calls."""
        ids = list(sids) if sids else self.sids
        out = []
        for c in range(calls):
            sid = ids[c % len(ids)]
            dt, got = timed(lambda sid=sid: self.store.tail(sid, n=n))
            assert got, "tail returned nothing"
            out.append(dt * 1000)
        return statistics.median(out)


def last_chunks_ms(store: Any, sid: Any, calls: int, chunks: int = 10) -> tuple[float, float, int]:
    """p50 ms of reading every turn of the session's last ``chunks`` chunks: locating them
    with chunks(last=), then streaming them with history(from_seq); returns both p50s."""
    locate, read = [], []
    turns = 0
    for _ in range(calls):
        t0 = time.perf_counter()
        last = store.chunks(sid, last=chunks)
        t1 = time.perf_counter()
        got = list(store.history(sid, last[0].first_turn_seq))
        locate.append((t1 - t0) * 1000)
        read.append((time.perf_counter() - t1) * 1000)
        turns = len(got)
    return statistics.median(locate), statistics.median(read), turns


def explain(dsn: str, name: str, params: Sequence[Any]) -> dict[str, Any]:
    """Planning and Execution Time (ms) of ``EXPLAIN (ANALYZE, SUMMARY)`` of the named
    statement with literal parameters (a client-side cursor, as the store sends its
    partition-key reads: planned with the values); run in a transaction that is rolled back,
    so an explained append leaves nothing. Three runs, the median; the first is discarded
    (it loads the relation caches)."""
    plans: list[float] = []
    execs: list[float] = []
    try:
        with psycopg.connect(dsn) as conn:
            cur = psycopg.ClientCursor(conn)
            for i in range(4):
                cur.execute("EXPLAIN (ANALYZE, SUMMARY, FORMAT JSON) " + query(name), params)
                row = cur.fetchone()
                assert row is not None
                doc = row[0][0]
                if i:
                    plans.append(float(doc["Planning Time"]))
                    execs.append(float(doc["Execution Time"]))
                conn.rollback()
            partitions = _partitions_in(doc["Plan"])
    except psycopg.Error as exc:  # the statement's parameters changed underneath
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"}
    return {
        "planning_ms": statistics.median(plans),
        "execution_ms": statistics.median(execs),
        "relations_scanned": partitions,
    }


def _partitions_in(plan: dict[str, Any]) -> int:
    """How many relation scans a plan holds (1 per partition read after pruning)."""
    n = 1 if "Relation Name" in plan else 0
    for child in plan.get("Plans", []):
        n += _partitions_in(child)
    return n


def explain_all(dsn: str, store: Any, msgs: Messages, sid: Any) -> dict[str, Any]:
    """The hot statements against one session of the database behind ``dsn``."""
    info = store.session(sid)
    chunks = store.chunks(sid, last=3)
    folded = [c for c in chunks if not c.is_open] or chunks
    msg = msgs.texts[1]
    size = len(msg.encode())
    tokens = size // 4
    secs = INTERVAL.total_seconds()
    origin = datetime(2001, 1, 1, tzinfo=UTC)
    budget, cap = 8333, 16 * 1024 * 1024
    head = max(info.turn_count - 20, 0)
    return {
        "append_one": explain(
            dsn, "append_one", (sid, msg, tokens, size, None, budget, cap, secs, origin)
        ),
        "append": explain(
            dsn,
            "append",
            (sid, "[" + msg + "]", [tokens], [size], [None], budget, cap, secs, origin),
        ),
        "tail": explain(dsn, "tail_window", (sid, 20, None)),
        "chunk_map_from": explain(dsn, "chunk_map_from", (sid, sid, head)),
        "chunk_texts": explain(
            dsn,
            "chunk_texts",
            (sid, [c.chunk_seq for c in folded], [c.chunk_start for c in folded]),
        ),
        "buffer_turns": explain(dsn, "buffer_turns", (sid, head, info.turn_count)),
    }


def sizes(dsn: str, vacuum: bool = False) -> dict[str, Any]:
    """Bytes on disk: the whole database, shardstore's tables (heap, TOAST, indexes) and
    each table's share (partitions summed under their parent); after a plain ``VACUUM``
    (as autovacuum would run; space stays allocated) when ``vacuum``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        if vacuum:
            conn.execute("VACUUM")
        (db,) = conn.execute("SELECT pg_database_size(current_database())").fetchone() or (0,)
        rows = conn.execute(
            "SELECT coalesce(p.relname, c.relname), sum(pg_total_relation_size(c.oid))::bigint"
            "  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            "  LEFT JOIN pg_inherits i ON i.inhrelid = c.oid"
            "  LEFT JOIN pg_class p ON p.oid = i.inhparent"
            " WHERE n.nspname = 'shardstore' AND c.relkind = 'r'"
            " GROUP BY 1 ORDER BY 2 DESC"
        ).fetchall()
    tables = {str(name): int(size) for name, size in rows}
    return {"database": int(db), "shardstore": sum(tables.values()), "tables": tables}


# ---------------------------------------------------------------- the run


class Results:
    """Everything measured so far, written out after every phase."""

    def __init__(self, prefix: str | None, args: argparse.Namespace) -> None:
        self.prefix = prefix
        self.doc: dict[str, Any] = {"args": vars(args), "started": datetime.now(UTC).isoformat()}

    def put(self, key: str, value: Any) -> None:
        self.doc[key] = value
        self.write()

    def write(self) -> None:
        self.doc["written"] = datetime.now(UTC).isoformat()
        if self.prefix:
            write_results(self.prefix, render(self.doc), self.doc)


def render(doc: dict[str, Any]) -> str:
    """The markdown report of whatever has been measured."""
    a = doc["args"]
    out = [
        "# Scale run",
        "",
        f"`nice -n 10 python -m benchmarks scale --scale {a['scale']}"
        f"{' --text off' if a.get('text') == 'off' else ''}` "
        f"({doc.get('plan', {}).get('sessions', '?'):,} sessions x {a['turns']} turns + one "
        f"{doc.get('plan', {}).get('long_turns', 0):,}-turn session, 1-hour partitions over "
        f"{a['hours']} hours, full-text indexing {a.get('text', 'on')}, embedded "
        f"PostgreSQL 18, started {doc['started'][:16]}Z). "
        "Medians over rounds with [min–max] ranges; 'baseline' is a small database on the "
        "same server, measured interleaved with the big one.",
        "",
    ]
    if "load" in doc:
        out += [
            "## Load",
            "",
            "| segment | turns | seconds | turns/s | DB turns after | partitions |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for s in doc["load"]:
            out.append(
                f"| {s['what']} | {s['turns']:,} | {s['seconds']:.1f} | {s['rate']:.0f} | "
                f"{s['total_turns']:,} | {s['partitions']} |"
            )
        out.append("")
    if "probe" in doc:
        out += [
            "## Append and tail (p50 per round; median [range] over rounds)",
            "",
            "| when | call | big database | baseline database | big / baseline |",
            "|---|---|---|---|---|",
        ]
        for when, p in doc["probe"].items():
            for call in ("append_turn", "tail_20", "tail_20_imported"):
                if call in p["big"]:
                    out.append(
                        f"| {when} | {call} | {fmt(p['big'][call])} | "
                        f"{fmt(p['baseline'].get(call))} | {fmt(p['ratio'].get(call), '×')} |"
                    )
        if "start" in doc["probe"] and "end" in doc["probe"]:
            out.append("")
            for call in ("append_turn", "tail_20"):
                s, e = doc["probe"]["start"]["big"][call], doc["probe"]["end"]["big"][call]
                rs = doc["probe"]["start"]["ratio"][call]["p50"]
                re_ = doc["probe"]["end"]["ratio"][call]["p50"]
                out.append(
                    f"* {call}: end / start = {e['p50'] / s['p50']:.2f} (raw p50s); "
                    f"as ratios to the baseline measured beside each: {re_ / rs:.2f} "
                    f"(goal <= 1.2)"
                )
        out.append("")
    if "long" in doc:
        lg = doc["long"]
        out += [
            "## The long session",
            "",
            f"Last 10 chunks ({lg['turns']} turns) of the {lg['session_turns']:,}-turn "
            f"session, `chunks(last=10)` + `history(from_seq)`: {fmt(lg['last10'])} "
            f"(seed's claim: < 5 ms), of which chunks(last=10) {fmt(lg['locate'])} and "
            f"history {fmt(lg['read'])}; `tail(n=20)`: " + fmt(lg["tail_20"]),
            "",
        ]
    if "explain" in doc:
        out += [
            "## Planning time of the hot statements",
            "",
            "`EXPLAIN (ANALYZE, SUMMARY)`, literal parameters, median of 3 runs after one "
            "warm-up; 'scans' is the number of relation scans in the plan (1 per partition "
            "read after pruning). For the function calls (append_one, append, tail) "
            "the planning of their inner statements is part of Execution Time.",
            "",
            "| when | database | partitions | statement | planning ms | execution ms | scans |",
            "|---|---|---:|---|---:|---:|---:|",
        ]
        for when, per_db in doc["explain"].items():
            for db, stm in per_db.items():
                parts = stm.get("_partitions", "?")
                for name, e in stm.items():
                    if name.startswith("_"):
                        continue
                    if "error" in e:
                        out.append(f"| {when} | {db} | {parts} | {name} | {e['error']} | | |")
                    else:
                        out.append(
                            f"| {when} | {db} | {parts} | {name} | {e['planning_ms']:.3f} | "
                            f"{e['execution_ms']:.3f} | {e['relations_scanned']} |"
                        )
        out.append("")
    if "lifecycle" in doc:
        out += [
            "## Maintenance, purge, stats",
            "",
            "| when | database | DB turns | call | seconds | work done |",
            "|---|---|---:|---|---:|---|",
        ]
        for row in doc["lifecycle"]:
            out.append(
                f"| {row['when']} | {row['db']} | {row['db_turns']:,} | {row['call']} | "
                f"{row['seconds']:.3f} | {row['work']} |"
            )
        out.append("")
    if "disk" in doc:
        d = doc["disk"]
        out += [
            "## Disk",
            "",
            f"Payload (message JSON) {d['payload'] / 1e9:.2f} GB; database "
            f"{d['database'] / 1e9:.2f} GB ({d['database'] / d['payload']:.2f} B per payload "
            f"byte), shardstore tables {d['shardstore'] / 1e9:.2f} GB "
            f"({d['shardstore'] / d['payload']:.2f}); agent_history partitions "
            f"{d['partitions_bytes'] / 1e9:.2f} GB ({d['partitions_bytes'] / d['payload']:.2f}); "
            f"turn_buffer rows left: {d['buffered_turns']:,}. Measured after a plain "
            f"`VACUUM` (before it: database {d['before_vacuum']['database'] / 1e9:.2f} GB); "
            "the two purged subjects' space stays allocated.",
            "",
            "| table | bytes | per payload byte | before VACUUM |",
            "|---|---:|---:|---:|",
        ]
        for name, size in d["tables"].items():
            if size >= 1 << 20:
                was = d["before_vacuum"]["tables"].get(name, 0)
                out.append(
                    f"| {name} | {size / 1e6:,.1f} MB | {size / d['payload']:.3f} | "
                    f"{was / 1e6:,.1f} MB |"
                )
        out.append("")
    if "notes" in doc:
        out += ["## Notes", ""] + [f"* {n}" for n in doc["notes"]] + [""]
    return "\n".join(out)


def probe_round(
    big: Probe, base: Probe, calls: int, rounds: int, imported: tuple[list[Any], list[Any]] | None
) -> dict[str, Any]:
    """Append and tail p50s on both databases, alternating which goes first each round."""
    res: dict[str, dict[str, list[float]]] = {"big": {}, "baseline": {}}
    for r in range(rounds):
        order = [("big", big), ("baseline", base)]
        if r % 2:
            order.reverse()
        for label, p in order:
            res[label].setdefault("append_turn", []).append(p.appends(calls))
            res[label].setdefault("tail_20", []).append(p.tails(calls))
            if imported is not None:
                ids = imported[0] if label == "big" else imported[1]
                res[label].setdefault("tail_20_imported", []).append(p.tails(calls, ids))
    out: dict[str, Any] = {"big": {}, "baseline": {}, "ratio": {}}
    for call in res["big"]:
        out["big"][call] = med(res["big"][call])
        out["baseline"][call] = med(res["baseline"][call])
        out["ratio"][call] = med(
            [b / a for b, a in zip(res["big"][call], res["baseline"][call], strict=False)]
        )
    return out


def _import_parallel(store: Any, streams: list[Iterator[str]], batch: int) -> int:
    """Import each stream with ``store.import_jsonl`` on its own thread (the store is
    thread-safe; each import holds one pooled connection); returns the turns imported."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(len(streams)) as pool:
        reports = list(
            pool.map(lambda ls: store.import_jsonl(LineStream(ls), batch_size=batch), streams)
        )
    return sum(r.turns for r in reports)


def db_turns(store: Any) -> int:
    return int(store.stats().turns)


def lifecycle(
    results: Results, when: str, stores: dict[str, Any], subjects: dict[str, tuple[str, str]]
) -> None:
    """maintain() twice, purge_subject of one 100-session subject and stats(), on each
    database (big first, then baseline), appended to the results."""
    rows = results.doc.setdefault("lifecycle", [])
    for db, store in stores.items():
        turns = db_turns(store)
        for k in (1, 2):
            progress(f"{when}: maintain #{k} on {db}")
            dt, rep = timed(lambda store=store: store.maintain(embed=False))
            rows.append(
                {
                    "when": when,
                    "db": db,
                    "db_turns": turns,
                    "call": f"maintain() #{k}",
                    "seconds": dt,
                    "work": f"{rep.sessions_folded:,} idle sessions folded, "
                    f"{rep.turns_folded:,} turns",
                }
            )
            results.write()
        tenant, subject = subjects[db]
        progress(f"{when}: purge_subject {subject} on {db}")
        dt, rep = timed(lambda: store.purge_subject(tenant, subject))  # noqa: B023 (called now)
        removed = sum(t.rows for t in rep.tables.values()) if rep.tables else 0
        rows.append(
            {
                "when": when,
                "db": db,
                "db_turns": turns,
                "call": "purge_subject",
                "seconds": dt,
                "work": f"{len(rep.session_ids)} sessions, {removed:,} rows, "
                f"{len(rep.partitions)} partitions touched",
            }
        )
        results.write()
        dt, st = timed(lambda store=store: store.stats())
        rows.append(
            {
                "when": when,
                "db": db,
                "db_turns": turns,
                "call": "stats()",
                "seconds": dt,
                "work": f"{st.sessions:,} sessions, {st.chunks:,} chunks, "
                f"{len(st.partitions)} partitions",
            }
        )
        results.write()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the issue's size")
    parser.add_argument("--sessions", type=int, default=100_000, help="sessions at scale 1")
    parser.add_argument("--turns", type=int, default=100, help="turns per session")
    parser.add_argument("--long-turns", type=int, default=1_000_000, help="long session at scale 1")
    parser.add_argument("--hours", type=int, default=500, help="hours the turns' times span")
    parser.add_argument("--segments", type=int, default=10, help="load steps (rate per step)")
    parser.add_argument("--jobs", type=int, default=2, help="import streams run in parallel")
    parser.add_argument("--batch", type=int, default=500, help="turns per import statement")
    parser.add_argument("--probes", type=int, default=8, help="probe sessions per database")
    parser.add_argument("--probe-fill", type=int, default=200, help="turns in each probe")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dsn", default=None, help="server to use (default: embedded)")
    parser.add_argument(
        "--text",
        choices=("on", "off"),
        default="on",
        help="full-text indexing in both databases (off: ~0.6 instead of ~1.7 bytes of disk "
        "per payload byte, and loads ~3x faster)",
    )
    parser.add_argument("--out", help="write OUT.md and OUT.json after every phase")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="200 sessions x 20 turns + a 1,000-turn session over 24 hours, 2 rounds",
    )
    args = parser.parse_args(argv)
    quick(
        args,
        parser,
        scale=0.001,
        turns=20,
        hours=24,
        segments=2,
        probes=2,
        probe_fill=50,
        calls=20,
        rounds=2,
    )
    sessions = max(SUBJECT_SIZE * 2, round(args.sessions * args.scale))
    long_turns = max(1000, round(args.long_turns * args.scale))
    results = Results(args.out, args)
    msgs = Messages()
    plan = Plan(
        sessions, args.turns, long_turns, args.hours, datetime.now(UTC) - timedelta(hours=2)
    )
    total_turns = sessions * args.turns + long_turns
    results.put(
        "plan",
        {
            "sessions": sessions,
            "long_turns": long_turns,
            "turns": total_turns,
            "from": plan.start,
            "to": plan.end,
        },
    )
    progress(f"plan: {sessions:,} sessions x {args.turns} + {long_turns:,} = {total_turns:,} turns")

    with open_server(args.dsn, keep=False) as server:
        base_dsn = _sibling(server.admin_dsn, server.dsn)
        with (
            shardstore.connect(server.dsn, partition_interval=INTERVAL) as big,
            shardstore.connect(base_dsn, partition_interval=INTERVAL) as base,
        ):
            # every past partition first, in short transactions of its own: an import runs a
            # session in one transaction, and a partition it creates stays locked (its CREATE
            # and ATTACH) until that commits, so two imports creating partitions in different
            # orders deadlock (seen here: fold_sealed in two parallel import_jsonl calls).
            # No store method creates partitions in the past (premake_partitions looks
            # ahead), so this calls the partition function's named statement directly.
            if args.text == "off":
                for store in (big, base):
                    store.configure_text_search(None)
            progress(f"creating {args.hours + 1} past partitions")
            premake_past(server.dsn, plan)
            # the baseline: two 100-session subjects (one purged at half load, one at the end)
            progress("baseline: importing two 100-session subjects")
            # within 2 hours: few partitions, so big / baseline spans both size and partitions
            bplan = Plan(2 * SUBJECT_SIZE, args.turns, 0, 2, plan.end)
            base.import_jsonl(
                LineStream(plan_lines(msgs, bplan, 0, 2 * SUBJECT_SIZE)), batch_size=args.batch
            )
            base_imported = [bplan.sid(j) for j in range(0, 2 * SUBJECT_SIZE, 23)]
            progress("probes")
            pb_big = Probe(big, msgs, "start", args.probes, args.probe_fill)
            pb_base = Probe(base, msgs, "start", args.probes, args.probe_fill)
            probes: dict[str, Any] = {}
            probes["start"] = probe_round(pb_big, pb_base, args.calls, args.rounds, None)
            results.put("probe", probes)
            explains: dict[str, Any] = {}
            explains["start"] = {
                "big": {
                    **explain_all(server.dsn, big, msgs, pb_big.sids[0]),
                    "_partitions": len(big.stats().partitions),
                },
            }
            results.put("explain", explains)

            # the load
            load: list[dict[str, Any]] = []
            loaded = 0

            def segment(what: str, lines: list[Iterator[str]], turns: int) -> None:
                nonlocal loaded
                progress(f"load {what}: {turns:,} turns")
                dt, done = timed(lambda: _import_parallel(big, lines, args.batch))
                assert done == turns, (done, turns)
                loaded += turns
                st = big.stats()
                load.append(
                    {
                        "what": what,
                        "turns": turns,
                        "seconds": dt,
                        "rate": turns / dt,
                        "total_turns": loaded,
                        "partitions": len(st.partitions),
                    }
                )
                results.put("load", load)
                left = (total_turns - loaded) / (turns / dt)
                progress(
                    f"  {turns / dt:.0f} turns/s; {loaded:,}/{total_turns:,}; "
                    f"~{left / 60:.0f} min left at this rate"
                )

            seg = max(1, args.segments)
            bounds = [round(sessions * k / seg) for k in range(seg + 1)]
            half = seg // 2
            for k in range(seg):
                lo, hi = bounds[k], bounds[k + 1]
                cuts = [lo + (hi - lo) * i // args.jobs for i in range(args.jobs + 1)]
                streams = [plan_lines(msgs, plan, a, b) for a, b in itertools.pairwise(cuts)]
                what, turns = f"sessions {lo:,}–{hi - 1:,}", (hi - lo) * args.turns
                if k == 0:  # the long session is one transaction: beside the first segment
                    streams.append(long_lines(msgs, plan))
                    what, turns = what + " + the long session", turns + long_turns
                segment(what, streams, turns)
                if k + 1 == half:
                    lifecycle(
                        results,
                        "half load",
                        {"big": big, "baseline": base},
                        {
                            "big": (plan.tenant(0), plan.subject(0)),
                            "baseline": (bplan.tenant(0), bplan.subject(0)),
                        },
                    )

            # the end
            big_imported = [
                plan.sid(j) for j in range(SUBJECT_SIZE, sessions, max(1, sessions // 40))
            ]
            lifecycle(
                results,
                "end",
                {"big": big, "baseline": base},
                {
                    "big": (plan.tenant(sessions - 1), plan.subject(sessions - 1)),
                    "baseline": (bplan.tenant(SUBJECT_SIZE), bplan.subject(SUBJECT_SIZE)),
                },
            )
            big_imported = [s for s in big_imported if not big.session(s).purged]
            base_imported = [s for s in base_imported if not base.session(s).purged]
            progress("probes at the end")
            pe_big = Probe(big, msgs, "end", args.probes, args.probe_fill)
            pe_base = Probe(base, msgs, "end", args.probes, args.probe_fill)
            probes["end"] = probe_round(
                pe_big, pe_base, args.calls, args.rounds, (big_imported, base_imported)
            )
            results.put("probe", probes)
            lsid = plan.long_sid()
            locate: list[float] = []
            read: list[float] = []
            tails: list[float] = []
            turns = 0
            for _ in range(args.rounds):
                a, b, turns = last_chunks_ms(big, lsid, 20)
                locate.append(a)
                read.append(b)
                tails.append(pe_big.tails(args.calls, [lsid]))
            results.put(
                "long",
                {
                    "last10": med([a + b for a, b in zip(locate, read, strict=False)]),
                    "locate": med(locate),
                    "read": med(read),
                    "tail_20": med(tails),
                    "turns": turns,
                    "session_turns": long_turns,
                },
            )
            explains["end"] = {
                "big": {
                    **explain_all(server.dsn, big, msgs, pe_big.sids[0]),
                    "_partitions": len(big.stats().partitions),
                },
                "baseline": {
                    **explain_all(base_dsn, base, msgs, pe_base.sids[0]),
                    "_partitions": len(base.stats().partitions),
                },
                "big, long session": {
                    **explain_all(server.dsn, big, msgs, lsid),
                    "_partitions": len(big.stats().partitions),
                },
            }
            results.put("explain", explains)
            st = big.stats()
            payload = sum(payload_of(msgs, args.turns, j * 97) for j in range(sessions))
            payload += payload_of(msgs, long_turns, 0)
            progress("sizes, then VACUUM and sizes again")
            before = sizes(server.dsn)
            results.put(
                "disk",
                {
                    **sizes(server.dsn, vacuum=True),
                    "before_vacuum": before,
                    "payload": payload,
                    "partitions_bytes": sum(p.bytes for p in st.partitions),
                    "buffered_turns": st.buffered_turns,
                    "note": "after a plain VACUUM; purged subjects' space stays",
                },
            )
    if not args.out:
        print(render(results.doc))
    progress(f"done: {args.out or 'stdout'}")
    return 0


def _sibling(admin: str, dsn: str) -> str:
    """A second scratch database on the same server for the baseline (dropped with the
    embedded server; on your own server it is left behind with a warning)."""
    name = conninfo_to_dict(dsn).get("dbname", "postgres") + "_base"
    return create_database(admin, name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
