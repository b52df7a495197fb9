"""Export sessions to JSONL and import them back (``store.export_sessions``,
``store.import_jsonl``; ``shardstore export``, ``shardstore import jsonl``).

The format (``shardstore.jsonl`` version 4; every record in docs/portability.md): one JSON
object per line, pure ASCII (non-ASCII characters and lone surrogates as ``\\u``
escapes): an ``export`` line (the export's id, time, scope, whether artifact bytes are in
it), then per session the ``artifact`` lines (and base64 ``artifact_part`` lines) of the
artifacts it references that the file does not hold yet (``artifact_lines.py``), and

    {"kind": "session", "format": "shardstore.jsonl", "version": 4, "session_id": "…",
     "tenant_id": "…", "subject_id": "…"|null, "agent_id": "…"|null, "metadata": {…},
     "created_at": "2026-05-01T10:00:00.123456+00:00", "first_turn_seq": 0,
     "fork": {"parent": "…", "at": 19}|null, "copies": [{"origin": "…", "first": 20, "last": 24}]}
    {"kind": "turn", "turn_seq": 0, "created_at": "…", "idempotency_key": "…"|null,
     "tokens": 12, "message": {…}}                       one line per turn, in order
    {"kind": "checkpoint", "checkpoint_id": "…", "tenant_id": "…", "turn_seq": 0,
     "sub_step": 1|null, "parent_id": "…"|null, "idempotency_key": "…"|null,
     "created_at": "…", "state": {…}, "tool_calls": …|null, "tool_results": …|null,
     "metadata": {…}}                                    in seq order
    {"kind": "run", "run_id": "…", "tenant_id": "…", "framework": "…", "thread_key": "…",
     "status": "awaiting_human", "awaiting": {…}|null, "awaiting_since": "…"|null,
     "steps": 3, "usd_cost": 0.125, "error": "…"|null, "metadata": {…},
     "created_at": "…", "updated_at": "…", "closed_at": "…"|null}
    {"kind": "summary", "tenant_id": "…", "chunk_seq": 0, "chunk_start": "…",
     "first_turn_seq": 0, "last_turn_seq": 11, "summary": "…", "tokens": 6, "model": "…",
     "created_at": "…", "message_tokens": 26|null, "counted_by": "…"|null}
    {"kind": "artifact_ref", ...}                        the session's artifact references
    {"kind": "artifact_link", "tenant_id": "…", "artifact_id": "…"}   links no reference backs
    {"kind": "end", "session_id": "…", "turns": 1}

and, after the sessions of an export by tenant and/or subject, each version of their facts:

    {"kind": "fact", "tenant_id": "…", "fact_id": "…", "subject": "…", "key": "…",
     "value": …, "confidence": 0.9|null, "source_session_id": "…"|null,
     "source_turn_seq": 3|null, "valid_from": "…", "valid_to": "…"|null, "recorded_at": "…"}

Version 3 is the same without the session line's ``copies``, the ``artifact_link`` lines
and the references of no session (which follow the facts of a tenant export); version 2
also without the export, artifact, artifact_part and artifact_ref lines; version 1 also
without the session line's ``first_turn_seq`` and ``fork`` and without checkpoint, run,
summary and fact lines; all still import. A fork is imported as a fork when its parent
is here (:mod:`.lineage`), else as a plain session holding its inherited turns; a checkpoint's
``seq`` is renumbered by the importing database (the order is kept); a summary goes on the
imported chunk holding exactly its turns, and is listed in the report's ``skipped`` when none
does (a chunk cut by a range purge, other chunk settings). Every row of a session is written in
the session's tenant: a line naming another tenant or session is refused.

A header line and a line per turn (rather than a line per session) let both sides stream:
the exporter writes a chunk of turns at a time and the importer appends ``batch_size``
turns at a time, so a session of any length never has to fit in memory. The end line
marks a session as complete: a file cut short (a crashed export, a partial copy) ends
inside a session, and the importer refuses that session. ``tokens`` is kept when it is
within 10% + 4 of the importing store's own count of the message (the same tokenizer
counts a few tokens apart once JSONB has reordered a message's keys), else the importing
store's count is used: chunk budgets depend on it, whatever a file claims.

An export of each session is read in one snapshot. An import into a database that lacks
the session recreates it exactly: session id, owners, metadata, ``created_at``, and each
turn's ``turn_seq``, ``created_at`` and idempotency key (``import_turns_v3``: the chunker's
rules applied to those times; docs/importers.md, "How it works"). Each session is one
transaction: a bad line raises ``ImportRejected`` naming it, with nothing of that session
written (sessions before it stay; a re-run with ``on_existing="skip"`` goes on after them).
"""

from __future__ import annotations

import functools
import io
import json
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..core import jsoncodec, validate
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Call, Op, Q, StatementFailed, Try, Tx, relay
from ..encryption import turns as enc_turns
from ..encryption.envelope import Sealer
from ..errors import (
    ConfigurationError,
    DecryptionFailed,
    EncryptionRequired,
    ImportRejected,
    InvalidInput,
    SessionExists,
    SessionPurged,
)
from ..history import ops as history_ops
from ..models import SessionInfo, Turn
from . import sealing
from .access import AccessReport, access_tables_op
from .artifact_lines import (
    Carried,
    Owner,
    Pending,
    Written,
    discard,
    export_artifacts_op,
    export_links_op,
    export_loose_refs_op,
    export_refs_op,
    import_link_op,
    import_ref_op,
    read_artifact_op,
    store_artifacts_op,
)
from .fields import (
    _field,
    _instant,
    _int,
    _jsonb,
    _key,
    _number,
    _opt_instant,
    _opt_int,
    _opt_text,
    _owned,
    _text,
    _uuid,
)
from .lineage import (
    Copy,
    ancestors_op,
    breaks,
    copies_of,
    copies_op,
    fork_op,
    inherited,
    record_copies_op,
    seal_op,
)
from .records import line, paged_op, record_lines
from .remap import IdMap, import_id_of, needs_import_id
from .report import ON_ERROR, Counts, ExportReport, ImportReport, Progress, Skipped, Tally
from .textfiles import open_text, path_or_stream
from .writer import Batch, Partitions, append_exact_op, partition_check, premake_op

FORMAT = "shardstore.jsonl"
VERSION = 4
VERSIONS = (1, 2, 3, 4)  # the versions this shardstore reads
DEFAULT_BATCH = 500
PAGE = 200  # sessions listed per round trip when exporting by tenant or subject
ON_EXISTING = ("refuse", "skip")
# the lines after a session's turns
STATE_KINDS = ("checkpoint", "run", "summary", "artifact_ref", "artifact_link")
TOP_KINDS = ("session", "artifact", "fact")  # the lines that start a record of their own
RUN_STATUSES = ("running", "awaiting_human", "done", "failed")
# a row the server refuses all the same (a unique or check constraint, a value out of range):
# recovered as ImportRejected naming the line, the session's transaction rolled back
_REFUSALS = frozenset({"23505", "23514", "22003", "22P02", "22007", "22008", "54000"})
_LINE_SLACK = 1 << 20  # a turn line may exceed its message by this many characters


# ---------------------------------------------------------------- export


