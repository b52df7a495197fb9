"""Helpers shared by the purge tests (no tests here): raw views of every shardstore table
and conversations full of marker strings."""

from __future__ import annotations

import time
from typing import Any

import psycopg

import shardstore
from shardstore.history.ops import append_op


def table_rows(dsn: str) -> dict[str, list[str]]:
    """The text cast of every row of every ordinary table in the shardstore schema (every
    partition, attached or not, the write buffer, the sessions, the registry...), sorted."""
    out: dict[str, list[str]] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        names = conn.execute(
            "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.relname)"
            "  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'shardstore' AND c.relkind = 'r' ORDER BY 1"
        ).fetchall()
        for (name,) in names:
            rows = conn.execute(f"SELECT t::text FROM {name} t").fetchall()
            out[name] = sorted(r[0] for r in rows)
    return out


def hits(rows: dict[str, list[str]], needle: str) -> list[tuple[str, str]]:
    """(table, row) pairs whose text contains ``needle``."""
    return [(table, row) for table, rs in rows.items() for row in rs if needle in row]


def without(rows: dict[str, list[str]], needles: list[str]) -> dict[str, list[str]]:
    """Every table's rows that contain none of ``needles``."""
    return {t: [r for r in rs if not any(n in r for n in needles)] for t, rs in rows.items()}


def snapshot(store: shardstore.Store, sid: Any) -> list[tuple[Any, ...]]:
    """A session's history, every field of every turn."""
    return [
        (t.turn_seq, t.chunk_seq, t.tokens, t.created_at, t.idempotency_key, t.message)
        for t in store.history(sid)
    ]


def message(marker: str, i: int) -> dict[str, Any]:
    """A message carrying ``marker`` in its text, in a tool call and in an extra field."""
    if i % 3 == 2:
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": f'{{"who": "{marker}"}}'},
                }
            ],
        }
    return {
        "role": "user" if i % 3 == 0 else "tool",
        "content": f"{marker} says hello for the {i}th time " + "blah " * (5 + i % 17),
        **({"tool_call_id": f"call_{i - 1}"} if i % 3 == 1 else {}),
        "metadata": {"note": f"from {marker}"},
    }


def converse(
    store: shardstore.Store,
    sid: Any,
    marker: str,
    turns: int,
    *,
    start: int = 0,
    keyed: bool = True,
) -> None:
    """Append ``turns`` marker messages, some one by one, some in batches."""
    i = start
    while i < start + turns:
        if i % 5 == 4 and i + 2 <= start + turns:
            store.append_turns(
                sid,
                [message(marker, i), message(marker, i + 1)],
                [f"{marker}-k{i}", None] if keyed else None,
            )
            i += 2
        else:
            store.append_turn(sid, message(marker, i), f"{marker}-k{i}" if keyed else None)
            i += 1


def append_unfolded(
    store: shardstore.Store, sid: Any, msg: dict[str, Any], key: str | None
) -> bool:
    """Append without folding a chunk it seals (as if the process died before its fold):
    the sealed chunk stays in the write buffer. Returns whether a chunk was sealed."""
    outcome = store._run(append_op(store.ctx, sid, [msg], [key]))
    return outcome.sealed


def next_second() -> None:
    """Sleep into the next whole second (a new partition with 1-second partitions)."""
    time.sleep(1.02 - (time.time() % 1.0))


def rich_session(
    store: shardstore.Store, marker: str, *, subject: str, tenant: str = "acme"
) -> Any:
    """A session that has every storage state: folded chunks in two partitions, a flushed
    open chunk with buffered turns after the flush, a sealed chunk not yet folded, keys."""
    sid = store.create_session(
        tenant,
        subject,
        f"agent-{marker}",
        metadata={"email": f"{marker}@example.com", "name": marker},
    )
    converse(store, sid, marker, 14)
    store.drain_folds()
    next_second()
    converse(store, sid, marker, 10, start=14)
    store.drain_folds()
    store.flush(sid)
    converse(store, sid, marker, 2, start=24)
    store.drain_folds()
    i = 26
    while not append_unfolded(store, sid, message(marker, i), f"{marker}-k{i}"):
        i += 1
    append_unfolded(store, sid, message(marker, i + 1), f"{marker}-k{i + 1}")
    return sid
