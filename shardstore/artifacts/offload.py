"""Offload on append: a string inside an appended message (its content, a tool output, a
block of an Anthropic or Responses item) longer than ``offload_over`` UTF-8 bytes is stored
as an artifact and replaced by a small card::

    {"$shardstore.artifact": {<the ArtifactRef's fields>}, "preview": "<first 256 chars>",
     "session_id": "<the session>"}

The turn, its chunk, every checkpoint and every trace then hold the card, not the bytes.
``tail(expand=True)``, ``history(expand=True)`` and ``store.expand(turns)`` put the original
strings back, exactly (lone surrogates included). A card is expanded only where its turn
references its artifact, and a message that already holds a ``"$shardstore.artifact"`` key is
never offloaded, so a card-shaped dict a caller stored is returned as it was.

Order, so that no turn ever shows a card whose object is missing: the strings are uploaded
(verified, unreferenced), then the append and the turns' references commit in one
transaction. A client that dies in between leaves unreferenced artifacts for the sweep.
Token counts of an offloaded turn are the card's; the ref's ``tokens`` estimates the
string's (bytes / 4), so the 1 MB string is never tokenized on the append path."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any

from ..core import jsoncodec, validate
from ..core.sql import query
from ..core.state import StoreState
from ..core.steps import Op, Q
from ..encryption.keystore import DataKey
from ..errors import InvalidInput
from ..models import Turn
from .config import config_of
from .links import has_marker, ref_checkpoint_op, ref_turns_op
from .model import MARKER, ArtifactRef
from .ops import Sealing, check_sealing_op, read_all_op, sealing_op, session_tenant_op
from .source import source

PREVIEW_CHARS = 256
CONTENT_TYPE = "text/plain; charset=utf-8"
_CARD_KEYS = frozenset({MARKER, "preview", "session_id"})


def _big(value: str, over: int) -> bytes | None:
    if len(value) * 4 <= over:  # at most 4 bytes per character: surely small
        return None
    raw = value.encode("utf-8", "surrogatepass")
    return raw if len(raw) > over else None


def _big_strings(value: Any, over: int, found: dict[str, bytes], depth: int = 0) -> None:
    # The walk may run before the message is validated (needs_offload decides the path):
    # below the deepest level a valid message has it stops, so a message nested too deeply
    # (or holding a cycle) is left to jsoncodec to refuse as InvalidMessage, never a
    # RecursionError here.
    if depth > jsoncodec.MAX_DEPTH:
        return
    if isinstance(value, str):
        if value not in found:
            raw = _big(value, over)
            if raw is not None:
                found[value] = raw
    elif isinstance(value, dict):
        for item in value.values():
            _big_strings(item, over, found, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _big_strings(item, over, found, depth + 1)


def needs_offload(messages: Sequence[Any], over: int) -> bool:
    """Whether any message holds a string longer than ``over`` bytes (cheap for small
    messages: characters are counted before anything is encoded). Never raises: a message
    that is not valid (nested too deeply, cyclic, of the wrong type) is refused by the
    append's validation either way."""
    for message in messages:
        found: dict[str, bytes] = {}
        _big_strings(message, over, found)
        if found:
            return True
    return False


def _replace(value: Any, cards: dict[str, dict[str, Any]]) -> Any:
    if isinstance(value, str):
        return cards.get(value, value)
    if isinstance(value, dict):
        return {k: _replace(v, cards) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, cards) for v in value]
    return value


def card(ref: ArtifactRef, text: str, session_id: uuid.UUID) -> dict[str, Any]:
    """The card that stands for ``text`` in a stored message."""
    return {MARKER: ref.fields(), "preview": text[:PREVIEW_CHARS], "session_id": str(session_id)}