class _Sink:
    """Where export lines go: a text stream given by the caller, or a file it names
    (opened here, closed at the end)."""

    def __init__(self, out: Any) -> None:
        self.path, self.stream = path_or_stream(
            out, "write", "out must be a path or a text stream (an object with write())"
        )
        self.owned = False
        self.bytes = 0

    def open(self) -> None:
        """Open the named file (for writing, UTF-8)."""
        if self.path is not None:
            self.stream = open_text(self.path, "w")
            self.owned = True

    def write(self, lines: Sequence[str]) -> None:
        """Write whole lines (each ends with a newline)."""
        assert self.stream is not None
        text = "".join(lines)
        self.stream.write(text)
        self.bytes += len(text)  # pure ASCII: characters are bytes

    def close(self) -> None:
        """Flush, and close what this sink opened."""
        if self.stream is not None:
            if self.owned:
                self.stream.close()
            else:
                self.stream.flush()
            self.stream = None


def session_line(
    info: SessionInfo, state: Any = None, copies: Sequence[dict[str, Any]] = ()
) -> str:
    """The header line of a session (``state``: its export_session_state row, if read;
    ``copies``: the turns copy-on-write copied into it, by origin)."""
    doc: dict[str, Any] = {
        "kind": "session",
        "format": FORMAT,
        "version": VERSION,
        "session_id": str(info.session_id),
        "tenant_id": info.tenant_id,
        "subject_id": info.subject_id,
        "agent_id": info.agent_id,
        "metadata": info.metadata,
        "created_at": info.created_at.isoformat(),
        "first_turn_seq": info.first_turn_seq,
        "fork": None,
        "copies": list(copies),
    }
    if state is not None:
        doc["first_turn_seq"] = state["first_turn_seq"]
        if state["fork_parent"] is not None:
            doc["fork"] = {"parent": str(state["fork_parent"]), "at": state["fork_at"]}
    return line(doc)


def turn_line(turn: Turn) -> str:
    """The line of one turn."""
    return line(
        {
            "kind": "turn",
            "turn_seq": turn.turn_seq,
            "created_at": turn.created_at.isoformat(),
            "idempotency_key": turn.idempotency_key,
            "tokens": turn.tokens,
            "message": turn.message,
        }
    )


def _turns_op(
    op: Op[Any], sink: _Sink, bar: Progress, sid: uuid.UUID, opener: Sealer | None = None
) -> Op[int]:
    """Run the streaming ``history`` operation inside this one, writing what it emits
    (a chunk of turns at a time) to the sink, opened by ``opener`` when given (a
    decrypting export); returns the number of turns written."""
    written = 0

    def write(turns: Sequence[Any]) -> Op[None]:
        nonlocal written
        if opener is not None:
            turns = yield from enc_turns.open_turns_op(opener, sid, list(turns))
        yield Call(sink.write, ([turn_line(t) for t in turns],))
        written += len(turns)
        bar.done(len(turns))

    yield from relay(op, write)
    return written


def _writer(
    kind: str,
    sink: _Sink,
    counts: Counts,
    opened: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
) -> Any:
    """A pager's page handler: the rows' lines written (each row ``opened`` first, when
    given: a decrypting export), and counted."""

    def write(rows: Sequence[Any]) -> Op[None]:
        if opened is not None:
            rows = [opened(row) for row in rows]
        yield Call(sink.write, (record_lines(kind, rows),))
        counts.add(kind, len(rows))

    return write


def _state_op(
    sid: uuid.UUID, sink: _Sink, counts: Counts, opener: Sealer | None = None
) -> Op[None]:
    """A session's checkpoints (seq order), runs and chunk summaries, a page at a time;
    their sealed values opened by ``opener`` when given (a decrypting export)."""
    checkpoint = summary = None
    if opener is not None:
        checkpoint = functools.partial(sealing.open_checkpoint, opener, sid)
        summary = functools.partial(sealing.open_summary_row, opener, sid)
    by_seq = {"sid": sid, "after": 0}
    yield from paged_op(
        "export_checkpoints",
        by_seq,
        lambda r: {"after": r["seq"]},
        _writer("checkpoint", sink, counts, checkpoint),
    )
    rows = yield Q(query("export_runs"), (sid,), named=True)
    if rows:
        yield from _writer("run", sink, counts)(rows)
    by_chunk = {"sid": sid, "after": -1}
    yield from paged_op(
        "export_summaries",
        by_chunk,
        lambda r: {"after": r["chunk_seq"]},
        _writer("summary", sink, counts, summary),
    )


def _facts_op(
    tenant: str | None,
    subject: str | None,
    sink: _Sink,
    counts: Counts,
    access: AccessReport | None,
    sealer: Sealer | None,
    decrypt: bool,
) -> Op[None]:
    """Every version of the facts of ``tenant`` and/or ``subject``, one snapshot (the
    current ones noted in ``access``, their values opened when the store has ``sealer``);
    the values opened by ``sealer`` in the file too when ``decrypt``."""
    opened = None
    if decrypt:
        assert sealer is not None
        opened = functools.partial(sealing.open_fact_row, sealer)
    write = _writer("fact", sink, counts, opened)

    def each(rows: Sequence[Any]) -> Op[None]:
        yield from write(rows)
        if access is not None:
            access.facts(sealing.shown_fact_rows(sealer, rows))

    params: dict[str, Any] = {
        "tenant": tenant,
        "subject": subject,
        "after_tenant": "",
        "after_id": uuid.UUID(int=0),
    }
    yield Tx.BEGIN_SNAPSHOT
    yield from paged_op(
        "export_facts",
        params,
        lambda r: {"after_tenant": r["tenant_id"], "after_id": r["fact_id"]},
        each,
    )
    yield Tx.COMMIT


def _export_one_op(
    store: StoreState,
    sid: uuid.UUID,
    sink: _Sink,
    bar: Progress,
    counts: Counts,
    written: Written,
    access: AccessReport | None,
    opener: Sealer | None,
) -> Op[int]:
    """One session's lines, from one snapshot: the artifacts it references that the file
    does not hold yet, its session line, turns, state, references and end line (sealed
    values opened by ``opener`` when given); returns its turn count."""
    yield Tx.BEGIN_SNAPSHOT
    info: SessionInfo = yield from history_ops.session(store, sid)
    if info.purged:
        raise SessionPurged(f"session {sid} was purged; there is nothing to export")
    bar.expect(info.turn_count)
    yield from export_artifacts_op(store, sid, written, sink.write)
    state = yield Q(query("export_session_state"), (sid,), fetch="one", named=True)
    copies = yield from copies_op(sid)
    if state["fork_parent"] is not None:
        counts.add("fork")
    yield Call(sink.write, ([session_line(info, state, copies)],))
    turns = yield from _turns_op(history_ops.stored_history(store, sid), sink, bar, sid, opener)
    yield from _state_op(sid, sink, counts, opener)
    yield from export_refs_op(store, sid, written, sink.write)
    yield from export_links_op(sid, written, sink.write)
    end = line({"kind": "end", "session_id": str(sid), "turns": turns})
    yield Call(sink.write, ([end],))
    yield Tx.COMMIT
    if access is not None:
        access.session(info, turns)
    return turns


