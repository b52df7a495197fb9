#!/usr/bin/env python
"""The append and tail hot paths side by side with their floors (issue 14), in one process.

    python -m benchmarks append [--dsn DSN] [--rounds 7] [--calls 200] [--quick]

Every figure is a median over rounds with its [min-max]; within a round the contenders run
``--calls`` calls each, interleaved call by call in an order that rotates, on the same server, and
ratios are taken pair by pair within a round (so a loaded machine moves both sides).

* **append, one writer**: the bare single-row ``INSERT`` (the compare suite's floor),
  langchain-postgres ``add_message``, shardstore ``append_turn`` at default settings, with
  2,000-token chunks, and ``append_turn(..., checkpoint=state)``; on the synthetic agent
  messages (the compare suite's corpus), on the real-text messages
  (benchmarks/lib/realtext.py) and on ~1.3 kB random-word messages (where exact BPE
  counting is slowest). p50 and p99 per round.
* **append, 8 writers**: turns/s of 8 threads, each with its own session and connection.
* **tail(n=20)** against the floor's ``ORDER BY seq DESC LIMIT 20`` at several history
  lengths, with ~400-token and ~700-token turns (the open chunk holding 8 turns, as
  the compare suite aligns it); built in bulk (an imported history), or with ``--tail-fill N``
  its newest N turns appended one call at a time (a history an agent wrote); beside it the
  same history with every bulk batch's sealed chunks folded at once, as before migration
  0040 (a tail then reads the newest folded chunk).

``--corpus synthetic|real|both`` (``both`` by default) picks the corpora of the one-writer,
8-writer and ~400-token tail parts; each corpus runs in a database of its own on the same
server, against the same peers, and with both a table at the end puts them side by side.

Writes markdown to stdout (and ``--out OUT``: OUT.md, the raw rounds in OUT.json).
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

import shardstore
import shardstore.history
from benchmarks.lib.contenders import CONTENDERS, FLOOR, LC, SS, Contender, Shardstore, Writer
from benchmarks.lib.corpus import CORPUS_CHOICES, CORPUS_LABELS, Corpus, corpus_sources, encode
from benchmarks.lib.report import command, progress, quick, write_results
from benchmarks.lib.server import open_server
from benchmarks.lib.stats import med, pct, ratio_spread, spread

STATE = {"step": 3, "plan": ["search", "read", "answer"], "notes": "x" * 200}
WORDS = [
    "".join(random.Random(i).choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3 + i % 7))
    for i in range(5000)
]


def random_words(seed: int, n: int, nbytes: int) -> list[dict[str, Any]]:
    """``n`` user messages of ~``nbytes`` bytes of random (mostly non-dictionary) words."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words: list[str] = []
        size = 0
        while size < nbytes:
            w = rng.choice(WORDS)
            words.append(w)
            size += len(w) + 1
        out.append({"role": "user", "content": " ".join(words)})
    return out


class Corpus(Corpus):
    """the compare suite's corpus (or the real-text one: ``source``), or one of random-word
    messages."""

    def __init__(self, size: int, words: int | None = None, source: str = "synthetic") -> None:
        super().__init__(size, source=source)
        if words:
            self.msgs = random_words(7, size, words)
            self.n = len(self.msgs)
            self.texts = [encode(m) for m in self.msgs]
            self.nbytes = [len(t.encode()) for t in self.texts]


class SSChunks(Shardstore):
    """shardstore with other settings (``chunk_tokens=2000``)."""

    settings: ClassVar[dict[str, Any]] = {}

    def setup(self) -> None:
        self.store = shardstore.connect(
            self.dsn, pool_min_size=9, pool_max_size=10, **self.settings
        )


class SSBulkFolded(Shardstore):
    """shardstore as before migration 0040: after each bulk batch every sealed chunk is
    folded, so a tail after it reads the newest folded chunk (the A/B of 0040's keep
    window; the same rows as a batch wrote then)."""

    def bulk(self, w: Writer, sid: Any, idx: Sequence[int]) -> None:
        super().bulk(w, sid, idx)
        self.store._run(shardstore.history.ops.fold_sealed_op(sid, 0))


class SSCheckpoint(Shardstore):
    """shardstore ``append_turn(..., checkpoint=state)``."""

    def writer(self) -> Writer:
        store = self.store

        class W(Writer):
            def append(self, sid: Any, obj: Any) -> None:
                store.append_turn(sid, obj, checkpoint=STATE)

        return W(self)


