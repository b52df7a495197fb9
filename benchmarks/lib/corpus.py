"""The corpora the suites append.

Three generators, all deterministic by seed. The two synthetic ones have all messages
distinct (no repeated filler, so TOAST compression behaves roughly as on real text):

* ``words``: :func:`make_messages`, a cycle of user / assistant / tool-call / tool-result
  messages of English words at Zipf-like frequencies plus agent vocabulary, each about
  ``target_bytes`` of JSON (±30%; 1.6 kB, ~380 cl100k tokens by default). The core,
  import, checkpoints, scale and LangGraph suites use it.
* ``synthetic``: ``shardstore.demo.synthetic.messages``, agent conversations with tool
  calls of varied sizes; :class:`Corpus` pools them (plus one ~12k-token pasted document)
  for the comparison, append, tail, seal, disk and text suites.

* ``real``: :func:`benchmarks.lib.realtext.messages`, agent conversations cut from text
  the installed packages ship (documentation, source, JSON, license texts, log lines, id
  tables, base64 blobs), a few words to ~30 kB a message; the same messages for a seed on
  the same install.

Each is an entry of :data:`SOURCES` (a function of ``(count, seed)`` to OpenAI-style
message dicts); ``Corpus(source=...)`` and :func:`messages` take its name.
:data:`CORPUS_CHOICES` and :func:`corpus_sources` are the suites' ``--corpus`` option.
"""

from __future__ import annotations

import itertools
import json
import random
import threading
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.lib import realtext
from shardstore.core import jsoncodec
from shardstore.demo import synthetic

# Common English plus the vocabulary of agent transcripts: gives roughly the bytes/token
# ratio (~4) and the compressibility of real conversation text, unlike a repeated character.
_WORDS = """
the of and to a in is it you that he was for on are with as I his they be at one have this
from or had by hot word but what some we can out other were all there when up use your how
said an each she which do their time if will way about many then them write would like so
these her long make thing see him two has look more day could go come did number sound no
most people my over know water than call first who may down side been now find any new work
part take get place made live where after back little only round man year came show every
good me give our under name very through just form sentence great think say help low line
differ turn cause much mean before move right boy old too same tell does set three want air
well also play small end put home read hand port large spell add even land here must big
high such follow act why ask men change went light kind off need house picture try us again
animal point mother world near build self earth father head stand own page should country
found answer school grow study still learn plant cover food sun four between state keep eye
never last let thought city tree cross farm hard start might story saw far sea draw left
late run while press close night real life few north open seem together next white children
begin got walk example ease paper group always music those both mark often letter until mile
river car feet care second book carry took science eat room friend began idea fish mountain
stop once base hear horse cut sure watch color face wood main enough plain girl usual young
ready above ever red list though feel talk bird soon body dog family direct pose leave song
measure door product black short numeral class wind question happen complete ship area half
rock order fire south problem piece told knew pass since top whole king space heard best hour
better true during hundred five remember step early hold west ground interest reach fast verb
sing listen six table travel less morning ten simple several vowel toward war lay against
pattern slow center love person money serve appear road map rain rule govern pull cold notice
voice unit power town fine certain fly fall lead cry dark machine note wait plan figure star
function request response database query index partition latency buffer commit transaction
session message token chunk history append retry error timeout config deploy cluster replica
schema migration vector embedding model prompt context window agent tool result user server
client cache memory thread process network socket payload header status version release
"""
WORDS = _WORDS.split()
TOOLS = ["search_docs", "run_sql", "read_file", "http_get", "list_tickets", "send_email"]


# Zipf-like word frequencies: the list is roughly in order of frequency
_CUM = list(itertools.accumulate(1 / (i + 10) for i in range(len(WORDS))))


def _sentence(rng: random.Random) -> str:
    n = rng.randint(6, 22)
    words = rng.choices(WORDS, cum_weights=_CUM, k=n)
    if rng.random() < 0.15:
        words.insert(rng.randrange(n), str(rng.randint(0, 99999)))
    if rng.random() < 0.1:
        words.insert(rng.randrange(n), f"`{rng.choice(WORDS)}_{rng.choice(WORDS)}()`")
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice(".....?!:")


