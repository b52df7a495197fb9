"""OpenTelemetry spans of store operations (the ``otel`` extra: opentelemetry-api), in the
GenAI semantic conventions for memory operations, and the hook that records the store's
call metrics (:mod:`shardstore.integrations.metrics`).

Every store method runs in a span named ``shardstore.<method>`` (``shardstore.append_turn``,
``shardstore.tail``, ``shardstore.search``, ``shardstore.checkpoint``,
``shardstore.maintain``, ``shardstore.purge_subject``, ...), made in one place: the method
bindings of :mod:`shardstore.core.bind`. Attributes:

* ``gen_ai.operation.name``: the GenAI memory operation the method is
  (:data:`OPERATIONS`): ``search_memory`` (reads), ``update_memory`` (writes that create or
  change records), ``delete_memory`` (rewinds, purges, forgetting), and for the store's
  own upkeep, which the conventions name no operation for, ``maintain_memory_store``
  (maintenance, folds, embedding, partitions) and ``describe_memory_store`` (statistics and
  settings); ``gen_ai.conversation.id`` (the session), ``gen_ai.agent.id`` (an ``agent_id``
  argument), ``gen_ai.memory.record.id`` (the one record a call names or makes: a
  checkpoint, run, artifact or fact id);
* ``db.system`` / ``db.system.name`` (``postgresql``), ``db.operation.name`` (the method);
* the ``shardstore.*`` ids given (``shardstore.session_id``, ``.tenant_id``,
  ``.subject_id``, ``.checkpoint_id``, ``.artifact_id``) and counts from the result
  (``shardstore.turn_seq``, ``shardstore.tokens``, ``shardstore.turns``, ``shardstore.items``,
  ``shardstore.bytes``, ...);
* on failure ``error.type`` (the shardstore error's class name), the span's status and its
  exception event.

Never content: no message text, fact value, state, payload or query is put on a span; the
conventions' opt-in content attributes (``gen_ai.memory.query.text``,
``gen_ai.memory.records``) are never set.

No telemetry, no cost: without opentelemetry installed, or with neither a tracer provider
(``trace.set_tracer_provider``, or :func:`use_provider` here) nor a meter provider
(``metrics.set_meter_provider``, or :func:`shardstore.integrations.metrics.use_provider`)
set, a call checks one flag and runs as before.

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
from contextlib import contextmanager, nullcontext
from datetime import datetime
from typing import Any, Final

from . import metrics
from ._otel import global_provider_set, import_api

DB_SYSTEM = "postgresql"

# the GenAI memory operations (semantic-conventions-genai's memory spans; the Python
# package opentelemetry-semantic-conventions 0.66b2 does not define them yet)
SEARCH_MEMORY: Final = "search_memory"
UPDATE_MEMORY: Final = "update_memory"
DELETE_MEMORY: Final = "delete_memory"
# the store's own upkeep and description: no GenAI operation fits, so these are named in
# the conventions' style (<verb>_memory_store, as create_memory_store / delete_memory_store)
MAINTAIN_MEMORY_STORE: Final = "maintain_memory_store"
DESCRIBE_MEMORY_STORE: Final = "describe_memory_store"

# attribute names: gen_ai.operation.name, gen_ai.conversation.id, gen_ai.agent.id and
# error.type as opentelemetry-semantic-conventions defines them (a test compares), the
# gen_ai.memory.* one as semantic-conventions-genai does
OPERATION_NAME: Final = "gen_ai.operation.name"
CONVERSATION_ID: Final = "gen_ai.conversation.id"
AGENT_ID: Final = "gen_ai.agent.id"
MEMORY_RECORD_ID: Final = "gen_ai.memory.record.id"
ERROR_TYPE: Final = "error.type"

#: ``gen_ai.operation.name`` of each store method.
OPERATIONS: Final[dict[str, str]] = {
    **dict.fromkeys(
        (
            "session",
            "sessions",
            "tail",
            "tail_explained",
            "history",
            "chunks",
            "search",
            "restore",
            "checkpoints",
            "recall",
            "fact_history",
            "get_run",
            "runs",
            "context",
            "summaries",
            "get_artifact",
            "open_artifact",
            "list_artifacts",
            "expand",
            "export_sessions",
        ),
        SEARCH_MEMORY,
    ),
    **dict.fromkeys(
        (
            "create_session",
            "append_turn",
            "append_turns",
            "checkpoint",
            "fork",
            "remember",
            "open_run",
            "mark_awaiting",
            "resume_run",
            "record_step",
            "close_run",
            "summarize",
            "put_artifact",
            "ref_artifact",
            "attach_payload",
            "import_single_row",
            "import_langgraph",
            "import_jsonl",
        ),
        UPDATE_MEMORY,
    ),
    **dict.fromkeys(
        (
            "purge_session",
            "purge_subject",
            "purge_tenant",
            "purge_range",
            "purge_before",
            "rewind",
            "forget",
            "unref_artifact",
            "sweep_artifacts",
        ),
        DELETE_MEMORY,
    ),
    **dict.fromkeys(
        (
            "flush",
            "premake_partitions",
            "maintain",
            "embed",
            "reembed",
            "configure_text_search",
            "configure_sealed_vectors",
            "distribute",
            "rotate_data_key",
        ),
        MAINTAIN_MEMORY_STORE,
    ),
    **dict.fromkeys(("stats", "text_search_language", "sealed_vectors"), DESCRIBE_MEMORY_STORE),
}

_api: Any = None  # the opentelemetry.trace module once imported; False: not installed
_provider: Any = None


def use_provider(provider: Any) -> None:
    """Trace shardstore with this TracerProvider (None: the global one again)."""
    global _provider
    _provider = provider


def _trace() -> Any:
    global _api
    if _api is None:
        _api = import_api("opentelemetry", "trace")
    return _api


def _tracing() -> bool:
    if _provider is not None:
        return True
    api = _api if _api is not None else _trace()
    return global_provider_set(api, "_TRACER_PROVIDER", "NoOpTracerProvider")


def active() -> bool:
    """Whether a tracer or a meter provider is set: the one check every store call makes."""
    return _tracing() or metrics.recording()


def operation_name(method: str) -> str | None:
    """The ``gen_ai.operation.name`` of the store method ``method`` (None: not a store
    method)."""
    return OPERATIONS.get(method)


def _tracer() -> Any:
    trace = _trace()
    provider = _provider if _provider is not None else trace.get_tracer_provider()
    return provider.get_tracer("shardstore")


@functools.cache
def _signature(build: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(build)


def _id_text(value: Any) -> str | None:
    return str(value) if isinstance(value, str | uuid.UUID) else None


def _arguments(build: Callable[..., Any], args: Any, kwargs: Any) -> dict[str, Any] | None:
    """The call's arguments by parameter name (None when they do not fit: the call itself
    then raises the TypeError)."""
    try:
        return dict(_signature(build).bind(None, *args, **kwargs).arguments)
    except TypeError:
        return None


def _start_attributes(
    build: Callable[..., Any], arguments: dict[str, Any] | None
) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "db.system": DB_SYSTEM,
        "db.system.name": DB_SYSTEM,
        "db.operation.name": build.__name__,
    }
    operation = operation_name(build.__name__)
    if operation is not None:
        attrs[OPERATION_NAME] = operation
    if arguments is None:
        return attrs
    for name in ("session_id", "tenant_id", "subject_id", "checkpoint_id", "artifact_id"):
        value = _id_text(arguments.get(name))
        if value is not None:
            attrs[f"shardstore.{name}"] = value
    session = _id_text(arguments.get("session_id"))
    if session is not None:
        attrs[CONVERSATION_ID] = session
    agent = _id_text(arguments.get("agent_id"))
    if agent is not None:
        attrs[AGENT_ID] = agent
    for name in ("checkpoint_id", "run_id", "artifact_id"):
        record = _id_text(arguments.get(name))
        if record is not None:
            attrs[MEMORY_RECORD_ID] = record
            break
    return attrs


def _record_id(result: Any) -> str | None:
    """The id of the one record a call made (a checkpoint, run, artifact, fact)."""
    for name in ("checkpoint_id", "run_id", "artifact_id", "fact_id"):
        value = getattr(result, name, None)
        if isinstance(value, uuid.UUID):
            return str(value)
    return None


def _result_attributes(span: Any, method: str, result: Any) -> None:
    """Counts and ids from a result, never its content."""
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
    record = _record_id(result)
    if record is not None:
        span.set_attribute(MEMORY_RECORD_ID, record)
    elif isinstance(result, uuid.UUID) and method in ("create_session", "fork"):
        span.set_attribute(CONVERSATION_ID, str(result))  # the session it made


def error_type(exc: BaseException) -> str:
    """``error.type`` of a failed call: the exception's class name (``SessionNotFound``,
    ``InvalidInput``, ...; a low-cardinality value, never its message)."""
    return type(exc).__name__


def _span(build: Callable[..., Any], arguments: dict[str, Any] | None) -> Any:
    trace = _trace()
    return _tracer().start_as_current_span(
        f"shardstore.{build.__name__}",
        kind=trace.SpanKind.CLIENT,
        attributes=_start_attributes(build, arguments),
    )


def _open(build: Callable[..., Any], args: Any, kwargs: Any) -> tuple[Any, Any]:
    """The span (or a null context) and the metrics call (or None) of one store call."""
    arguments = _arguments(build, args, kwargs)
    span = _span(build, arguments) if _tracing() else nullcontext(None)
    call = metrics.start_call(build.__name__, operation_name(build.__name__), arguments)
    return span, call


def _failed(span: Any, call: Any, exc: BaseException) -> None:
    if span is not None:
        span.set_attribute(ERROR_TYPE, error_type(exc))
    if call is not None:
        call.failed(error_type(exc))


@contextmanager
def _measured(
    store: Any, build: Callable[..., Any], args: Any, kwargs: Any
) -> Iterator[tuple[Any, Any]]:
    """The span (or None) and the metrics call (or None) of one store call, around its
    body: a failure is recorded on both and raised again; a stream its caller stops early
    (GeneratorExit) is recorded as done, not as failed."""
    context, call = _open(build, args, kwargs)
    with context as span:
        try:
            yield span, call
        except GeneratorExit:
            if call is not None:
                call.done(store, None)
            raise
        except BaseException as exc:
            _failed(span, call, exc)
            raise


def run(store: Any, build: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """``store._run(build(store, ...))`` in a span, its duration (and appends) recorded."""
    with _measured(store, build, args, kwargs) as (span, call):
        result = store._run(build(store, *args, **kwargs))
        if span is not None:
            _result_attributes(span, build.__name__, result)
        if call is not None:
            call.done(store, result)
        return result


async def arun(store: Any, build: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """The asyncio flavour of :func:`run`."""
    with _measured(store, build, args, kwargs) as (span, call):
        result = await store._run(build(store, *args, **kwargs))
        if span is not None:
            _result_attributes(span, build.__name__, result)
        if call is not None:
            await call.adone(store, result)
        return result


def stream(store: Any, build: Callable[..., Any], args: Any, kwargs: Any) -> Iterator[Any]:
    """A streaming method's items, the whole iteration in one span (and one duration)."""
    with _measured(store, build, args, kwargs) as (span, call):
        count = tokens = 0
        for item in store._stream(build(store, *args, **kwargs)):
            count += 1
            size = getattr(item, "tokens", 0)
            tokens += size if isinstance(size, int) else 0
            yield item
        if span is not None:
            span.set_attribute("shardstore.items", count)
            span.set_attribute("shardstore.tokens", tokens)
        if call is not None:
            call.done(store, None)


