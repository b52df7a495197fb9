"""A hypothesis state machine holds fork, append, rewind, checkpoint, restore, flush and
GDPR purge to an in-memory model: every session is a list of turns (seq, message, origin);
a fork copies the list up to its point; a purge removes the purged session's turns (by
origin) from every list; rewinds and appends touch one list only."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import shardstore

# every test here is slow: see [tool.pytest.ini_options] markers in pyproject.toml
pytestmark = pytest.mark.slow

StoreFactory = Callable[..., shardstore.Store]


@dataclass
class Model:
    turns: list[tuple[int, dict[str, Any], Any]] = field(default_factory=list)  # seq, msg, origin
    next: int = 0
    checkpoints: list[int] = field(default_factory=list)
    purged: bool = False

    def contiguous(self) -> bool:
        return [t[0] for t in self.turns] == list(range(self.next))


def test_fork_state_machine(make_store: StoreFactory) -> None:
    store = make_store(chunk_tokens=40, partition_interval=timedelta(days=3650), premake=0)
    counter = [0]

    class Forks(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            root = store.create_session("acme", "alice")
            self.ids: list[Any] = [root]
            self.model: dict[Any, Model] = {root: Model()}

        def _pick(self, i: int, live: bool = True) -> Any:
            ids = [s for s in self.ids if not (live and self.model[s].purged)]
            return ids[i % len(ids)] if ids else None

        @rule(i=st.integers(0, 20), n=st.integers(1, 4), size=st.integers(0, 12))
        def append(self, i: int, n: int, size: int) -> None:
            sid = self._pick(i)
            if sid is None:
                return
            m = self.model[sid]
            batch = []
            for _ in range(n):
                counter[0] += 1
                batch.append({"role": "user", "content": f"m{counter[0]} " + "ocean " * size})
            got = store.append_turns(sid, batch)
            assert [r.turn_seq for r in got] == list(range(m.next, m.next + n))
            for msg in batch:
                m.turns.append((m.next, msg, sid))
                m.next += 1

        @precondition(lambda self: len(self.ids) < 7)
        @rule(i=st.integers(0, 20), at=st.integers(-1, 40), by_checkpoint=st.booleans())
        def fork(self, i: int, at: int, by_checkpoint: bool) -> None:
            sid = self._pick(i)
            if sid is None:
                return
            m = self.model[sid]
            if by_checkpoint and m.checkpoints:
                cps = store.checkpoints(sid)
                child = store.fork(sid, checkpoint_id=cps[-1].checkpoint_id)
                point = cps[-1].turn_seq
                assert point == m.checkpoints[0]
            else:
                point = min(at, m.next - 1)
                child = store.fork(sid, at_turn_seq=point)
            self.ids.append(child)
            self.model[child] = Model([t for t in m.turns if t[0] <= point], point + 1)

        @rule(i=st.integers(0, 20), back=st.integers(0, 30))
        def rewind(self, i: int, back: int) -> None:
            sid = self._pick(i)
            if sid is None or not self.model[sid].contiguous():
                return
            m = self.model[sid]
            to = max(0, m.next - back)
            assert store.rewind(sid, to) == m.next - to
            m.turns = [t for t in m.turns if t[0] < to]
            m.next = to
            m.checkpoints = [c for c in m.checkpoints if c < to]

        @rule(i=st.integers(0, 20))
        def checkpoint(self, i: int) -> None:
            sid = self._pick(i)
            if sid is None:
                return
            m = self.model[sid]
            assert store.checkpoint(sid, {"n": m.next}).turn_seq == m.next - 1
            m.checkpoints.append(m.next - 1)

        @rule(i=st.integers(0, 20))
        def flush(self, i: int) -> None:
            sid = self._pick(i)
            if sid is not None:
                store.flush(sid)

        @precondition(lambda self: sum(not m.purged for m in self.model.values()) > 1)
        @rule(i=st.integers(0, 20))
        def purge(self, i: int) -> None:
            sid = self._pick(i)
            store.purge_session(sid)
            self.model[sid].purged = True
            for m in self.model.values():
                m.turns = [t for t in m.turns if t[2] != sid]

        @rule(i=st.integers(0, 20))
        def restore(self, i: int) -> None:
            sid = self._pick(i)
            if sid is None:
                return
            m = self.model[sid]
            upto = m.checkpoints[-1] if m.checkpoints else m.next - 1
            got = store.restore(sid)
            assert [(t.turn_seq, t.message) for t in got.turns] == [
                (s, msg) for s, msg, _o in m.turns if s <= upto
            ]
            window = store.restore(sid, n=3)
            assert [t.turn_seq for t in window.turns] == [s for s, _m, _o in m.turns if s <= upto][
                -3:
            ]

        @invariant()
        def reads_match(self) -> None:
            for sid in self.ids:
                m = self.model[sid]
                if m.purged:
                    continue
                assert [(t.turn_seq, t.message) for t in store.history(sid)] == [
                    (s, msg) for s, msg, _o in m.turns
                ]
                assert [t.turn_seq for t in store.tail(sid, n=4)] == [s for s, _m, _o in m.turns][
                    -4:
                ]
                assert store.session(sid).turn_count == m.next
                assert sum(c.turn_count for c in store.chunks(sid)) == len(m.turns)

    run_state_machine_as_test(
        Forks,
        settings=settings(
            max_examples=30,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