class QuarterBytes:
    """Not a real counter: ``len(text) // 4``, about cl100k_base's count on English but
    neither exact nor a bound. The ``ss_nocount`` contender uses it to show what an append
    would cost if exact counting were taken off its path (issue 14's first lever): the
    ceiling of what deferring the count could buy, not a configuration to run."""

    name = "quarter-bytes"

    def count(self, text: str) -> int:
        return len(text) // 4


class RsBpe:
    """rs-bpe's exact cl100k_base count, the store's fast counter before splintr-rs (the
    ``ss_rsbpe`` contender: the A/B of that change; texts over the store's fast limit and lone
    surrogates go to tiktoken, as the store's counter does)."""

    name = "cl100k_base"

    def __init__(self) -> None:
        from rs_bpe.bpe import openai

        self._fast = openai.cl100k_base()
        self._slow = shardstore.TiktokenCounter("cl100k_base", fast=False)

    def count(self, text: str) -> int:
        if len(text) <= shardstore.TiktokenCounter.FAST_MAX_CHARS:
            try:
                return int(self._fast.count(text))
            except UnicodeEncodeError:
                pass
        return self._slow.count(text)


def make(kind: str, dsn: str, corpus: Corpus, counter: Any) -> Contender:
    if kind == "ss2000":
        c: Contender = type("SS2000", (SSChunks,), {"settings": {"chunk_tokens": 2000}})(
            dsn, corpus, counter
        )
    elif kind == "ss_bulk_folded":
        c = SSBulkFolded(dsn, corpus, counter)
    elif kind == "ss_ckpt":
        c = SSCheckpoint(dsn, corpus, counter)
    elif kind == "ss_tiktoken":  # counting with tiktoken alone, as before rs-bpe and splintr
        slow = shardstore.TiktokenCounter("cl100k_base", fast=False)
        c = type("SSTiktoken", (SSChunks,), {"settings": {"tokenizer": slow}})(dsn, corpus, counter)
    elif kind == "ss_rsbpe":  # counting with rs-bpe, as before splintr-rs
        c = type("SSRsBpe", (SSChunks,), {"settings": {"tokenizer": RsBpe()}})(dsn, corpus, counter)
    elif kind == "ss_nocount":  # the count taken off the path (a probe, not exact)
        c = type("SSNoCount", (SSChunks,), {"settings": {"tokenizer": QuarterBytes()}})(
            dsn, corpus, counter
        )
    else:
        c = CONTENDERS[{"ss": SS, "lc": LC, "floor": FLOOR}[kind]](dsn, corpus, counter)
    return c


def one_writer(cs: dict[str, Contender], rounds: int, calls: int) -> dict[str, Any]:
    ws = {k: c.writer() for k, c in cs.items()}
    sids = {k: c.new_session(ws[k]) for k, c in cs.items()}
    corpus = next(iter(cs.values())).corpus
    for k in cs:  # warm: plans, prepared statements, the first seal and fold
        for i in corpus.take(40):
            ws[k].append(sids[k], ws[k].prepare(i))
        cs[k].settle()
    out: dict[str, dict[str, list[float]]] = {k: {"p50": [], "p99": []} for k in cs}
    names = list(cs)
    clock = time.perf_counter_ns
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        idx = corpus.take(calls)  # the same messages for every contender in a round
        objs = {k: [ws[k].prepare(i) for i in idx] for k in names}
        lat: dict[str, list[int]] = {k: [] for k in names}
        for j in range(calls):  # interleaved call by call: load shifts hit every contender
            turn = order[j % len(order) :] + order[: j % len(order)]
            for k in turn:
                t0 = clock()
                ws[k].append(sids[k], objs[k][j])
                lat[k].append(clock() - t0)
        for k in names:
            out[k]["p50"].append(pct(lat[k], 50) / 1e6)
            out[k]["p99"].append(pct(lat[k], 99) / 1e6)
        progress(
            f"append round {r + 1}/{rounds}: "
            + ", ".join(f"{k} {out[k]['p50'][-1]:.3f}" for k in names)
        )
    for k in cs:
        ws[k].close()
    return out


