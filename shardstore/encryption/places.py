"""Where each kind of sealed value is bound: the ``kind`` and the position string its
associated data names (with its tenant and origin, :func:`.envelope.associated_data`).

One definition for the writers that seal, the readers that open, the importers that re-seal
and the rotation that re-keys: the associated data is a stored format, so a second spelling
of any of these would make values written by one side unreadable by another."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

TURN_KIND = "turn"
FACT_KIND = "fact.value"
SUMMARY_KIND = "summary"
LANGGRAPH_WRITE_KIND = "langgraph.write"
_LANGGRAPH_SEP = "\x1f"  # between the parts of a pending write's position


def checkpoint_kind(part: str) -> str:
    """The kind a sealed checkpoint column (``state``, ``tool_calls``, ``tool_results``) is
    bound to, with its session and checkpoint id."""
    return f"checkpoint.{part}"


def fact_position(fact_id: Any, key: str) -> str:
    """A fact value's position: its fact id and key."""
    return f"{fact_id}/{key}"


def summary_position(chunk_seq: int, first_turn_seq: int, last_turn_seq: int) -> str:
    """A chunk summary's position: its chunk and the turns it summarises."""
    return f"{chunk_seq}/{first_turn_seq}-{last_turn_seq}"


def langgraph_write_position(parts: Iterable[str]) -> str:
    """A LangGraph pending write's position: its namespace, checkpoint id, task, channel and
    value type."""
    return _LANGGRAPH_SEP.join(parts)
