"""The synthetic vectors of the search suite and the search-layout probe: clustered unit
vectors (384-d, stored as halfvec) spread over tenants and sessions, exact ground truth by
numpy, recall@k, and the load of one layout (COPY into ``shardstore.chunk_vectors`` over N
daily partitions, then the HNSW index built and timed)."""

from __future__ import annotations

import argparse
import io
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import psycopg

import shardstore
from benchmarks.lib.report import progress
from benchmarks.lib.server import create_database, drop_database
from shardstore.history.ops import ensure_partitions_op
from shardstore.search.vectors import configure_op, partition_floor

MODEL = "synthetic-384"
DIM = 384
WINDOW_TOKENS = 256
K = 10
DAY = timedelta(days=1)
COLUMNS = (
    "session_id, chunk_seq, chunk_start, window_no, tenant_id, agent_id, "
    "first_turn_seq, last_turn_seq, first_at, last_at, embedding"
)


class SyntheticEmbedder:
    """The Embedder shape for a store whose vectors are written directly (never called to
    embed text in this benchmark)."""

    name = MODEL
    dimension = DIM
    window_tokens = WINDOW_TOKENS

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def split(self, text: str, max_tokens: int) -> list[str]:
        words = text.split()
        return [" ".join(words[i : i + max_tokens]) for i in range(0, len(words), max_tokens)] or [
            text
        ]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise NotImplementedError("synthetic vectors are loaded directly")


# --------------------------------------------------------------------------- data


@dataclass
class Dataset:
    vecs: np.ndarray  # (n, DIM) float16: exactly what the halfvec column holds
    norms: np.ndarray  # (n,) float32
    tenant: np.ndarray  # (n,) tenant number
    session: np.ndarray  # (n,) session number
    chunk_seq: np.ndarray  # (n,)
    pos: np.ndarray  # (n,) position in [0, 1) of chunk_start over the layout's time span
    session_ids: list[uuid.UUID]
    by_tenant: list[np.ndarray]  # row numbers of each tenant
    key_row: dict[tuple[uuid.UUID, int], int]
    queries: np.ndarray  # (q, DIM) float16
    q_tenant: np.ndarray  # (q,)
    groups: dict[str, list[int]]  # tenant class -> its query numbers