async def astream(
    store: Any, build: Callable[..., Any], args: Any, kwargs: Any
) -> AsyncIterator[Any]:
    """The asyncio flavour of :func:`stream`."""
    with _measured(store, build, args, kwargs) as (span, call):
        count = 0
        async for item in store._stream(build(store, *args, **kwargs)):
            count += 1
            yield item
        if span is not None:
            span.set_attribute("shardstore.items", count)
        if call is not None:
            await call.adone(store, None)


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
    lives until its retention passes.

    On a store connected with ``encryption=`` the payload's bytes are sealed as every
    artifact is (docs/artifacts.md, "Encryption"): under the session's key (its subject's,
    so ``purge_subject(shred=True)`` makes every copy unreadable) when ``session_id`` is
    given, else under the tenant's key. The reference to the session is written in a
    transaction that first locks the session row and reads its key again
    (:func:`~shardstore.artifacts.ops.check_sealing_op`), so it never names bytes sealed
    under a data-key version a rotation running meanwhile shreds: bytes or a str are
    sealed again under the new version (a few times at most, then ``Conflict``); a file
    object, read once, gets ``Conflict`` (retryable) with nothing referenced."""
    from ..artifacts.config import config_of
    from ..artifacts.ops import put_artifact, put_op, ref_op, resealing_op, session_tenant_op
    from ..artifacts.source import source
    from ..core import validate
    from ..errors import SessionNotFound

    label = validate.text(name, "name", limit=64)
    tenant = validate.text(tenant_id, "tenant_id")
    session = validate.optional_session_id(session_id)
    if session is not None and (yield from session_tenant_op(session)) != tenant:
        # checked before the upload, so a wrong session stores nothing; the reference
        # checks again under a lock (a purge in between refuses it)
        raise SessionNotFound(f"session {session} does not exist in tenant {tenant!r:.80}")
    context = span.get_span_context() if hasattr(span, "get_span_context") else None
    trace_id = f"{context.trace_id:032x}" if context is not None else "0" * 32
    span_id = f"{context.span_id:016x}" if context is not None else "0" * 16
    owner = f"{trace_id}:{span_id}:{label}"
    sealer = store.ctx.sealer
    if sealer is None:
        ref = yield from put_artifact(store, tenant_id, data, content_type=content_type)
        expires = yield from _expiry_op(store)
        yield from ref_op(
            tenant, ref.artifact_id, "trajectory", owner, session, None, False, expires
        )
    else:
        ctype = validate.text(content_type, "content_type", limit=255)
        src = source(data)

        def put_linked(sealing: Any) -> Any:
            # a refused link leaves the bytes unreferenced: swept after artifact_grace
            stored = yield from put_op(config_of(store), tenant, src, ctype, key=sealing.key)
            yield from _linked_op(store, tenant, sealing, stored, owner)
            return stored

        ref = yield from resealing_op(sealer, tenant, session, None, src, put_linked)
    if hasattr(span, "set_attribute"):
        prefix = f"shardstore.payload.{label}"
        span.set_attribute(f"{prefix}.uri", ref.uri)
        span.set_attribute(f"{prefix}.sha256", ref.sha256)
        span.set_attribute(f"{prefix}.size_bytes", ref.size_bytes)
        span.set_attribute(f"{prefix}.content_type", ref.content_type)
    return ref


def _expiry_op(store: Any) -> Any:
    """When a payload's reference stops counting: the database's now plus
    ``trajectory_retention``."""
    from ..artifacts.config import config_of

    (now,) = yield from _now_op()
    return now + config_of(store).trajectory_retention


def _linked_op(store: Any, tenant: str, sealing: Any, ref: Any, owner: str) -> Any:
    """The trajectory reference of sealed payload bytes, in one transaction that locks the
    payload's session row and reads its key again first (``check_sealing_op``), so a
    data-key rotation's final check either waits for and sees the reference, or the
    reference is refused with nothing written (the bytes' version is no longer current)."""
    from ..artifacts.ops import check_sealing_op, ref_op
    from ..core.steps import Tx

    yield Tx.BEGIN
    yield from check_sealing_op(sealing, f"the payload {ref.artifact_id}", "nothing was referenced")
    expires = yield from _expiry_op(store)
    yield from ref_op(
        tenant, ref.artifact_id, "trajectory", owner, sealing.session, None, False, expires
    )
    yield Tx.COMMIT


def _now_op() -> Any:
    from ..core.sql import query
    from ..core.steps import Q

    row: tuple[datetime] = yield Q(query("artifact_clock"), fetch="one")
    return row
