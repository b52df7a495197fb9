"""The id mapping every adapter shares."""

from __future__ import annotations

import uuid

import pytest

from shardstore.errors import InvalidInput
from shardstore.integrations.ids import NAMESPACE, external_metadata, external_session_id


def test_non_uuid_ids_map_deterministically_per_framework_and_tenant() -> None:
    a = external_session_id("langgraph", "acme", "thread-1")
    assert a == external_session_id("langgraph", "acme", "thread-1")
    assert a == uuid.uuid5(NAMESPACE, "langgraph\x1facme\x1fthread-1")
    assert a != external_session_id("langgraph", "other", "thread-1")
    assert a != external_session_id("openai-agents", "acme", "thread-1")


def test_uuid_ids_are_kept() -> None:
    u = uuid.uuid4()
    assert external_session_id("langgraph", "acme", str(u)) == u
    assert external_session_id("langgraph", "acme", u.hex.upper()) == u


@pytest.mark.parametrize("bad", ["", None, 7, "a\x00b"])
def test_bad_ids_are_refused(bad: object) -> None:
    with pytest.raises(InvalidInput):
        external_session_id("langgraph", "acme", bad)  # type: ignore[arg-type]


def test_metadata_keeps_the_original_id() -> None:
    assert external_metadata("langgraph", "thread-1") == {
        "framework": "langgraph",
        "external_id": "thread-1",
    }