class _Scope:
    """Which sessions an export covers: those named, or a tenant's and/or subject's."""

    def __init__(self, ids: list[uuid.UUID] | None, tenant: str | None, subject: str | None):
        self.named = None if ids is None else set(ids)
        self.tenant = tenant
        self.subject = subject

    def covers(self, row: Any) -> bool:
        """Whether an export_session_ancestors row is in scope."""
        if self.named is not None:
            return bool(row["session_id"] in self.named)
        return (self.tenant is None or row["tenant_id"] == self.tenant) and (
            self.subject is None or row["subject_id"] == self.subject
        )


def _lineage_first_op(sid: uuid.UUID, scope: _Scope, early: set[uuid.UUID]) -> Op[list[uuid.UUID]]:
    """The sessions to write for ``sid``, in order: its live ancestors in scope that were
    not written yet (parents before forks, so that an import can rebuild the lineage),
    then ``sid``. A listing by tenant or subject goes newest first, so a fork comes before
    its parent: the parent is written early and skipped when the listing reaches it."""
    order: list[uuid.UUID] = []
    todo = [sid]
    while todo:
        at = todo.pop()
        order.append(at)
        for row in (yield from ancestors_op(at)):
            anc = row["session_id"]
            if anc not in early and anc != sid and scope.covers(row):
                early.add(anc)
                todo.append(anc)
    if scope.named is not None:
        early.add(sid)  # a list naming a session twice, or after its fork, writes it once
    return order[::-1]


def export_line(
    export_id: uuid.UUID,
    ids: int | None,
    tenant: str | None,
    subject: str | None,
    with_bytes: bool,
    sealed: bool = False,
    decrypted: bool = False,
) -> str:
    """The first line of a version 3 export: which export this is (``export_id``, what
    ``import_jsonl(remap_ids=True)`` derives new ids from), when, of what, whether
    artifacts' bytes are in it, whether its values are sealed (written by a store with
    ``encryption=``: an import needs the key store) or were decrypted (plaintext, though
    the store encrypts them)."""
    doc = {
        "kind": "export",
        "format": FORMAT,
        "version": VERSION,
        "export_id": str(export_id),
        "exported_at": datetime.now(UTC).isoformat(),
        "scope": {"session_ids": ids, "tenant_id": tenant, "subject_id": subject},
        "artifact_bytes": with_bytes,
        "sealed": sealed,
        "decrypted": decrypted,
    }
    return line(doc)


def export_sessions(
    store: StoreState,
    session_ids: uuid.UUID | str | Sequence[uuid.UUID | str] | None = None,
    *,
    tenant_id: str | None = None,
    subject_id: str | None = None,
    out: Any,
    progress: bool = False,
    no_artifact_bytes: bool = False,
    report: Any = None,
    decrypt: bool = False,
) -> Op[ExportReport]:
    """Write sessions as JSONL (the format in :mod:`shardstore.importers.jsonl` and
    docs/portability.md) to ``out``, a text stream or a path (created or truncated): the
    sessions named by ``session_ids``, or every live session of ``tenant_id`` and/or
    ``subject_id`` (newest first), and for a tenant or subject scope every version of its
    facts. Each session is read in one snapshot and streamed a chunk at a time (memory
    stays flat however long it is), with its checkpoints, runs, summaries, the artifacts
    it references (their bytes, base64, each artifact once per file; only their
    description with ``no_artifact_bytes=True``) and the references, ending with its
    ``end`` line; a session that is missing raises ``SessionNotFound``, a purged one
    ``SessionPurged`` (the lines written before stay in ``out``, and a session without
    its end line is refused by :meth:`import_jsonl`). ``progress`` draws a bar of turns
    on stderr.

    ``report``: a path or text stream that gets a human-readable Markdown summary of what
    was exported (an access report, for ``subject_id``: every record kind counted, the
    rows each session table holds of the subject, the sessions and the current facts).
    The returned :class:`ExportReport` counts every record kind written.

    Encryption at rest (a store connected with ``encryption=``): the file carries the
    sealed values as stored (the export line says ``"sealed": true``; an import needs the
    key store). ``decrypt=True`` writes them in plaintext instead, each opened where it is
    stored as the store's readers open it (``"decrypted": true``; the file needs no key
    store, and must be protected as the plaintext it is); ``ConfigurationError`` on a store
    connected without ``encryption=``. Artifact bytes follow the same rule: the sealed
    object as stored (``"sealed": true`` on its line; no plaintext), or with
    ``decrypt=True`` the plaintext opened by the store's reader, its line announcing its
    plain sha256 (each artifact is read twice, a pass for its digest first; memory stays
    one chunk). The access report shows fact values opened whenever the store has the key
    store, else says that they are sealed."""
    ids: list[uuid.UUID] | None = None
    if session_ids is not None:
        if tenant_id is not None or subject_id is not None:
            raise InvalidInput("give session_ids, or tenant_id / subject_id, not both")
        many = session_ids if isinstance(session_ids, list | tuple) else [session_ids]
        ids = [validate.session_id(s) for s in many]
        if not ids:
            raise InvalidInput("session_ids is empty: name at least one session")
    elif tenant_id is None and subject_id is None:
        raise InvalidInput("name the sessions to export: session_ids, tenant_id or subject_id")
    tenant = validate.optional_text(tenant_id, "tenant_id")
    subject = validate.optional_text(subject_id, "subject_id")
    show = validate.flag(progress, "progress")
    with_bytes = not validate.flag(no_artifact_bytes, "no_artifact_bytes")
    sealer = store.ctx.sealer
    decrypting = validate.flag(decrypt, "decrypt")
    if decrypting and sealer is None:
        raise ConfigurationError(
            "decrypt=True opens encrypted values: connect with encryption= and the key store "
            "(shardstore.connect(dsn, encryption=LocalKeyProvider(path)))",
            cli="--decrypt opens encrypted values: give the key store (--key-store PATH or "
            "$SHARDSTORE_KEY_STORE)",
        )
    opener = sealer if decrypting else None
    sink = _Sink(out)
    access = None if report is None else AccessReport(report, tenant, subject, sink.path)
    bar = Progress(show, "exporting")
    sessions = turns = 0
    counts = Counts()
    written = Written(with_bytes, sealer, decrypting)
    export_id = uuid.uuid4()
    tally = Tally()
    try:
        yield Call(sink.open)
        header = export_line(
            export_id,
            None if ids is None else len(ids),
            tenant,
            subject,
            with_bytes,
            sealed=sealer is not None and not decrypting,
            decrypted=decrypting,
        )
        yield Call(sink.write, ([header],))
        before: SessionInfo | None = None
        scope = _Scope(ids, tenant, subject)
        early: set[uuid.UUID] = set()  # ancestors written before the listing reached them
        while True:
            if ids is not None:
                page, ids = ids, []
            else:
                listed = yield from history_ops.sessions(
                    store, tenant_id=tenant, subject_id=subject, before=before, limit=PAGE
                )
                before = listed[-1] if listed else None
                page = [info.session_id for info in listed]
            if not page:
                break
            for sid in page:
                if sid in early:
                    continue
                for one in (yield from _lineage_first_op(sid, scope, early)):
                    turns += yield from _export_one_op(
                        store, one, sink, bar, counts, written, access, opener
                    )
                    sessions += 1
        if ids is None:  # a tenant or subject scope: its facts too
            yield from _facts_op(tenant, subject, sink, counts, access, sealer, decrypting)
        if ids is None and tenant is not None:  # the tenant's references of no session
            yield Tx.BEGIN_SNAPSHOT
            yield from export_loose_refs_op(store, tenant, written, sink.write)
            yield Tx.COMMIT
        counts.add("artifact", written.artifacts)
        counts.add("artifact_ref", written.refs)
        counts.add("artifact_link", written.links)
        done = ExportReport(
            sessions,
            turns,
            sink.bytes,
            tally.report().seconds,
            **counts.by_name,
            artifact_bytes=written.bytes,
            export_id=str(export_id),
        )
        if access is not None and subject is not None:
            tables = yield from access_tables_op(subject, tenant)
            access.tables = tables
        if access is not None:
            yield Call(access.write, (done,))
    finally:
        bar.close()
        sink.close()
    return done