def offload_messages_op(
    store: StoreState, sid: uuid.UUID, messages: Sequence[Any]
) -> Op[tuple[str, list[Any], list[list[uuid.UUID]], Sealing | None]]:
    """(tenant, the messages with big strings replaced by cards, each message's artifact
    ids, the key they were sealed under when the store encrypts). Every message is
    validated first: a refused one uploads nothing."""
    config = config_of(store)
    over = config.offload_over
    assert over is not None
    for message in messages:
        jsoncodec.encode_message(message)  # InvalidMessage before any upload
    tenant = yield from session_tenant_op(sid)
    key = None
    sealing = None
    if store.ctx.sealer is not None:
        # sealed under the session's key, as its turns are: a shred of the subject's key
        # reaches the offloaded strings in every copy of the backend too
        sealing = yield from sealing_op(store.ctx.sealer, tenant, sid)
        key = sealing.key
    out: list[Any] = []
    ids: list[list[uuid.UUID]] = []
    for message in messages:
        found: dict[str, bytes] = {}
        if not has_marker(message):
            _big_strings(message, over, found)
        cards: dict[str, dict[str, Any]] = {}
        mine: list[uuid.UUID] = []
        for text, raw in found.items():
            ref = yield from _put_text_op(config, tenant, raw, key)
            cards[text] = card(ref, text, sid)
            mine.append(ref.artifact_id)
        out.append(_replace(message, cards) if cards else message)
        ids.append(mine)
    return tenant, out, ids, sealing


def _put_text_op(
    config: Any, tenant: str, raw: bytes, key: DataKey | None = None
) -> Op[ArtifactRef]:
    from .ops import put_op  # one module up; kept here to show what offload stores

    tokens = (len(raw) + 3) // 4
    return (yield from put_op(config, tenant, source(raw), CONTENT_TYPE, tokens, key=key))


def _ref_new_checkpoint_op(
    tenant: str, sid: uuid.UUID, results: Sequence[Any], links: dict[uuid.UUID, bool] | None
) -> Op[None]:
    """Reference a checkpoint state's artifacts from the checkpoint an append just wrote
    (none when the append was a retry: the first one's references stand)."""
    if not links or not results:
        return
    last = results[-1]
    if last.duplicate or last.checkpoint_id is None:
        return
    yield from ref_checkpoint_op(tenant, sid, last.checkpoint_id, links)


@dataclasses.dataclass(frozen=True, slots=True)
class Referenced:
    """An append that references artifacts: its session's tenant, the messages to store
    (big strings replaced by cards), each message's artifact ids, and those its checkpoint's
    state names (``links``)."""

    session_id: uuid.UUID
    tenant: str
    messages: list[Any]
    ids: list[list[uuid.UUID]]
    links: dict[uuid.UUID, bool] | None
    sealing: Sealing | None = None
    """The key the offloaded strings were sealed under (None: not sealed, or none)."""


def prepare_op(
    store: StoreState,
    session_id: Any,
    messages: list[Any],
    state: str | None,
    links: dict[uuid.UUID, bool] | None,
) -> Op[Referenced | None]:
    """What an append needs of the artifacts before its transaction: with ``offload_over``,
    its big strings uploaded (verified, unreferenced) and replaced by cards; with a
    checkpoint whose state names artifacts, the session's tenant. None when the append
    references no artifact (the plain path)."""
    config = store.artifact_config
    over = None if config is None else config.offload_over
    if over is not None and needs_offload(messages, over):
        sid = validate.session_id(session_id)
        tenant, stored, ids, sealing = yield from offload_messages_op(store, sid, messages)
        return Referenced(sid, tenant, stored, ids, links, sealing)
    if links and state is not None:  # links come only with a checkpoint's state
        sid = validate.session_id(session_id)
        tenant = yield from session_tenant_op(sid)
        return Referenced(sid, tenant, messages, [[] for _ in messages], links)
    return None


def reference_op(referenced: Referenced, results: Sequence[Any]) -> Op[None]:
    """In the append's transaction, after it: each turn's references to the artifacts its
    message holds, and the new checkpoint's to those its state names; a refused reference
    (``ArtifactNotFound``) rolls the append back. Offloaded strings sealed under a data-key
    version that a rotation replaced during their upload are never linked: ``Conflict``
    (retryable; the append is rolled back, and a repeat uploads them under the new
    version), since the rotation may shred the version once its final check passed."""
    sid, tenant = referenced.session_id, referenced.tenant
    per_turn = [
        (result.turn_seq, aid)
        for result, mine in zip(results, referenced.ids, strict=True)
        for aid in dict.fromkeys(mine)
    ]
    if per_turn:
        yield from check_sealing_op(
            referenced.sealing,
            "a string this append offloaded",
            "nothing was written, append again (retry=True with idempotency keys does)",
        )
    yield from ref_turns_op(tenant, sid, per_turn)
    yield from _ref_new_checkpoint_op(tenant, sid, results, referenced.links)


