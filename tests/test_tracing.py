"""OpenTelemetry spans of store operations, captured with the SDK's in-memory exporter:
names, attributes, no message content; payloads attached as trajectory artifacts; nothing
recorded (and nothing checked beyond one flag) without a tracer provider."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import shardstore
from shardstore import tracing

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
    store.put_artifact("acme", SECRET.encode() * 10, content_type="text/plain")
    store.maintain(embed=False)
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
        "shardstore.put_artifact",
        "shardstore.maintain",
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
    assert by_name["shardstore.put_artifact"].attributes["shardstore.size_bytes"] == 10 * len(
        SECRET
    )
    assert SECRET not in _dump(spans)


def test_errors_are_recorded(store: shardstore.Store, spans: InMemorySpanExporter) -> None:
    with pytest.raises(shardstore.SessionNotFound):
        store.tail(uuid.uuid4())
    (span,) = [s for s in spans.get_finished_spans() if s.name == "shardstore.tail"]
    assert not span.status.is_ok
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


def test_no_provider_records_nothing(store: shardstore.Store) -> None:
    assert not tracing.active()
    exporter = InMemorySpanExporter()
    sid = store.create_session("t")
    store.append_turn(sid, {"role": "user", "content": "x"})
    assert exporter.get_finished_spans() == ()


def test_hostile_payload_names(store: shardstore.Store) -> None:
    for bad in ("", "x" * 65, None):
        with pytest.raises(shardstore.InvalidInput):
            store.attach_payload(None, b"x", name=bad, content_type="x/y", tenant_id="t")
    assert store.list_artifacts("t") == []


def test_async_spans(dsn: str, spans: InMemorySpanExporter) -> None:
    async def main() -> None:
        store = await shardstore.connect_async(dsn)
        try:
            sid = await store.create_session("t")
            await store.append_turn(sid, {"role": "user", "content": SECRET})
            got = [t async for t in store.history(sid)]
            assert len(got) == 1
            await store.attach_payload(None, b"x", name="n", content_type="x/y", tenant_id="t")
        finally:
            await store.close()

    asyncio.run(main())
    names = [s.name for s in spans.get_finished_spans()]
    assert {"shardstore.append_turn", "shardstore.history", "shardstore.attach_payload"} <= set(
        names
    )
    assert SECRET not in _dump(spans)