# ---------------------------------------------------------------- import


class _Lines:
    """Lines of a JSONL source, read ``n`` at a time (a path is opened here, a stream is
    read as it is); each line at most ``limit`` characters."""

    def __init__(self, source: Any, limit: int) -> None:
        self.limit = limit
        self.path, self.stream = path_or_stream(
            source, "readline", "source must be a path or a text stream (with readline())"
        )
        self.owned = False
        self.number = 0
        self.pending: ImportRejected | None = None

    def open(self) -> None:
        """Open the named file (UTF-8)."""
        if self.path is not None:
            self.stream = open_text(self.path, "r", newline="\n")
            self.owned = True

    def read(self, n: int) -> list[tuple[int, str]]:
        """Up to ``n`` more non-blank lines with their 1-based numbers; empty at the end.
        A line that cannot be read is raised (``ImportRejected``) only once the lines
        before it were handed out, so the sessions before it are imported."""
        if self.pending is not None:
            raise self.pending
        out: list[tuple[int, str]] = []
        while len(out) < n:
            try:
                line = self._line()
            except ImportRejected as exc:
                if not out:
                    raise
                self.pending = exc
                break
            if not line:
                break
            if line.strip():
                out.append((self.number, line))
        return out

    def _line(self) -> str:
        try:
            line = self.stream.readline(self.limit + 1)
        except UnicodeDecodeError as exc:
            raise ImportRejected(f"line {self.number + 1}: not UTF-8 text ({exc.reason})") from None
        if not line:
            return ""
        if isinstance(line, bytes):
            raise InvalidInput("source must be opened in text mode, not binary")
        self.number += 1
        if len(line) > self.limit and not line.endswith("\n"):
            raise ImportRejected(
                f"line {self.number}: longer than {self.limit} characters (over what a "
                "turn of chunk_max_bytes can take)"
            )
        return str(line)

    def close(self) -> None:
        """Close what this reader opened."""
        if self.owned and self.stream is not None:
            self.stream.close()
        self.stream = None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (JSON has no NaN or Infinity)")


_decoder = json.JSONDecoder(parse_constant=_reject_constant)


def parse_line(number: int, text: str) -> dict[str, Any]:
    """One line as a JSON object with a string ``kind``; ``ImportRejected`` naming the
    line for anything else (not JSON, NaN or Infinity, an int too long for Python)."""
    try:
        value = _decoder.decode(text)
    except json.JSONDecodeError as exc:
        raise ImportRejected(f"line {number}: not JSON ({exc.msg} at column {exc.colno})") from None
    except ValueError as exc:  # NaN/Infinity, or an int over Python's digit limit
        raise ImportRejected(f"line {number}: {exc}") from None
    except RecursionError:
        raise ImportRejected(f"line {number}: nests too deeply") from None
    if type(value) is not dict or type(value.get("kind")) is not str:
        raise ImportRejected(f"line {number}: not an object with a string 'kind'")
    return value


class _Head:
    """A validated session line."""

    def __init__(self, doc: dict[str, Any], where: str) -> None:
        if doc.get("format") != FORMAT:
            raise ImportRejected(f"{where}: not a {FORMAT} session line")
        version = doc.get("version")
        if type(version) is not int or version not in VERSIONS:
            raise ImportRejected(
                f"{where}: format version {validate.shown(version, 20)} "
                f"(this shardstore reads {', '.join(map(str, VERSIONS))})"
            )
        self.version: int = version
        self.session_id: uuid.UUID = _field(validate.session_id, doc.get("session_id"), where)
        self.tenant: str = _field(validate.text, doc.get("tenant_id"), where, "tenant_id")
        self.subject: str | None = _field(
            validate.optional_text, doc.get("subject_id"), where, "subject_id"
        )
        self.agent: str | None = _field(
            validate.optional_text, doc.get("agent_id"), where, "agent_id"
        )
        metadata = doc.get("metadata", {})
        if type(metadata) is not dict:
            raise ImportRejected(f"{where}: metadata must be an object")
        self.metadata = _field(jsoncodec.encode_json, metadata, where, "metadata")
        self.created_at = _instant(doc.get("created_at"), where, "created_at")
        self.first_turn_seq: int | None = None
        self.fork: tuple[uuid.UUID, int] | None = None
        self.copies: list[Copy] = []
        if version >= 2:
            self.first_turn_seq = _int(doc.get("first_turn_seq"), where, "first_turn_seq")
            fork = doc.get("fork")
            if fork is not None:
                if type(fork) is not dict:
                    raise ImportRejected(f"{where}: fork must be an object or null")
                parent = _field(validate.session_id, fork.get("parent"), where)
                self.fork = (parent, _int(fork.get("at"), where, "fork.at", low=-1))
        if version >= 4:
            self.copies = copies_of(doc.get("copies", []), where)


class _Reader:
    """Parsed lines, fetched from the source a batch at a time."""

    def __init__(self, lines: _Lines, batch: int) -> None:
        self.lines = lines
        self.batch = batch
        self.buffer: deque[tuple[int, str]] = deque()
        self.last = 0
        self.last_kind: str | None = None

    def next_raw_op(self) -> Op[tuple[int, str] | None]:
        """The next line unparsed (number, text); None at the end."""
        if not self.buffer:
            self.buffer.extend((yield Call(self.lines.read, (self.batch,))))
        if not self.buffer:
            return None
        number, text = self.buffer.popleft()
        self.last = number
        self.last_kind = None
        return number, text

    def next_op(self) -> Op[tuple[int, dict[str, Any]] | None]:
        """The next line (number, object); None at the end."""
        raw = yield from self.next_raw_op()
        if raw is None:
            return None
        doc = parse_line(*raw)
        self.last_kind = doc["kind"]
        return raw[0], doc

    def push_back(self, number: int, text: str) -> None:
        """Hand a line back: the next read returns it again."""
        self.buffer.appendleft((number, text))


def _stored(row: Any, at: str) -> Any:
    """A statement's row, or ``ImportRejected`` naming the line the server refused."""
    if isinstance(row, StatementFailed):
        raise ImportRejected(f"{at}: the database refuses the row (SQLSTATE {row.sqlstate})")
    return row


