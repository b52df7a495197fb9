"""The bytes given to ``put_artifact``, read one chunk at a time: a bytes-like object or a
str (UTF-8) sliced in place, a binary file object read in ``Call`` steps (a worker thread
under asyncio), never wholly in memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..core.steps import Call, Op
from ..errors import InvalidInput

CHUNK = 1 << 20
"""Bytes per stored chunk (postgres backend) and per read."""


@dataclass
class Source:
    """Where the next chunk comes from: ``view`` (in memory) or ``reader`` (``read(n)``)."""

    view: memoryview | None
    reader: Any
    offset: int = 0


def source(data: Any, *, surrogates: bool = False) -> Source:
    """A source for bytes, bytearray, memoryview, str (UTF-8; with ``surrogates`` lone
    surrogates pass through, as offloaded strings may hold them) or a binary file object."""
    if isinstance(data, bytes | bytearray | memoryview):
        return Source(memoryview(data).cast("B"), None)
    if isinstance(data, str):
        try:
            raw = data.encode("utf-8", "surrogatepass" if surrogates else "strict")
        except UnicodeEncodeError:
            raise InvalidInput(
                "data is a str with a lone surrogate; pass bytes to store it exactly"
            ) from None
        return Source(memoryview(raw), None)
    read = getattr(data, "read", None)
    if callable(read):
        return Source(None, data)
    raise InvalidInput(
        f"data must be bytes, a str or a binary file object, not {type(data).__name__}"
    )


def rewind(src: Source) -> bool:
    """Start ``src`` over from its first byte; False for a file object (read once)."""
    if src.view is None:
        return False
    src.offset = 0
    return True


def next_chunk_op(src: Source) -> Op[bytes]:
    """The next chunk: exactly CHUNK bytes, fewer only at the end, b'' after it."""
    if src.view is not None:
        piece = bytes(src.view[src.offset : src.offset + CHUNK])
        src.offset += len(piece)
        return piece
    parts: list[bytes] = []
    have = 0
    while have < CHUNK:
        piece = yield Call(src.reader.read, (CHUNK - have,))
        if piece is None:  # a non-blocking raw stream with nothing yet: not supported
            raise InvalidInput("the file object returned None from read(); open it blocking")
        if not isinstance(piece, bytes | bytearray | memoryview):
            raise InvalidInput(
                f"the file object must be binary: read() returned {type(piece).__name__}"
            )
        if not piece:
            break
        parts.append(bytes(piece))
        have += len(piece)
    return b"".join(parts)