def writers8(cs: dict[str, Contender], rounds: int, per: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in cs}
    names = list(cs)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for k in order:
            c = cs[k]
            ws = [c.writer() for _ in range(8)]
            sids = [c.new_session(w) for w in ws]
            work = [[w.prepare(i) for i in c.corpus.take(per)] for w in ws]
            barrier = threading.Barrier(9)

            def run(
                j: int, ws: Any = ws, sids: Any = sids, work: Any = work, barrier: Any = barrier
            ) -> None:
                barrier.wait()
                for o in work[j]:
                    ws[j].append(sids[j], o)

            threads = [threading.Thread(target=run, args=(j,)) for j in range(8)]
            for t in threads:
                t.start()
            barrier.wait()
            t0 = time.perf_counter()
            for t in threads:
                t.join()
            out[k].append(8 * per / (time.perf_counter() - t0))
            for w in ws:
                w.close()
            c.settle()
        progress(f"8-writer round {r + 1}: " + ", ".join(f"{k} {out[k][-1]:,.0f}/s" for k in names))
    return out


def tails(
    cs: dict[str, Contender], sizes: list[int], rounds: int, calls: int, fill: int = 0
) -> dict[int, dict[str, list[float]]]:
    """tail(n=20) p50 per round at each history length; the newest ``fill`` turns of each
    session are appended one call at a time (as an agent writes them), the rest in bulk
    (as an import writes them)."""
    corpus = next(iter(cs.values())).corpus
    res: dict[int, dict[str, list[float]]] = {}
    for size in sizes:
        ws = {k: c.writer() for k, c in cs.items()}
        sids = {}
        bulk = size - min(fill, size)
        aligned: dict[str, list[int]] = {}
        for k, c in cs.items():
            sids[k] = c.new_session(ws[k])
            for lo in range(0, bulk, 500):
                c.bulk(ws[k], sids[k], corpus.seq(lo, min(500, bulk - lo)))
            for i in corpus.seq(bulk, size - bulk):
                ws[k].append(sids[k], ws[k].prepare(i))
            c.settle()
            counter = iter(range(size, size + 100_000))
            aligned[k] = c.align(ws[k], sids[k], lambda counter=counter: next(counter) % corpus.n)
        # every contender's window holds the same messages: the ones appended to align a
        # shardstore head are appended to the others too (a window of other messages, of
        # other sizes, made the ratios depend on the corpus: 0.7x to 2.4x at one size)
        heads = {tuple(a) for a in aligned.values() if a}
        assert len(heads) <= 1, "the shardstore contenders aligned on different messages"
        head = list(next(iter(heads), ()))
        for k, c in cs.items():
            if not aligned[k]:
                for i in head:
                    ws[k].append(sids[k], ws[k].prepare(i))
                c.settle()
        with cs["floor"].writer().conn as conn:  # type: ignore[attr-defined]
            conn.execute("VACUUM ANALYZE")
        out: dict[str, list[float]] = {k: [] for k in cs}
        names = list(cs)
        clock = time.perf_counter_ns
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for k in order:
                lat = []
                for _ in range(calls):
                    t0 = clock()
                    got = cs[k].tail20(ws[k], sids[k])
                    lat.append(clock() - t0)
                assert len(got) >= 16, (k, len(got))
                out[k].append(pct(lat, 50) / 1e6)
        progress(f"tail @{size}: " + ", ".join(f"{k} {med(out[k]):.3f}" for k in names))
        res[size] = out
        for k in cs:
            ws[k].close()
    return res


#: a corpus's name in a section heading
WHAT = {
    "synthetic": "synthetic agent messages",
    "real": "real-text messages, a few words to ~30 kB",
}


def key(part: str, source: str) -> str:
    """A part's key in the raw results: the synthetic corpus's is the part's name, as in
    the runs before the real-text corpus; another corpus's has its name appended."""
    return part if source == "synthetic" else f"{part}_{source}"


