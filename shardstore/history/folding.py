"""Folding sealed chunks off the append path.

An append that seals a chunk only marks it; the chunk's turns stay in the write buffer
(every read already merges buffer and chunks) until a fold moves them into
``agent_history``. The store hands sealed sessions to one of these folders, so no append
waits for a fold. If a process dies first, the chunk waits in the buffer for the next
fold of that session, ``store.flush()`` or maintenance: nothing is lost either way.

A fold leaves the newest sealed chunks holding the session's newest ``default_tail_turns``
turns in the buffer (``keep_turns``): a default ``tail()`` then reads buffer rows only
(docs/decisions/0006-folds-keep-the-tail-buffered.md). They are folded by a later seal's
fold, ``flush()`` or maintenance.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import uuid
from collections.abc import Awaitable, Callable

from ..core.steps import Op
from ..errors import ShardstoreError
from .ops import background_fold_op

log = logging.getLogger("shardstore.folding")


class BackgroundFolder:
    """One worker thread folding sealed chunks, each session at most once in the queue."""

    def __init__(self, run: Callable[[Op[bool]], bool], keep_turns: int) -> None:
        self._run = run
        self._keep_turns = keep_turns
        self.text_search = True
        """Whether the last pass found the database indexing text (the append path hands
        sessions over for text passes only while it does)."""
        self._queue: queue.Queue[uuid.UUID | None] = queue.Queue()
        self._queued: set[uuid.UUID] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, session_id: uuid.UUID) -> None:
        """Queue a fold of the session (once while it waits; nothing after ``close``)."""
        with self._lock:
            if self._closed or session_id in self._queued:
                return
            self._queued.add(session_id)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._work, name="shardstore-folder", daemon=True
                )
                self._thread.start()
        self._queue.put(session_id)

    def _work(self) -> None:
        while True:
            session_id = self._queue.get()
            try:
                if session_id is None:
                    return
                with self._lock:
                    # a seal that arrives while this fold runs queues the session again
                    self._queued.discard(session_id)
                self.text_search = self._run(background_fold_op(session_id, self._keep_turns))
            except ShardstoreError as exc:
                log.warning("fold of session %s deferred: %s", session_id, exc)
            except Exception:  # never let the worker die; the chunk stays safely buffered
                log.exception("fold of session %s failed", session_id)
            finally:
                self._queue.task_done()

    def drain(self) -> None:
        """Block until every fold submitted so far has run."""
        self._queue.join()

    def close(self) -> None:
        """Run the queued folds, then stop the worker."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join()


class AsyncFolder:
    """asyncio version: one task per sealed session, each session at most once in flight."""

    def __init__(self, run: Callable[[Op[bool]], Awaitable[bool]], keep_turns: int) -> None:
        self._run = run
        self._keep_turns = keep_turns
        self.text_search = True  # as BackgroundFolder.text_search
        self._queued: set[uuid.UUID] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def submit(self, session_id: uuid.UUID) -> None:
        """Start a fold of the session as a task of the running loop (once while it waits;
        nothing after ``close``)."""
        if self._closed or session_id in self._queued:
            return
        self._queued.add(session_id)
        task = asyncio.get_running_loop().create_task(self._fold(session_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fold(self, session_id: uuid.UUID) -> None:
        self._queued.discard(session_id)
        try:
            self.text_search = await self._run(background_fold_op(session_id, self._keep_turns))
        except ShardstoreError as exc:
            log.warning("fold of session %s deferred: %s", session_id, exc)
        except Exception:
            log.exception("fold of session %s failed", session_id)

    async def drain(self) -> None:
        """Wait until every fold submitted so far has run."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

    async def close(self) -> None:
        """Take no more sessions and wait for the folds already started."""
        self._closed = True
        await self.drain()
