"""Where results go, and the one writer of them.

A suite prints its markdown to stdout (progress to stderr) and, with ``--out``, writes it
with :func:`write_results`: ``NAME.md`` and, when it has raw numbers, ``NAME.json`` beside
it. ``python -m benchmarks SUITE`` passes ``--out`` for the suite: a full run writes
``benchmarks/results/latest/SUITE.md``, a ``--quick`` run ``benchmarks/results/scratch/``
(ignored by git), so a quick check never replaces the numbers the docs quote."""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

RESULTS = Path(__file__).resolve().parent.parent / "results"
LATEST = RESULTS / "latest"
ARCHIVE = RESULTS / "archive"
SCRATCH = RESULTS / "scratch"


def progress(text: str) -> None:
    """One line of progress on stderr, with the time."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def default_out(suite: str, quick: bool) -> Path:
    """The results path (without suffix) of a suite's run: latest/ or, quick, scratch/."""
    return (SCRATCH if quick else LATEST) / suite


def quick(args: argparse.Namespace, parser: argparse.ArgumentParser, **values: Any) -> None:
    """``--quick``'s sizes: each of ``values`` replaces the option's default, never a value
    given on the command line (one equal to the default counts as not given)."""
    if not getattr(args, "quick", False):
        return
    for name, value in values.items():
        if getattr(args, name) == parser.get_default(name):
            setattr(args, name, value)


def command(suite: str, argv: Sequence[str] | None) -> str:
    """The command line of a run, for a results file's header: an ``--out`` the runner
    added (the default results path, which holds this machine's checkout path) left out."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--out" in args:
        i = args.index("--out")
        added = str(default_out(suite, "--quick" in args))
        if args[i + 1 : i + 2] == [added]:
            del args[i : i + 2]
    return " ".join(["python -m benchmarks", suite, *args])


def write_results(
    path: str | Path, markdown: str | None = None, data: Any = None, *, indent: int = 1
) -> Path:
    """Write ``markdown`` to ``path`` with the suffix ``.md`` and ``data`` (when given) as
    JSON to the suffix ``.json``; makes the folder. ``path`` may carry either suffix or
    none. Returns the markdown's path."""
    p = Path(path)
    if p.suffix in (".md", ".json", ".txt"):
        p = p.with_suffix("")
    p.parent.mkdir(parents=True, exist_ok=True)
    md = p.with_name(p.name + ".md")
    if markdown is not None:
        md.write_text(markdown if markdown.endswith("\n") else markdown + "\n", encoding="utf-8")
    if data is not None:
        p.with_name(p.name + ".json").write_text(
            json.dumps(data, indent=indent, default=_jsonable) + "\n", encoding="utf-8"
        )
    return md


def _jsonable(x: Any) -> Any:
    """numpy scalars as numbers, anything else JSON cannot take as its text."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


@dataclass
class Report:
    """Markdown lines, printed as they come and kept for :func:`write_results`."""

    lines: list[str] = field(default_factory=list)
    echo: bool = True

    def add(self, *lines: str) -> None:
        for line in lines:
            self.lines.append(line)
            if self.echo:
                print(line, flush=True)

    def table(self, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        self.add("| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|")
        for row in rows:
            self.add("| " + " | ".join(str(c) for c in row) + " |")
        self.add("")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class _Tee(io.TextIOBase):
    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.buffer_ = io.StringIO()

    def write(self, s: str) -> int:
        self.buffer_.write(s)
        return self.stream.write(s)

    def flush(self) -> None:
        self.stream.flush()


@contextmanager
def tee_stdout() -> Iterator[io.StringIO]:
    """Everything printed inside, still printed, and kept in the yielded buffer (the
    markdown of a suite that prints its results)."""
    tee = _Tee(sys.stdout)
    saved, sys.stdout = sys.stdout, tee  # type: ignore[assignment]
    try:
        yield tee.buffer_
    finally:
        sys.stdout = saved
