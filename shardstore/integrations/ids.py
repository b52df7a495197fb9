"""Stable session ids for frameworks whose own ids are not UUIDs.

LangGraph thread ids (``"thread-1"``), OpenAI Agents session ids and LangChain session ids
are arbitrary strings. Every adapter maps them the same way, so that an importer, the CLI
and a second adapter find the same session: an id that already is a UUID is used as it is;
any other id becomes ``uuid5(NAMESPACE, "<framework>\\x1f<tenant>\\x1f<id>")``. The tenant is
part of the name, so one framework id in two tenants names two sessions. The original id is
kept in the session's metadata under :data:`FRAMEWORK_KEY` and :data:`EXTERNAL_ID_KEY`.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..errors import InvalidInput

# fixed forever: changing it would orphan every mapped session
NAMESPACE = uuid.UUID("5b1c7a52-3f0e-5c8e-9d4a-73686172640a")
FRAMEWORK_KEY = "framework"
EXTERNAL_ID_KEY = "external_id"
_SEPARATOR = "\x1f"  # cannot occur in a tenant id or framework name a user types


def external_session_id(framework: str, tenant_id: str, external_id: str) -> uuid.UUID:
    """The shardstore session id for ``external_id`` of ``framework`` in ``tenant_id``.

    Guarantees: deterministic across processes and versions; a UUID string (any case,
    with or without hyphens) maps to that UUID; distinct (framework, tenant, id) triples of
    non-UUID ids map to distinct UUIDs (up to uuid5 collisions).
    """
    if not isinstance(external_id, str) or not external_id or "\x00" in external_id:
        raise InvalidInput("an external session id must be a non-empty string")
    try:
        return uuid.UUID(external_id)
    except ValueError:
        pass
    name = _SEPARATOR.join((framework, tenant_id, external_id))
    return uuid.uuid5(NAMESPACE, name)


def external_metadata(framework: str, external_id: str) -> dict[str, Any]:
    """The session metadata an adapter writes when it creates a mapped session."""
    return {FRAMEWORK_KEY: framework, EXTERNAL_ID_KEY: external_id}
