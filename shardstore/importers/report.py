"""What an import or an export did (the dataclasses the store methods return) and the
progress bar they draw."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ..core.rows import json_fields
from ..errors import ImportRejected


@dataclass(frozen=True, slots=True)
class Skipped:
    """A source row, thread or session that was not imported, and why (``source`` names
    it as the error would: ``"row session_id='a1'"``, ``"thread 't-1'"``, ``"line 12"``)."""

    source: str
    reason: str


@dataclass(frozen=True, slots=True)
class ImportReport:
    """The outcome of one import run.

    ``sessions``: sessions created or extended; ``turns`` and ``bytes``: turns appended and
    their stored JSON size; ``unchanged``: sessions already complete (a re-run finds every
    source element already imported); ``skipped``: what was left out, with the reason;
    ``seconds``: the run's wall time. The other records a JSONL import writes, each
    counted when written (a re-run that finds them there counts none): ``checkpoints``,
    ``runs``, ``summaries``, ``facts`` (versions), ``artifacts`` (stored from the file's
    bytes), ``artifact_refs``, ``artifact_links`` (a session's links no reference backs)
    and ``forks`` (sessions made forks of their parent, as in the source)."""

    sessions: int
    turns: int
    bytes: int
    unchanged: int
    skipped: tuple[Skipped, ...]
    seconds: float
    checkpoints: int = 0
    runs: int = 0
    summaries: int = 0
    facts: int = 0
    artifacts: int = 0
    artifact_refs: int = 0
    artifact_links: int = 0
    forks: int = 0

    def to_json(self) -> dict[str, Any]:
        """The report as the CLI prints it with ``--json``."""
        return json_fields(self, skipped=[json_fields(s) for s in self.skipped])


@dataclass(frozen=True, slots=True)
class ExportReport:
    """The outcome of an export: sessions and turns written, bytes of JSONL text, and
    every other record kind written: ``checkpoints``, ``runs``, ``summaries``, ``facts``
    (versions), ``artifacts`` (``artifact_bytes`` of their content, 0 without bytes),
    ``artifact_refs``, ``artifact_links``, ``forks`` (sessions exported with a fork
    lineage); ``export_id``: the id on the file's export line."""

    sessions: int
    turns: int
    bytes: int
    seconds: float
    checkpoints: int = 0
    runs: int = 0
    summaries: int = 0
    facts: int = 0
    artifacts: int = 0
    artifact_refs: int = 0
    artifact_links: int = 0
    forks: int = 0
    artifact_bytes: int = 0
    export_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as the CLI prints it with ``--json``."""
        return json_fields(self)


@dataclass(slots=True)
class Counts:
    """The records other than sessions and turns that an export or import wrote."""

    checkpoints: int = 0
    runs: int = 0
    summaries: int = 0
    facts: int = 0
    artifacts: int = 0
    artifact_refs: int = 0
    artifact_links: int = 0
    forks: int = 0

    def add(self, kind: str, n: int = 1) -> None:
        """Count ``n`` records of a line kind (``checkpoint``, ``artifact_ref``...)."""
        name = "summaries" if kind == "summary" else kind + "s"
        setattr(self, name, getattr(self, name) + n)


@dataclass(slots=True)
class Tally:
    """Counts an import accumulates while it runs (one per run, never shared)."""

    sessions: int = 0
    turns: int = 0
    bytes: int = 0
    unchanged: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    counts: Counts = field(default_factory=Counts)

    def add_session(self, turns: int, stored_bytes: int, existed: bool) -> None:
        """Count one imported session: ``turns`` appended, ``stored_bytes`` of them; a
        session that existed and got no turn counts as unchanged."""
        self.turns += turns
        self.bytes += stored_bytes
        if turns or not existed:
            self.sessions += 1
        else:
            self.unchanged += 1

    def stopped(self, exc: ImportRejected) -> ImportRejected:
        """``exc`` as the run's error when it stops the run: its message says what was
        imported and committed before it (kept; a re-run resumes after it), and
        ``report`` holds that partial report."""
        done = self.report()
        kept = (
            f"{done.sessions} session{'s' if done.sessions != 1 else ''} "
            f"({done.turns} turn{'s' if done.turns != 1 else ''}) imported before it stay"
            " committed; a re-run skips what is complete and resumes the rest"
            if done.sessions
            else "nothing was imported before it"
        )
        error = ImportRejected(f"{exc}; {kept}")
        error.report = done
        return error

    def report(self) -> ImportReport:
        """The frozen report of what was counted so far."""
        return ImportReport(
            self.sessions,
            self.turns,
            self.bytes,
            self.unchanged,
            tuple(self.skipped),
            time.perf_counter() - self.started,
            **asdict(self.counts),
        )


class Progress:
    """A tqdm bar of turns on stderr when ``show``; a no-op otherwise. The total grows as
    sources announce their sizes."""

    def __init__(self, show: bool, what: str) -> None:
        self.bar: Any = None
        if show:
            from tqdm import tqdm

            self.bar = tqdm(
                total=None, unit="turn", desc=what, file=sys.stderr, dynamic_ncols=True, leave=False
            )

    def expect(self, turns: int) -> None:
        """``turns`` more are coming."""
        if self.bar is not None and turns > 0:
            self.bar.total = (self.bar.total or 0) + turns
            self.bar.refresh()

    def done(self, turns: int) -> None:
        """``turns`` more were written."""
        if self.bar is not None and turns:
            self.bar.update(turns)

    def close(self) -> None:
        """Remove the bar (idempotent)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
