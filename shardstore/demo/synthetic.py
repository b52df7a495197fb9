"""Deterministic synthetic agent conversations, for demos, benchmarks and tests.

:func:`conversation` yields OpenAI-style chat messages that look like a coding / research
agent at work: user questions, assistant answers, assistant messages carrying
``tool_calls`` and the ``role: "tool"`` results that answer them. Sizes range from a few
tokens (short questions) to a few thousand tokens (file reads, logs, query results).

Everything is drawn from a ``random.Random`` seeded with the caller's seed, so a seed always
produces the same messages, on every platform and Python version that keeps
``random.Random``'s documented reproducibility (``random``, ``randrange``, ``choice``,
``choices``, ``shuffle`` on the same seed). Text is assembled from word lists so that it is
varied and not trivially compressible, like real conversation text.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["TOOL_NAMES", "conversation", "messages"]

Message = dict[str, Any]

_NOUNS = (
    "cache",
    "index",
    "partition",
    "request",
    "worker",
    "schema",
    "session",
    "buffer",
    "cluster",
    "queue",
    "token",
    "payload",
    "thread",
    "replica",
    "snapshot",
    "pipeline",
    "endpoint",
    "migration",
    "deployment",
    "container",
    "tenant",
    "budget",
    "checkpoint",
    "gradient",
    "embedding",
    "vector",
    "transaction",
    "lock",
    "column",
    "trigger",
    "backlog",
    "retry",
    "timeout",
    "latency",
    "throughput",
    "histogram",
    "dashboard",
    "alert",
    "runbook",
    "config",
    "manifest",
    "parser",
    "encoder",
    "decoder",
    "tokenizer",
    "scheduler",
    "daemon",
    "socket",
    "handshake",
    "certificate",
    "credential",
    "quota",
    "shard",
    "ledger",
    "journal",
    "heartbeat",
    "watermark",
    "offset",
    "cursor",
    "iterator",
    "closure",
    "coroutine",
    "future",
    "promise",
    "callback",
    "fixture",
    "benchmark",
    "regression",
    "invariant",
    "assertion",
    "contract",
    "interface",
    "adapter",
    "gateway",
    "proxy",
    "router",
    "balancer",
    "mirror",
    "archive",
    "bucket",
    "object",
    "blob",
    "segment",
    "page",
    "extent",
    "tablespace",
    "vacuum",
    "planner",
    "optimizer",
    "statistic",
    "sample",
    "estimate",
    "threshold",
    "window",
    "horizon",
)
_VERBS = (
    "rebuilds",
    "flushes",
    "rotates",
    "validates",
    "rejects",
    "batches",
    "streams",
    "retries",
    "compacts",
    "serialises",
    "merges",
    "splits",
    "throttles",
    "caches",
    "evicts",
    "locks",
    "scans",
    "prunes",
    "indexes",
    "replays",
    "acknowledges",
    "forwards",
    "drops",
    "appends",
    "truncates",
    "encodes",
    "decodes",
    "schedules",
    "cancels",
    "promotes",
    "demotes",
    "checkpoints",
    "restores",
    "migrates",
    "partitions",
    "aggregates",
    "samples",
    "measures",
    "reports",
    "warns about",
    "logs",
    "ignores",
    "duplicates",
    "reorders",
    "delays",
    "wraps",
)
_ADJECTIVES = (
    "stale",
    "hot",
    "cold",
    "partial",
    "sealed",
    "open",
    "idle",
    "busy",
    "slow",
    "fast",
    "noisy",
    "quiet",
    "flaky",
    "stable",
    "large",
    "tiny",
    "nested",
    "flat",
    "sparse",
    "dense",
    "ordered",
    "shuffled",
    "pending",
    "committed",
    "orphaned",
    "duplicated",
    "corrupted",
    "encrypted",
    "compressed",
    "bounded",
    "unbounded",
    "hourly",
    "nightly",
    "regional",
    "primary",
    "secondary",
    "legacy",
    "experimental",
    "deprecated",
    "optional",
    "mandatory",
    "transient",
    "persistent",
    "concurrent",
    "sequential",
    "idempotent",
    "lossy",
    "exact",
)
_ADVERBS = (
    "quickly",
    "silently",
    "eventually",
    "rarely",
    "always",
    "occasionally",
    "twice",
    "immediately",
    "lazily",
    "eagerly",
    "safely",
    "incorrectly",
    "intermittently",
    "briefly",
    "repeatedly",
    "only once",
    "in order",
    "out of order",
    "under load",
    "after a restart",
)
_CONNECTORS = (
    "because",
    "although",
    "so",
    "but",
    "while",
    "unless",
    "whenever",
    "after",
    "before",
    "since",
    "even though",
    "and then",
    "which means",
    "so that",
)
_OPENERS = (
    "I think",
    "It looks like",
    "In practice",
    "As far as I can tell",
    "Apparently",
    "According to the logs",
    "From the trace",
    "To be fair",
    "On the other hand",
    "Interestingly",
    "For now",
    "In the staging environment",
    "During the incident",
    "After the last deploy",
    "When traffic peaks",
)
_QUESTION_STARTS = (
    "Why does the",
    "How can I make the",
    "Can you check whether the",
    "What happens when the",
    "Is it safe to let the",
    "Could you explain why the",
    "Where is the",
    "Which",
    "When should the",
    "Please find out if the",
    "Help me understand how the",
    "Should we worry that the",
)
_NAMES = (
    "alice",
    "bob",
    "carol",
    "dmitri",
    "eun-ji",
    "farah",
    "gustavo",
    "hiro",
    "ines",
    "jonas",
    "kwame",
    "lucia",
    "mateo",
    "nadia",
    "oskar",
    "priya",
    "quentin",
    "rosa",
    "sven",
    "tariq",
)
_DIRS = ("src", "lib", "app", "services", "internal", "pkg", "core", "tools", "scripts", "tests")
_EXTS = (".py", ".ts", ".go", ".rs", ".sql", ".yaml", ".toml", ".md", ".json", ".sh")
_LEVELS = ("DEBUG", "INFO", "INFO", "INFO", "WARN", "ERROR")
_HTTP = ("GET", "POST", "PUT", "DELETE", "PATCH")
_STATUS = (200, 200, 200, 201, 204, 301, 400, 401, 403, 404, 409, 429, 500, 502, 503)
_ID_CHARS = string.ascii_letters + string.digits
_KEYWORDS = ("def", "return", "if", "for", "while", "with", "yield", "raise", "await", "class")

#: The tools the synthetic agent calls (``function.name`` of every tool call).
TOOL_NAMES = (
    "read_file",
    "run_shell",
    "search_code",
    "query_database",
    "http_get",
    "list_directory",
    "web_search",
)


# ---------------------------------------------------------------- text building blocks


def _word(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.45:
        return rng.choice(_NOUNS)
    if roll < 0.65:
        return rng.choice(_ADJECTIVES)
    if roll < 0.85:
        return rng.choice(_VERBS)
    if roll < 0.95:
        return rng.choice(_ADVERBS)
    return _identifier(rng)


def _identifier(rng: random.Random) -> str:
    style = rng.randrange(4)
    parts = [rng.choice(_NOUNS).replace(" ", "_") for _ in range(rng.randint(1, 3))]
    if style == 0:
        return "_".join(parts)
    if style == 1:
        return parts[0] + "".join(p.title() for p in parts[1:])
    if style == 2:
        return "".join(p.title() for p in parts)
    return "-".join(parts) + f"-{rng.randrange(1000)}"


def _path(rng: random.Random) -> str:
    depth = rng.randint(1, 3)
    parts = [rng.choice(_DIRS)] + [_identifier(rng).lower().replace("-", "_") for _ in range(depth)]
    return "/".join(parts) + rng.choice(_EXTS)


def _sentence(rng: random.Random) -> str:
    subject = f"the {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"
    clause = f"{subject} {rng.choice(_VERBS)} {rng.choice(('the', 'every', 'each', 'a'))} "
    clause += f"{rng.choice(_NOUNS)} {rng.choice(_ADVERBS)}"
    if rng.random() < 0.5:
        clause += f" {rng.choice(_CONNECTORS)} the {rng.choice(_NOUNS)} "
        clause += f"{rng.choice(_VERBS)} {' '.join(_word(rng) for _ in range(rng.randint(1, 4)))}"
    if rng.random() < 0.3:
        clause = f"{rng.choice(_OPENERS)}, {clause}"
    if rng.random() < 0.15:
        clause += f" (see `{_path(rng)}`, line {rng.randint(1, 900)})"
    if rng.random() < 0.1:
        clause += f" at about {rng.randint(2, 980)} ms p{rng.choice((50, 90, 95, 99))}"
    return clause[0].upper() + clause[1:] + rng.choice((".", ".", ".", "!"))


def _paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(_sentence(rng) for _ in range(sentences))


def _prose(rng: random.Random, target_words: int) -> str:
    """Paragraphs of roughly ``target_words`` words (about 1.3 tokens per word)."""
    paragraphs: list[str] = []
    words = 0
    while words < target_words:
        para = _paragraph(rng, rng.randint(2, 6))
        paragraphs.append(para)
        words += para.count(" ") + 1
    return "\n\n".join(paragraphs)


def _log_size(rng: random.Random, low: int, high: int) -> int:
    """An int in [low, high] drawn log-uniformly: mostly small, sometimes large."""
    return int(low * (high / low) ** rng.random() + 0.5)


def _hexid(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _call_id(rng: random.Random, seen: set[str]) -> str:
    while True:
        call_id = "call_" + "".join(rng.choice(_ID_CHARS) for _ in range(24))
        if call_id not in seen:
            seen.add(call_id)
            return call_id


def _timestamp(rng: random.Random, base: int) -> str:
    seconds = base + rng.randrange(86_400)
    day, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return (
        f"2025-{(day // 28) % 12 + 1:02d}-{day % 28 + 1:02d}T{hours:02d}:{minutes:02d}:"
        f"{secs:02d}.{rng.randrange(1000):03d}Z"
    )


# ---------------------------------------------------------------- tool calls and outputs


def _code(rng: random.Random, lines: int) -> str:
    out: list[str] = []
    indent = 0
    for i in range(lines):
        roll = rng.random()
        pad = "    " * indent
        if roll < 0.12 or indent == 0:
            name = _identifier(rng).replace("-", "_")
            args = ", ".join(rng.choice(_NOUNS) for _ in range(rng.randint(0, 3)))
            out.append(f"{pad}def {name.lower()}({args}):")
            indent = min(indent + 1, 3)
        elif roll < 0.22:
            out.append(f"{pad}# {_sentence(rng)}")
        elif roll < 0.35:
            limit = rng.randint(0, 512)
            out.append(f"{pad}if {rng.choice(_NOUNS)}.{rng.choice(_NOUNS)} > {limit}:")
            indent = min(indent + 1, 3)
        elif roll < 0.45 and indent > 0:
            out.append(f"{pad}return {_identifier(rng).replace('-', '_')}")
            indent -= 1
        else:
            target = rng.choice(_NOUNS)
            call = _identifier(rng).replace("-", "_")
            arg = rng.choice(
                (
                    str(rng.randint(0, 10_000)),
                    repr(rng.choice(_ADJECTIVES)),
                    rng.choice(_NOUNS),
                    f"{rng.random():.4f}",
                )
            )
            out.append(f"{pad}{target} = {call}({arg}, {rng.choice(_KEYWORDS)}_{i})")
    return "\n".join(out)


def _log(rng: random.Random, lines: int) -> str:
    base = rng.randrange(300 * 86_400)
    rows = []
    for _ in range(lines):
        level = rng.choice(_LEVELS)
        rows.append(
            f"{_timestamp(rng, base)} {level:<5} [{rng.choice(_NOUNS)}-{rng.randrange(64)}] "
            f"{_sentence(rng)} req={_hexid(rng, 12)} took={rng.randint(1, 4000)}ms"
        )
    return "\n".join(rows)


def _table(rng: random.Random, rows: int) -> str:
    columns = rng.sample(_NOUNS, rng.randint(3, 6))
    records = []
    for i in range(rows):
        record: dict[str, Any] = {"id": i + rng.randrange(100_000)}
        for col in columns:
            kind = rng.randrange(4)
            if kind == 0:
                record[col] = rng.randint(-1000, 1_000_000)
            elif kind == 1:
                record[col] = round(rng.uniform(0, 1000), 3)
            elif kind == 2:
                record[col] = rng.choice(_ADJECTIVES)
            else:
                record[col] = _identifier(rng)
        records.append(record)
    return json.dumps({"columns": ["id", *columns], "rows": records, "row_count": rows})


def _listing(rng: random.Random, entries: int) -> str:
    rows = []
    for _ in range(entries):
        kind = rng.choice(("-rw-r--r--", "-rw-r--r--", "drwxr-xr-x", "-rwxr-xr-x"))
        name = _identifier(rng).lower().replace("-", "_")
        if not kind.startswith("d"):
            name += rng.choice(_EXTS)
        rows.append(f"{kind} {rng.choice(_NAMES):<8} {_log_size(rng, 10, 9_000_000):>9} {name}")
    return "\n".join(rows)


def _search_hits(rng: random.Random, hits: int) -> str:
    lines = []
    for _ in range(hits):
        lines.append(f"{_path(rng)}:{rng.randint(1, 1500)}:    {_code(rng, 1).strip()}")
    return "\n".join(lines)


def _web_results(rng: random.Random, hits: int) -> str:
    results = []
    for i in range(hits):
        results.append(
            {
                "rank": i + 1,
                "title": " ".join(_word(rng) for _ in range(rng.randint(3, 9))).title(),
                "url": f"https://{rng.choice(_NOUNS)}.example.org/{_identifier(rng).lower()}",
                "snippet": _paragraph(rng, rng.randint(1, 3)),
            }
        )
    return json.dumps({"results": results})


def _tool_read_file(rng: random.Random) -> tuple[dict[str, Any], str]:
    path = _path(rng)
    lines = _log_size(rng, 8, 300)
    start = rng.randint(1, 400)
    return {"path": path, "start_line": start, "max_lines": lines}, _code(rng, lines)


def _tool_run_shell(rng: random.Random) -> tuple[dict[str, Any], str]:
    command = rng.choice(
        (
            f"pytest -q {_path(rng)}",
            f"grep -rn {_identifier(rng)} {rng.choice(_DIRS)}",
            f"journalctl -u {rng.choice(_NOUNS)} --since -{rng.randint(1, 48)}h",
            f"kubectl logs deploy/{_identifier(rng).lower()} --tail={rng.randint(20, 500)}",
            f"make {rng.choice(('build', 'test', 'lint', 'bench'))}",
        )
    )
    lines = _log_size(rng, 3, 160)
    exit_code = rng.choice((0, 0, 0, 1, 2))
    body = _log(rng, lines)
    return {"command": command, "timeout_s": rng.choice((30, 60, 120, 600))}, (
        f"$ {command}\n{body}\n[exit code {exit_code}]"
    )


def _tool_search_code(rng: random.Random) -> tuple[dict[str, Any], str]:
    pattern = _identifier(rng)
    return {"pattern": pattern, "path": rng.choice(_DIRS)}, _search_hits(rng, _log_size(rng, 1, 80))


def _tool_query_database(rng: random.Random) -> tuple[dict[str, Any], str]:
    table = rng.choice(_NOUNS) + "s"
    sql = (
        f"SELECT * FROM {table} WHERE {rng.choice(_NOUNS)} > {rng.randint(0, 999)} "
        f"ORDER BY {rng.choice(_NOUNS)} LIMIT {rng.randint(5, 200)}"
    )
    return {"sql": sql}, _table(rng, _log_size(rng, 1, 90))


def _tool_http_get(rng: random.Random) -> tuple[dict[str, Any], str]:
    url = f"https://{rng.choice(_NOUNS)}.internal/{_identifier(rng).lower()}/{rng.randrange(999)}"
    status = rng.choice(_STATUS)
    headers = "\n".join(
        f"{h}: {v}"
        for h, v in (
            ("content-type", "application/json"),
            ("x-request-id", _hexid(rng, 16)),
            ("x-ratelimit-remaining", str(rng.randint(0, 5000))),
        )
    )
    body = (
        _table(rng, _log_size(rng, 1, 40))
        if status < 300
        else json.dumps({"error": _sentence(rng), "code": status})
    )
    return {"url": url, "method": rng.choice(_HTTP)}, f"HTTP {status}\n{headers}\n\n{body}"


def _tool_list_directory(rng: random.Random) -> tuple[dict[str, Any], str]:
    return {"path": rng.choice(_DIRS) + "/" + _identifier(rng).lower()}, _listing(
        rng, _log_size(rng, 2, 120)
    )


def _tool_web_search(rng: random.Random) -> tuple[dict[str, Any], str]:
    query = " ".join(_word(rng) for _ in range(rng.randint(2, 7)))
    return {"query": query, "top_k": rng.choice((3, 5, 10))}, _web_results(rng, rng.randint(1, 10))


_TOOLS: dict[str, Callable[[random.Random], tuple[dict[str, Any], str]]] = {
    "read_file": _tool_read_file,
    "run_shell": _tool_run_shell,
    "search_code": _tool_search_code,
    "query_database": _tool_query_database,
    "http_get": _tool_http_get,
    "list_directory": _tool_list_directory,
    "web_search": _tool_web_search,
}
assert tuple(_TOOLS) == TOOL_NAMES


# ---------------------------------------------------------------- messages


def _user_message(rng: random.Random) -> Message:
    roll = rng.random()
    if roll < 0.5:
        text = (
            f"{rng.choice(_QUESTION_STARTS)} {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)} "
            f"{rng.choice(_VERBS)} the {rng.choice(_NOUNS)} {rng.choice(_ADVERBS)}?"
        )
    elif roll < 0.85:
        text = (
            f"{rng.choice(_QUESTION_STARTS)} {rng.choice(_NOUNS)} in `{_path(rng)}` "
            f"{rng.choice(_VERBS)} {rng.choice(_NOUNS)}s? {_paragraph(rng, rng.randint(1, 4))}"
        )
    else:
        snippet = _log(rng, _log_size(rng, 2, 30))
        text = f"{_sentence(rng)} Here is what I see:\n```\n{snippet}\n```\nWhat is going on?"
    return {"role": "user", "content": text}


def _assistant_reply(rng: random.Random) -> Message:
    words = _log_size(rng, 8, 700)
    text = _prose(rng, words)
    if rng.random() < 0.3:
        text += "\n\n```python\n" + _code(rng, _log_size(rng, 3, 40)) + "\n```"
    if rng.random() < 0.3:
        steps = "\n".join(f"{i + 1}. {_sentence(rng)}" for i in range(rng.randint(2, 6)))
        text += "\n\nNext steps:\n" + steps
    return {"role": "assistant", "content": text}


def _tool_round(rng: random.Random, seen: set[str]) -> list[Message]:
    count = rng.choices((1, 2, 3), weights=(70, 22, 8))[0]
    calls: list[dict[str, Any]] = []
    results: list[Message] = []
    for _ in range(count):
        name = rng.choice(TOOL_NAMES)
        arguments, output = _TOOLS[name](rng)
        call_id = _call_id(rng, seen)
        calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        )
        results.append({"role": "tool", "tool_call_id": call_id, "content": output})
    preface = _sentence(rng) if rng.random() < 0.35 else None
    call_message: Message = {"role": "assistant", "content": preface, "tool_calls": calls}
    return [call_message, *results]


def _episode(rng: random.Random, seen: set[str]) -> list[Message]:
    """One user request and the agent's work on it: zero to four tool rounds, then a reply."""
    out = [_user_message(rng)]
    rounds = rng.choices((0, 1, 2, 3, 4), weights=(30, 30, 20, 12, 8))[0]
    for _ in range(rounds):
        out.extend(_tool_round(rng, seen))
    out.append(_assistant_reply(rng))
    return out