def make_dataset(args: argparse.Namespace) -> Dataset:
    """Clustered unit vectors (centres + gaussian noise), sessions of ``chunks_per_session``
    chunks; tenant 0 owns ``big_tenant_share`` of the sessions, the others share the rest
    evenly. Queries = noisy copies of a random stored vector of the queried tenant:
    ``queries`` of uniformly drawn small tenants, then ``big_queries`` of tenant 0."""
    rng = np.random.default_rng(args.seed)
    n = args.chunks
    centres = rng.standard_normal((args.centres, DIM), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    cluster = rng.integers(0, args.centres, n)
    vecs = np.empty((n, DIM), dtype=np.float16)
    sigma = args.spread / math.sqrt(DIM)
    for lo in range(0, n, 20_000):
        hi = min(n, lo + 20_000)
        x = centres[cluster[lo:hi]] + sigma * rng.standard_normal((hi - lo, DIM), dtype=np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        vecs[lo:hi] = x.astype(np.float16)
    norms = np.linalg.norm(vecs.astype(np.float32), axis=1)

    per = args.chunks_per_session
    session = np.arange(n) // per
    n_sessions = int(session[-1]) + 1
    chunk_seq = np.arange(n) % per
    n_big = round(args.big_tenant_share * n_sessions)
    sess_tenant = rng.permutation(
        np.concatenate(
            [
                np.zeros(n_big, dtype=np.int64),
                1 + np.arange(n_sessions - n_big) % (args.tenants - 1),
            ]
        )
    )
    tenant = sess_tenant[session]
    pos = rng.random(n)
    pos = pos[np.lexsort((pos, session))]  # rows are grouped by session: time grows with seq
    session_ids = [uuid.UUID(int=int(rng.integers(1, 2**62)) << 64 | s) for s in range(n_sessions)]
    by_tenant = [np.flatnonzero(tenant == t) for t in range(args.tenants)]
    key_row = {(session_ids[session[i]], int(chunk_seq[i])): i for i in range(n)}

    q_tenant = np.concatenate(
        [
            rng.integers(1, args.tenants, args.queries),
            np.zeros(args.big_queries if n_big else 0, dtype=np.int64),
        ]
    )
    src = np.array([rng.choice(by_tenant[t]) for t in q_tenant])
    qs = vecs[src].astype(np.float32) + (args.query_noise / math.sqrt(DIM)) * rng.standard_normal(
        (len(q_tenant), DIM), dtype=np.float32
    )
    small = (n - len(by_tenant[0])) / (args.tenants - 1) / n
    groups = {f"small ({small:.1%})": list(range(args.queries))}
    if n_big:
        groups[f"big ({len(by_tenant[0]) / n:.0%})"] = list(range(args.queries, len(q_tenant)))
    qs /= np.linalg.norm(qs, axis=1, keepdims=True)
    return Dataset(
        vecs,
        norms,
        tenant,
        session,
        chunk_seq,
        pos,
        session_ids,
        by_tenant,
        key_row,
        qs.astype(np.float16),
        q_tenant,
        groups,
    )


def tenant_name(t: int) -> str:
    return f"tenant-{t:03d}"


def exact_distances(ds: Dataset, qi: int, rows: np.ndarray) -> np.ndarray:
    """Cosine distances (as pgvector computes them from the halfvec values)."""
    q = ds.queries[qi].astype(np.float32)
    dots = ds.vecs[rows].astype(np.float32) @ q
    return 1.0 - dots / (ds.norms[rows] * np.linalg.norm(q))


def ground_truth(ds: Dataset) -> list[tuple[np.ndarray, float]]:
    """Per query: the exact top-k rows of its tenant, and the k-th distance."""
    out = []
    for qi, t in enumerate(ds.q_tenant):
        rows = ds.by_tenant[t]
        d = exact_distances(ds, qi, rows)
        top = np.argsort(d, kind="stable")[:K]
        out.append((rows[top], float(d[top[-1]])))
    return out


def recall(ds: Dataset, qi: int, truth: tuple[np.ndarray, float], keys: Sequence[Any]) -> float:
    """Share of the true top-k found: a returned chunk counts if its exact distance is within
    the true k-th distance (+1e-5, so that float ties and rounding do not count as misses)."""
    rows = [ds.key_row[(sid, int(seq))] for sid, seq in keys]
    if not rows:
        return 0.0
    d = exact_distances(ds, qi, np.array(rows))
    return float(np.sum(d <= truth[1] + 1e-5)) / K


# --------------------------------------------------------------------------- load


def copy_vectors(conn: psycopg.Connection[Any], ds: Dataset, base: datetime, parts: int) -> None:
    """COPY every chunk's one window (window_no 0) with chunk_start spread over ``parts``
    days from ``base``."""
    span_us = parts * DAY / timedelta(microseconds=1)
    offsets = (ds.pos * span_us).astype(np.int64)
    sql = f"COPY shardstore.chunk_vectors ({COLUMNS}) FROM STDIN"
    with conn.cursor() as cur, cur.copy(sql) as cp:
        for lo in range(0, len(ds.vecs), 5_000):
            hi = min(len(ds.vecs), lo + 5_000)
            buf = io.StringIO()
            np.savetxt(buf, ds.vecs[lo:hi].astype(np.float32), fmt="%.5g", delimiter=",")
            vec_lines = buf.getvalue().splitlines()
            out = []
            for i, v in zip(range(lo, hi), vec_lines, strict=True):
                start = base + timedelta(microseconds=int(offsets[i]))
                seq = int(ds.chunk_seq[i])
                out.append(
                    f"{ds.session_ids[ds.session[i]]}\t{seq}\t{start.isoformat()}\t0\t"
                    f"{tenant_name(int(ds.tenant[i]))}\t\\N\t{seq * 50}\t{seq * 50 + 49}\t"
                    f"{start.isoformat()}\t{(start + timedelta(minutes=30)).isoformat()}\t[{v}]\n"
                )
            cp.write("".join(out))


@dataclass
class Layout:
    parts: int
    dsn: str
    db: str
    store: shardstore.Store
    load_s: float
    build_s: float
    vacuum_s: float
    heap_mb: float
    index_mb: float


def build_layout(admin_dsn: str, prefix: str, ds: Dataset, parts: int) -> Layout:
    db = f"{prefix}_p{parts}"
    dsn = create_database(admin_dsn, db)
    store = shardstore.connect(
        dsn, partition_interval=DAY, premake=0, embedding_model=SyntheticEmbedder()
    )
    try:
        store._run(configure_op(MODEL, DIM, WINDOW_TOKENS, False))
        with psycopg.connect(dsn, autocommit=True) as conn:
            now = conn.execute("SELECT now()").fetchone()[0]
            top = partition_floor(now, DAY, store.ctx.partition_origin)
            base = top - (parts - 1) * DAY
            store._run(ensure_partitions_op([base + i * DAY for i in range(parts)]))
            conn.execute("DROP INDEX shardstore.chunk_vectors_hnsw")
            (strategy,) = conn.execute(
                "SELECT partstrat FROM pg_partitioned_table"
                " WHERE partrelid = 'shardstore.chunk_vectors'::regclass"
            ).fetchone()
            # the range layout (before the vector_layout migration) has one vector partition
            # per agent_history partition, made by its vec_sync_partitions_v1()
            if strategy == "r":
                got = conn.execute(
                    "SELECT count(*) FROM shardstore.vec_sync_partitions_v1()"
                ).fetchone()
                if got[0] != parts:
                    raise RuntimeError(f"{got[0]} vector partitions, wanted {parts}")
            t0 = time.perf_counter()
            copy_vectors(conn, ds, base, parts)
            load_s = time.perf_counter() - t0
            conn.execute("SET maintenance_work_mem = '1GB'")
            conn.execute("SET max_parallel_maintenance_workers = 1")
            t0 = time.perf_counter()
            conn.execute(
                "CREATE INDEX chunk_vectors_hnsw ON shardstore.chunk_vectors"
                " USING hnsw (embedding halfvec_cosine_ops)"
            )
            build_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            conn.execute("VACUUM ANALYZE shardstore.chunk_vectors")
            vacuum_s = time.perf_counter() - t0
            heap, idx = conn.execute(
                "SELECT sum(pg_table_size(relid)), sum(pg_indexes_size(relid))"
                " FROM pg_partition_tree('shardstore.chunk_vectors') WHERE isleaf"
            ).fetchone()
            counts = conn.execute(
                "SELECT min(n), max(n) FROM (SELECT count(*) n FROM shardstore.chunk_vectors"
                " GROUP BY tableoid) x"
            ).fetchone()
        progress(
            f"{parts} partitions: load {load_s:.1f}s, HNSW build {build_s:.1f}s, "
            f"{counts[0]}..{counts[1]} rows per partition"
        )
    except BaseException:
        store.close()
        drop_db(admin_dsn, db)
        raise
    return Layout(
        parts, dsn, db, store, load_s, build_s, vacuum_s, float(heap) / 2**20, float(idx) / 2**20
    )


drop_db = drop_database


def qvec(ds: Dataset, qi: int) -> list[float]:
    return [float(x) for x in ds.queries[qi]]


def ann_params(vec: str, tenant: str, limit: int) -> dict[str, Any]:
    return {
        "q": vec,
        "session": None,
        "tenant": tenant,
        "agent": None,
        "since": None,
        "until": None,
        "since_floor": None,
        "n": limit,
    }


def vec_text(ds: Dataset, qi: int) -> str:
    return "[" + ",".join(f"{x:.6g}" for x in qvec(ds, qi)) + "]"


def dataset_args(chunks: int) -> argparse.Namespace:
    """The generator's parameters of the 1m run (results/archive/search_scale_1m.json)."""
    return argparse.Namespace(
        chunks=chunks,
        tenants=50,
        queries=200,
        big_tenant_share=0.3,
        big_queries=100,
        centres=200,
        spread=1.0,
        query_noise=0.5,
        seed=42,
        chunks_per_session=200 if chunks >= 100_000 else 20,
    )
