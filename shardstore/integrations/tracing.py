"""OpenTelemetry spans of store operations (the ``otel`` extra: opentelemetry-api).

Every store method runs in a span named ``shardstore.<method>`` (``shardstore.append_turn``,
``shardstore.tail``, ``shardstore.search``, ``shardstore.checkpoint``,
``shardstore.maintain``, ``shardstore.purge_subject``, ...), made in one place: the method
bindings of :mod:`shardstore.core.bind`. Attributes: ``db.system`` / ``db.system.name``
(``postgresql``), ``db.operation.name``, the session and tenant ids given, and counts from
the result (``shardstore.turn_seq``, ``shardstore.tokens``, ``shardstore.turns``,
``shardstore.bytes``, ...), never message content. Errors are recorded on the span.

No span, no cost: without opentelemetry installed, or with no tracer provider set (neither
globally with ``trace.set_tracer_provider`` nor here with :func:`use_provider`), a call
checks one flag and runs as before.

:func:`attach_payload` (``store.attach_payload``) stores a payload (a prompt, a tool
output) as an artifact owned by the trajectory, referenced until ``trajectory_retention``
has passed, and puts its reference on the span: ``shardstore.payload.<name>.uri``,
``.sha256``, ``.size_bytes``, ``.content_type`` (the GenAI semantic conventions define no
attribute for content stored by reference; these sit beside ``gen_ai.*`` and carry no
content)."""

from __future__ import annotations

import functools
import inspect
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime
from typing import Any

DB_SYSTEM = "postgresql"
_api: Any = None  # the opentelemetry.trace module once imported; False: not installed
_provider: Any = None


def _trace() -> Any:
    global _api
    if _api is None:
        try:
            from opentelemetry import trace
        except ImportError:
            _api = False
        else:
            _api = trace
    return _api


def use_provider(provider: Any) -> None:
    """Trace shardstore with this TracerProvider (None: the global one again)."""
    global _provider
    _provider = provider


def active() -> bool:
    """Whether a tracer provider is set: the one check every store call makes."""
    if _provider is not None:
        return True
    trace = _api if _api is not None else _trace()
    if trace is False:
        return False
    # the global provider as set_tracer_provider() stored it: get_tracer_provider() reads
    # the environment on every call while none is set (~7 us measured, per store call)
    provider = getattr(trace, "_TRACER_PROVIDER", None)
    if provider is None:
        return False
    return not isinstance(provider, trace.NoOpTracerProvider)


def _tracer() -> Any:
    trace = _trace()
    provider = _provider if _provider is not None else trace.get_tracer_provider()
    return provider.get_tracer("shardstore")


