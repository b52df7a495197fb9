"""The ``shardstore`` command line.

    shardstore [--dsn DSN] [--json] COMMAND ...

The database is ``--dsn``, else ``$SHARDSTORE_DSN``, else the embedded Postgres (started on
demand). Human output is aligned plain text; ``--json`` prints one JSON document on stdout
(``history --json`` prints one JSON object per line). Errors from shardstore print
``error: <message>`` on stderr and exit with status 2 (bad usage also exits 2, unexpected
failures exit 1).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import sys
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .connector import resolve_dsn
from .demo import synthetic
from .errors import DatabaseUnavailable, ShardstoreError
from .models import AppendResult, Chunk, PartitionInfo, Stats, Turn
from .settings import parse_interval
from .store import Store

PROG = "shardstore"


class UsageError(Exception):
    """Bad input detected by the CLI itself (e.g. a message that is not JSON); exit 2."""


# ---------------------------------------------------------------- JSON shapes


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _dumps(value: Any, *, indent: int | None = 2) -> str:
    # ensure_ascii: stored strings may hold lone surrogates, which only escapes can carry.
    return json.dumps(value, default=_json_default, ensure_ascii=True, indent=indent)


def turn_json(turn: Turn) -> dict[str, Any]:
    """A turn as the CLI prints it with ``--json``."""
    return {
        "turn_seq": turn.turn_seq,
        "chunk_seq": turn.chunk_seq,
        "tokens": turn.tokens,
        "created_at": turn.created_at,
        "idempotency_key": turn.idempotency_key,
        "message": turn.message,
    }


def chunk_json(chunk: Chunk) -> dict[str, Any]:
    """A chunk's metadata as the CLI prints it with ``--json``."""
    return {
        "chunk_seq": chunk.chunk_seq,
        "first_turn_seq": chunk.first_turn_seq,
        "last_turn_seq": chunk.last_turn_seq,
        "turn_count": chunk.turn_count,
        "token_count": chunk.token_count,
        "byte_count": chunk.byte_count,
        "chunk_start": chunk.chunk_start,
        "chunk_end": chunk.chunk_end,
        "is_open": chunk.is_open,
        "partition": chunk.partition,
    }


def partition_json(part: PartitionInfo) -> dict[str, Any]:
    """A partition as the CLI prints it with ``--json``."""
    return {
        "name": part.name,
        "lower": part.lower,
        "upper": part.upper,
        "rows": part.rows,
        "bytes": part.bytes,
    }


def append_json(result: AppendResult) -> dict[str, Any]:
    """An append result as the CLI prints it with ``--json``."""
    return {
        "turn_seq": result.turn_seq,
        "chunk_seq": result.chunk_seq,
        "tokens": result.tokens,
        "duplicate": result.duplicate,
    }


def stats_json(stats: Stats) -> dict[str, Any]:
    """Store statistics as the CLI prints them with ``--json``."""
    return {
        "sessions": stats.sessions,
        "turns": stats.turns,
        "chunks": stats.chunks,
        "buffered_turns": stats.buffered_turns,
        "partition_interval_seconds": stats.partition_interval_seconds,
        "partitions": [partition_json(p) for p in stats.partitions],
    }


# ---------------------------------------------------------------- human formatting