# ---------------------------------------------------------------- expand


def _is_card(value: dict[str, Any]) -> bool:
    return set(value) == _CARD_KEYS and isinstance(value.get(MARKER), dict)


def _cards(value: Any, out: list[dict[str, Any]], depth: int = 0) -> None:
    if depth > jsoncodec.MAX_DEPTH:
        # no stored message nests deeper; a caller-built Turn that does holds no card of ours
        raise InvalidInput(
            f"a turn's message nests deeper than {jsoncodec.MAX_DEPTH} levels (or contains "
            "a cycle): it did not come from tail() or history()"
        )
    if isinstance(value, dict):
        if _is_card(value):
            out.append(value)
            return
        for item in value.values():
            _cards(item, out, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _cards(item, out, depth + 1)


def _restore(value: Any, texts: dict[int, str]) -> Any:
    if isinstance(value, dict):
        if id(value) in texts:
            return texts[id(value)]
        return {k: _restore(v, texts) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v, texts) for v in value]
    return value


def expand_op(store: StoreState, turns: Sequence[Turn]) -> Op[list[Turn]]:
    """The turns with every card their turn references replaced by the original string
    (other turns unchanged, the same objects)."""
    found = []
    for turn in turns:
        cards: list[dict[str, Any]] = []
        _cards(turn.message, cards)
        if cards:
            found.append((turn, cards))
    if not found:
        return list(turns)
    config = config_of(store)
    sessions: dict[uuid.UUID, tuple[str, set[tuple[int, uuid.UUID]]]] = {}
    wanted: dict[uuid.UUID, set[int]] = {}
    for turn, cards in found:
        for c in cards:
            try:
                sid = uuid.UUID(str(c["session_id"]))
            except ValueError:
                continue
            wanted.setdefault(sid, set()).add(turn.turn_seq)
    for sid, seqs in wanted.items():
        tenant = yield from session_tenant_op(sid)
        rows = yield Q(query("artifact_turn_refs"), (sid, sorted(seqs)))
        sessions[sid] = (tenant, {(int(seq), aid) for seq, aid in rows})
    cache: dict[tuple[str, uuid.UUID], str] = {}
    out: list[Turn] = []
    by_turn = {id(turn): cards for turn, cards in found}
    for turn in turns:
        cards = by_turn.get(id(turn), [])
        texts: dict[int, str] = {}
        for c in cards:
            try:
                sid = uuid.UUID(str(c["session_id"]))
                aid = uuid.UUID(str(c[MARKER]["artifact_id"]))
            except (KeyError, ValueError):
                continue
            tenant, refs = sessions.get(sid, ("", set()))
            if (turn.turn_seq, aid) not in refs:
                continue
            if (tenant, aid) not in cache:
                raw = yield from read_all_op(config, tenant, aid, store.ctx.sealer)
                cache[(tenant, aid)] = raw.decode("utf-8", "surrogatepass")
            texts[id(c)] = cache[(tenant, aid)]
        out.append(
            dataclasses.replace(turn, message=_restore(turn.message, texts)) if texts else turn
        )
    return out


def expand(store: StoreState, turns: Sequence[Turn]) -> Op[list[Turn]]:
    """The turns with their offloaded strings put back: each message exactly as it was
    appended (the cards that ``tail()`` and ``history()`` return are replaced by the
    artifacts' text). Tokens stay those of the stored cards. ``ArtifactNotFound`` if an
    artifact a turn references is gone (its session was purged meanwhile)."""
    if not isinstance(turns, list | tuple) or not all(isinstance(t, Turn) for t in turns):
        raise InvalidInput("turns must be a list of Turn (as tail() and history() return)")
    return (yield from expand_op(store, turns))
