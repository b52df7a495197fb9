"""Past conversation history as the JSONL that ``store.import_jsonl`` reads (the only
public path that keeps past ``created_at``s; ``append_turns`` stamps now), generated on the
fly: a :class:`Plan` of sessions (subjects, tenants, turn times over a window of hours)
and one long session, over a cycle of the ``words`` corpus. The scale suite loads with it;
the long-reads suite builds its long session with it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg

from benchmarks.lib.corpus import make_messages
from shardstore.core.sql import query

POOL = 4096  # distinct messages cycled through (each chunk of ~21 turns is all distinct)
SUBJECT_SIZE = 100  # sessions per data subject (purge_subject purges one)
TURN_GAP = 15.0  # seconds between two turns of a 100-turn session (25 minutes long)
INTERVAL = timedelta(hours=1)


# ---------------------------------------------------------------- the generated JSONL


class Messages:
    """A cycle of distinct conversation-like messages (benchmarks.lib.corpus, ``words``), each kept
    as its JSON text so that a turn line costs one string format."""

    def __init__(self) -> None:
        msgs = make_messages(POOL)
        self.texts = [json.dumps(m, ensure_ascii=True, separators=(",", ":")) for m in msgs]
        self.payload = [len(t) for t in self.texts]
        self.objects = msgs

    def text(self, i: int) -> str:
        return self.texts[i % POOL]


class Plan:
    """Who and when: session ``j`` of the load, its subject, tenant and turn times."""

    def __init__(self, sessions: int, turns: int, long_turns: int, hours: int, end: datetime):
        self.sessions = sessions
        self.turns = turns
        self.long_turns = long_turns
        self.hours = hours
        self.end = end
        self.start = end - timedelta(hours=hours)
        self.namespace = uuid.uuid4()

    def sid(self, j: int) -> uuid.UUID:
        return uuid.uuid5(self.namespace, f"s{j}")

    def long_sid(self) -> uuid.UUID:
        return uuid.uuid5(self.namespace, "long")

    def subject(self, j: int) -> str:
        return f"subject-{j // SUBJECT_SIZE}"

    def tenant(self, j: int) -> str:
        return f"tenant-{(j // SUBJECT_SIZE) % 10}"

    def first_at(self, j: int) -> datetime:
        span = self.hours * 3600.0 - self.turns * TURN_GAP
        return self.start + timedelta(seconds=span * (j + 0.5) / max(self.sessions, 1))


def _iso(t: datetime) -> str:
    return t.isoformat()


_TURN = '{"kind":"turn","turn_seq":%d,"created_at":"%s","idempotency_key":null,"message":%s}\n'


def session_lines(
    msgs: Messages,
    sid: uuid.UUID,
    tenant: str,
    subject: str | None,
    first: datetime,
    gap: float,
    turns: int,
    offset: int,
) -> Iterator[str]:
    """One session of the JSONL format (shardstore/importers/jsonl.py)."""
    head = {
        "kind": "session",
        "format": "shardstore.jsonl",
        "version": 1,
        "session_id": str(sid),
        "tenant_id": tenant,
        "subject_id": subject,
        "agent_id": "scale",
        "metadata": {},
        "created_at": _iso(first),
    }
    yield json.dumps(head) + "\n"
    base = first.timestamp()
    for i in range(turns):
        at = datetime.fromtimestamp(base + i * gap, UTC)
        yield _TURN % (i, _iso(at), msgs.text(offset + i))
    yield json.dumps({"kind": "end", "session_id": str(sid), "turns": turns}) + "\n"


class LineStream:
    """A text stream (``readline``) over generated lines: what ``import_jsonl`` reads,
    with no file on disk. Counts the message bytes it handed out."""

    def __init__(self, lines: Iterator[str]) -> None:
        self.lines = lines

    def readline(self, size: int = -1) -> str:
        return next(self.lines, "")


def plan_lines(msgs: Messages, plan: Plan, lo: int, hi: int) -> Iterator[str]:
    """Sessions ``lo <= j < hi`` of the plan, in time order."""
    for j in range(lo, hi):
        yield from session_lines(
            msgs,
            plan.sid(j),
            plan.tenant(j),
            plan.subject(j),
            plan.first_at(j),
            TURN_GAP,
            plan.turns,
            j * 97,
        )


def long_lines(msgs: Messages, plan: Plan) -> Iterator[str]:
    gap = plan.hours * 3600.0 / max(plan.long_turns, 1)
    yield from session_lines(
        msgs, plan.long_sid(), "tenant-long", "subject-long", plan.start, gap, plan.long_turns, 0
    )


def payload_of(msgs: Messages, turns: int, offset: int) -> int:
    """Message JSON bytes of ``turns`` turns starting at pool offset ``offset``."""
    full, rest = divmod(turns, POOL)
    total = full * sum(msgs.payload)
    for i in range(rest):
        total += msgs.payload[(offset + i) % POOL]
    return total


def premake_past(dsn: str, plan: Plan) -> None:
    """The partition of every hour of the plan's window (``ensure_partition_v1``, one
    autocommitted statement each)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for h in range(plan.hours + 1):
            conn.execute(query("ensure_partition"), (plan.start + timedelta(hours=h),))