def conversation(seed: int, turns: int) -> Iterator[Message]:
    """Yield exactly ``turns`` messages of a synthetic agent conversation.

    Guarantees:

    - Deterministic: the same ``(seed, turns)`` yields equal messages every time, and a
      shorter run is a prefix of a longer one with the same seed.
    - Every message is a fresh JSON-serialisable dict (str keys; str, int, float, None,
      list and dict values) with ``role`` one of ``"system"`` (only the first message),
      ``"user"``, ``"assistant"`` or ``"tool"``.
    - Assistant messages with ``tool_calls`` hold OpenAI-style calls
      (``{"id", "type": "function", "function": {"name", "arguments"}}`` with
      ``arguments`` a JSON string) and are immediately followed by one ``role: "tool"``
      message per call, in call order, whose ``tool_call_id`` is that call's id. The only
      exception is a conversation cut off by ``turns`` in the middle of that group.
    - Tool call ids are unique within a conversation.

    ``turns`` must be >= 0; ``seed`` is any int.
    """
    if turns < 0:
        raise ValueError("turns must be >= 0")
    rng = random.Random(seed)
    seen: set[str] = set()
    produced = 0
    if turns == 0:
        return
    yield {
        "role": "system",
        "content": (
            f"You are {rng.choice(_NAMES).title()}, an engineering agent with tools "
            f"({', '.join(TOOL_NAMES)}). {_paragraph(rng, 3)}"
        ),
    }
    produced += 1
    while produced < turns:
        for message in _episode(rng, seen):
            if produced >= turns:
                return
            yield message
            produced += 1


def messages(seed: int, turns: int) -> list[Message]:
    """``list(conversation(seed, turns))``: the same guarantees, as a list."""
    return list(conversation(seed, turns))