def side_by_side(raw: dict[str, Any], sources: list[str]) -> list[str]:
    """The corpora's headline figures in one table: medians [min–max] over rounds, ratios
    taken within a round (each corpus in its own rounds)."""
    head = "| figure | " + " | ".join(CORPUS_LABELS[s] for s in sources) + " |"
    lines = ["## The corpora side by side", "", head, "|---" * (len(sources) + 1) + "|"]

    def row(figure: str, cell: Any) -> None:
        lines.append(f"| {figure} | " + " | ".join(cell(s) for s in sources) + " |")

    if all(key("append", s) in raw for s in sources):
        one = {s: raw[key("append", s)] for s in sources}
        for k, label in (
            ("floor", "bare INSERT"),
            ("lc", "langchain-postgres"),
            ("ss", "shardstore"),
        ):
            row(f"{label}: append p50 ms", lambda s, k=k: spread(one[s][k]["p50"]))
        row(
            "shardstore p50 / INSERT p50",
            lambda s: ratio_spread(one[s]["ss"]["p50"], one[s]["floor"]["p50"]),
        )
        row(
            "shardstore p50 / langchain-postgres p50",
            lambda s: ratio_spread(one[s]["ss"]["p50"], one[s]["lc"]["p50"]),
        )
        row(
            "shardstore p99 / INSERT p99",
            lambda s: ratio_spread(one[s]["ss"]["p99"], one[s]["floor"]["p99"]),
        )
    if all(key("writers", s) in raw for s in sources):
        w8 = {s: raw[key("writers", s)] for s in sources}
        for k, label in (
            ("floor", "bare INSERT"),
            ("lc", "langchain-postgres"),
            ("ss", "shardstore"),
        ):
            row(f"{label}: 8 writers turns/s", lambda s, k=k: spread(w8[s][k], 0))
        row(
            "shardstore / langchain-postgres, 8 writers",
            lambda s: ratio_spread(w8[s]["ss"], w8[s]["lc"]),
        )
    return [*lines, ""]


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dsn")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--per-writer", type=int, default=100)
    p.add_argument("--sizes", default="100,10000,100000")
    p.add_argument("--sizes700", default="100,10000", help="history lengths, ~700-token turns")
    p.add_argument(
        "--text-off",
        action="store_true",
        help="switch full-text indexing off in the run's databases (configure_text_search(None))",
    )
    p.add_argument(
        "--tail-fill",
        type=int,
        default=0,
        help="append the newest N turns of each tail session one call at a time (0: bulk)",
    )
    p.add_argument("--quick", action="store_true", help="3 rounds, 100 calls, sizes 100,10000")
    p.add_argument("--only", default="append,words,writers,tail,tail700")
    p.add_argument("--out", help="write OUT.md, and the raw rounds to OUT.json")
    p.add_argument(
        "--corpus",
        default="both",
        choices=CORPUS_CHOICES,
        help="corpora of the append, writers and tail parts: synthetic, real text, or both",
    )
    a = p.parse_args(argv)
    sources = corpus_sources(a.corpus)
    quick(a, p, rounds=3, calls=100, sizes="100,10000")
    parts = set(a.only.split(","))
    sizes = [int(s) for s in a.sizes.split(",")]
    raw: dict[str, Any] = {}
    lines = [
        "# append and tail against their floors",
        "",
        f"`{command('append', argv)}` at "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {a.rounds} rounds of "
        f"{a.calls} calls per contender (order rotating); medians over rounds [min–max]; "
        "ratios pair by pair within a round. fsync on.",
        "",
    ]
    counter = shardstore.history.tokens.make_counter(None)
    with open_server(a.dsn, keep=False) as srv:
        shardstore.connect(srv.dsn).close()  # migrate once
        template = conninfo_to_dict(srv.dsn)["dbname"]

        def build(kinds: list[str], corpus: Corpus, db: str) -> dict[str, Contender]:
            with psycopg.connect(srv.admin_dsn, autocommit=True) as c:
                c.execute(f'CREATE DATABASE "{db}" TEMPLATE "{template}"')
            dsn = make_conninfo(srv.admin_dsn, dbname=db)
            if a.text_off:  # full-text indexing off in this database (0026)
                with shardstore.connect(dsn) as s:
                    s.configure_text_search(None)
            cs = {k: make(k, dsn, corpus, counter) for k in kinds}
            for c in cs.values():
                c.setup()
            return cs

        def close(cs: dict[str, Contender]) -> None:
            for c in cs.values():
                c.close()

        # (results key, part, random-word bytes, corpus): the synthetic corpus keeps the
        # keys of earlier runs' JSON
        one = [(key(part, src), part, None, src) for part in ["append"] for src in sources]
        for rkey, part, words, src in [*one, ("words", "words", 1300, "synthetic")]:
            if part not in parts:
                continue
            corpus = Corpus(5000, words, src)
            cs = build(
                ["floor", "lc", "ss", "ss2000", "ss_ckpt", "ss_tiktoken", "ss_rsbpe", "ss_nocount"],
                corpus,
                f"ba_{rkey}_{uuid.uuid4().hex[:6]}",
            )
            res = one_writer(cs, a.rounds, a.calls)
            close(cs)
            raw[rkey] = res
            what = WHAT[src] if words is None else f"~{words} B random-word messages"
            lines += [
                f"## append_turn, one writer ({what})",
                "",
                "| contender | p50 ms | p50 / INSERT | p50 / langchain | p99 ms "
                "| p99 / INSERT p99 |",
                "|---|---|---|---|---|---|",
            ]
            f = res["floor"]
            for k, label in (
                ("floor", "bare INSERT"),
                ("lc", "langchain-postgres add_message"),
                ("ss", "shardstore (defaults)"),
                ("ss2000", "shardstore chunk_tokens=2000"),
                ("ss_ckpt", "shardstore checkpoint=state"),
                ("ss_tiktoken", "shardstore counting with tiktoken only"),
                ("ss_rsbpe", "shardstore counting with rs-bpe (before splintr)"),
                ("ss_nocount", "shardstore with no exact count (`len // 4`; a probe)"),
            ):
                v = res[k]
                lines.append(
                    f"| {label} | {spread(v['p50'])} | {ratio_spread(v['p50'], f['p50'])} | "
                    f"{ratio_spread(v['p50'], res['lc']['p50'])} | {spread(v['p99'])} | "
                    f"{ratio_spread(v['p99'], f['p99'])} |"
                )
            lines += [
                "",
                "checkpoint=state / bare shardstore p50: "
                + ratio_spread(res["ss_ckpt"]["p50"], res["ss"]["p50"]),
                "",
                "defaults (splintr counting) / tiktoken-only counting p50: "
                + ratio_spread(res["ss"]["p50"], res["ss_tiktoken"]["p50"]),
                "",
                "defaults (splintr counting) / rs-bpe counting p50: "
                + ratio_spread(res["ss"]["p50"], res["ss_rsbpe"]["p50"]),
                "",
                "no exact count (`len // 4`) / defaults p50: "
                + ratio_spread(res["ss_nocount"]["p50"], res["ss"]["p50"]),
                "",
            ]
        for src in sources if "writers" in parts else []:
            corpus = Corpus(5000, source=src)
            cs = build(
                ["floor", "lc", "ss", "ss_rsbpe", "ss_nocount"],
                corpus,
                f"ba_w_{src}_{uuid.uuid4().hex[:6]}",
            )
            res8 = writers8(cs, a.rounds, a.per_writer)
            close(cs)
            raw[key("writers", src)] = res8
            lines += [
                f"## 8 writers ({a.per_writer} appends each, own session and connection; "
                f"{WHAT[src]})",
                "",
                "| contender | turns/s | / langchain |",
                "|---|---|---|",
            ]
            for k in ("floor", "lc", "ss", "ss_rsbpe", "ss_nocount"):
                lines.append(f"| {k} | {spread(res8[k])} | {ratio_spread(res8[k], res8['lc'])} |")
            lines.append("")
        tail = [(key("tail", src), "tail", None, src) for src in sources]
        for rkey, part, words, src in [*tail, ("tail700", "tail700", 1560, "synthetic")]:
            if part not in parts:
                continue
            corpus = Corpus(5000, words, src)
            cs = build(
                ["floor", "ss", "ss_bulk_folded"], corpus, f"ba_{rkey}_{uuid.uuid4().hex[:6]}"
            )
            wanted = sizes if words is None else [int(x) for x in a.sizes700.split(",")]
            res_t = tails(cs, wanted, a.rounds, a.calls, a.tail_fill)
            close(cs)
            raw[rkey] = {str(s): v for s, v in res_t.items()}
            what = (
                ("synthetic messages (~400 tokens mean)" if src == "synthetic" else WHAT[src])
                if words is None
                else "~700-token random-word turns"
            )
            lines += [
                f"## tail(n=20) vs `ORDER BY seq DESC LIMIT 20` ({what}"
                + (f"; newest {a.tail_fill} turns appended one by one)" if a.tail_fill else ")"),
                "",
                "| turns | floor p50 ms | shardstore p50 ms | shardstore / floor "
                "| bulk batches folded whole (before 0040) / floor |",
                "|---|---|---|---|---|",
            ]
            for s, v in res_t.items():
                lines.append(
                    f"| {s:,} | {spread(v['floor'])} | {spread(v['ss'])} | "
                    f"{ratio_spread(v['ss'], v['floor'])} | "
                    f"{ratio_spread(v['ss_bulk_folded'], v['floor'])} |"
                )
            lines.append("")
    if len(sources) > 1:
        lines += side_by_side(raw, sources)
    print("\n".join(lines))
    if a.out:
        progress(f"wrote {write_results(a.out, chr(10).join(lines), raw)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
