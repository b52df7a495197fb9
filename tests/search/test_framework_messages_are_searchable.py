"""Vector search reads the text of every framework format the adapters store (Pydantic AI
parts, LlamaIndex blocks, Microsoft Agent Framework contents, Google ADK event content): a
turn written in that format is found by a word of its text, of a tool call's arguments and
of a tool's result, and the searchable text is the message's words, not its JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import shardstore
from shardstore.search.embedding import message_text
from tests.embedders import HashEmbedder

Message = dict[str, Any]


def pydantic_ai_turns() -> list[Message]:
    messages = pytest.importorskip("pydantic_ai.messages")
    from shardstore.integrations.pydantic_ai import to_turns

    return to_turns(
        [
            messages.ModelRequest(parts=[messages.UserPromptPart(content="where is wombatparcel")]),
            messages.ModelResponse(
                parts=[messages.ToolCallPart(tool_name="track", args={"code": "okapicode"})]
            ),
            messages.ModelRequest(
                parts=[
                    messages.ToolReturnPart(
                        tool_name="track", content={"at": "narwhaldepot"}, tool_call_id="c1"
                    )
                ]
            ),
        ]
    )


def llamaindex_turns() -> list[Message]:
    pytest.importorskip("llama_index.core")
    from llama_index.core.llms import ChatMessage

    from shardstore.integrations.llamaindex import to_item

    return [
        to_item(ChatMessage(role="user", content="where is wombatparcel")),
        to_item(ChatMessage(role="assistant", content="calling okapicode then narwhaldepot")),
    ]


def agent_framework_turns() -> list[Message]:
    framework = pytest.importorskip("agent_framework")
    call = framework.Content.from_function_call(
        call_id="c1", name="track", arguments={"code": "okapicode"}
    )
    result = framework.Content.from_function_result(call_id="c1", result="at narwhaldepot")
    return [
        framework.Message(role="user", contents=["where is wombatparcel"]).to_dict(),
        framework.Message(role="assistant", contents=[call]).to_dict(),
        framework.Message(role="tool", contents=[result]).to_dict(),
    ]


def google_adk_turns() -> list[Message]:
    pytest.importorskip("google.adk")
    from google.adk.events import Event
    from google.genai import types

    from shardstore.integrations.google_adk import _event_message

    def event(author: str, role: str, part: Any) -> Message:
        return _event_message(Event(author=author, content=types.Content(role=role, parts=[part])))

    call = types.FunctionCall(name="track", args={"code": "okapicode"})
    reply = types.FunctionResponse(name="track", response={"at": "narwhaldepot"})
    return [
        event("user", "user", types.Part(text="where is wombatparcel")),
        event("helper", "model", types.Part(function_call=call)),
        event("helper", "user", types.Part(function_response=reply)),
    ]


FORMATS: dict[str, Callable[[], list[Message]]] = {
    "pydantic-ai": pydantic_ai_turns,
    "llamaindex": llamaindex_turns,
    "agent-framework": agent_framework_turns,
    "google-adk": google_adk_turns,
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_the_text_is_the_words_not_the_json(fmt: str) -> None:
    texts = [message_text(m) for m in FORMATS[fmt]()]
    joined = "\n".join(texts)
    for word in ("wombatparcel", "okapicode", "narwhaldepot"):
        assert word in joined, (fmt, texts)
    # field names of the envelope are not searchable text
    for noise in ("part_kind", "block_type", "tool_call_id", "invocation_id", "call_id"):
        assert noise not in joined, (fmt, noise, texts)


def test_vector_search_finds_each_format(store: shardstore.Store) -> None:
    embedder = HashEmbedder()
    searcher = shardstore.connect(store.dsn, embedding_model=embedder)
    try:
        sessions = {}
        for fmt, turns in FORMATS.items():
            try:
                messages = turns()
            except pytest.skip.Exception:
                continue
            sid = searcher.create_session("acme", fmt)
            searcher.append_turns(sid, messages)
            searcher.flush(sid)
            sessions[fmt] = sid
        assert searcher.embed() == len(sessions)
        for fmt, sid in sessions.items():
            for word in ("wombatparcel", "okapicode", "narwhaldepot"):
                hits = searcher.search(word, session_id=sid, k=1, mode="vector")
                assert hits, (fmt, word)
                found = " ".join(message_text(t.message) for t in hits[0].turns)
                assert word in found, (fmt, word, found)
    finally:
        searcher.close()
