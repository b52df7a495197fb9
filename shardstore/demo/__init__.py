"""Demo data: deterministic synthetic agent conversations and the demo's recall scenario.

Only the ``shardstore demo`` command, benchmarks and tests import this package; the library
core never does. :mod:`shardstore.demo.synthetic` holds the conversation generator
(re-exported here as :func:`conversation`, :func:`messages` and :data:`TOOL_NAMES`).
"""

from __future__ import annotations

from typing import Any

from . import synthetic
from .synthetic import TOOL_NAMES, conversation, messages

__all__ = [
    "DEMO_FACTS",
    "DEMO_MODEL",
    "DEMO_QUESTION",
    "TOOL_NAMES",
    "conversation",
    "messages",
    "recall_messages",
    "synthetic",
]

#: The embedding model the demo's search part uses.
DEMO_MODEL = "all-MiniLM-L6-v2"

# the demo's recall part: a short conversation with facts in it, asked about in other words
#: Facts planted in the recall conversation (the first one answers :data:`DEMO_QUESTION`).
DEMO_FACTS = [
    "By the way, my refund reference is QX-4471, the duplicate charge was on March 3rd.",
    "Our staging database listens on port 6543, production on 5432.",
    "I named my dog Biscuit after the cookies my grandmother baked.",
]
#: A paraphrased question whose answer is ``DEMO_FACTS[0]``.
DEMO_QUESTION = "which number should I quote about getting my money back?"


def recall_messages() -> list[dict[str, Any]]:
    """The demo's recall conversation: the first 40 text messages of
    ``messages(7, 60)`` with each of :data:`DEMO_FACTS` inserted as a user message (at
    positions 5, 17 and 29). Deterministic; a fresh list of fresh dicts on every call."""
    chatter = messages(7, 60)
    out = [m for m in chatter if isinstance(m.get("content"), str)][:40]
    for i, fact in enumerate(DEMO_FACTS):
        out.insert(5 + i * 12, {"role": "user", "content": fact})
    return out