def text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        s = _sentence(rng)
        out.append(s)
        size += len(s) + 1
        if rng.random() < 0.12:
            out.append("\n\n")
    return " ".join(out)[:chars].rstrip()


def make_messages(count: int, seed: int = 7, target_bytes: int = 1600) -> list[dict[str, Any]]:
    """A deterministic conversation-like cycle of user / assistant / tool-call / tool
    messages, each about ``target_bytes`` of JSON (±30%), all distinct."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    pending_call: str | None = None
    while len(out) < count:
        size = int(target_bytes * rng.uniform(0.7, 1.3))
        kind = rng.random()
        if pending_call is not None:
            msg: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": pending_call,
                "content": text(rng, size - 60),
            }
            pending_call = None
        elif kind < 0.35:
            msg = {"role": "user", "content": text(rng, size - 30)}
        elif kind < 0.55:
            pending_call = f"call_{rng.getrandbits(64):016x}"
            args = {"query": text(rng, size - 200), "limit": rng.randint(1, 50)}
            msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": pending_call,
                        "type": "function",
                        "function": {"name": rng.choice(TOOLS), "arguments": json.dumps(args)},
                    }
                ],
            }
        else:
            msg = {"role": "assistant", "content": text(rng, size - 35)}
        out.append(msg)
    return out


def encode(message: dict[str, Any]) -> str:
    """The JSON text both contenders store (what shardstore's codec produces for it)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


Source = Callable[[int, int], list[dict[str, Any]]]

#: message generators by name: ``(count, seed) -> messages``
SOURCES: dict[str, Source] = {
    "words": lambda count, seed: make_messages(count, seed=seed),
    "synthetic": lambda count, seed: synthetic.messages(seed, count),
    "real": lambda count, seed: realtext.messages(count, seed=seed),
}

#: the ``--corpus`` choices of the suites that report on both corpora
CORPUS_CHOICES = ("synthetic", "real", "both")


def corpus_sources(choice: str, own: str = "synthetic") -> list[str]:
    """The :data:`SOURCES` a ``--corpus`` choice runs, in report order: ``synthetic`` is
    the suite's own synthetic generator ``own`` (``synthetic``, or ``words`` for the
    suites built on it), ``real`` the real-text one, ``both`` the two."""
    return {"synthetic": [own], "real": ["real"], "both": [own, "real"]}[choice]


#: a corpus's name in a report
CORPUS_LABELS = {
    "words": "synthetic (words)",
    "synthetic": "synthetic",
    "real": "real text",
}


def messages(source: str, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` messages of the generator ``source`` (see :data:`SOURCES`)."""
    try:
        make = SOURCES[source]
    except KeyError:
        raise ValueError(f"unknown corpus {source!r}; known: {', '.join(SOURCES)}") from None
    return make(count, seed)


class Corpus:
    """A pool of deterministic agent messages of one :data:`SOURCES` generator, cycled to
    any history length."""

    def __init__(self, size: int, seed: int = 2024, source: str = "synthetic") -> None:
        self.msgs = messages(source, size, seed)
        self.n = len(self.msgs)
        # One big pasted document (~12k tokens, over a shardstore chunk's budget): every
        # history ends "filler, SEP, the same head turns", so the newest turns (and their
        # chunk boundaries) are identical at every size and tail latencies compare like
        # with like.
        paste = "\n\n".join(str(m.get("content") or "") for m in self.msgs[:400])[:48_000]
        self.msgs.append({"role": "user", "content": "Please review this document:\n" + paste})
        self.sep = self.n
        self.texts = [jsoncodec.encode_message(m) for m in self.msgs]
        self.nbytes = [len(t.encode()) for t in self.texts]
        self.cursor = 0
        self.lock = threading.Lock()

    def take(self, k: int) -> list[int]:
        """The next ``k`` message indexes (thread-safe; wraps around the pool)."""
        with self.lock:
            lo = self.cursor
            self.cursor += k
        return [(lo + i) % self.n for i in range(k)]

    def seq(self, start: int, k: int) -> list[int]:
        """``k`` indexes from a fixed position: the same messages for every session."""
        return [(start + i) % self.n for i in range(k)]

    def payload(self, idx: Sequence[int]) -> int:
        return sum(self.nbytes[i] for i in idx)
