"""Store methods made of operations: each public method is written once, as a function
that takes the store and returns an operation (:mod:`shardstore.core.steps`); ``Store`` and
``AsyncStore`` bind it with one line each (``tail = method(history.tail)`` /
``tail = amethod(history.tail)``), keeping its name, signature and docstring."""

from __future__ import annotations

import functools
import io
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

from ..integrations import tracing
from .steps import Op

P = ParamSpec("P")
T = TypeVar("T")


def method(build: Callable[Concatenate[Any, P], Op[T]]) -> Callable[Concatenate[Any, P], T]:
    """A sync store method that runs ``build(store, ...)`` and returns its result."""

    def bound(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if tracing.active():  # the one span of every method (shardstore.integrations.tracing)
            return tracing.run(self, build, args, kwargs)  # type: ignore[no-any-return]
        return self._run(build(self, *args, **kwargs))  # type: ignore[no-any-return]

    functools.update_wrapper(bound, build)
    return bound


def amethod(
    build: Callable[Concatenate[Any, P], Op[T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """An asyncio store method that runs ``build(store, ...)`` and returns its result."""

    async def bound(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        if tracing.active():
            return await tracing.arun(self, build, args, kwargs)  # type: ignore[no-any-return]
        return await self._run(build(self, *args, **kwargs))  # type: ignore[no-any-return]

    functools.update_wrapper(bound, build)
    return bound


def stream(
    build: Callable[Concatenate[Any, P], Op[None]], item: type[T]
) -> Callable[Concatenate[Any, P], Iterator[T]]:
    """A sync store method that streams what ``build(store, ...)`` emits (of type ``item``)."""

    def bound(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        if tracing.active():
            return tracing.stream(self, build, args, kwargs)
        return self._stream(build(self, *args, **kwargs))  # type: ignore[no-any-return]

    functools.update_wrapper(bound, build)
    return bound


def astream(
    build: Callable[Concatenate[Any, P], Op[None]], item: type[T]
) -> Callable[Concatenate[Any, P], AsyncIterator[T]]:
    """An asyncio store method that streams what ``build(store, ...)`` emits."""

    async def bound(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        if tracing.active():
            async for value in tracing.astream(self, build, args, kwargs):
                yield value
            return
        async for value in self._stream(build(self, *args, **kwargs)):
            yield value

    functools.update_wrapper(bound, build)
    return bound


class _IterRaw(io.RawIOBase):
    """A raw binary stream over an iterator of byte pieces (closing it closes the
    iterator, which gives its connection back)."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self._pieces = pieces
        self._left = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            piece = next(self._pieces, None)
            if piece is None:
                return 0
            self._left = piece
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n

    def close(self) -> None:
        closer = getattr(self._pieces, "close", None)
        if closer is not None:
            closer()
        super().close()


class AsyncReader:
    """An asyncio binary stream over an async iterator of byte pieces: ``await read(n)``
    (``n`` < 0: to the end), ``await aclose()``, ``async with``."""

    def __init__(self, pieces: AsyncIterator[bytes]) -> None:
        self._pieces = pieces
        self._left = b""
        self._done = False

    async def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (fewer only at the end; b'' after it)."""
        out = bytearray()
        while (n < 0 or len(out) < n) and not self._done:
            if not self._left:
                try:
                    self._left = await anext(self._pieces)
                except StopAsyncIteration:
                    self._done = True
                    break
            take = len(self._left) if n < 0 else min(n - len(out), len(self._left))
            out += self._left[:take]
            self._left = self._left[take:]
        return bytes(out)

    async def aclose(self) -> None:
        """Stop reading; the connection goes back."""
        closer = getattr(self._pieces, "aclose", None)
        if closer is not None:
            await closer()

    async def __aenter__(self) -> AsyncReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def reader(build: Callable[Concatenate[Any, P], Op[None]]) -> Callable[Concatenate[Any, P], Any]:
    """A sync store method returning a readable binary stream (``io.BufferedReader``) of
    the byte pieces ``build(store, ...)`` emits."""

    def bound(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> io.BufferedReader:
        return io.BufferedReader(_IterRaw(self._stream(build(self, *args, **kwargs))))

    functools.update_wrapper(bound, build)
    return bound


def areader(build: Callable[Concatenate[Any, P], Op[None]]) -> Callable[Concatenate[Any, P], Any]:
    """The asyncio flavour of :func:`reader`: a coroutine giving an :class:`AsyncReader`
    (``stream = await store.open_artifact(...)``)."""

    async def bound(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> AsyncReader:
        return AsyncReader(aiter(self._stream(build(self, *args, **kwargs))))

    functools.update_wrapper(bound, build)
    return bound
