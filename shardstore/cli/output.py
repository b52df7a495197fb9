"""What the command line prints: the one ``--json`` serialisation path and the shared text
formatting helpers.

Every JSON document the CLI prints goes through :func:`dumps` (with :func:`json_default`
for datetimes and UUIDs), so all commands agree on how values are written. The ``*_json``
functions give the JSON shape of each model object; the rest renders human text.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ..history.pairing import HELD_OVER_MAX_TOKENS, TailWindow
from ..models import AppendResult, Chunk, PartitionInfo, SearchHit, SessionInfo, Stats, Turn
from ..state.checkpoints import Checkpoint
from ..state.facts import Fact
from ..state.runs import Run

# ---------------------------------------------------------------- JSON


def json_default(value: Any) -> Any:
    """The JSON form of values :mod:`json` cannot write itself: a datetime as its ISO 8601
    text, a UUID as its canonical text; anything else raises ``TypeError``."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def dumps(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON text: pretty-printed with ``indent`` (one line when ``None``),
    datetimes and UUIDs via :func:`json_default`, pure ASCII (non-ASCII characters and lone
    surrogates, which stored strings may hold, are written as ``\\u`` escapes)."""
    return json.dumps(value, default=json_default, ensure_ascii=True, indent=indent)


def _fields(value: Any, *names: str) -> dict[str, Any]:
    return {name: getattr(value, name) for name in names}


def turn_json(turn: Turn) -> dict[str, Any]:
    """A turn as the CLI prints it with ``--json``."""
    return _fields(
        turn, "turn_seq", "chunk_seq", "tokens", "created_at", "idempotency_key", "message"
    )


def chunk_json(chunk: Chunk) -> dict[str, Any]:
    """A chunk's metadata as the CLI prints it with ``--json``."""
    return _fields(
        chunk,
        *("chunk_seq", "first_turn_seq", "last_turn_seq", "turn_count", "token_count"),
        *("byte_count", "chunk_start", "chunk_end", "is_open", "partition"),
    )


def partition_json(part: PartitionInfo) -> dict[str, Any]:
    """A partition as the CLI prints it with ``--json``."""
    return _fields(part, "name", "lower", "upper", "rows", "bytes")


def append_json(result: AppendResult) -> dict[str, Any]:
    """An append result as the CLI prints it with ``--json``."""
    return _fields(result, "turn_seq", "chunk_seq", "tokens", "duplicate")


def session_json(info: SessionInfo) -> dict[str, Any]:
    """A session's owners, metadata and counts as the CLI prints them with ``--json``
    (``shardstore session`` and each entry of ``shardstore sessions``)."""
    return _fields(
        info,
        *("session_id", "tenant_id", "subject_id", "agent_id", "metadata", "created_at"),
        *("turn_count", "first_turn_seq", "stored_turns", "chunk_count", "purged"),
        "last_turn_at",
    )


def stats_json(stats: Stats) -> dict[str, Any]:
    """Store statistics as the CLI prints them with ``--json``."""
    return {
        **_fields(stats, "sessions", "turns", "chunks", "buffered_turns"),
        "partition_interval_seconds": stats.partition_interval_seconds,
        "partitions": [partition_json(p) for p in stats.partitions],
    }


def hit_json(hit: SearchHit) -> dict[str, Any]:
    """A search hit as the CLI prints it with ``--json`` (score rounded to 6 places)."""
    return {
        "session_id": str(hit.session_id),
        "chunk_seq": hit.chunk_seq,
        "score": round(hit.score, 6),
        "turns": [turn_json(t) for t in hit.turns],
    }


def held_back_text(window: TailWindow, *, shown: bool = False) -> str | None:
    """One line saying how many turns a tail window held back and why, and how to see
    them (``shown``: that they are printed, with ``--show-held``); None when it held none
    back."""
    count = len(window.held_back)
    if not count:
        return None
    turns = f"{count} turn{'s' if count != 1 else ''}"
    if window.reason == HELD_OVER_MAX_TOKENS:
        newest = window.held_back[-1]
        why = f"the newest turn alone has {newest.tokens:,} tokens, over --max-tokens"
        widen = "raise --max-tokens"
    else:
        what = "a tool result" if count == 1 else "tool results"
        whose = "whose call is" if count == 1 else "whose calls are"
        why = f"{what} {whose} outside the window"
        widen = "use -n/--max-tokens to widen the window"
    if shown:
        return f"held back {turns}: {why} (shown with --show-held)"
    them = "it" if count == 1 else "them"
    return f"held back {turns}: {why} ({widen}, or --show-held to show {them})"


