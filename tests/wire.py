"""A TCP proxy in front of the test server that counts round trips and can add latency.

A round trip is counted for each message after which a client waits for the server: a
Sync (the end of an extended-protocol exchange: one statement, or a pipeline of several), a
simple Query, or a Flush (a pipelined client fetching results before its Sync; not one sent
right after a Sync, which adds no wait). The client's byte stream is parsed for them, so the
count does not depend on how the client's writes or the server's answers are cut into
chunks on a loaded machine (a pipeline written in two parts is still one round trip).
``delay`` holds every chunk that long in each direction, as a database one network hop
away would (the latency benchmark, benchmarks/bench_latency.py).
Used by tests/pooler/test_round_trips.py; loopback only, and every thread ends with the proxy.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

_CHUNK = 1 << 16


# the untyped messages a client may send before its startup packet
_SSL_REQUEST, _GSSENC_REQUEST = 80877103, 80877104
_WAITS = (b"S", b"Q")  # Sync, Query: the client waits for ReadyForQuery after each
_FLUSH = b"H"


class _Link:
    """One client connection's stream to the server, parsed into messages as it passes."""

    def __init__(self) -> None:
        self.pending = b""
        self.started = False
        self.last = b""  # the type of the last whole message

    def waits(self, data: bytes) -> int:
        """How many messages after which the client waits for the server complete in
        ``data`` (appended to what an earlier chunk left unfinished)."""
        buf = self.pending + data
        found = 0
        at = 0
        while True:
            if not self.started:  # length-prefixed, no type byte
                if len(buf) - at < 8:
                    break
                length = int.from_bytes(buf[at : at + 4], "big")
                code = int.from_bytes(buf[at + 4 : at + 8], "big")
                if len(buf) - at < length:
                    break
                at += length
                if code not in (_SSL_REQUEST, _GSSENC_REQUEST):
                    self.started = True  # the startup packet (or a cancel request)
                continue
            if len(buf) - at < 5:
                break
            length = int.from_bytes(buf[at + 1 : at + 5], "big")
            if len(buf) - at < 1 + length:
                break
            kind = buf[at : at + 1]
            if kind in _WAITS or (kind == _FLUSH and self.last != b"S"):
                found += 1
            self.last = kind
            at += 1 + length
        self.pending = buf[at:]
        return found


class WireProxy:
    """Proxy to the server of ``dsn``; :meth:`dsn` gives the same database through it."""

    def __init__(self, dsn: str, delay: float = 0.0) -> None:
        params = conninfo_to_dict(dsn)
        host = str(params.get("host") or "127.0.0.1")
        port = int(params.get("port") or 5432)
        self._target: Any = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        self._params = params
        self.delay = delay
        self._lock = threading.Lock()
        self._round_trips = 0
        self._closing = threading.Event()
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._spawn(self._accept)

    def dsn(self, **overrides: Any) -> str:
        """The proxied database's DSN (``overrides``: other conninfo parameters)."""
        params = {**self._params, "host": "127.0.0.1", "port": str(self.port), **overrides}
        return make_conninfo("", **{k: v for k, v in params.items() if v is not None})

    @property
    def round_trips(self) -> int:
        """Round trips of every connection since the proxy started."""
        with self._lock:
            return self._round_trips

    @contextmanager
    def counting(self) -> Iterator[list[int]]:
        """``with proxy.counting() as n:`` — afterwards ``n[0]`` holds the round trips made
        inside the block."""
        out = [0]
        start = self.round_trips
        try:
            yield out
        finally:
            out[0] = self.round_trips - start

    def close(self) -> None:
        """Stop accepting, close every connection and wait for the threads."""
        self._closing.set()
        with suppress(OSError):  # wakes the thread blocked in accept(), which close() does not
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for s in list(self._sockets):
            with suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in self._threads:
            t.join(timeout=10)

    def __enter__(self) -> WireProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            family = socket.AF_UNIX if isinstance(self._target, str) else socket.AF_INET
            server = socket.socket(family, socket.SOCK_STREAM)
            try:
                server.connect(self._target)
            except OSError:
                client.close()
                continue
            for s in (client, server):
                if s.family == socket.AF_INET:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, server]
            link = _Link()
            self._spawn(self._pump, client, server, link, True)
            self._spawn(self._pump, server, client, link, False)

    def _pump(self, src: socket.socket, dst: socket.socket, link: _Link, upstream: bool) -> None:
        """Forward ``src`` to ``dst``, each chunk ``delay`` late (a second thread sends, so
        that reading goes on meanwhile and a burst keeps its shape)."""
        due: list[tuple[float, int, bytes]] = []
        ready = threading.Condition()
        order = itertools.count()
        finished = threading.Event()

        def send() -> None:
            while True:
                with ready:
                    while not due and not finished.is_set():
                        ready.wait()
                    if not due:
                        break
                    when, _, data = due[0]
                    wait = when - time.monotonic()
                    if wait > 0:
                        ready.wait(wait)
                        continue
                    heapq.heappop(due)
                try:
                    dst.sendall(data)
                except OSError:
                    break
            with suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        self._spawn(send)
        try:
            while True:
                try:
                    data = src.recv(_CHUNK)
                except OSError:
                    break
                if not data:
                    break
                if upstream:
                    waits = link.waits(data)
                    if waits:
                        with self._lock:
                            self._round_trips += waits
                with ready:
                    heapq.heappush(due, (time.monotonic() + self.delay, next(order), data))
                    ready.notify()
        finally:
            finished.set()
            with ready:
                ready.notify()
