"""Store methods made of operations: each public method is written once, as a function
that takes the store and returns an operation (:mod:`shardstore.core.steps`); ``Store`` and
``AsyncStore`` bind it with one line each (``tail = method(history.tail)`` /
``tail = amethod(history.tail)``), keeping its name, signature and docstring."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

from .steps import Op

P = ParamSpec("P")
T = TypeVar("T")


def method(build: Callable[Concatenate[Any, P], Op[T]]) -> Callable[Concatenate[Any, P], T]:
    """A sync store method that runs ``build(store, ...)`` and returns its result."""

    def bound(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(build(self, *args, **kwargs))  # type: ignore[no-any-return]

    functools.update_wrapper(bound, build)
    return bound


def amethod(
    build: Callable[Concatenate[Any, P], Op[T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """An asyncio store method that runs ``build(store, ...)`` and returns its result."""

    async def bound(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._run(build(self, *args, **kwargs))  # type: ignore[no-any-return]

    functools.update_wrapper(bound, build)
    return bound


def stream(
    build: Callable[Concatenate[Any, P], Op[None]], item: type[T]
) -> Callable[Concatenate[Any, P], Iterator[T]]:
    """A sync store method that streams what ``build(store, ...)`` emits (of type ``item``)."""

    def bound(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
        return self._stream(build(self, *args, **kwargs))  # type: ignore[no-any-return]

    functools.update_wrapper(bound, build)
    return bound


def astream(
    build: Callable[Concatenate[Any, P], Op[None]], item: type[T]
) -> Callable[Concatenate[Any, P], AsyncIterator[T]]:
    """An asyncio store method that streams what ``build(store, ...)`` emits."""

    async def bound(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        async for value in self._stream(build(self, *args, **kwargs)):
            yield value

    functools.update_wrapper(bound, build)
    return bound
