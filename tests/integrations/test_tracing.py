"""OpenTelemetry spans of store operations, captured with the SDK's in-memory exporter:
names, attributes, no message content; payloads attached as trajectory artifacts; nothing
recorded (and nothing checked beyond one flag) without a tracer provider."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import shardstore
from shardstore.integrations import metrics, tracing

SECRET = "top-secret-" + uuid.uuid4().hex


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use_provider(provider)
    try:
        yield exporter
    finally:
        tracing.use_provider(None)


def _dump(exporter: InMemorySpanExporter) -> str:
    return json.dumps([s.to_json() for s in exporter.get_finished_spans()])


def test_every_operation_has_a_span_without_content(
    store: shardstore.Store, spans: InMemorySpanExporter
) -> None:
    sid = store.create_session("acme", subject_id="u1")
    store.append_turn(sid, {"role": "user", "content": SECRET})
    store.append_turns(sid, [{"role": "assistant", "content": SECRET + "!"}])
    store.tail(sid, n=5)
    list(store.history(sid))
    store.checkpoint(sid, {"note": SECRET})
    hits = store.search(SECRET, session_id=sid, mode="text")  # the query is content too
    store.put_artifact("acme", SECRET.encode() * 10, content_type="text/plain")
    store.maintain(embed=False)
    store.purge_range(sid, before_turn_seq=1)
    store.purge_subject("acme", "u1")
    finished = spans.get_finished_spans()
    names = [s.name for s in finished]
    for expected in (
        "shardstore.create_session",
        "shardstore.append_turn",
        "shardstore.append_turns",
        "shardstore.tail",
        "shardstore.history",
        "shardstore.checkpoint",
        "shardstore.search",
        "shardstore.put_artifact",
        "shardstore.maintain",
        "shardstore.purge_range",
        "shardstore.purge_subject",
    ):
        assert expected in names, (expected, names)
    by_name = {s.name: s for s in finished}
    append = by_name["shardstore.append_turn"].attributes
    assert append["db.system"] == "postgresql"
    assert append["shardstore.session_id"] == str(sid)
    assert append["shardstore.turn_seq"] == 0 and append["shardstore.tokens"] > 0
    tail = by_name["shardstore.tail"].attributes
    assert tail["shardstore.items"] == 2 and tail["shardstore.tokens"] > 0
    assert by_name["shardstore.history"].attributes["shardstore.items"] == 2
    search = by_name["shardstore.search"].attributes
    assert search["db.system"] == "postgresql" and search["shardstore.session_id"] == str(sid)
    assert search["shardstore.items"] == len(hits) >= 1
    assert by_name["shardstore.purge_subject"].attributes["shardstore.tenant_id"] == "acme"
    assert by_name["shardstore.put_artifact"].attributes["shardstore.size_bytes"] == 10 * len(
        SECRET
    )
    assert SECRET not in _dump(spans)
    # the GenAI memory operation of each, beside the shardstore.* attributes
    operations = {s.name: s.attributes.get("gen_ai.operation.name") for s in finished}
    assert operations["shardstore.append_turn"] == "update_memory"
    assert operations["shardstore.create_session"] == "update_memory"
    assert operations["shardstore.tail"] == operations["shardstore.search"] == "search_memory"
    assert operations["shardstore.history"] == "search_memory"
    assert operations["shardstore.purge_range"] == "delete_memory"
    assert operations["shardstore.purge_subject"] == "delete_memory"
    assert operations["shardstore.maintain"] == "maintain_memory_store"
    assert append["gen_ai.conversation.id"] == str(sid)
    made = by_name["shardstore.create_session"].attributes
    assert made["gen_ai.conversation.id"] == str(sid) and "shardstore.session_id" not in made
    checkpoint = by_name["shardstore.checkpoint"].attributes
    assert uuid.UUID(str(checkpoint["gen_ai.memory.record.id"]))
    artifact = by_name["shardstore.put_artifact"].attributes
    assert uuid.UUID(str(artifact["gen_ai.memory.record.id"]))
    for span in finished:
        assert span.kind.name == "CLIENT"
        # the conventions' opt-in content attributes are never set
        assert not {"gen_ai.memory.query.text", "gen_ai.memory.records"} & set(span.attributes)
        assert "error.type" not in span.attributes


def test_every_store_method_has_a_memory_operation() -> None:
    """Each public method of both stores maps to a GenAI operation: the conventions'
    memory operations, or the two store-upkeep names the docs explain."""
    allowed = {
        "search_memory",
        "update_memory",
        "delete_memory",
        "maintain_memory_store",
        "describe_memory_store",
    }
    for cls in (shardstore.Store, shardstore.AsyncStore):
        methods = {
            name
            for name, value in vars(cls).items()
            if callable(value) and not name.startswith("_") and hasattr(value, "__wrapped__")
        }
        assert methods, cls
        missing = sorted(m for m in methods if tracing.operation_name(m) is None)
        assert missing == [], f"{cls.__name__}: add these to tracing.OPERATIONS: {missing}"
    assert set(tracing.OPERATIONS.values()) == allowed


def test_attribute_names_are_the_semantic_conventions() -> None:
    """The names the installed opentelemetry-semantic-conventions defines are used as it
    spells them; where it defines the memory operations (a later release), with the same
    values."""
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
    from opentelemetry.semconv.attributes import db_attributes, error_attributes

    assert tracing.OPERATION_NAME == gen_ai.GEN_AI_OPERATION_NAME
    assert tracing.CONVERSATION_ID == gen_ai.GEN_AI_CONVERSATION_ID
    assert tracing.AGENT_ID == gen_ai.GEN_AI_AGENT_ID
    assert tracing.ERROR_TYPE == error_attributes.ERROR_TYPE
    assert db_attributes.DB_OPERATION_NAME == "db.operation.name"
    assert db_attributes.DB_SYSTEM_NAME == "db.system.name"
    values = gen_ai.GenAiOperationNameValues
    for ours in (tracing.SEARCH_MEMORY, tracing.UPDATE_MEMORY, tracing.DELETE_MEMORY):
        member = getattr(values, ours.upper(), None)
        assert member is None or member.value == ours
    # the two upkeep names are not the conventions' (so they cannot mean something else)
    known = {member.value for member in values}
    assert not {tracing.MAINTAIN_MEMORY_STORE, tracing.DESCRIBE_MEMORY_STORE} & known
    record = getattr(gen_ai, "GEN_AI_MEMORY_RECORD_ID", tracing.MEMORY_RECORD_ID)
    assert record == tracing.MEMORY_RECORD_ID == "gen_ai.memory.record.id"


def test_errors_are_recorded(store: shardstore.Store, spans: InMemorySpanExporter) -> None:
    with pytest.raises(shardstore.SessionNotFound):
        store.tail(uuid.uuid4())
    (span,) = [s for s in spans.get_finished_spans() if s.name == "shardstore.tail"]
    assert not span.status.is_ok
    assert span.attributes["error.type"] == "SessionNotFound"
    assert span.attributes["gen_ai.operation.name"] == "search_memory"
    assert any(e.name == "exception" for e in span.events)


def test_attach_payload_stores_a_trajectory_artifact(
    store: shardstore.Store, spans: InMemorySpanExporter
) -> None:
    tracer = tracing._tracer()
    with tracer.start_as_current_span("agent.step") as span:
        ref = store.attach_payload(
            span, SECRET * 3, name="tool_output", content_type="text/plain", tenant_id="acme"
        )
    (step,) = [s for s in spans.get_finished_spans() if s.name == "agent.step"]
    attrs = step.attributes
    assert attrs["shardstore.payload.tool_output.sha256"] == ref.sha256
    assert attrs["shardstore.payload.tool_output.size_bytes"] == 3 * len(SECRET)
    assert attrs["shardstore.payload.tool_output.uri"] == ref.uri
    assert store.get_artifact("acme", ref.artifact_id) == (SECRET * 3).encode()
    (info,) = store.list_artifacts("acme")
    assert info.live_refs == 1
    # referenced until the retention passes: a sweep with no grace keeps it
    assert store.sweep_artifacts(grace=timedelta(0)).deleted == 0
    assert SECRET not in _dump(spans)


def test_payload_expires_with_trajectory_retention(make_store: Any) -> None:
    store = make_store(trajectory_retention=timedelta(0))
    ref = store.attach_payload(None, b"payload", name="p", content_type="x/y", tenant_id="t")
    assert store.sweep_artifacts(grace=timedelta(0)).deleted == 1
    with pytest.raises(shardstore.ArtifactNotFound):
        store.get_artifact("t", ref.artifact_id)


def test_no_provider_records_nothing(
    store: shardstore.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a tracer provider (none global, none given) a store call makes no span: the
    span factory is never reached. Without the extra (opentelemetry not importable) the
    same."""
    assert not tracing.active() and not metrics.recording()
    made: list[str] = []

    def no_span(build: Any, *_arguments: Any) -> Any:
        made.append(build.__name__)
        raise AssertionError("a span was started without a tracer provider")

    monkeypatch.setattr(tracing, "_span", no_span)
    sid = store.create_session("t")
    store.append_turn(sid, {"role": "user", "content": "x"})
    assert len(store.tail(sid)) == 1 and len(list(store.history(sid))) == 1
    # opentelemetry not installed: the import fails once, then one flag is checked
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setattr(tracing, "_api", None)
    assert not tracing.active() and tracing._api is False
    store.append_turn(sid, {"role": "user", "content": "y"})
    assert len(store.tail(sid)) == 2
    assert made == []
    # the control: with a provider given, the same call does reach the span factory
    monkeypatch.setattr(tracing, "_api", None)
    monkeypatch.delitem(sys.modules, "opentelemetry")
    tracing.use_provider(TracerProvider())
    try:
        with pytest.raises(AssertionError, match="without a tracer provider"):
            store.tail(sid)
    finally:
        tracing.use_provider(None)
    assert made == ["tail"]