@dataclass(eq=False)
class _State:
    """The checkpoints, runs, summaries and artifact references of one session being
    imported (version 2 and 3): each line checked, then written in the session's
    transaction, in the tenant of the session (a row naming another is refused), under
    the ids ``remap`` gives (``old_sid``: the session's id in the file, ``sid`` here)."""

    old_sid: uuid.UUID
    sid: uuid.UUID
    tenant: str
    remap: IdMap
    carried: dict[Any, Carried]
    resealing: sealing.SessionResealer | None = None
    started: bool = field(default=False, init=False)
    head: int = field(default=0, init=False)  # the next turn_seq once its turns are in
    ids: set[uuid.UUID] = field(default_factory=set, init=False)
    keys: set[str] = field(default_factory=set, init=False)
    runs: set[uuid.UUID] = field(default_factory=set, init=False)
    counts: Counts = field(default_factory=Counts, init=False)
    unmatched: list[str] = field(default_factory=list, init=False)
    unreferenced: list[tuple[str, str]] = field(default_factory=list, init=False)

    def line_op(self, kind: str, doc: dict[str, Any], at: str, version: int) -> Op[None]:
        """Check one state line and write it."""
        if (kind == "artifact_ref" and version < 3) or (kind == "artifact_link" and version < 4):
            raise ImportRejected(f"{at}: an {kind!r} line inside a version {version} file")
        _owned(doc, self.tenant, at)
        if doc.get("session_id", str(self.old_sid)) != str(self.old_sid):
            raise ImportRejected(f"{at}: the row names another session than its own")
        if kind == "checkpoint":
            yield from self._checkpoint_op(doc, at)
        elif kind == "run":
            yield from self._run_op(doc, at)
        elif kind == "summary":
            if not (yield from self._summary_op(doc, at)):
                return
        else:
            if kind == "artifact_link":
                why = yield from import_link_op(
                    doc, at, self.sid, self.tenant, self.carried, self.remap
                )
            else:
                why = yield from import_ref_op(
                    doc,
                    at,
                    old_sid=self.old_sid,
                    sid=self.sid,
                    tenant=self.tenant,
                    head=self.head,
                    checkpoints=self.ids,
                    ids=self.remap,
                    carried=self.carried,
                )
            if why is not None:
                self.unreferenced.append((at, why))
                return
        self.counts.add(kind)

    def _checkpoint_op(self, doc: dict[str, Any], at: str) -> Op[None]:
        cid = _uuid(doc.get("checkpoint_id"), at, "checkpoint_id")
        if cid in self.ids:
            raise ImportRejected(f"{at}: checkpoint {cid} appears twice in the session")
        turn = _int(doc.get("turn_seq"), at, "turn_seq", low=-1)
        if turn >= self.head:
            raise ImportRejected(
                f"{at}: checkpoint turn_seq {turn} is past the session's turns "
                f"(its last is {self.head - 1})"
            )
        key = _opt_text(doc, "idempotency_key", at, validate.MAX_KEY_CHARS)
        if key is not None:
            if key in self.keys:
                raise ImportRejected(f"{at}: idempotency key {key!r:.60} is used twice")
            self.keys.add(key)
        parent = doc.get("parent_id")
        new_cid = self.remap.checkpoint(cid)
        params = {
            "sid": self.sid,
            "id": new_cid,
            "turn": turn,
            "sub": _opt_int(doc.get("sub_step"), at, "sub_step", high=validate.MAX_INT32),
            "parent": None
            if parent is None
            else self.remap.checkpoint(_uuid(parent, at, "parent_id")),
            "key": key,
            "at": _instant(doc.get("created_at"), at, "created_at"),
            "state": _jsonb(doc.get("state"), at, "state"),
            "calls": _jsonb(doc.get("tool_calls"), at, "tool_calls", null=True),
            "results": _jsonb(doc.get("tool_results"), at, "tool_results", null=True),
            "meta": _jsonb(_object(doc.get("metadata", {}), at, "metadata"), at, "metadata"),
        }
        if doc.get("state") is None:
            raise ImportRejected(f"{at}: a checkpoint needs a state")
        refs_here = functools.partial(self.remap.artifact_refs_in_text, self.tenant)
        if self.resealing is not None:
            for part, name in _CHECKPOINT_COLUMNS:
                params[name] = self.resealing.checkpoint_part(
                    part, doc.get(part), _opt_str(params[name]), cid, new_cid, at, refs_here
                )
        else:
            for _part, name in _CHECKPOINT_COLUMNS:
                params[name] = refs_here(_opt_str(params[name]))
        self.ids.add(cid)
        _stored((yield Q(query("import_checkpoint"), params, fetch="none", recover=_REFUSALS)), at)

    def _run_op(self, doc: dict[str, Any], at: str) -> Op[None]:
        rid = _uuid(doc.get("run_id"), at, "run_id")
        if rid in self.runs:
            raise ImportRejected(f"{at}: run {rid} appears twice in the session")
        status = doc.get("status")
        if status not in RUN_STATUSES:
            raise ImportRejected(f"{at}: status must be one of {', '.join(RUN_STATUSES)}")
        awaiting = doc.get("awaiting")
        awaiting_since = _opt_instant(doc.get("awaiting_since"), at, "awaiting_since")
        closed = _opt_instant(doc.get("closed_at"), at, "closed_at")
        error = _opt_text(doc, "error", at, None)
        waits = status == "awaiting_human"
        if waits != (awaiting is not None) or waits != (awaiting_since is not None):
            raise ImportRejected(f"{at}: awaiting and awaiting_since go with awaiting_human")
        if (status in ("done", "failed")) != (closed is not None):
            raise ImportRejected(f"{at}: closed_at goes with a done or failed run")
        if error is not None and status != "failed":
            raise ImportRejected(f"{at}: only a failed run has an error")
        params = {
            "sid": self.sid,
            "id": self.remap.run(rid),
            "framework": _text(doc, "framework", at),
            "thread": _text(doc, "thread_key", at, validate.MAX_KEY_CHARS),
            "status": status,
            "awaiting": _jsonb(awaiting, at, "awaiting", null=True),
            "awaiting_since": awaiting_since,
            "steps": _int(doc.get("steps"), at, "steps"),
            "cost": _number(doc.get("usd_cost"), at, "usd_cost", 0.0, 1e300),
            "error": error,
            "meta": _jsonb(_object(doc.get("metadata", {}), at, "metadata"), at, "metadata"),
            "at": _instant(doc.get("created_at"), at, "created_at"),
            "updated": _instant(doc.get("updated_at"), at, "updated_at"),
            "closed": closed,
        }
        elsewhere = yield Q(
            query("import_run_elsewhere"), (self.remap.run(rid), self.sid), fetch="one"
        )
        if elsewhere is not None:
            raise ImportRejected(f"{at}: run id {rid} belongs to another session here")
        self.runs.add(rid)
        _stored((yield Q(query("import_run"), params, fetch="none", recover=_REFUSALS)), at)

    def _summary_op(self, doc: dict[str, Any], at: str) -> Op[bool]:
        first = _int(doc.get("first_turn_seq"), at, "first_turn_seq")
        last = _int(doc.get("last_turn_seq"), at, "last_turn_seq")
        if last < first or last >= self.head:
            raise ImportRejected(f"{at}: summary of turns {first}..{last} outside the session")
        old_chunk = _int(doc.get("chunk_seq"), at, "chunk_seq")
        _instant(doc.get("chunk_start"), at, "chunk_start")
        params = {
            "sid": self.sid,
            "first": first,
            "last": last,
            "summary": _text(doc, "summary", at, None),
            "tokens": _int(doc.get("tokens"), at, "tokens", high=validate.MAX_INT32),
            "model": _text(doc, "model", at),
            "at": _instant(doc.get("created_at"), at, "created_at"),
            "message_tokens": _opt_int(
                doc.get("message_tokens"), at, "message_tokens", high=validate.MAX_INT32
            ),
            "counted_by": _opt_text(doc, "counted_by", at),
        }
        if self.resealing is not None:
            chunk = yield Q(query("import_summary_chunk"), params, fetch="one")
            if chunk is None:  # no chunk here holds exactly its turns: listed, as below
                self.unmatched.append(at)
                return False
            params["summary"] = self.resealing.summary_text(
                str(params["summary"]), old_chunk, int(chunk[0]), first, last, at
            )
        row = _stored(
            (yield Q(query("import_summary"), params, fetch="one", recover=_REFUSALS)), at
        )
        if not row[0]:
            self.unmatched.append(at)
        return bool(row[0])

    def counted(self, tally: Tally) -> None:
        """The records written are counted; summaries no imported chunk holds exactly
        (chunked otherwise here) and references to artifacts exported without bytes that
        this database lacks are listed."""
        for kind in STATE_KINDS:
            tally.counts.add(kind, self.counts.of(kind))
        for at in self.unmatched:
            tally.skipped.append(
                Skipped(at, f"summary of session {self.sid}: no chunk here holds its turns")
            )
        for at, why in self.unreferenced:
            tally.skipped.append(Skipped(at, why))


