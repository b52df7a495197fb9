"""What an import or an export did (the dataclasses the store methods return) and the
progress bar they draw."""

from __future__ import annotations

import sys
import time
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from ..core.rows import json_fields
from ..errors import ImportRejected


@dataclass(frozen=True, slots=True)
class Skipped:
    """A source row, thread or session that was not imported, and why (``source`` names
    it as the error would: ``"row session_id='a1'"``, ``"thread 't-1'"``, ``"line 12"``)."""

    source: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordCounts:
    """The records other than sessions and turns that an export or an import wrote, by
    kind: ``checkpoints``, ``runs``, ``summaries``, ``facts`` (versions), ``artifacts``,
    ``artifact_refs``, ``artifact_links`` (a session's links that no reference of it
    backs) and ``forks`` (sessions with a fork lineage)."""

    checkpoints: int = 0
    runs: int = 0
    summaries: int = 0
    facts: int = 0
    artifacts: int = 0
    artifact_refs: int = 0
    artifact_links: int = 0
    forks: int = 0

    def _fields_json(self, **override: Any) -> dict[str, Any]:
        """json_fields in reading order: the report's own required fields, the counts,
        then its other fields."""
        doc = json_fields(self, **override)
        own = [f.name for f in fields(self) if f.name not in RECORD_KINDS]
        required = [f.name for f in fields(self) if f.name in own and f.default is MISSING]
        order = required + list(RECORD_KINDS) + [n for n in own if n not in required]
        return {name: doc[name] for name in order}


RECORD_KINDS = tuple(f.name for f in fields(RecordCounts))


@dataclass(frozen=True, slots=True)
class ImportReport(RecordCounts):
    """The outcome of one import run.

    ``sessions``: sessions created or extended; ``turns`` and ``bytes``: turns appended and
    their stored JSON size (a fork's inherited turns are read through its parent, not
    appended); ``unchanged``: sessions already complete (a re-run finds every source
    element already imported); ``skipped``: what was left out, with the reason;
    ``seconds``: the run's wall time. The other records a JSONL import writes
    (:class:`RecordCounts`) are each counted when written (a re-run that finds them there
    counts none); ``artifacts`` are those stored from the file's bytes, ``forks`` the
    sessions made forks of their parent again."""

    sessions: int
    turns: int
    bytes: int
    unchanged: int
    skipped: tuple[Skipped, ...]
    seconds: float

    def to_json(self) -> dict[str, Any]:
        """The report as the CLI prints it with ``--json``."""
        return self._fields_json(skipped=[json_fields(s) for s in self.skipped])


@dataclass(frozen=True, slots=True)
class ExportReport(RecordCounts):
    """The outcome of an export: sessions and turns written, bytes of JSONL text, every
    other record kind written (:class:`RecordCounts`; ``artifact_bytes``: the content of
    the artifacts, 0 without bytes), and ``export_id``, the id on the file's export
    line."""

    sessions: int
    turns: int
    bytes: int
    seconds: float
    artifact_bytes: int = 0
    export_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as the CLI prints it with ``--json``."""
        return self._fields_json()


_LABELS = {"summaries": "summaries", "artifact_refs": "artifact references"}


def records_text(report: RecordCounts, *, every: bool = False) -> str:
    """The record counts of a report as a phrase ("3 checkpoints, 1 run, ..."): those
    that are not 0, or ``every`` one; "" when none is listed."""
    parts = []
    for name in RECORD_KINDS:
        n = getattr(report, name)
        if n or every:
            label = _LABELS.get(name, name).replace("_", " ")
            if n == 1:
                label = {"summaries": "summary"}.get(label, label.removesuffix("s"))
            parts.append(f"{n:,} {label}")
    return ", ".join(parts)


class Counts:
    """:class:`RecordCounts` as an import or export accumulates them."""

    __slots__ = ("by_name",)

    def __init__(self) -> None:
        self.by_name: dict[str, Any] = dict.fromkeys(RECORD_KINDS, 0)

    @staticmethod
    def name(kind: str) -> str:
        """The count's name of a line kind (``summary``: ``summaries``)."""
        return "summaries" if kind == "summary" else kind + "s"

    def add(self, kind: str, n: int = 1) -> None:
        """Count ``n`` records of a line kind (``checkpoint``, ``artifact_ref``...)."""
        self.by_name[self.name(kind)] += n

    def of(self, kind: str) -> int:
        """The count of a line kind."""
        return int(self.by_name[self.name(kind)])


#: What ``on_error`` may be: stop the run at the first source element that cannot be
#: imported, or list it in the report's ``skipped`` and go on.
ON_ERROR = ("raise", "skip")


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

    def skip(self, where: str, exc: Exception) -> None:
        """Note that what ``where`` names was left out for ``exc`` (its reason: the message
        without the ``where: `` it starts with)."""
        self.skipped.append(Skipped(where, str(exc).removeprefix(where + ": ")))

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
            **self.counts.by_name,
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
