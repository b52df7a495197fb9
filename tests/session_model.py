"""A simple in-memory model of one session, used by the property-based tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardstore.history.pairing import is_tool_result


@dataclass
class ModelTurn:
    message: dict[str, Any]
    tokens: int
    size: int
    key: str | None
    chunk_seq: int


@dataclass
class SessionModel:
    """Chunks by the documented rule: a turn opens a new chunk when the open one holds
    turns and the turn would take it over the token budget or the byte cap."""

    budget_tokens: int
    max_bytes: int
    turns: list[ModelTurn] = field(default_factory=list)
    keys: dict[str, int] = field(default_factory=dict)
    open_chunk: int = 0
    open_tokens: int = 0
    open_bytes: int = 0
    open_turns: int = 0

    def append(
        self, message: dict[str, Any], tokens: int, size: int, key: str | None
    ) -> tuple[int, int, int, bool]:
        if key is not None and key in self.keys:
            first = self.turns[self.keys[key]]
            return (self.keys[key], first.chunk_seq, first.tokens, True)
        if self.open_turns and (
            self.open_tokens + tokens > self.budget_tokens
            or self.open_bytes + size > self.max_bytes
        ):
            self.open_chunk += 1
            self.open_tokens = self.open_bytes = self.open_turns = 0
        self.turns.append(ModelTurn(message, tokens, size, key, self.open_chunk))
        self.open_tokens += tokens
        self.open_bytes += size
        self.open_turns += 1
        if key is not None:
            self.keys[key] = len(self.turns) - 1
        return (len(self.turns) - 1, self.open_chunk, tokens, False)

    def rewind(self, to: int) -> int:
        """Drop turns >= ``to`` and their keys; the chunk holding the last kept turn is the
        open chunk again (store.rewind's head rule). Returns how many were dropped."""
        removed = len(self.turns) - to
        del self.turns[to:]
        self.keys = {k: seq for k, seq in self.keys.items() if seq < to}
        self.open_chunk = self.turns[-1].chunk_seq if self.turns else 0
        members = [t for t in self.turns if t.chunk_seq == self.open_chunk]
        self.open_turns = len(members)
        self.open_tokens = sum(t.tokens for t in members)
        self.open_bytes = sum(t.size for t in members)
        return removed

    def tail(self, n: int | None, max_tokens: int | None) -> list[int]:
        """turn_seqs the tail should return."""
        picked: list[int] = []
        total = 0
        for seq in range(len(self.turns) - 1, -1, -1):
            if n is not None and len(picked) >= n:
                break
            if max_tokens is not None and total + self.turns[seq].tokens > max_tokens:
                break
            picked.append(seq)
            total += self.turns[seq].tokens
        picked.reverse()
        while picked and is_tool_result(self.turns[picked[0]].message):
            picked.pop(0)
        return picked