@functools.cache
def _signature(build: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(build)


def _start_attributes(build: Callable[..., Any], args: Any, kwargs: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "db.system": DB_SYSTEM,
        "db.system.name": DB_SYSTEM,
        "db.operation.name": build.__name__,
    }
    try:
        bound = _signature(build).bind(None, *args, **kwargs)
    except TypeError:
        return attrs
    for name in ("session_id", "tenant_id", "subject_id", "checkpoint_id", "artifact_id"):
        value = bound.arguments.get(name)
        if isinstance(value, str | uuid.UUID):
            attrs[f"shardstore.{name}"] = str(value)
    return attrs


def _result_attributes(span: Any, result: Any) -> None:
    """Counts from a result, never its content."""
    items = result if isinstance(result, list) else None
    if items is not None:
        span.set_attribute("shardstore.items", len(items))
        tokens = [t for t in (getattr(i, "tokens", None) for i in items) if isinstance(t, int)]
        if tokens:
            span.set_attribute("shardstore.tokens", sum(tokens))
        seqs = [getattr(i, "turn_seq", None) for i in items]
        if seqs and isinstance(seqs[-1], int):
            span.set_attribute("shardstore.turn_seq", seqs[-1])
        return
    for name in ("turn_seq", "tokens", "size_bytes", "rows", "bytes", "deleted"):
        value = getattr(result, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            span.set_attribute(f"shardstore.{name}", value)
    if isinstance(result, bytes):
        span.set_attribute("shardstore.bytes", len(result))
    turns = getattr(result, "turns", None)
    if isinstance(turns, list):
        span.set_attribute("shardstore.turns", len(turns))


def _span(build: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    trace = _trace()
    return _tracer().start_as_current_span(
        f"shardstore.{build.__name__}",
        kind=trace.SpanKind.CLIENT,
        attributes=_start_attributes(build, args, kwargs),
    )


def run(store: Any, build: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """``store._run(build(store, ...))`` in a span."""
    with _span(build, args, kwargs) as span:
        result = store._run(build(store, *args, **kwargs))
        _result_attributes(span, result)
        return result


async def arun(store: Any, build: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """The asyncio flavour of :func:`run`."""
    with _span(build, args, kwargs) as span:
        result = await store._run(build(store, *args, **kwargs))
        _result_attributes(span, result)
        return result


def stream(store: Any, build: Callable[..., Any], args: Any, kwargs: Any) -> Iterator[Any]:
    """A streaming method's items, the whole iteration in one span."""
    with _span(build, args, kwargs) as span:
        count = tokens = 0
        for item in store._stream(build(store, *args, **kwargs)):
            count += 1
            tokens += (
                getattr(item, "tokens", 0) if isinstance(getattr(item, "tokens", 0), int) else 0
            )
            yield item
        span.set_attribute("shardstore.items", count)
        span.set_attribute("shardstore.tokens", tokens)


async def astream(
    store: Any, build: Callable[..., Any], args: Any, kwargs: Any
) -> AsyncIterator[Any]:
    """The asyncio flavour of :func:`stream`."""
    with _span(build, args, kwargs) as span:
        count = 0
        async for item in store._stream(build(store, *args, **kwargs)):
            count += 1
            yield item
        span.set_attribute("shardstore.items", count)


# ---------------------------------------------------------------- payloads


def attach_payload(
    store: Any,
    span: Any,
    data: bytes | str | Any,
    *,
    name: str,
    content_type: str,
    tenant_id: str,
    session_id: Any = None,
) -> Any:
    """Store ``data`` (as :meth:`put_artifact` takes it) as an artifact of ``tenant_id``
    owned by the span's trajectory (owner ``trajectory``, ``<trace_id>:<span_id>:<name>``),
    referenced until ``trajectory_retention`` (default 7 days) has passed, then swept; set
    ``shardstore.payload.<name>.uri`` / ``.sha256`` / ``.size_bytes`` / ``.content_type`` on
    ``span`` (a recording span; anything else just gets the artifact). Returns the
    ArtifactRef.

    ``session_id``: the session the span served (a live session of ``tenant_id``, else
    ``SessionNotFound`` / ``SessionPurged`` and no reference). Its reference then goes with
    the session: a purge of the session, its subject or its tenant removes it, and a GDPR
    purge deletes the payload's bytes at once. Without it the payload is the tenant's and
    lives until its retention passes."""
    from ..artifacts.config import config_of
    from ..artifacts.ops import put_artifact, ref_op, session_tenant_op
    from ..core import validate
    from ..errors import SessionNotFound

    label = validate.text(name, "name", limit=64)
    tenant = validate.text(tenant_id, "tenant_id")
    session = validate.optional_session_id(session_id)
    if session is not None and (yield from session_tenant_op(session)) != tenant:
        # checked before the upload, so a wrong session stores nothing; the reference
        # checks again under a lock (a purge in between refuses it)
        raise SessionNotFound(f"session {session} does not exist in tenant {tenant!r:.80}")
    ref = yield from put_artifact(store, tenant_id, data, content_type=content_type)
    context = span.get_span_context() if hasattr(span, "get_span_context") else None
    trace_id = f"{context.trace_id:032x}" if context is not None else "0" * 32
    span_id = f"{context.span_id:016x}" if context is not None else "0" * 16
    (now,) = yield from _now_op()
    expires = now + config_of(store).trajectory_retention
    owner = f"{trace_id}:{span_id}:{label}"
    yield from ref_op(tenant, ref.artifact_id, "trajectory", owner, session, None, False, expires)
    if hasattr(span, "set_attribute"):
        prefix = f"shardstore.payload.{label}"
        span.set_attribute(f"{prefix}.uri", ref.uri)
        span.set_attribute(f"{prefix}.sha256", ref.sha256)
        span.set_attribute(f"{prefix}.size_bytes", ref.size_bytes)
        span.set_attribute(f"{prefix}.content_type", ref.content_type)
    return ref


def _now_op() -> Any:
    from ..core.sql import query
    from ..core.steps import Q

    row: tuple[datetime] = yield Q(query("artifact_clock"), fetch="one")
    return row