# a checkpoint line's sealed fields and the statement parameters they go to
_CHECKPOINT_COLUMNS = (("state", "state"), ("tool_calls", "calls"), ("tool_results", "results"))


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _object(value: Any, where: str, what: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise ImportRejected(f"{where}: {what} must be an object")
    return value


def _fact_op(
    doc: dict[str, Any],
    at: str,
    ids: IdMap,
    tally: Tally,
    resealer: sealing.Resealer | None = None,
) -> Op[bool]:
    """One fact version, in a transaction of its own: True when written, False when its
    fact_id is there already. Its source session, when this database has it, must be of
    the fact's tenant. A current version whose subject and key have another current
    version here is refused, or, in a remapped import (which adds a copy beside existing
    data), left out and listed in the report's ``skipped``. With ``resealer`` (a store
    with ``encryption=``) the value is stored sealed for its id here."""
    tenant = _text(doc, "tenant_id", at)
    old_fid = _uuid(doc.get("fact_id"), at, "fact_id")
    fid = ids.fact(old_fid)
    source = doc.get("source_session_id")
    src = None if source is None else ids.source_session(_uuid(source, at, "source_session_id"))
    seq = _opt_int(doc.get("source_turn_seq"), at, "source_turn_seq")
    if (src is None) != (seq is None):
        raise ImportRejected(f"{at}: source_session_id and source_turn_seq go together")
    confidence = doc.get("confidence")
    valid_from = _instant(doc.get("valid_from"), at, "valid_from")
    valid_to = _opt_instant(doc.get("valid_to"), at, "valid_to")
    if valid_to is not None and valid_to <= valid_from:
        raise ImportRejected(f"{at}: valid_to must be after valid_from")
    value = _jsonb(doc.get("value"), at, "value")
    assert value is not None
    if len(value.encode("utf-8", "surrogatepass")) > validate.MAX_JSON_BYTES:
        raise ImportRejected(f"{at}: value is larger than {validate.MAX_JSON_BYTES} bytes")
    subject = _text(doc, "subject", at)
    key = _text(doc, "key", at, validate.MAX_KEY_CHARS)
    if resealer is not None:
        value = resealer.fact_text(
            doc.get("value"), value, tenant, subject, key, old_fid, fid, f"{at}: the value"
        )
    params = (
        tenant,
        fid,
        subject,
        key,
        value,
        None if confidence is None else _number(confidence, at, "confidence", 0.0, 1.0),
        src,
        seq,
        valid_from,
        valid_to,
        _instant(doc.get("recorded_at"), at, "recorded_at"),
    )
    yield Tx.BEGIN
    if src is not None:
        owner = yield Q(query("import_session_tenant"), (src,), fetch="one")
        if owner is not None and owner[0] != tenant:
            raise ImportRejected(f"{at}: its source session belongs to another tenant")
    row = _stored((yield Q(query("import_fact"), params, fetch="one", recover=_REFUSALS)), at)
    if row is None:
        there = yield Q(query("import_fact_exists"), (tenant, fid), fetch="one")
        if there is None and not ids.active:
            raise ImportRejected(
                f"{at}: the subject and key already have a current fact in this database"
            )
        if there is None:
            tally.skipped.append(
                Skipped(at, "fact: its subject and key already have a current fact here")
            )
    yield Tx.COMMIT
    if row is not None:
        tally.counts.add("fact")
    return row is not None


def _loose_ref_op(
    store: StoreState,
    doc: dict[str, Any],
    at: str,
    ids: IdMap,
    tally: Tally,
    carried: dict[Any, Carried],
    pending: list[Pending],
) -> Op[None]:
    """A reference that names no session (version 4), in a transaction of its own with the
    artifacts read before it."""
    tenant = _text(doc, "tenant_id", at)
    yield Tx.BEGIN
    tally.counts.add("artifact", (yield from store_artifacts_op(store, pending, ids)))
    why = yield from import_ref_op(
        doc,
        at,
        old_sid=None,
        sid=None,
        tenant=tenant,
        head=0,
        checkpoints=set(),
        ids=ids,
        carried=carried,
    )
    yield Tx.COMMIT
    if why is None:
        tally.counts.add("artifact_ref")
    else:
        tally.skipped.append(Skipped(at, why))


def _inherits(head: _Head, seq: int) -> bool:
    """Whether turn ``seq`` of the file's session may have been sealed by another session
    of its lineage: inherited from its fork parent, or copied into it."""
    if head.fork is not None and seq <= head.fork[1]:
        return True
    return any(copy.first <= seq <= copy.last for copy in head.copies)


def _skip_session_op(reader: _Reader, head: _Head, where: str) -> Op[None]:
    """Read past a session's lines up to its end line."""
    while True:
        item = yield from reader.next_op()
        if item is None:
            raise ImportRejected(f"{where}: the file ends inside session {head.session_id}")
        number, doc = item
        if doc["kind"] == "end":
            return
        if doc["kind"] != "turn" and (head.version < 2 or doc["kind"] not in STATE_KINDS):
            raise ImportRejected(f"line {number}: a {doc['kind']!r:.40} line inside a session")


def _session_op(
    store: StoreState,
    reader: _Reader,
    head: _Head,
    where: str,
    on_existing: str,
    tally: Tally,
    bar: Progress,
    partitions: Partitions,
    ids: IdMap,
    carried: dict[Any, Carried],
    pending: list[Pending],
    resealer: sealing.Resealer | None = None,
) -> Op[None]:
    """One session: created and filled in one transaction, or skipped / refused. In a
    remapped import a session already there is this import's own from an earlier run
    (its id derives from the import id), complete: counted as unchanged. A fork whose
    parent is here is made a fork again (:mod:`.lineage`). With ``resealer`` (a store with
    ``encryption=``) every turn, checkpoint and summary is stored sealed for its place
    here; without, a line holding a sealed value raises ``EncryptionRequired``."""
    ctx = store.ctx
    old_sid = head.session_id
    sid = ids.session(old_sid)
    resealing = None
    if resealer is not None:
        resealing = sealing.SessionResealer(
            resealer,
            head.tenant,
            head.subject,
            old_sid,
            sid,
            functools.partial(_inherits, head),
        )
    yield Tx.BEGIN
    owners = (head.tenant, head.subject, head.agent)
    status, lineage = yield from fork_op(
        sid, head.fork, owners, head.metadata, head.created_at, ids
    )
    made: Any = status == "ok"
    if status == "plain":
        made = yield Q(
            query("import_session_insert"),
            (sid, *owners, head.metadata, head.created_at),
            fetch="one",
        )
    owner = Owner(head.tenant, head.subject, sid)
    if not made:
        # the session is here already (this import's own from an earlier run, or skipped):
        # the artifacts stored with it are too, and later records may name them by the
        # file's ids
        yield from store_artifacts_op(store, pending, ids, owner, store_missing=False)
        yield Tx.COMMIT  # nothing was written
        discard(pending)
        if ids.active:
            yield from _skip_session_op(reader, head, where)
            tally.add_session(0, 0, existed=True)
            return
        if on_existing == "refuse":
            exists = f"{where}: session {sid} already exists in this database"
            raise SessionExists(
                f"{exists} (on_existing='skip' leaves it as it is and imports the others)",
                cli=f"{exists} (--on-existing skip leaves it as it is and imports the others)",
            )
        yield from _skip_session_op(reader, head, where)
        tally.skipped.append(Skipped(where, f"session {sid} already exists"))
        return
    artifacts = yield from store_artifacts_op(store, pending, ids, owner)
    batch = Batch()
    state = _State(old_sid, sid, head.tenant, ids, carried, resealing)
    places: list[str] = []
    cuts = breaks(head.copies)
    first: int | None = None
    start = 0  # turn_seq of the batch's first turn
    count = written = inherited_turns = 0

    def flush_op() -> Op[None]:
        nonlocal start, written
        yield from premake_op(store, partitions, batch.times)
        yield from append_exact_op(ctx, sid, start, batch, places)
        start += len(batch)
        written += batch.bytes
        bar.done(len(batch))
        batch.clear()
        places.clear()

    def turns_done_op() -> Op[None]:
        yield from flush_op()
        if lineage is not None and not lineage.met:
            raise ImportRejected(
                f"{where}: session {old_sid} holds fewer turns than it inherits from its parent"
            )
        plain = yield from record_copies_op(sid, head.tenant, head.copies, ids, where)
        tally.skipped.extend(Skipped(where, why) for why in plain)
        state.started = True
        state.head = (first or 0) + count

    while True:
        item = yield from reader.next_op()
        if item is None:
            raise ImportRejected(
                f"line {reader.last}: the file ends inside session {sid} ({where}) before "
                "its end line (a truncated export); nothing of that session was imported"
            )
        number, doc = item
        at = f"line {number}"
        kind = doc["kind"]
        if resealing is None:
            sealing.refuse_sealed_line(doc, at)
        if kind in STATE_KINDS and head.version >= 2:
            if not state.started:  # the turns are over: the last batch goes in first
                yield from turns_done_op()
            yield from state.line_op(kind, doc, at, head.version)
        elif kind == "turn" and state.started:
            raise ImportRejected(f"{at}: a turn line after the session's state lines")
        elif kind == "turn":
            seq = doc.get("turn_seq")
            if type(seq) is not int or seq < 0 or seq > validate.MAX_INT64:
                raise ImportRejected(f"{at}: turn_seq must be a non-negative int")
            if first is None:
                first = start = seq
            elif seq != first + count:
                raise ImportRejected(f"{at}: turn_seq {seq} where {first + count} was expected")
            key = _field(_key, doc.get("idempotency_key"), at)
            created = _instant(doc.get("created_at"), at, "created_at")
            partition_check(ctx, created, at)
            count += 1
            if lineage is not None and seq <= lineage.at:  # read through the parent
                inherited(lineage, seq, created, at)
                inherited_turns += 1
                start = seq + 1
                continue
            if seq in cuts:
                yield from flush_op()
                yield from seal_op(sid)
            message = doc.get("message")
            seal = None
            if resealing is not None:
                message = resealing.turn_message(message, seq, at)
                seal = resealing.turn_sealer(seq)
            message = ids.artifact_refs_in(head.tenant, message)
            batch.add(ctx, message, at, key, doc.get("tokens"), seal)
            batch.times.append(created)
            places.append(at)
            if len(batch) >= reader.batch:
                yield from flush_op()
        elif kind == "end":
            if doc.get("session_id") != str(old_sid) or doc.get("turns") != count:
                raise ImportRejected(
                    f"{at}: the end line does not close session {old_sid} with {count} turns"
                )
            if not state.started:
                yield from turns_done_op()
            if head.first_turn_seq is not None and count and first != head.first_turn_seq:
                raise ImportRejected(
                    f"{where}: first_turn_seq {head.first_turn_seq} but the first turn is {first}"
                )
            if first and lineage is None:  # exported after a range purge: starts there
                yield Q(query("import_session_first_turn"), (first, sid), fetch="none")
            yield Tx.COMMIT
            tally.add_session(count - inherited_turns, written, existed=False)
            tally.counts.add("artifact", artifacts)
            if lineage is not None:
                tally.counts.add("fork")
            state.counted(tally)
            return
        else:
            raise ImportRejected(f"{at}: a {kind!r:.40} line inside session {sid}")


def _resync_op(reader: _Reader) -> Op[None]:
    """After a session or artifact was refused (``on_error="skip"``): read past the rest
    of its lines, up to its end line or the next line that starts a record of its own
    (handed back to the reader), lines that are not JSON included."""
    if reader.last_kind == "end":
        return
    while True:
        raw = yield from reader.next_raw_op()
        if raw is None:
            return
        number, text = raw
        try:
            kind = parse_line(number, text)["kind"]
        except ImportRejected:
            continue
        if kind == "end":
            return
        if kind in TOP_KINDS:
            reader.push_back(number, text)
            return


def import_jsonl(
    store: StoreState,
    source: Any,
    *,
    on_existing: str = "refuse",
    batch_size: int = DEFAULT_BATCH,
    progress: bool = False,
    remap_ids: bool = False,
    import_id: str | None = None,
    on_error: str = "raise",
) -> Op[ImportReport]:
    """Import a JSONL export (a path or a text stream; the format in
    :mod:`shardstore.importers.jsonl` and docs/portability.md): its sessions, each exactly
    as exported (ids, owners, metadata, ``created_at``, turn_seqs, turn times, idempotency
    keys, checkpoints, runs, summaries, artifact references), its artifacts (their bytes
    checked against their sha256 and stored in this store's artifact backend) and its
    facts. ``batch_size`` turns per statement; lines are read as they are needed.

    A session already in this database (live or purged) is refused with
    ``SessionExists`` (``on_existing="refuse"``, the default) or left as it is and listed
    in the report's ``skipped`` (``"skip"``). Each session is one transaction: a bad line
    (not JSON, NaN/Infinity, a wrong field, a turn_seq out of order, a time going back, a
    message shardstore cannot store or over ``chunk_max_bytes``, a file ending before the
    session's end line) raises ``ImportRejected`` naming the line, with nothing of that
    session written; sessions before it stay, so a re-run with ``on_existing="skip"``
    completes the import. ``on_error="skip"`` lists such a session (or artifact) in the
    report's ``skipped`` instead, and goes on with the next.

    ``remap_ids=True`` imports beside existing data: sessions, checkpoints, runs and
    facts get new ids derived from their ids in the file and ``import_id`` (default: the
    ``export_id`` of the file's export line; ``InvalidInput`` for a file without one), so
    the same import re-run (after a crash, say) finds its sessions there and writes
    nothing twice (they count as ``unchanged``). ``progress`` draws a bar of turns on
    stderr. The report counts every record kind written.

    Encryption at rest (:mod:`.sealing`): a store connected with ``encryption=`` stores
    every turn, checkpoint state and tool calls/results, summary and fact value sealed for
    its place here, whether the file holds it in plaintext or sealed (then opened first,
    for its ids in the file, with this store's key store, and only under a data key of the
    record's tenant); a sealed value whose key this key store lacks raises ``KeyShredded``,
    one that does not authenticate where the file puts it ``DecryptionFailed``, each naming
    its line, with nothing of its session (or fact version) written, and skipped with
    ``on_error="skip"``. A store connected without ``encryption=`` raises
    ``EncryptionRequired`` for a file holding sealed values (at its export line when that
    says so, before anything is written), whatever ``on_error`` says.

    Artifacts: a sealed artifact is opened before anything is written (for the tenant and
    id of its line, under a data key of that tenant: ``KeyShredded`` / ``DecryptionFailed``
    otherwise). An encrypted store seals every artifact under the owning scope's key here
    (the session that follows it in the file, else the tenant); the artifact's id is then
    its address here, and every reference of the file to it (reference and link lines,
    ``ArtifactRef`` values in checkpoint state, tool calls and results, turn messages)
    names that id. A plaintext store does the same for a decrypted export's artifacts."""
    if on_existing not in ON_EXISTING:
        raise InvalidInput(
            f"on_existing must be 'refuse' or 'skip', not {validate.shown(on_existing)}"
        )
    if on_error not in ON_ERROR:
        raise InvalidInput(f"on_error must be 'raise' or 'skip', not {validate.shown(on_error)}")
    size = validate.count(batch_size, "batch_size", high=100_000)
    show = validate.flag(progress, "progress")
    remap = validate.flag(remap_ids, "remap_ids")
    given_id = import_id_of(import_id)
    if given_id is not None and not remap:
        raise InvalidInput(
            "import_id goes with remap_ids=True", cli="--import-id goes with --remap-ids"
        )
    if isinstance(source, io.BufferedIOBase | io.RawIOBase):
        raise InvalidInput("source must be opened in text mode, not binary")
    lines = _Lines(source, 2 * store.ctx.settings.chunk_max_bytes + _LINE_SLACK)
    reader = _Reader(lines, size)
    tally = Tally()
    resealer = None if store.ctx.sealer is None else sealing.Resealer(store.ctx.sealer)
    bar = Progress(show, "importing")
    partitions = Partitions()
    export_id: str | None = None
    ids: IdMap | None = None
    carried: dict[Any, Carried] = {}
    pending: list[Pending] = []  # artifacts waiting for the session after them
    try:
        yield Call(lines.open)
        while True:
            item = yield from reader.next_op()
            if item is None:
                break
            number, doc = item
            where = f"line {number}"
            kind = doc["kind"]
            if kind == "export":  # several exports concatenated: each part maps by its own
                export_id = _export_head(doc, where)
                if resealer is None:
                    sealing.refuse_sealed_export(doc, where)
                if ids is not None and ids.active and given_id is None:
                    ids.import_id = export_id
                continue
            if ids is None:
                ids = needs_import_id(remap, given_id, export_id)
            if kind not in TOP_KINDS and kind != "artifact_ref":
                raise ImportRejected(
                    f"{where}: a {kind!r:.40} line outside a session "
                    "(each session starts with its session line)"
                )
            if kind == "fact":
                if resealer is None:
                    sealing.refuse_sealed_line(doc, where)
                try:
                    yield Try(_fact_op(doc, where, ids, tally, resealer))
                except DecryptionFailed as exc:  # one line, listed like a refused session
                    if on_error == "raise" or isinstance(exc, EncryptionRequired):
                        raise
                    tally.skip(where, exc)
                continue
            try:
                if kind == "artifact":
                    artifact = yield from read_artifact_op(
                        reader, doc, where, carried, store.ctx.sealer
                    )
                    if artifact is not None:
                        pending.append(artifact)
                    continue
                if kind == "artifact_ref":  # a reference of no session (version 4)
                    yield Try(_loose_ref_op(store, doc, where, ids, tally, carried, pending))
                    continue
                head = _Head(doc, where)
                yield Try(
                    _session_op(
                        store,
                        reader,
                        head,
                        where,
                        on_existing,
                        tally,
                        bar,
                        partitions,
                        ids,
                        carried,
                        pending,
                        resealer,
                    )
                )
            except (ImportRejected, DecryptionFailed) as exc:
                if on_error == "raise" or isinstance(exc, EncryptionRequired):
                    raise
                discard(pending)  # the refused session's artifacts go with it
                tally.skip(where, exc)
                if kind != "artifact_ref":  # one line: nothing of it to read past
                    yield from _resync_op(reader)
        if pending:  # artifacts no session follows
            yield Tx.BEGIN
            assert ids is not None
            tally.counts.add("artifact", (yield from store_artifacts_op(store, pending, ids)))
            yield Tx.COMMIT
    finally:
        discard(pending)
        bar.close()
        lines.close()
    return tally.report()


def _export_head(doc: dict[str, Any], where: str) -> str:
    """The export id of a checked export line."""
    if doc.get("format") != FORMAT:
        raise ImportRejected(f"{where}: not a {FORMAT} export line")
    version = doc.get("version")
    if type(version) is not int or version not in VERSIONS or version < 3:
        raise ImportRejected(
            f"{where}: export line of format version {validate.shown(version, 20)} "
            f"(this shardstore reads {', '.join(map(str, VERSIONS))})"
        )
    return str(_uuid(doc.get("export_id"), where, "export_id"))
