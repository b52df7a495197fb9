"""A LangGraph checkpointer on shardstore: ``ShardstoreSaver(store, tenant_id=...)``.

Storage grows linearly with the conversation. A LangGraph thread is one shardstore session
(``integrations.ids.external_session_id("langgraph", tenant, thread_id)``, created on the
first write with ``external_metadata`` in its metadata). The ``messages`` channel is the
session's turns: each message is appended once, in order, as the graph adds it, and a
checkpoint records only how many of the session's first turns it holds. Every other
channel, the channel versions, ``versions_seen`` and the metadata are one row of
``shardstore.checkpoints``; LangGraph's ids and namespaces and the pending writes are two
small tables of the langgraph migration (registered: purges, retention and rewinds cover them).
Serialized values (pending writes, channel values that are not plain JSON) are stored
deflated when that is shorter, and a run's input (the ``__start__`` channel) and its input
task's write, which hold the same messages, are stored once: whichever LangGraph stores
second names the first (decision 0026).

When a checkpoint's ``messages`` are not an append of the turns (time travel then a new
branch, an edit, a ``RemoveMessage``), the checkpoint holds the turns they share with the
session and the rest inline; a value that is not a list of messages, and a message that
would not come back exactly from JSON (``message_to_dict``), is stored inline whole, with
LangGraph's serializer. So every checkpoint comes back exactly as it was put.

Sync methods need a :class:`shardstore.Store`; with one, the async methods run the same
operations in a worker thread. Async methods on a :class:`shardstore.AsyncStore` await
them; its sync methods then raise ``InvalidInput`` (an asyncio pool cannot be used from
another thread). Each operation is written once, in the step protocol, for both.

Known limits: a message object changed in place after it was stored (instead of returned
as a new message with the same id) is not seen, as the saver compares the list's items by
identity first; ``delete_for_runs`` and ``prune`` remove checkpoints and writes, not turns
(purging the session, ``delete_thread``, removes everything).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import math
import operator
import threading
import uuid
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..core import jsoncodec, validate
from ..core.sql import query
from ..core.steps import Op, Q, Tx, collect
from ..encryption import turns as enc_turns
from ..encryption.envelope import is_sealed, refuse_sealed
from ..encryption.keystore import DataKey
from ..encryption.places import LANGGRAPH_WRITE_KIND, checkpoint_kind, langgraph_write_position
from ..errors import (
    Conflict,
    DecryptionFailed,
    InvalidInput,
    MissingDependency,
    SessionNotFound,
    SessionPurged,
)
from ..history import ops as history_ops
from ..lifecycle import purge as purge_ops
from ..state import fork as fork_ops
from .ids import external_metadata, external_session_id

try:
    from langchain_core.messages import (
        BaseMessage,
        convert_to_messages,
        message_to_dict,
        messages_from_dict,
    )
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_serializable_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise MissingDependency(
        "the LangGraph adapter needs langgraph: pip install 'shardstore[langgraph]'"
    ) from exc

__all__ = ["FRAMEWORK", "ShardstoreSaver"]

FRAMEWORK = "langgraph"
# fixed forever: names the shardstore checkpoint of (namespace, LangGraph id) and the
# session a thread moves to after delete_thread
_NAMESPACE = uuid.UUID("0c9b3f0e-6a51-5d3e-8f0c-6c616e676772")
_SEP = "\x1f"
_GENERATIONS = 8  # session ids tried per round trip when resolving a deleted thread
_ATTEMPTS = 5  # puts retried when another writer moved the session meanwhile
_MAX_INT = 2**63
_STATE_VERSION = 1
# serialized values of at least this many bytes are stored deflated when that is shorter:
# LangGraph's serializer keeps a message's text as is, and PostgreSQL compresses only rows
# over ~2 kB (a 1.6 kB message in a pending write or a run's input went to disk and WAL whole)
_DEFLATE_FROM = 128
# the value type of a deflated pending write: this prefix, then the serializer's type
_DEFLATED = "shardstore.deflate:"
# the channel LangGraph holds a run's input in, and how many checkpoints' message writes a
# saver keeps in memory for the input of the checkpoint they belong to (it is put after them)
_INPUT_CHANNEL = "__start__"
_RECENT_WRITES = 16
# the value type of a pending write that is its checkpoint's input (stored there once)
_INPUT_TYPE = "shardstore.input"
# how long a put_writes waits for its checkpoint's put running in another thread (LangGraph
# runs them side by side under async durability)
_PUT_WAIT_S = 2.0
_STATE_KIND = checkpoint_kind("state")  # as the store's own checkpoints: restore() opens it


# ---------------------------------------------------------------- values


def _plain(value: Any, depth: int = 0) -> bool:
    """True when ``value`` survives JSON (jsoncodec) exactly: only dict with str keys, list,
    str, bool, None, int of 64 bits and finite float."""
    if depth > 200:
        return False
    t = type(value)
    if value is None or t is str or t is bool:
        return True
    if t is int:
        return bool(-_MAX_INT <= value < _MAX_INT)
    if t is float:
        return math.isfinite(value)
    if t is list:
        return all(_plain(v, depth + 1) for v in value)
    if t is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    return False


def _forget_oldest(recent: dict[Any, Any]) -> None:
    """Trim one of a saver's small memories of what it stored last to :data:`_RECENT_WRITES`
    entries, the oldest first (the caller holds the saver's lock)."""
    while len(recent) > _RECENT_WRITES:
        del recent[next(iter(recent))]


def _deflate(blob: bytes) -> bytes | None:
    """``blob`` deflated (zlib), or None when it is short or does not shrink."""
    if len(blob) < _DEFLATE_FROM:
        return None
    packed = zlib.compress(blob, 6)
    return packed if len(packed) < len(blob) else None


# the most a stored value inflates to: what one PostgreSQL field holds. A row written by
# other SQL than the saver's (a tenant role may write its own rows) could otherwise inflate
# a few kB into gigabytes in the reading process
_INFLATED_MAX = 2**30


def _inflate(packed: bytes) -> bytes:
    """What :func:`_deflate` packed; ``InvalidInput`` for bytes that are not (a row this
    saver did not write), or that would inflate past :data:`_INFLATED_MAX`."""
    inflater = zlib.decompressobj()
    try:
        blob = inflater.decompress(packed, _INFLATED_MAX)
    except zlib.error:
        raise InvalidInput("a stored LangGraph value is not deflated data") from None
    if inflater.unconsumed_tail or not inflater.eof or inflater.unused_data:
        raise InvalidInput(
            "a stored LangGraph value is not deflated data the saver wrote (truncated, "
            f"followed by other bytes, or inflating past {_INFLATED_MAX} bytes)"
        )
    return blob


def _tuples_to_lists(value: Any) -> Any:
    """Metadata as JSON has it: tuples become lists (LangGraph's own savers do the same)."""
    if isinstance(value, tuple | list):
        return [_tuples_to_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _tuples_to_lists(v) for k, v in value.items()}
    return value


def _text(value: Any, what: str, *, empty: bool = False) -> str:
    """A string the database can store (no NUL, no lone surrogate); empty only if allowed."""
    return validate.text(value, what, limit=None, empty=empty)


def _configurable(config: Any) -> Mapping[str, Any]:
    if not isinstance(config, Mapping):
        raise InvalidInput(f"config must be a dict, not {type(config).__name__}")
    conf = config.get("configurable")
    if not isinstance(conf, Mapping):
        raise InvalidInput("config needs a 'configurable' dict with a 'thread_id'")
    return conf


def _thread_id(value: Any) -> str:
    if isinstance(value, uuid.UUID) or (type(value) is int):
        value = str(value)
    return _text(value, "thread_id")


def _where(config: Any) -> tuple[str, str, str | None]:
    """(thread_id, checkpoint_ns, checkpoint_id or None) of a config."""
    conf = _configurable(config)
    thread = _thread_id(conf.get("thread_id"))
    ns = _text(conf.get("checkpoint_ns", ""), "checkpoint_ns", empty=True)
    cid = conf.get("checkpoint_id")
    return thread, ns, None if cid is None else _text(cid, "checkpoint_id")


def _config(thread: str, ns: str, cid: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}


def shard_checkpoint_id(checkpoint_ns: str, checkpoint_id: str) -> uuid.UUID:
    """The id of the shardstore checkpoint holding LangGraph checkpoint ``checkpoint_id`` of
    namespace ``checkpoint_ns`` (deterministic: a repeated put overwrites it)."""
    return uuid.uuid5(_NAMESPACE, checkpoint_ns + _SEP + checkpoint_id)


def _next_generation(sid: uuid.UUID) -> uuid.UUID:
    return uuid.uuid5(_NAMESPACE, f"next{_SEP}{sid}")


def message_turn(message: Any, limit: int) -> dict[str, Any] | None:
    """The turn that stores a LangChain message (``message_to_dict``), or None when it
    would not come back exactly (a type ``messages_from_dict`` does not know, a value JSON
    cannot hold, or over ``limit`` bytes): that message is then kept inline."""
    if not isinstance(message, BaseMessage):
        return None
    try:
        turn = message_to_dict(message)
        text = jsoncodec.encode_message(turn)
        if len(text.encode("utf-8")) > limit:
            return None
        back = messages_from_dict([jsoncodec.loads(text)])[0]
    except Exception:  # any failure only means: keep it inline
        return None
    if type(back) is not type(message) or back != message:
        return None
    return turn


def turn_message(turn: dict[str, Any]) -> BaseMessage:
    """The LangChain message of a stored turn: one this saver wrote, or one appended by
    other means in a format LangChain reads (``{"role": ..., "content": ...}``)."""
    try:
        return messages_from_dict([turn])[0]
    except Exception:  # not a message_to_dict turn: LangChain's general conversion
        return convert_to_messages([turn])[0]


def _same_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items ``a`` and ``b`` share: by identity (the graph passes back the
    very objects), else by equality."""
    n = min(len(a), len(b))
    if all(map(operator.is_, a, b)):  # map stops at the shorter: no copies
        return n
    for i in range(n):
        if a[i] is not b[i] and a[i] != b[i]:
            return i
    return n


@dataclass(frozen=True, slots=True)
class _Head:
    """A session's turns as last seen: the count, the last append's time, the first turn
    still stored. Equal heads mean equal turns (appends change the time, rewinds the count
    or the time, range purges the first turn)."""

    turns: int
    last_at: datetime | None
    first: int


@dataclass(frozen=True, slots=True)
class _Log:
    """The saver's copy of a session's turns ``first .. first + len(messages)``, valid
    while the session's head is ``head``. Replaced, never changed in place."""

    head: _Head
    messages: list[Any] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return self.head.first + len(self.messages) >= self.head.turns


def _head(row: Mapping[str, Any]) -> _Head:
    return _Head(int(row["turns"]), row["last_at"], int(row["first"]))


def _named(name: str, params: Any, fetch: Any = "all", **kw: Any) -> Q:
    return Q(query(name), params, fetch=fetch, named=True, **kw)


@dataclass(frozen=True, slots=True)
class _Plan:
    """What a put stores for the messages: turns to append, the position, the rest inline."""

    append: list[dict[str, Any]]
    appended: list[Any]
    ref: dict[str, Any] | None


class ShardstoreSaver(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer (``BaseCheckpointSaver``) storing threads of ``tenant_id``
    in a shardstore ``store`` (a :class:`shardstore.Store` for the sync methods, an
    :class:`shardstore.AsyncStore` for the async ones; see the module docstring).

    ``messages_channel`` names the channel kept as turns (``MessagesState``'s is
    ``"messages"``). ``serde``: LangGraph's serializer for values that are not plain JSON
    and for pending writes (default ``JsonPlusSerializer``). Guarantees: every checkpoint,
    its metadata and its pending writes come back exactly as put; each message that round
    trips through ``message_to_dict`` is stored once, as a turn; a put is one statement
    (one round trip) when the graph only appended messages.

    With a store connected with ``encryption=``, the turns, the checkpoint state (every
    channel value, versions, ``versions_seen``) and the pending writes are sealed
    client-side under the thread session's data key, each bound to its session and place
    (turn_seq; checkpoint; namespace, checkpoint, task, channel and type of a write), and
    opened on read: a value copied to another thread or place raises ``DecryptionFailed``,
    a plaintext one ``PlaintextRefused``; nothing of either is returned. The checkpoint
    metadata stays clear (``list(filter=...)`` matches it in the database)."""

    def __init__(
        self,
        store: Any,
        *,
        tenant_id: str,
        messages_channel: str = "messages",
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        from ..aio import AsyncStore
        from ..store import Store

        if not isinstance(store, Store | AsyncStore):
            raise InvalidInput(
                f"store must be a shardstore.Store or AsyncStore, not {type(store).__name__}"
            )
        self.store = store
        self.tenant_id = _text(tenant_id, "tenant_id")
        self.messages_channel = _text(messages_channel, "messages_channel")
        self._async = isinstance(store, AsyncStore)
        self._lock = threading.Lock()
        self._threads: dict[str, uuid.UUID] = {}  # thread id -> its live session
        self._logs: dict[uuid.UUID, _Log] = {}
        # (session, namespace, checkpoint id) -> {task id: value} of the messages channel's
        # writes stored last: a run's input names the one it equals instead of a copy
        self._written: dict[tuple[uuid.UUID, str, str], dict[str, Any]] = {}
        # (session, namespace, checkpoint id) -> the messages of the input stored in the
        # checkpoint put last: its input task's write names it instead of a copy
        self._inputs: dict[tuple[uuid.UUID, str, str], Any] = {}
        # (session, namespace, checkpoint id) -> set when the put of it running now ends
        self._putting: dict[tuple[uuid.UUID, str, str], threading.Event] = {}

    # ------------------------------------------------------------ running

    def _run(self, op: Op[Any]) -> Any:
        if self._async:
            raise InvalidInput(
                "this ShardstoreSaver was made with an AsyncStore: use the async methods "
                "(ainvoke, astream, aget_state...) or give it a shardstore.Store"
            )
        return self.store._run(op)

    async def _arun(self, op: Op[Any]) -> Any:
        if self._async:
            return await self.store._run(op)
        return await asyncio.to_thread(self.store._run, op)

    # ------------------------------------------------------------ values

    def _enc(self, value: Any) -> dict[str, Any]:
        if _plain(value):
            return {"j": value}
        kind, blob = self.serde.dumps_typed(value)
        packed = _deflate(blob)
        if packed is not None:
            return {"z": [kind, base64.b64encode(packed).decode("ascii")]}
        return {"s": [kind, base64.b64encode(blob).decode("ascii")]}

    def _dec(self, doc: Mapping[str, Any]) -> Any:
        if "j" in doc:
            return doc["j"]
        if "z" in doc:
            kind, text = doc["z"]
            return self.serde.loads_typed((kind, _inflate(base64.b64decode(text))))
        kind, text = doc["s"]
        return self.serde.loads_typed((kind, base64.b64decode(text)))

    def _input_ref(self, sid: uuid.UUID, ns: str, cid: str, value: Any) -> dict[str, Any] | None:
        """A run's input (``__start__``: a dict whose messages-channel entry is what the
        input task wrote) as the name of that pending write of the same checkpoint, which
        LangGraph stores before the checkpoint: the input's messages are not stored twice."""
        channel = self.messages_channel
        if type(value) is not dict or channel not in value:
            return None
        with self._lock:
            written = self._written.get((sid, ns, cid))
        if not written:
            return None
        inner = value[channel]
        task = next((t for t, v in written.items() if v is inner), None)
        if task is None:
            task = next((t for t, v in written.items() if v == inner), None)
        if task is None:
            return None
        rest = {k: v for k, v in value.items() if k != channel}
        return {"w": task, "k": list(value), "r": self._enc(rest)}

    def _dec_channel(self, doc: Mapping[str, Any], writes: Sequence[Any]) -> Any:
        """A channel value as stored: encoded (``_enc``), or a run's input naming its
        checkpoint's pending write (``_input_ref``)."""
        if "w" not in doc:
            return self._dec(doc)
        channel = self.messages_channel
        inner = next((v for task, c, v in writes if task == doc["w"] and c == channel), _MISSING)
        if inner is _MISSING:
            raise InvalidInput(
                "a checkpoint's input names a pending write that is gone (rows changed "
                "outside this saver)"
            )
        rest = self._dec(doc["r"])
        return {k: inner if k == channel else rest[k] for k in doc["k"]}

    def _write_values(
        self, stored: Sequence[tuple[str, str, str, bytes]], state: Mapping[str, Any]
    ) -> list[tuple[str, str, Any]]:
        """A checkpoint's pending writes (task, channel, type, opened bytes) as LangGraph's
        (task, channel, value); a write stored as its checkpoint's input (``_INPUT_TYPE``)
        is read from the checkpoint's ``state``."""
        out = []
        for task, channel, kind, blob in stored:
            if kind == _INPUT_TYPE:
                doc = state["ch"].get(_INPUT_CHANNEL)
                start = self._dec(doc) if isinstance(doc, Mapping) and "w" not in doc else None
                if type(start) is not dict or channel not in start:
                    raise InvalidInput(
                        "a pending write names its checkpoint's input, which holds none "
                        "(rows changed outside this saver)"
                    )
                out.append((task, channel, start[channel]))
            else:
                out.append((task, channel, self._loads_write(kind, blob)))
        return out

    def _dumps_write(self, value: Any) -> tuple[str, bytes]:
        """A pending write's value as stored: its type and bytes, deflated when shorter."""
        kind, blob = self.serde.dumps_typed(value)
        packed = _deflate(blob)
        return (kind, blob) if packed is None else (_DEFLATED + kind, packed)

    def _loads_write(self, kind: str, blob: bytes) -> Any:
        """A pending write's value from its stored type and bytes (deflated or not)."""
        if kind.startswith(_DEFLATED):
            return self.serde.loads_typed((kind[len(_DEFLATED) :], _inflate(bytes(blob))))
        return self.serde.loads_typed((kind, bytes(blob)))

    # ------------------------------------------------------------ encryption
    # With a store connected with encryption=, the saver seals what its own statements
    # write, as the store's own writes are sealed: each turn for its session and turn_seq
    # (the store's readers open them), the checkpoint state for its session and shardstore
    # checkpoint id (so store.restore() opens it too), and each pending write for its
    # session, namespace, checkpoint, task, channel and type. Each names its writing session
    # ("o"), which copy_thread's target accepts from its fork lineage only.

    def _key_op(self, sid: uuid.UUID) -> Op[DataKey]:
        """The session's data key, read under its row's lock: call it inside the transaction
        that writes what it seals, so that a data-key rotation never shreds the version that
        seals it (:func:`~shardstore.encryption.turns.locked_session_key_op`)."""
        sealer = self.store.ctx.sealer
        assert sealer is not None
        return (yield from enc_turns.locked_session_key_op(sealer, sid))

    def _seal_turns(
        self, key: DataKey, sid: uuid.UUID, first_seq: int, texts: Sequence[str]
    ) -> tuple[list[str], list[int]]:
        sealer = self.store.ctx.sealer
        assert sealer is not None
        sealed = [
            sealer.seal_text(
                key, enc_turns.TURN, str(sid), str(first_seq + i), text, with_origin=True
            )
            for i, text in enumerate(texts)
        ]
        return sealed, enc_turns.sealed_sizes(sealed, self.store.settings.chunk_max_bytes)

    def _seal_state(self, key: DataKey, sid: uuid.UUID, ns: str, cid: str, text: str) -> str:
        sealer = self.store.ctx.sealer
        assert sealer is not None
        position = str(shard_checkpoint_id(ns, cid))
        return sealer.seal_text(key, _STATE_KIND, str(sid), position, text, with_origin=True)

    def _seal_write(
        self, key: DataKey, sid: uuid.UUID, where: tuple[str, str, str, str, str], blob: bytes
    ) -> bytes:
        sealer = self.store.ctx.sealer
        assert sealer is not None
        text = base64.b64encode(blob).decode("ascii")
        return sealer.seal_text(
            key,
            LANGGRAPH_WRITE_KIND,
            str(sid),
            langgraph_write_position(where),
            text,
            with_origin=True,
        ).encode("ascii")

    def _origin_op(self, sid: uuid.UUID, value: Any, lineage: dict[str, Any]) -> Op[str]:
        """The session a sealed value names as its writer, accepted only from ``sid``'s fork
        lineage (copy_thread's source); ``lineage`` caches it for the call."""
        origin = value.get("o", str(sid))
        if origin == str(sid):
            return str(origin)
        if "lineage" not in lineage:
            lineage["lineage"] = yield from enc_turns.lineage_op(sid)
        if type(origin) is not str or origin not in lineage["lineage"]:
            raise DecryptionFailed(
                f"a value of thread session {sid} was sealed for another session; nothing of "
                "it is returned"
            )
        return origin

    def _open_state_op(
        self, sid: uuid.UUID, ns: str, cid: str, text: str, lineage: dict[str, Any]
    ) -> Op[dict[str, Any]]:
        """A checkpoint row's state, opened (sealed stores) or checked not to be sealed."""
        value = jsoncodec.loads(text)
        sealer = self.store.ctx.sealer
        what = f"checkpoint {cid!r:.80} of thread session {sid}"
        if sealer is None:
            refuse_sealed(value, what)
            return value  # type: ignore[no-any-return]
        origin = str(sid)
        if is_sealed(value):
            origin = yield from self._origin_op(sid, value, lineage)
        position = str(shard_checkpoint_id(ns, cid))
        opened: dict[str, Any] = jsoncodec.loads(
            sealer.open(value, _STATE_KIND, origin, position, what)
        )
        return opened

    def _open_write_op(
        self,
        sid: uuid.UUID,
        where: tuple[str, str, str, str, str],
        blob: bytes,
        lineage: dict[str, Any],
    ) -> Op[bytes]:
        """A pending write's value, opened (sealed stores) or checked not to be sealed."""
        sealer = self.store.ctx.sealer
        what = f"a pending write of checkpoint {where[1]!r:.80} of thread session {sid}"
        value: Any = None
        if blob[:1] == b"{":
            with contextlib.suppress(ValueError, UnicodeDecodeError):
                value = jsoncodec.loads(blob.decode("utf-8"))
        if sealer is None:
            refuse_sealed(value, what)
            return blob
        origin = str(sid)
        if is_sealed(value):
            origin = yield from self._origin_op(sid, value, lineage)
        text = sealer.open(
            value, LANGGRAPH_WRITE_KIND, origin, langgraph_write_position(where), what
        )
        try:
            return base64.b64decode(text, validate=True)
        except ValueError:
            raise DecryptionFailed(f"{what} is malformed") from None

    def _open_got_op(self, row: Any, sid: uuid.UUID, ns: str) -> Op[Any]:
        """An ``lg_get_one`` row with its state and pending writes opened."""
        if row is None or row["checkpoint_id"] is None:
            return row
        cid = row["checkpoint_id"]
        lineage: dict[str, Any] = {}
        state = yield from self._open_state_op(sid, ns, cid, row["state"], lineage)
        opened = dict(row)
        opened["state"] = state
        if row["task_ids"] is not None:
            values = []
            for task, channel, kind, blob in zip(
                row["task_ids"],
                row["channels"],
                row["value_types"],
                row["write_values"],
                strict=True,
            ):
                where = (ns, cid, task, channel, kind)
                values.append((yield from self._open_write_op(sid, where, bytes(blob), lineage)))
            opened["write_values"] = values
        return opened

    # ------------------------------------------------------------ sessions

    def _forget(self, thread: str, sid: uuid.UUID | None = None) -> None:
        with self._lock:
            if sid is None or self._threads.get(thread) == sid:
                self._threads.pop(thread, None)
            if sid is not None:
                self._logs.pop(sid, None)

    def _resolve_op(self, thread: str) -> Op[tuple[uuid.UUID, bool]]:
        """The session a thread maps to now and whether it exists: the mapped id
        (``external_session_id``), or, once that session was purged (``delete_thread``),
        the next id derived from it, so that a thread id can be used again."""
        sid = external_session_id(FRAMEWORK, self.tenant_id, thread)
        while True:
            ids = [sid]
            for _ in range(_GENERATIONS - 1):
                ids.append(_next_generation(ids[-1]))
            rows = yield _named("lg_sessions", (ids,))
            purged = {r["session_id"]: r["purged"] for r in rows}
            live = next((i for i in ids if i not in purged or not purged[i]), None)
            if live is not None:
                return live, live in purged
            sid = _next_generation(ids[-1])

    def _session_op(self, thread: str, *, create: bool) -> Op[uuid.UUID | None]:
        """The live session of a thread, created (with ``external_metadata``) if it has
        none and ``create``; None if it has none and not ``create``."""
        known = self._threads.get(thread)
        if known is not None:
            return known
        sid, exists = yield from self._resolve_op(thread)
        if not exists:
            if not create:
                return None
            yield from history_ops.create_session_op(
                self.tenant_id, session_id=sid, metadata=external_metadata(FRAMEWORK, thread)
            )
        with self._lock:
            self._threads[thread] = sid
        return sid

    def _head_op(self, sid: uuid.UUID) -> Op[_Head | None]:
        row = yield _named("lg_head", (sid,), fetch="one")
        if row is None or row["purged"]:
            return None
        return _head(row)

    def _log_op(self, sid: uuid.UUID, head: _Head, upto: int, *, keep: bool = True) -> Op[_Log]:
        """The saver's copy of turns ``head.first .. upto`` of a session whose head is
        ``head``, read from the database as far as the copy lacks them (and kept as the
        saver's copy when ``keep``; without, the caller keeps it once it knows the turns
        read are those of ``head``)."""
        with self._lock:
            log = self._logs.get(sid)
        if log is None or log.head != head:
            log = _Log(head, [])
        have = head.first + len(log.messages)
        upto = min(upto, head.turns)
        if have < upto:
            turns = yield from collect(history_ops.history(self.store, sid, have, head.turns))
            fresh = [turn_message(t.message) for t in turns]
            log = _Log(head, log.messages + fresh)
            if keep:
                with self._lock:
                    self._logs[sid] = log
        return log

    # ------------------------------------------------------------ put

    def _plan(self, log: _Log, messages: Any) -> _Plan:
        """What to store for this checkpoint's messages against the session's turns."""
        channel = self.messages_channel
        known = log.messages
        shared = _same_prefix(messages, known) if isinstance(messages, list) else -1
        # the shared items equal turns, which are messages: only the rest needs a look
        if shared < 0 or not all(isinstance(m, BaseMessage) for m in messages[shared:]):
            return _Plan([], [], {"c": channel, "v": self._enc(messages)})
        append: list[dict[str, Any]] = []
        appended: list[Any] = []
        if shared == len(known):
            limit = self.store.settings.chunk_max_bytes
            for m in messages[shared:]:
                turn = message_turn(m, limit)
                if turn is None:
                    break
                append.append(turn)
                appended.append(m)
        held = shared + len(appended)
        ref: dict[str, Any] = {"c": channel, "n": log.head.first + held}
        if held < len(messages):
            ref["t"] = self._enc(messages[held:])
        return _Plan(append, appended, ref)

    def _put_op(
        self,
        config: Any,
        checkpoint: Any,
        metadata: Any,
        new_versions: Any,
    ) -> Op[RunnableConfig]:
        thread, ns, parent = _where(config)
        if not isinstance(checkpoint, Mapping) or not isinstance(
            checkpoint.get("channel_values"), Mapping
        ):
            raise InvalidInput("checkpoint must be a LangGraph Checkpoint (a dict)")
        cid = _text(checkpoint.get("id"), "checkpoint id")
        if not isinstance(metadata, Mapping):
            raise InvalidInput(f"metadata must be a dict, not {type(metadata).__name__}")
        meta = _tuples_to_lists(get_serializable_checkpoint_metadata(config, dict(metadata)))  # type: ignore[arg-type]
        meta_text = jsoncodec.encode_json(meta, "metadata")
        run_id = meta.get("run_id")
        run_id = run_id if isinstance(run_id, str) and run_id and "\x00" not in run_id else None
        values = dict(checkpoint["channel_values"])
        messages = values.pop(self.messages_channel, _MISSING)
        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        base_state: dict[str, Any] = {
            "lg": _STATE_VERSION,
            "cp": self._enc(rest),
            "ch": {k: self._enc(v) for k, v in values.items()},
        }
        ctx = self.store.ctx
        chunking = (
            ctx.settings.budget_tokens,
            ctx.settings.chunk_max_bytes,
            ctx.partition_interval.total_seconds(),
            ctx.partition_origin,
        )
        sid = yield from self._session_op(thread, create=True)
        assert sid is not None
        start = values.get(_INPUT_CHANNEL)
        in_flight = (sid, ns, cid)
        done = threading.Event()
        with self._lock:
            mine = self._putting.setdefault(in_flight, done) is done
        try:
            log: _Log | None = None
            for _attempt in range(_ATTEMPTS):
                with self._lock:
                    cached = self._logs.get(sid)
                if log is None and cached is not None and cached.complete:
                    log = cached
                if log is None:
                    head = yield from self._head_op(sid)
                    if head is None:  # purged meanwhile: the thread moves on
                        self._forget(thread, sid)
                        sid = yield from self._session_op(thread, create=True)
                        assert sid is not None
                        continue
                    log = yield from self._log_op(sid, head, head.turns)
                state = dict(base_state)
                given = self._input_ref(sid, ns, cid, start)
                if given is not None:
                    state["ch"] = {**state["ch"], _INPUT_CHANNEL: given}
                plan = None
                if messages is not _MISSING:
                    plan = self._plan(log, messages)
                    state["msg"] = plan.ref
                state_text = history_ops.encode_state(
                    state, "checkpoint", ctx.settings.chunk_max_bytes
                )
                turns = [] if plan is None else plan.append
                batch = history_ops.prepare_turns(ctx, turns, [None] * len(turns))
                texts, sizes = batch.texts, batch.sizes
                sealed = ctx.sealer is not None
                if sealed:
                    # lg_put appends at the head it is given (else 'stale'): turn i gets
                    # log.head.turns + i, the seq it is sealed for; the key is read under the
                    # session row's lock, held until lg_put commits
                    yield Tx.BEGIN
                    key = yield from self._key_op(sid)
                    texts, sizes = self._seal_turns(key, sid, log.head.turns, texts)
                    state_text = self._seal_state(key, sid, ns, cid, state_text)
                params = (
                    sid,
                    ns,
                    cid,
                    parent,
                    run_id,
                    shard_checkpoint_id(ns, cid),
                    log.head.turns,
                    log.head.last_at,
                    "[" + ",".join(texts) + "]",
                    batch.tokens,
                    sizes,
                    *chunking,
                    state_text,
                    meta_text,
                )
                try:
                    row = yield _named("lg_put", params, fetch="one")
                    if sealed:
                        yield Tx.COMMIT
                except (SessionNotFound, SessionPurged):
                    self._forget(thread, sid)
                    log = None
                    sid = yield from self._session_op(thread, create=True)
                    assert sid is not None
                    continue
                if row["status"] == "stale":
                    with self._lock:
                        self._logs.pop(sid, None)
                    log = None
                    continue
                head = _Head(int(row["turns"]), row["last_at"], log.head.first)
                grown = _Log(head, log.messages + (plan.appended if plan is not None else []))
                with self._lock:
                    current = self._logs.get(sid)
                    if current is None or current is log:
                        self._logs[sid] = grown
                    else:  # another call of this saver replaced it meanwhile: read it again
                        self._logs.pop(sid, None)
                if given is None and type(start) is dict and self.messages_channel in start:
                    # stored here: the input task's write (LangGraph puts it after this, with
                    # async durability) names it
                    with self._lock:
                        self._inputs.setdefault((sid, ns, cid), start[self.messages_channel])
                        _forget_oldest(self._inputs)
                if row["sealed"]:
                    outcome = history_ops.AppendOutcome(sid, [], True)
                    yield from history_ops._after_append_op(self.store, outcome)
                return _config(thread, ns, cid)
            raise Conflict(
                f"thread {thread!r}: the session kept changing under this put ({_ATTEMPTS} tries); "
                "another writer is appending to it: retry"
            )
        finally:
            if mine:
                with self._lock:
                    del self._putting[in_flight]
                done.set()

    def _put_writes_op(self, config: Any, writes: Any, task_id: Any, task_path: Any) -> Op[None]:
        thread, ns, cid = _where(config)
        if cid is None:
            raise InvalidInput("put_writes needs a config with a checkpoint_id")
        task = _text(task_id, "task_id")
        path = _text(task_path, "task_path", empty=True)
        if isinstance(writes, str | bytes) or not isinstance(writes, Sequence):
            raise InvalidInput("writes must be a sequence of (channel, value) pairs")
        idx, channels, kinds, blobs = [], [], [], []
        for i, write in enumerate(writes):
            if not isinstance(write, tuple | list) or len(write) != 2:
                raise InvalidInput(f"write {i} must be a (channel, value) pair")
            channel = _text(write[0], f"write {i}'s channel")
            kind, blob = self._dumps_write(write[1])
            idx.append(WRITES_IDX_MAP.get(channel, i))
            channels.append(channel)
            kinds.append(kind)
            blobs.append(blob)
        if not idx:
            return None
        sid = yield from self._session_op(thread, create=True)
        assert sid is not None
        with self._lock:
            putting = self._putting.get((sid, ns, cid))
        if putting is not None and not self._async:
            # the checkpoint's put is under way in another thread: its input, once stored,
            # may hold this write's value
            putting.wait(_PUT_WAIT_S)
        with self._lock:
            stored_input = self._inputs.get((sid, ns, cid), _MISSING)
        if stored_input is not _MISSING:
            for i, (channel, write) in enumerate(zip(channels, writes, strict=True)):
                value = write[1]
                if channel == self.messages_channel and (
                    value is stored_input or value == stored_input
                ):
                    # the checkpoint holds this value as its input already
                    kinds[i], blobs[i] = _INPUT_TYPE, b""
        try:
            yield from self._write_blobs_op(sid, (ns, cid, task, path, idx, channels, kinds), blobs)
        except (SessionNotFound, SessionPurged):
            self._forget(thread, sid)
            sid = yield from self._session_op(thread, create=True)
            assert sid is not None
            yield from self._write_blobs_op(sid, (ns, cid, task, path, idx, channels, kinds), blobs)
        mine = [
            w[1]
            for c, w, i, k in zip(channels, writes, idx, kinds, strict=True)
            if c == self.messages_channel and i >= 0 and k != _INPUT_TYPE
        ]
        if len(mine) == 1:
            # a regular write stored once is kept (lg_put_writes): the first value is the one
            # the input may name
            with self._lock:
                self._written.setdefault((sid, ns, cid), {}).setdefault(task, mine[0])
                _forget_oldest(self._written)
        return None

    def _write_blobs_op(
        self, sid: uuid.UUID, where: tuple[Any, ...], blobs: list[bytes]
    ) -> Op[None]:
        """One ``lg_put_writes`` of ``blobs`` for ``where`` (namespace, checkpoint, task,
        path, indexes, channels, types); sealed stores seal them and write them in one
        transaction, the key read under the session row's lock."""
        ns, cid, task, _path, _idx, channels, kinds = where
        sealed = self.store.ctx.sealer is not None
        if sealed:
            yield Tx.BEGIN
        stored = yield from self._sealed_blobs_op(sid, ns, cid, task, channels, kinds, blobs)
        yield Q(query("lg_put_writes"), (sid, *where, stored), fetch="one")
        if sealed:
            yield Tx.COMMIT

    def _sealed_blobs_op(
        self,
        sid: uuid.UUID,
        ns: str,
        cid: str,
        task: str,
        channels: list[str],
        kinds: list[str],
        blobs: list[bytes],
    ) -> Op[list[bytes]]:
        """The writes' values as stored: sealed for their place with encryption on."""
        if self.store.ctx.sealer is None:
            return blobs
        key = yield from self._key_op(sid)
        return [
            self._seal_write(key, sid, (ns, cid, task, channel, kind), blob)
            for channel, kind, blob in zip(channels, kinds, blobs, strict=True)
        ]

    # ------------------------------------------------------------ reads

    def _tuple(
        self,
        row: Mapping[str, Any],
        state: Mapping[str, Any],
        sid: uuid.UUID,
        ns: str,
        thread: str,
        writes: list[Any],
        log: _Log | None,
    ) -> CheckpointTuple:
        """The checkpoint tuple of a checkpoint row, its decoded state and its pending
        writes, with its messages from ``log`` (the saver's copy of the session's turns,
        read with the row; None when the session was purged)."""
        cid = row["checkpoint_id"]
        rest = self._dec(state["cp"])
        values = {k: self._dec_channel(v, writes) for k, v in state["ch"].items()}
        ref = state.get("msg")
        if ref is not None:
            if "v" in ref:
                values[ref["c"]] = self._dec(ref["v"])
            else:
                held: list[Any] = []
                if log is not None:
                    held = log.messages[: max(0, ref["n"] - log.head.first)]
                if "t" in ref:
                    held = held + self._dec(ref["t"])
                values[ref["c"]] = held
        parent = row["parent_id"]
        return CheckpointTuple(
            config=_config(thread, ns, cid),
            checkpoint={**rest, "channel_values": values},  # type: ignore[typeddict-item]
            metadata=jsoncodec.loads(row["metadata"]),
            parent_config=None if parent is None else _config(thread, ns, parent),
            pending_writes=writes,
        )

    def _tuples_op(
        self, rows: Sequence[Mapping[str, Any]], threads: Mapping[uuid.UUID, str]
    ) -> Op[list[CheckpointTuple]]:
        """Checkpoint tuples of ``rows`` (inside the caller's snapshot): their writes in one
        statement, their messages from the saver's copy of each session's turns."""
        if not rows:
            return []
        keys = (
            [r["session_id"] for r in rows],
            [r["checkpoint_ns"] for r in rows],
            [r["checkpoint_id"] for r in rows],
        )
        written = yield _named("lg_writes", keys)
        writes: dict[tuple[Any, str, str], list[tuple[str, str, str, bytes]]] = {}
        lineages: dict[uuid.UUID, dict[str, Any]] = {}
        for w in written:
            where = (
                w["checkpoint_ns"],
                w["checkpoint_id"],
                w["task_id"],
                w["channel"],
                w["value_type"],
            )
            lineage = lineages.setdefault(w["session_id"], {})
            blob = yield from self._open_write_op(
                w["session_id"], where, bytes(w["value"]), lineage
            )
            writes.setdefault((w["session_id"], w["checkpoint_ns"], w["checkpoint_id"]), []).append(
                (w["task_id"], w["channel"], w["value_type"], blob)
            )
        states = []
        for r in rows:
            lineage = lineages.setdefault(r["session_id"], {})
            states.append(
                (
                    yield from self._open_state_op(
                        r["session_id"], r["checkpoint_ns"], r["checkpoint_id"], r["state"], lineage
                    )
                )
            )
        logs: dict[uuid.UUID, _Log] = {}
        for row, state in zip(rows, states, strict=True):
            ref = state.get("msg")
            sid = row["session_id"]
            if ref is None or "n" not in ref or sid in logs:
                continue
            head = yield from self._head_op(sid)
            if head is None:
                continue
            upto = max(
                s["msg"]["n"]
                for r, s in zip(rows, states, strict=True)
                if r["session_id"] == sid and "n" in s.get("msg", {})
            )
            logs[sid] = yield from self._log_op(sid, head, upto)
        return [
            self._tuple(
                row,
                state,
                row["session_id"],
                row["checkpoint_ns"],
                threads[row["session_id"]],
                self._write_values(
                    writes.get((row["session_id"], row["checkpoint_ns"], row["checkpoint_id"]), []),
                    state,
                ),
                logs.get(row["session_id"]),
            )
            for row, state in zip(rows, states, strict=True)
        ]

    def _got(
        self,
        row: Mapping[str, Any] | None,
        sid: uuid.UUID,
        ns: str,
        thread: str,
        log: _Log | None,
        *,
        check: bool,
    ) -> CheckpointTuple | _Missing | None:
        """get_tuple's answer from an ``lg_get_one`` row and the saver's copy of the
        session's turns. ``check``: a ``_Missing`` when that copy is not the one the row's
        head names, or lacks turns the checkpoint holds (the turns must then be read in the
        row's snapshot); without, ``log`` was read in that snapshot."""
        if row is None or row["checkpoint_id"] is None:
            return None
        state = row["state"]  # opened by _open_got_op
        ref = state.get("msg")
        if row["purged"]:
            log = None
        elif check and ref is not None and "n" in ref:
            head = _head(row)
            upto = min(ref["n"], head.turns)
            if log is None or log.head != head or head.first + len(log.messages) < upto:
                return _Missing()
        stored = []
        if row["task_ids"] is not None:
            stored = list(
                zip(
                    row["task_ids"],
                    row["channels"],
                    row["value_types"],
                    row["write_values"],
                    strict=True,
                )
            )
        writes = self._write_values(stored, state)
        return self._tuple(row, state, sid, ns, thread, writes, log)

    def _get_op(self, config: Any) -> Op[CheckpointTuple | None]:
        thread, ns, cid = _where(config)
        sid = yield from self._session_op(thread, create=False)
        if sid is None:
            return None
        params = (sid, ns, cid)
        with self._lock:
            log = self._logs.get(sid)
        # the checkpoint, its writes and the session's head in one statement (one snapshot);
        # in the common case the messages come from the saver's copy of the turns, valid
        # while the head read is the one that copy was made at
        row = yield _named("lg_get_one", params, fetch="one")
        row = yield from self._open_got_op(row, sid, ns)
        found = self._got(row, sid, ns, thread, log, check=True)
        if not isinstance(found, _Missing):
            return found
        # the copy lacks turns the checkpoint holds (a saver that has not seen the thread
        # yet, or another writer moved the session): read them, then the head again. An
        # unchanged head means unchanged turns (appends and rewinds change its count or
        # time, range purges its first turn), so the turns read are the row's.
        assert row is not None
        head = _head(row)
        upto = row["state"]["msg"]["n"]
        log = yield from self._log_op(sid, head, upto, keep=False)
        again = yield from self._head_op(sid)
        if again == head:
            with self._lock:
                self._logs[sid] = log
            found = self._got(row, sid, ns, thread, log, check=False)
            assert not isinstance(found, _Missing)
            return found
        # the session moved meanwhile: the row and the turns from one snapshot
        yield Tx.BEGIN_SNAPSHOT
        row = yield _named("lg_get_one", params, fetch="one")
        row = yield from self._open_got_op(row, sid, ns)
        log = None
        if row is not None and row["checkpoint_id"] is not None and not row["purged"]:
            ref = row["state"].get("msg")
            if ref is not None and "n" in ref:
                log = yield from self._log_op(sid, _head(row), ref["n"])
        yield Tx.COMMIT
        found = self._got(row, sid, ns, thread, log, check=False)
        assert not isinstance(found, _Missing)
        return found

    def _list_op(
        self, config: Any, filter: Any, before: Any, limit: Any
    ) -> Op[list[CheckpointTuple]]:
        thread = None
        ns = None
        if config is not None:
            conf = _configurable(config)
            if conf.get("thread_id") is not None:
                thread = _thread_id(conf["thread_id"])
            if conf.get("checkpoint_ns") is not None:
                ns = _text(conf["checkpoint_ns"], "checkpoint_ns", empty=True)
        before_id = None
        if before is not None:
            before_id = _configurable(before).get("checkpoint_id")
            before_id = None if before_id is None else _text(before_id, "before's checkpoint_id")
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidInput(f"limit must be an int >= 0, not {validate.shown(limit, 40)}")
        filter_text = None
        if filter:
            if not isinstance(filter, Mapping):
                raise InvalidInput(f"filter must be a dict, not {type(filter).__name__}")
            filter_text = jsoncodec.encode_json(_tuples_to_lists(dict(filter)), "filter")
        sid = None
        if thread is not None:
            sid = yield from self._session_op(thread, create=False)
            if sid is None:
                return []
        params = {
            "tenant": self.tenant_id,
            "sid": sid,
            "ns": ns,
            "before": before_id,
            "filter": filter_text,
            "limit": limit,
        }
        yield Tx.BEGIN_SNAPSHOT
        rows = yield _named("lg_list", params, prepare=False)
        threads: dict[uuid.UUID, str] = {}
        for r in rows:
            if thread is not None:
                threads[r["session_id"]] = thread
            else:
                meta = jsoncodec.loads(r["session_metadata"])
                threads[r["session_id"]] = str(meta.get("external_id", r["session_id"]))
        found = yield from self._tuples_op(rows, threads)
        yield Tx.COMMIT
        return found

    # ------------------------------------------------------------ deletes

    def _delete_thread_op(self, thread_id: Any) -> Op[None]:
        thread = _thread_id(thread_id)
        sid = yield from self._session_op(thread, create=False)
        if sid is None:
            return None
        with contextlib.suppress(SessionNotFound, SessionPurged):
            yield from purge_ops.purge_session(self.store, sid)
        self._forget(thread, sid)
        return None

    def _delete_rows_op(self, rows: Sequence[Mapping[str, Any]]) -> Op[int]:
        if not rows:
            return 0
        keys = (
            [r["session_id"] for r in rows],
            [r["checkpoint_ns"] for r in rows],
            [r["checkpoint_id"] for r in rows],
        )
        (done,) = yield Q(query("lg_delete"), keys, fetch="one")
        return int(done)

    def _delete_for_runs_op(self, run_ids: Any) -> Op[None]:
        if isinstance(run_ids, str | bytes) or not isinstance(run_ids, Sequence):
            raise InvalidInput("run_ids must be a sequence of run id strings")
        ids = [_text(r, "run id") if not isinstance(r, uuid.UUID) else str(r) for r in run_ids]
        if not ids:
            return None
        yield Tx.BEGIN
        rows = yield _named("lg_runs", (ids, self.tenant_id))
        yield from self._delete_rows_op(rows)
        yield Tx.COMMIT
        return None

    def _prune_op(self, thread_ids: Any, strategy: Any) -> Op[None]:
        if isinstance(thread_ids, str | bytes) or not isinstance(thread_ids, Sequence):
            raise InvalidInput("thread_ids must be a sequence of thread ids")
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput(
                f"strategy must be 'keep_latest' or 'delete', not {validate.shown(strategy, 40)}"
            )
        threads = [_thread_id(t) for t in thread_ids]
        if strategy == "delete":
            for thread in threads:
                yield from self._delete_thread_op(thread)
            return None
        sids = []
        for thread in threads:
            sid = yield from self._session_op(thread, create=False)
            if sid is not None:
                sids.append(sid)
        if sids:
            yield Tx.BEGIN
            rows = yield _named("lg_not_latest", (sids,))
            yield from self._delete_rows_op(rows)
            yield Tx.COMMIT
        return None

    def _copy_thread_op(self, source: Any, target: Any) -> Op[None]:
        src_thread, dst_thread = _thread_id(source), _thread_id(target)
        if src_thread == dst_thread:
            raise InvalidInput("copy_thread needs two different thread ids")
        src = yield from self._session_op(src_thread, create=False)
        if src is None:
            return None
        dst, exists = yield from self._resolve_op(dst_thread)
        if exists:
            raise InvalidInput(f"copy_thread: target thread {dst_thread!r} already exists")
        # the copy shares the source's turns (one row, whatever their number) and gets a
        # copy of its checkpoint rows, which stay valid: its turn positions are the same
        yield Tx.BEGIN
        yield from fork_ops.fork_op(
            src, new_session_id=dst, metadata=external_metadata(FRAMEWORK, dst_thread)
        )
        yield Q(query("lg_copy"), (src, dst), fetch="one")
        yield Tx.COMMIT
        return None

    # ------------------------------------------------------------ LangGraph's interface

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint named by ``config`` (its ``checkpoint_id``), else the thread's
        newest in its ``checkpoint_ns``; None if there is none. Read from one snapshot."""
        return self._run(self._get_op(config))  # type: ignore[no-any-return]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of the config's thread (all of this tenant's threads
        for None) and namespace (all when the config names none), whose metadata contains
        ``filter``, older than ``before``'s checkpoint, at most ``limit``."""
        return iter(self._run(self._list_op(config, filter, before, limit)))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint (a repeated id overwrites it) and return its config; the
        messages the graph added are appended to the session's turns in the same
        statement."""
        return self._run(self._put_op(config, checkpoint, metadata, new_versions))  # type: ignore[no-any-return]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes for the config's checkpoint (a regular write seen
        before for the same task and index is kept, a special one replaced)."""
        self._run(self._put_writes_op(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Purge the thread's session: turns, checkpoints and writes (a shardstore purge,
        leaving a tombstone); the thread id can be used again (a new session)."""
        self._run(self._delete_thread_op(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete this tenant's checkpoints whose metadata ``run_id`` is one of
        ``run_ids``, with their writes (the turns stay)."""
        self._run(self._delete_for_runs_op(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, its writes and the turns of one thread to a new one
        (``InvalidInput`` if the target already has history)."""
        self._run(self._copy_thread_op(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: keep each namespace's newest checkpoint of these threads (and
        its writes), delete the others; ``delete``: :meth:`delete_thread` each."""
        self._run(self._prune_op(thread_ids, strategy))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """As :meth:`get_tuple`."""
        return await self._arun(self._get_op(config))  # type: ignore[no-any-return]

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """As :meth:`list`."""
        for item in await self._arun(self._list_op(config, filter, before, limit)):
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """As :meth:`put`."""
        return await self._arun(self._put_op(config, checkpoint, metadata, new_versions))  # type: ignore[no-any-return]

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """As :meth:`put_writes`."""
        await self._arun(self._put_writes_op(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        """As :meth:`delete_thread`."""
        await self._arun(self._delete_thread_op(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """As :meth:`delete_for_runs`."""
        await self._arun(self._delete_for_runs_op(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """As :meth:`copy_thread`."""
        await self._arun(self._copy_thread_op(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """As :meth:`prune`."""
        await self._arun(self._prune_op(thread_ids, strategy))

    def session_id(self, thread_id: str) -> uuid.UUID | None:
        """The shardstore session holding a thread now (None if it has none): read its
        turns with ``store.history(...)``, purge it, etc. Sync stores only."""
        return self._run(self._session_op(_thread_id(thread_id), create=False))  # type: ignore[no-any-return]


class _Missing:
    pass


_MISSING: Any = _Missing()