def held_back_json(window: TailWindow, *, turns: bool = False) -> dict[str, Any] | None:
    """What a tail window held back as the CLI prints it with ``--json`` (None when
    nothing): how many, the reason code, the line :func:`held_back_text` prints, the turn
    seqs and, with ``turns``, the turns themselves."""
    if not window.held_back:
        return None
    doc: dict[str, Any] = {
        "count": len(window.held_back),
        "reason": window.reason,
        "message": held_back_text(window),
        "turn_seqs": [t.turn_seq for t in window.held_back],
    }
    if turns:
        doc["turns"] = [turn_json(t) for t in window.held_back]
    return doc


# ---------------------------------------------------------------- human formatting

_SPACE = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def printable(text: str) -> str:
    """Text that any UTF-8 stream can carry (lone surrogates and control bytes escaped)."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def num(n: int) -> str:
    """An integer with thousands separators (``12,345``)."""
    return f"{n:,}"


def size(n: int) -> str:
    """A byte count for humans: ``N B`` below 1 KiB, else one decimal in KiB, MiB or GiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def when(at: datetime, *, seconds: bool = True) -> str:
    """A time in UTC as ``YYYY-MM-DD HH:MM:SS`` (``HH:MM`` without ``seconds``)."""
    fmt = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    return at.astimezone(UTC).strftime(fmt)


def interval_text(seconds: float) -> str:
    """A duration in the largest whole unit that divides it (``7 days``, ``1 hour``,
    ``90 seconds``), rounded to whole seconds."""
    whole = round(seconds)
    for unit, length in (("day", 86_400), ("hour", 3600), ("minute", 60)):
        if whole >= length and whole % length == 0:
            count = whole // length
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{whole} second{'s' if whole != 1 else ''}"


def abbrev(text: str, width: int) -> str:
    """``text`` on one line (runs of whitespace folded to one space, made
    :func:`printable`), cut to at most ``width`` characters with a trailing ``…``."""
    text = printable(_SPACE.sub(" ", text).strip())
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
                parts.append(dumps(part, indent=None))
        return " ".join(parts)
    return dumps(content, indent=None)


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
                arguments = dumps(arguments, indent=None)
            out.append(f"→ {name}({arguments})")
        else:
            out.append(f"→ {dumps(call, indent=None)}")
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


def kv(pairs: Sequence[tuple[str, str]], indent: str = "", *, width: int = 0) -> str:
    """``key  value`` lines with the values aligned in one column, at least ``width``
    characters in (so that blocks printed apart line up); ``pairs`` must not be empty."""
    width = max(width, *(len(k) for k, _ in pairs))
    return "\n".join(f"{indent}{k.ljust(width)}  {v}" for k, v in pairs)


def display_dsn(dsn: str) -> str:
    """A DSN safe to print: its parameters without the password (noting that one was
    hidden), or ``(unparseable DSN)``; never raises."""
    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return "(unparseable DSN)"
    hidden = "password" in params
    params.pop("password", None)
    shown = make_conninfo("", **{k: str(v) for k, v in params.items() if v is not None})
    return shown + (" (password hidden)" if hidden else "")


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
        """Print the column header once (the first call; never in ``full`` mode)."""
        if not self.full and not self._header_done:
            print(
                self._row(("turn", "chunk", "tokens", "created (UTC)", "role", "content")),
                file=self.out,
            )
        self._header_done = True

    def turn(self, turn: Turn) -> None:
        """Print one turn (after the header, if it was not printed yet)."""
        self.header()
        role = turn.message.get("role")
        role_text = printable(role if isinstance(role, str) else repr(role))
        if self.full:
            print(
                f"{self.indent}── turn {turn.turn_seq} · chunk {turn.chunk_seq} · "
                f"{num(turn.tokens)} tokens · {when(turn.created_at)} UTC · {role_text}",
                file=self.out,
            )
            self._full_body(turn.message)
            return
        print(
            self._row(
                (
                    str(turn.turn_seq),
                    str(turn.chunk_seq),
                    num(turn.tokens),
                    when(turn.created_at),
                    role_text[:9],
                    abbrev(message_summary(turn.message), self._content_width),
                )
            ),
            file=self.out,
        )

    def _full_body(self, message: dict[str, Any]) -> None:
        text = _content_text(message.get("content"))
        if message.get("role") == "tool" and isinstance(message.get("tool_call_id"), str):
            print(f"{self.indent}[result of {message['tool_call_id']}]", file=self.out)
        if text:
            print(printable(text), file=self.out)
        for call in _tool_calls_text(message):
            print(printable(call), file=self.out)
        extra = {
            k: v
            for k, v in message.items()
            if k not in ("role", "content", "tool_calls", "tool_call_id")
        }
        if extra:
            print(f"{self.indent}{dumps(extra, indent=None)}", file=self.out)
        print(file=self.out)