_GLOBAL_PROVIDER = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import shardstore
from shardstore.integrations import tracing
assert not tracing.active()
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from shardstore.integrations import metrics as shardstore_metrics
assert not shardstore_metrics.recording()
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
assert shardstore_metrics.recording()
store = shardstore.connect(sys.argv[1])
sid = store.create_session("t")
store.append_turn(sid, {"role": "user", "content": "hi"})
store.close()
turns = [
    p.value
    for r in reader.get_metrics_data().resource_metrics
    for s in r.scope_metrics
    for m in s.metrics
    if m.name == "shardstore.appended.turns"
    for p in m.data.data_points
]
print(json.dumps({"spans": [s.name for s in exporter.get_finished_spans()], "turns": turns}))
"""


@pytest.mark.slow
def test_global_tracer_provider_is_used(dsn: str) -> None:
    """Providers set the usual way (``trace.set_tracer_provider``,
    ``metrics.set_meter_provider``: once per process, so in a child process) turn spans and
    call metrics on without ``use_provider``."""
    out = subprocess.run(
        [sys.executable, "-c", _GLOBAL_PROVIDER, dsn],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    names = seen["spans"]
    assert "shardstore.create_session" in names and "shardstore.append_turn" in names
    assert seen["turns"] == [1]  # a global meter provider turns call metrics on too


def test_hostile_payload_names(store: shardstore.Store) -> None:
    for bad in ("", "x" * 65, None):
        with pytest.raises(shardstore.InvalidInput):
            store.attach_payload(None, b"x", name=bad, content_type="x/y", tenant_id="t")
    assert store.list_artifacts("t") == []


def test_payload_of_a_session_goes_with_its_purge(store: shardstore.Store, dsn: str) -> None:
    sid = store.create_session("t", subject_id="u")
    ref = store.attach_payload(
        None, SECRET, name="p", content_type="text/plain", tenant_id="t", session_id=str(sid)
    )
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT session_id, turn_seq FROM shardstore.artifact_refs WHERE artifact_id = %s",
            (ref.artifact_id,),
        ).fetchone()
    assert row == (sid, None)
    store.rewind(sid, 0)  # by turn: a trajectory reference has none, it stays
    assert store.get_artifact("t", ref.artifact_id) == SECRET.encode()
    report = store.purge_session(sid)
    assert report.tables["shardstore.artifacts"].rows == 1  # released at once
    with pytest.raises(shardstore.ArtifactNotFound):
        store.get_artifact("t", ref.artifact_id)


def test_payload_session_must_be_a_live_session_of_the_tenant(store: shardstore.Store) -> None:
    theirs = store.create_session("other")
    gone = store.create_session("t")
    store.purge_session(gone)
    cases: list[tuple[Any, type[Exception]]] = [
        (uuid.uuid4(), shardstore.SessionNotFound),
        (theirs, shardstore.SessionNotFound),
        (gone, shardstore.SessionPurged),
        ("not-a-uuid", shardstore.InvalidInput),
        (12, shardstore.InvalidInput),
    ]
    for bad, error in cases:
        with pytest.raises(error):
            store.attach_payload(
                None, b"x", name="n", content_type="x/y", tenant_id="t", session_id=bad
            )
    assert store.list_artifacts("t") == []  # checked before the upload: nothing stored


def test_async_spans(dsn: str, spans: InMemorySpanExporter) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(dsn)
        try:
            sid = await store.create_session("t")
            await store.append_turn(sid, {"role": "user", "content": SECRET})
            got = [t async for t in store.history(sid)]
            assert len(got) == 1
            await store.attach_payload(None, b"x", name="n", content_type="x/y", tenant_id="t")
            ref = await store.attach_payload(
                None, b"y", name="n", content_type="x/y", tenant_id="t", session_id=sid
            )
            assert (await store.purge_session(sid)).tables["shardstore.artifacts"].rows == 1
            with pytest.raises(shardstore.ArtifactNotFound):
                await store.get_artifact("t", ref.artifact_id)
        finally:
            await store.close()

    asyncio.run(main())
    names = [s.name for s in spans.get_finished_spans()]
    assert {"shardstore.append_turn", "shardstore.history", "shardstore.attach_payload"} <= set(
        names
    )
    assert SECRET not in _dump(spans)