_SPACE = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _printable(text: str) -> str:
    """Text that any UTF-8 stream can carry (lone surrogates and control bytes escaped)."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _num(n: int) -> str:
    return f"{n:,}"


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def _when(at: datetime, *, seconds: bool = True) -> str:
    fmt = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    return at.astimezone(UTC).strftime(fmt)


def _interval(seconds: float) -> str:
    whole = round(seconds)
    for unit, size in (("day", 86_400), ("hour", 3600), ("minute", 60)):
        if whole >= size and whole % size == 0:
            count = whole // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{whole} second{'s' if whole != 1 else ''}"


def _abbrev(text: str, width: int) -> str:
    text = _printable(_SPACE.sub(" ", text).strip())
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and isinstance(part.get("type"), str):
                parts.append(f"[{part['type']}]")
            else:
                parts.append(_dumps(part, indent=None))
        return " ".join(parts)
    return _dumps(content, indent=None)


def _tool_calls_text(message: dict[str, Any]) -> list[str]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            name = function.get("name")
            arguments = function.get("arguments")
            if not isinstance(arguments, str):
                arguments = _dumps(arguments, indent=None)
            out.append(f"→ {name}({arguments})")
        else:
            out.append(f"→ {_dumps(call, indent=None)}")
    return out


def message_summary(message: dict[str, Any]) -> str:
    """A one-line rendering of a message: its text, then its tool calls as ``→ name(args)``."""
    parts = [_content_text(message.get("content")), *_tool_calls_text(message)]
    return " ".join(p for p in parts if p)


def format_table(
    headers: Sequence[str], rows: Iterable[Sequence[str]], align: str, indent: str = ""
) -> str:
    """Rows of strings as an aligned table; ``align`` holds one ``l`` or ``r`` per column.
    The last column is never padded (so long text does not drag trailing spaces)."""
    body = [list(r) for r in rows]
    widths = [len(h) for h in headers]
    for row in body:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *body]:
        cells = []
        for i, cell in enumerate(row):
            if i == len(row) - 1 and align[i] == "l":
                cells.append(cell)
            elif align[i] == "r":
                cells.append(cell.rjust(widths[i]))
            else:
                cells.append(cell.ljust(widths[i]))
        lines.append(indent + "  ".join(cells).rstrip())
    return "\n".join(lines)


def _terminal_width() -> int:
    return max(60, shutil.get_terminal_size((120, 24)).columns)


class TurnPrinter:
    """Prints turns as they arrive: fixed-width rows with abbreviated content, or (``full``)
    a transcript with every message in full."""

    def __init__(self, out: TextIO, *, full: bool = False, indent: str = "") -> None:
        self.out = out
        self.full = full
        self.indent = indent
        self._header_done = False
        self._content_width = max(20, _terminal_width() - len(indent) - 58)

    def _row(self, cells: Sequence[str]) -> str:
        turn, chunk, tokens, created, role, content = cells
        return (
            f"{self.indent}{turn:>6}  {chunk:>5}  {tokens:>6}  {created:<19}  {role:<9}  {content}"
        ).rstrip()

    def header(self) -> None:
        if not self.full and not self._header_done:
            print(
                self._row(("turn", "chunk", "tokens", "created (UTC)", "role", "content")),
                file=self.out,
            )
        self._header_done = True

    def turn(self, turn: Turn) -> None:
        self.header()
        role = turn.message.get("role")
        role_text = _printable(role if isinstance(role, str) else repr(role))
        if self.full:
            print(
                f"{self.indent}── turn {turn.turn_seq} · chunk {turn.chunk_seq} · "
                f"{_num(turn.tokens)} tokens · {_when(turn.created_at)} UTC · {role_text}",
                file=self.out,
            )
            self._full_body(turn.message)
            return
        print(
            self._row(
                (
                    str(turn.turn_seq),
                    str(turn.chunk_seq),
                    _num(turn.tokens),
                    _when(turn.created_at),
                    role_text[:9],
                    _abbrev(message_summary(turn.message), self._content_width),
                )
            ),
            file=self.out,
        )

    def _full_body(self, message: dict[str, Any]) -> None:
        text = _content_text(message.get("content"))
        if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
            print(f"{self.indent}[result of {message['tool_call_id']}]", file=self.out)
        if text:
            print(_printable(text), file=self.out)
        for call in _tool_calls_text(message):
            print(_printable(call), file=self.out)
        extra = {
            k: v
            for k, v in message.items()
            if k not in ("role", "content", "tool_calls", "tool_call_id")
        }
        if extra:
            print(f"{self.indent}{_dumps(extra, indent=None)}", file=self.out)
        print(file=self.out)


def _short_partition(name: str | None) -> str | None:
    return name.removeprefix("shardstore.") if name else name


def _chunk_rows(chunks: Sequence[Chunk]) -> list[list[str]]:
    return [
        [
            str(c.chunk_seq),
            f"{c.first_turn_seq}-{c.last_turn_seq}",
            _num(c.turn_count),
            _num(c.token_count),
            _size(c.byte_count),
            _when(c.chunk_start),
            _short_partition(c.partition) or ("(write buffer)" if c.is_open else "-"),
            "open" if c.is_open else "sealed",
        ]
        for c in chunks
    ]


_CHUNK_HEADERS = (
    "chunk",
    "turn range",
    "turns",
    "tokens",
    "bytes",
    "start (UTC)",
    "partition",
    "state",
)
_CHUNK_ALIGN = "rrrrrlll"


def format_chunks(
    chunks: Sequence[Chunk], *, head: int = 0, tail: int = 0, indent: str = ""
) -> str:
    """The chunks table; with ``head``/``tail`` set, long lists are elided in the middle."""
    rows = _chunk_rows(chunks)
    if head + tail and len(rows) > head + tail + 1:
        hidden = len(rows) - head - tail
        rows = [*rows[:head], ["…", f"({hidden} more)", "", "", "", "", "", ""], *rows[-tail:]]
    return format_table(_CHUNK_HEADERS, rows, _CHUNK_ALIGN, indent)


def format_partitions(parts: Sequence[PartitionInfo], indent: str = "") -> str:
    """The partitions table (name, bounds in UTC, chunk rows, size on disk)."""
    rows = [
        [
            p.name,
            _when(p.lower, seconds=False),
            _when(p.upper, seconds=False),
            _num(p.rows),
            _size(p.bytes),
        ]
        for p in parts
    ]
    return format_table(
        ("partition", "from (UTC)", "to (UTC)", "rows", "size"), rows, "lllrr", indent
    )


def _kv(pairs: Sequence[tuple[str, str]], indent: str = "") -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{indent}{k.ljust(width)}  {v}" for k, v in pairs)


def _display_dsn(dsn: str) -> str:
    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return "(unparseable DSN)"
    hidden = "password" in params
    params.pop("password", None)
    shown = make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})
    return shown + (" (password hidden)" if hidden else "")


# ---------------------------------------------------------------- commands


def _connect_failure(dsn: str) -> str:
    """The server's reason for refusing one direct connection (the pool's error does not
    carry it), as a suffix for the error message; empty if a direct connection works."""
    try:
        with psycopg.connect(dsn, connect_timeout=5):
            return ""
    except Exception as exc:
        reason = " ".join(str(exc).split())
        return f" ({reason})" if reason else ""


class Runner:
    """Holds what every command needs: parsed arguments, output streams, the store."""

    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO) -> None:
        self.args = args
        self.out = out
        self.err = err
        self.json: bool = bool(args.json)
        self.embedded = not (args.dsn or os.environ.get("SHARDSTORE_DSN"))
        self.dsn = ""

    def connect(self, **settings: Any) -> Store:
        import shardstore

        if self.embedded and self.err.isatty():
            print(
                "starting the embedded Postgres (set SHARDSTORE_DSN or --dsn to use another "
                "server)…",
                file=self.err,
            )
        self.dsn = resolve_dsn(self.args.dsn)
        # The pool retries failed connections until connect_timeout and logs each failure;
        # the CLI reports the final error once instead.
        logging.getLogger("psycopg.pool").setLevel(logging.CRITICAL)
        try:
            return shardstore.connect(
                self.dsn, connect_timeout=self.args.connect_timeout, **settings
            )
        except DatabaseUnavailable as exc:
            raise DatabaseUnavailable(f"{exc}{_connect_failure(self.dsn)}") from exc

    def emit(self, document: Any) -> None:
        print(_dumps(document), file=self.out)

    def line(self, text: str = "") -> None:
        print(text, file=self.out)


def cmd_init(run: Runner) -> int:
    settings: dict[str, Any] = {}
    if run.args.partition_interval is not None:
        settings["partition_interval"] = parse_interval(run.args.partition_interval)
    from .migrations import all_migrations

    with run.connect(**settings) as store:
        stats = store.stats()
    version = len(all_migrations())
    if run.json:
        run.emit(
            {
                "database": _display_dsn(run.dsn),
                "embedded": run.embedded,
                "schema_version": version,
                "partition_interval_seconds": stats.partition_interval_seconds,
                "partitions": [partition_json(p) for p in stats.partitions],
            }
        )
        return 0
    run.line(
        _kv(
            [
                ("database", _display_dsn(run.dsn) + (" (embedded)" if run.embedded else "")),
                ("schema", f"up to date (migration {version})"),
                ("partition interval", _interval(stats.partition_interval_seconds)),
                ("partitions", str(len(stats.partitions))),
            ]
        )
    )
    if stats.partitions:
        run.line()
        run.line(format_partitions(stats.partitions))
    return 0


def cmd_create_session(run: Runner) -> int:
    metadata = _parse_json(run.args.metadata, "--metadata") if run.args.metadata else None
    with run.connect() as store:
        sid = store.create_session(
            run.args.tenant, run.args.subject, run.args.agent, run.args.session_id, metadata
        )
    if run.json:
        run.emit({"session_id": sid})
    else:
        run.line(str(sid))
    return 0


def _parse_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not valid JSON: {exc}") from None


def cmd_append(run: Runner) -> int:
    args = run.args
    if args.content is not None or args.role is not None:
        if args.message is not None:
            raise UsageError("give either MESSAGE_JSON or --role/--content, not both")
        if args.content is None:
            raise UsageError("--role needs --content")
        payload: Any = {"role": args.role or "user", "content": args.content}
    else:
        text = sys.stdin.read() if args.message in (None, "-") else args.message
        if not text.strip():
            raise UsageError("no message given (pass MESSAGE_JSON, '-' for stdin, or --content)")
        payload = _parse_json(text, "the message")
    with run.connect() as store:
        if isinstance(payload, list):
            keys = None if args.key is None else [f"{args.key}/{i}" for i in range(len(payload))]
            results = store.append_turns(args.session_id, payload, keys)
        else:
            results = [store.append_turn(args.session_id, payload, args.key)]
    if run.json:
        docs = [append_json(r) for r in results]
        run.emit(docs if isinstance(payload, list) else docs[0])
        return 0
    for r in results:
        note = "  (duplicate: already stored, nothing written)" if r.duplicate else ""
        run.line(f"turn {r.turn_seq}  chunk {r.chunk_seq}  {_num(r.tokens)} tokens{note}")
    return 0


def cmd_tail(run: Runner) -> int:
    with run.connect() as store:
        turns = store.tail(run.args.session_id, n=run.args.n, max_tokens=run.args.max_tokens)
    if run.json:
        run.emit({"session_id": run.args.session_id, "turns": [turn_json(t) for t in turns]})
        return 0
    printer = TurnPrinter(run.out, full=run.args.full)
    printer.header()
    for t in turns:
        printer.turn(t)
    return 0


def cmd_history(run: Runner) -> int:
    with run.connect() as store:
        printer = TurnPrinter(run.out, full=run.args.full)
        turns = store.history(run.args.session_id, run.args.from_seq, run.args.to_seq)
        try:
            for t in turns:
                if run.json:
                    print(_dumps(turn_json(t), indent=None), file=run.out)
                else:
                    printer.turn(t)
        finally:
            close = getattr(turns, "close", None)
            if close is not None:
                close()
        if not run.json:
            printer.header()  # an empty range still shows the header
    return 0


def cmd_chunks(run: Runner) -> int:
    with run.connect() as store:
        chunks = store.chunks(run.args.session_id, last=run.args.last)
    if run.json:
        run.emit({"session_id": run.args.session_id, "chunks": [chunk_json(c) for c in chunks]})
    else:
        run.line(format_chunks(chunks))
    return 0


def cmd_session(run: Runner) -> int:
    with run.connect() as store:
        info = store.session(run.args.session_id)
    doc = {
        "session_id": info.session_id,
        "tenant_id": info.tenant_id,
        "subject_id": info.subject_id,
        "agent_id": info.agent_id,
        "metadata": info.metadata,
        "created_at": info.created_at,
        "turn_count": info.turn_count,
        "chunk_count": info.chunk_count,
        "purged": info.purged,
    }
    if run.json:
        run.emit(doc)
        return 0
    run.line(
        _kv(
            [
                ("session", str(info.session_id)),
                ("tenant", _printable(info.tenant_id)),
                ("subject", _printable(info.subject_id or "-")),
                ("agent", _printable(info.agent_id or "-")),
                ("created", _when(info.created_at) + " UTC"),
                ("turns", _num(info.turn_count)),
                ("chunks", _num(info.chunk_count)),
                ("purged", "yes" if info.purged else "no"),
                ("metadata", _dumps(info.metadata, indent=None)),
            ]
        )
    )
    return 0


def cmd_stats(run: Runner) -> int:
    with run.connect() as store:
        stats = store.stats()
    if run.json:
        run.emit(stats_json(stats))
        return 0
    run.line(
        _kv(
            [
                ("sessions", _num(stats.sessions)),
                ("turns", _num(stats.turns)),
                ("chunks", _num(stats.chunks)),
                ("buffered turns", _num(stats.buffered_turns)),
                ("partition interval", _interval(stats.partition_interval_seconds)),
            ]
        )
    )
    if stats.partitions:
        run.line()
        run.line(format_partitions(stats.partitions))
    return 0


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def cmd_demo(run: Runner) -> int:
    from tqdm import tqdm

    args = run.args
    if args.turns < 1:
        raise UsageError("--turns must be at least 1")
    if args.batch < 1:
        raise UsageError("--batch must be at least 1")
    messages = synthetic.messages(args.seed, args.turns)
    with run.connect() as store:
        sid = store.create_session(
            args.tenant,
            "user:demo",
            "synthetic-agent",
            metadata={"generator": "shardstore.synthetic", "seed": args.seed},
        )
        latencies: list[float] = []
        tokens = 0
        progress = tqdm(
            total=len(messages),
            unit="turn",
            file=run.err,
            disable=None,
            desc="appending",
            dynamic_ncols=True,
        )
        started = time.perf_counter()
        try:
            for at in range(0, len(messages), args.batch):
                batch = messages[at : at + args.batch]
                keys = [f"demo-{args.seed}-{at + i}" for i in range(len(batch))]
                t0 = time.perf_counter()
                if len(batch) == 1:
                    results = [store.append_turn(sid, batch[0], keys[0])]
                else:
                    results = store.append_turns(sid, batch, keys)
                latencies.append(time.perf_counter() - t0)
                tokens += sum(r.tokens for r in results)
                progress.update(len(batch))
        finally:
            progress.close()
        elapsed = max(time.perf_counter() - started, 1e-9)

        read_started = time.perf_counter()
        read_back = [t.message for t in store.history(sid)]
        read_elapsed = max(time.perf_counter() - read_started, 1e-9)
        identical = read_back == messages

        tail = store.tail(sid, n=6)
        chunks = store.chunks(sid)
        stats = store.stats()

    byte_count = sum(c.byte_count for c in chunks)
    latencies.sort()
    turns_per_second = len(messages) / elapsed
    tokens_per_second = tokens / elapsed
    lat = {
        "p50": _percentile(latencies, 0.5) * 1000,
        "p99": _percentile(latencies, 0.99) * 1000,
        "max": latencies[-1] * 1000,
    }
    if run.json:
        run.emit(
            {
                "database": _display_dsn(run.dsn),
                "embedded": run.embedded,
                "session_id": sid,
                "tenant_id": args.tenant,
                "seed": args.seed,
                "turns": len(messages),
                "tokens": tokens,
                "bytes": byte_count,
                "batch": args.batch,
                "seconds": elapsed,
                "turns_per_second": turns_per_second,
                "tokens_per_second": tokens_per_second,
                "append_latency_ms": lat,
                "history": {
                    "turns": len(read_back),
                    "identical": identical,
                    "seconds": read_elapsed,
                },
                "tail": [turn_json(t) for t in tail],
                "chunks": [chunk_json(c) for c in chunks],
                "partition_interval_seconds": stats.partition_interval_seconds,
                "partitions": [partition_json(p) for p in stats.partitions],
            }
        )
        return 0 if identical else 1

    how = (
        "one append_turn() per message"
        if args.batch == 1
        else (f"append_turns() in batches of {args.batch}")
    )
    run.line(
        _kv(
            [
                ("database", _display_dsn(run.dsn) + (" (embedded)" if run.embedded else "")),
                ("session", f"{sid}  (tenant {_printable(args.tenant)}, seed {args.seed})"),
                (
                    "appended",
                    f"{_num(len(messages))} turns, {_num(tokens)} tokens, {_size(byte_count)} "
                    f"in {elapsed:.2f} s ({how}, each one commit)",
                ),
                (
                    "append rate",
                    f"{_num(round(turns_per_second))} turns/s, "
                    f"{_num(round(tokens_per_second))} tokens/s; latency "
                    f"p50 {lat['p50']:.2f} ms, p99 {lat['p99']:.2f} ms, "
                    f"max {lat['max']:.2f} ms",
                ),
                (
                    "read back",
                    f"{_num(len(read_back))} turns via history() in {read_elapsed:.2f} s: "
                    + ("identical to what was appended" if identical else "MISMATCH"),
                ),
            ]
        )
    )
    run.line()
    run.line(f"tail (newest {len(tail)} turns)")
    printer = TurnPrinter(run.out, indent="  ")
    printer.header()
    for t in tail:
        printer.turn(t)
    run.line()
    sealed = sum(1 for c in chunks if not c.is_open)
    run.line(
        f"chunks ({len(chunks)}: {sealed} sealed"
        + (", 1 open" if len(chunks) > sealed else "")
        + ")"
    )
    run.line(format_chunks(chunks, head=3, tail=6, indent="  "))
    run.line()
    run.line(
        f"partitions of agent_history (every {_interval(stats.partition_interval_seconds)}, "
        "store-wide)"
    )
    run.line(format_partitions(stats.partitions, indent="  "))
    if not args.no_search:
        from .cli_search import demo_search

        demo_search(run, args.tenant)
    return 0 if identical else 1


# ---------------------------------------------------------------- argument parsing


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (global options are accepted before or after the command)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Unbounded AI-agent conversation history in PostgreSQL.",
        epilog="The database is --dsn, else $SHARDSTORE_DSN, else the embedded Postgres.",
    )
    parser.add_argument(
        "--dsn",
        default=None,
        help="PostgreSQL DSN (default: $SHARDSTORE_DSN, else the embedded Postgres)",
    )
    parser.add_argument(
        "--json", action="store_true", default=False, help="print machine-readable JSON on stdout"
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="give up connecting after this long (default 10)",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dsn", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    common.add_argument(
        "--connect-timeout", type=float, default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, handler: Callable[[Runner], int], help_text: str) -> Any:
        p = sub.add_parser(name, parents=[common], help=help_text, description=help_text)
        p.set_defaults(handler=handler)
        return p

    p = command("init", cmd_init, "create or upgrade the schema and show its status")
    p.add_argument(
        "--partition-interval",
        metavar="INTERVAL",
        help="width of agent_history partitions on a new database, e.g. '7 days', "
        "'1h' (fixed once partitions exist)",
    )

    p = command(
        "demo", cmd_demo, "append a long synthetic agent conversation and show how it was stored"
    )
    p.add_argument("--turns", type=_positive_int, default=2000, help="messages (default 2000)")
    p.add_argument("--tenant", default="demo", help="tenant id (default 'demo')")
    p.add_argument(
        "--no-search", action="store_true", help="skip the embedding and search part"
    )
    p.add_argument("--seed", type=int, default=1, help="synthetic conversation seed (default 1)")
    p.add_argument(
        "--batch",
        type=_positive_int,
        default=1,
        help="messages per append call (default 1: one commit per message)",
    )

    p = command("create-session", cmd_create_session, "create a session and print its id")
    p.add_argument("--tenant", required=True, help="tenant id")
    p.add_argument("--subject", help="subject id (e.g. the end user)")
    p.add_argument("--agent", help="agent id")
    p.add_argument("--session-id", help="use this UUID (idempotent: repeating returns it)")
    p.add_argument("--metadata", metavar="JSON", help="a JSON object stored with the session")

    p = command(
        "append",
        cmd_append,
        "append a message (a JSON object; a JSON array appends several atomically)",
    )
    p.add_argument("session_id", metavar="SESSION_ID")
    p.add_argument(
        "message",
        metavar="MESSAGE_JSON",
        nargs="?",
        help="the message as JSON; '-' or nothing reads it from stdin",
    )
    p.add_argument("--key", help="idempotency key (for an array, KEY/0, KEY/1, ...)")
    p.add_argument("--role", help="with --content: build {role, content} (default role 'user')")
    p.add_argument("--content", metavar="TEXT", help="message text (instead of MESSAGE_JSON)")

    p = command("tail", cmd_tail, "show the newest turns, oldest first")
    p.add_argument("session_id", metavar="SESSION_ID")
    p.add_argument("-n", type=_positive_int, default=None, metavar="N", help="at most N turns")
    p.add_argument(
        "--max-tokens", type=_positive_int, default=None, metavar="M", help="at most M tokens"
    )
    p.add_argument("--full", action="store_true", help="print whole messages")

    p = command(
        "history",
        cmd_history,
        "stream turns FROM <= turn < TO in order (--json: one JSON object per line)",
    )
    p.add_argument("session_id", metavar="SESSION_ID")
    p.add_argument("--from", dest="from_seq", type=_non_negative_int, default=0, metavar="N")
    p.add_argument("--to", dest="to_seq", type=_non_negative_int, default=None, metavar="N")
    p.add_argument("--full", action="store_true", help="print whole messages")

    p = command("chunks", cmd_chunks, "show a session's chunks, oldest first")
    p.add_argument("session_id", metavar="SESSION_ID")
    p.add_argument(
        "--last", type=_positive_int, default=None, metavar="N", help="only the N newest chunks"
    )

    p = command("session", cmd_session, "show a session's owners and counts")
    p.add_argument("session_id", metavar="SESSION_ID")

    command("stats", cmd_stats, "store-wide counts and partitions")

    # commands of the lifecycle features live in their own modules
    from . import cli_maintain, cli_purge, cli_search

    cli_maintain.register(command)
    cli_purge.register(command)
    cli_search.register(command)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 ok, 2 shardstore error or bad
    usage, 1 unexpected failure, 130 interrupted)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed by argparse
        return exc.code if isinstance(exc.code, int) else 2
    run = Runner(args, sys.stdout, sys.stderr)
    handler: Callable[[Runner], int] = args.handler
    try:
        return handler(run)
    except (ShardstoreError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `shardstore history ... | head`): not an error
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except Exception as exc:
        traceback.print_exc(file=sys.stderr)
        print(f"error: unexpected {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