#: What an empty result means, by search mode: a vector search finds only embedded chunks
#: (``embed`` helps), a text search sees every stored turn from its append on (embedding
#: does not help it: no turn has the words, or the text search language stems them
#: differently).
NO_MATCHES = {
    "vector": "no matches (is anything embedded yet? run 'shardstore embed')",
    "text": (
        "no matches: no turn in this scope has these words (text search sees every turn "
        "as soon as it is appended; 'shardstore text-search' shows the language it "
        "stems words with)"
    ),
    "hybrid": (
        "no matches: no turn in this scope has these words, and no embedded chunk is near "
        "them (is anything embedded yet? run 'shardstore embed')"
    ),
}


def print_hits(
    out: TextIO, hits: Sequence[SearchHit], indent: str = "", *, mode: str = "vector"
) -> None:
    """Search hits, best first: a ``rank. score  session  chunk`` line per hit followed by
    its turns as :class:`TurnPrinter` rows; when there are none, what that means for a
    search of ``mode`` (:data:`NO_MATCHES`)."""
    if not hits:
        print(f"{indent}{NO_MATCHES[mode]}", file=out)
        return
    printer = TurnPrinter(out, indent=indent + "    ")
    for rank, hit in enumerate(hits, start=1):
        print(
            f"{indent}{rank}. score {hit.score:.3f}  session {hit.session_id}  "
            f"chunk {hit.chunk_seq}",
            file=out,
        )
        for turn in hit.turns:
            printer.turn(turn)


def _short_partition(name: str | None) -> str | None:
    return name.removeprefix("shardstore.") if name else name


def _chunk_rows(chunks: Sequence[Chunk]) -> list[list[str]]:
    return [
        [
            str(c.chunk_seq),
            f"{c.first_turn_seq}-{c.last_turn_seq}",
            num(c.turn_count),
            num(c.token_count),
            size(c.byte_count),
            when(c.chunk_start),
            # no partition: the chunk's turns are all still in the write buffer (the open
            # chunk, or a sealed one a fold keeps for tail() or has not reached yet)
            _short_partition(c.partition) or "(write buffer)",
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
            when(p.lower, seconds=False),
            when(p.upper, seconds=False),
            num(p.rows),
            size(p.bytes),
        ]
        for p in parts
    ]
    return format_table(
        ("partition", "from (UTC)", "to (UTC)", "rows", "size"), rows, "lllrr", indent
    )


def run_json(run: Run) -> dict[str, Any]:
    """A run as the CLI prints it with ``--json``."""
    return _fields(
        run,
        *("run_id", "session_id", "tenant_id", "framework", "thread_key", "status"),
        *("awaiting", "awaiting_since", "steps", "usd_cost", "error", "metadata"),
        *("created_at", "updated_at", "closed_at"),
    )


def fact_json(fact: Fact) -> dict[str, Any]:
    """A fact (one version) as the CLI prints it with ``--json``."""
    return _fields(
        fact,
        *("fact_id", "tenant_id", "subject", "key", "value", "confidence"),
        *("source_session_id", "source_turn_seq", "valid_from", "valid_to", "recorded_at"),
    )


def checkpoint_json(checkpoint: Checkpoint) -> dict[str, Any]:
    """A checkpoint as the CLI prints it with ``--json``."""
    return _fields(
        checkpoint,
        *("checkpoint_id", "session_id", "turn_seq", "sub_step", "parent_id", "created_at"),
        *("state", "tool_calls", "tool_results", "metadata"),
    )
