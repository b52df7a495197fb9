"""The systems shardstore is measured against, and the floors.

* :class:`InsertFloor`: ``bench.floor``, one autocommit single-row INSERT of the message
  JSON per call (one round trip, one commit): no storage layer appends durably for less.
* :data:`CONTENDERS`: the comparison's five, each in its own schema of one database, fed
  the same :class:`~benchmarks.lib.corpus.Corpus`: shardstore (``append_turn`` /
  ``append_turns`` / ``tail`` / ``history``), a naive JSONB array per conversation appended
  with ``||``, langchain-postgres' ``PostgresChatMessageHistory``, LangGraph's
  ``PostgresSaver`` under a one-node ``StateGraph(MessagesState)``, and the floor (a bare
  INSERT per message, ``COPY`` for bulk).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
from psycopg.conninfo import make_conninfo
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

import shardstore
from benchmarks.lib.corpus import Corpus, encode

SS, NAIVE, LC, LG, FLOOR = (
    "shardstore",
    "naive jsonb ||",
    "langchain-postgres",
    "langgraph PostgresSaver",
    "floor (INSERT / COPY)",
)
ORDER = [SS, NAIVE, LC, LG, FLOOR]
TAIL_FILL = 8  # turns in shardstore's open chunk when tail is timed
SHORT = {SS: "shardstore", NAIVE: "naive", LC: "langchain", LG: "langgraph", FLOOR: "floor"}


FLOOR_DDL = """
CREATE SCHEMA IF NOT EXISTS bench;
CREATE TABLE bench.floor (
    session_id uuid NOT NULL,
    seq        bigint NOT NULL,
    message    jsonb NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""
FLOOR_INSERT = "INSERT INTO bench.floor (session_id, seq, message) VALUES (%s, %s, %s::jsonb)"


class InsertFloor:
    """The floor: one autocommit single-row INSERT (one round trip, one commit)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.seq: dict[uuid.UUID, int] = {}

    def append(self, sid: uuid.UUID, message: dict[str, Any]) -> None:
        seq = self.seq.get(sid, 0)
        self.conn.execute(FLOOR_INSERT, (sid, seq, encode(message)))
        self.seq[sid] = seq + 1

    def bulk(self, sid: uuid.UUID, texts: Sequence[str]) -> None:
        seq = self.seq.get(sid, 0)
        with self.conn.transaction(), self.conn.cursor() as cur:
            cur.executemany(FLOOR_INSERT, [(sid, seq + i, t) for i, t in enumerate(texts)])
        self.seq[sid] = seq + len(texts)


def limited_counter(fast_max_chars: int) -> Any:
    """The store's default counter with splintr's limit set to ``fast_max_chars`` (texts
    over it go to tiktoken): the A/B of round 12's limit."""
    import shardstore

    limit = {"FAST_MAX_CHARS": fast_max_chars}
    return type("Limited", (shardstore.TiktokenCounter,), limit)()


def floor_block(
    conn: psycopg.Connection[Any], msgs: list[Any], gap: float
) -> tuple[list[float], list[bool]]:
    """One block of single-turn appends to the floor (``bench.floor``), ``gap`` seconds
    apart: latencies in ms, and no call seals (the shape of the seal suite's blocks)."""
    sid = uuid.uuid4()
    lat: list[float] = []
    for seq, m in enumerate(msgs):
        if gap:
            time.sleep(gap)
        t0 = time.perf_counter_ns()
        conn.execute(FLOOR_INSERT, (sid, seq, Jsonb(m)), prepare=True)
        lat.append((time.perf_counter_ns() - t0) / 1e6)
    return lat, [False] * len(lat)


def to_langchain(m: dict[str, Any]) -> Any:
    """A fresh langchain-core message object for a synthetic OpenAI-style dict."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    role, content = m["role"], m.get("content") or ""
    if role == "user":
        return HumanMessage(content)
    if role == "system":
        return SystemMessage(content)
    if role == "tool":
        return ToolMessage(content, tool_call_id=m["tool_call_id"])
    calls = [
        {
            "name": c["function"]["name"],
            "args": json.loads(c["function"]["arguments"]),
            "id": c["id"],
            "type": "tool_call",
        }
        for c in m.get("tool_calls") or []
    ]
    return AIMessage(content, tool_calls=calls)


# --------------------------------------------------------------------------- contenders


class Writer:
    """One client session (its own connection): the appends of one thread."""

    def prepare(self, i: int) -> Any:  # untimed: what the application already holds
        return self.corpus.msgs[i]

    def __init__(self, c: Contender) -> None:
        self.c = c
        self.corpus = c.corpus

    def append(self, sid: Any, obj: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Contender:
    name = ""
    schema = ""
    has_bulk = True

    def __init__(self, dsn: str, corpus: Corpus, counter: Any) -> None:
        self.dsn = dsn
        self.corpus = corpus
        self.counter = counter

    def setup(self) -> None: ...
    def writer(self) -> Writer: ...
    def new_session(self, w: Writer) -> Any: ...
    def bulk(self, w: Writer, sid: Any, idx: Sequence[int]) -> None: ...
    def tail20(self, w: Writer, sid: Any) -> list[Any]: ...
    def tail_tokens(self, w: Writer, sid: Any, budget: int) -> list[Any]: ...
    def read_all(self, w: Writer, sid: Any) -> int: ...

    def after_read(self, w: Writer) -> None:
        """Untimed cleanup after a read (end an implicit transaction)."""

    def align(self, w: Writer, sid: Any, nxt: Callable[[], int]) -> list[int]:
        """Untimed: bring the session's head to the same state at every size (appending the
        messages ``nxt()`` gives); returns the message indexes it appended."""
        return []

    def settle(self) -> None:
        """Wait (untimed) for work the appends left behind, before WAL and sizes."""

    def close(self) -> None: ...

    def schemas(self) -> list[str]:
        return [self.schema]


def _conn(dsn: str, schema: str | None = None, **kw: Any) -> psycopg.Connection[Any]:
    if schema:
        dsn = make_conninfo(dsn, options=f"-c search_path={schema}")
    return psycopg.connect(dsn, **kw)


def _count_newest(counter: Any, texts_newest_first: Sequence[str], budget: int) -> tuple[int, bool]:
    """How many of the newest messages fit ``budget`` tokens; whether the budget was hit."""
    used = 0
    for k, t in enumerate(texts_newest_first):
        used += counter.count(t)
        if used > budget:
            return k, True
    return len(texts_newest_first), False


# 1. shardstore -----------------------------------------------------------------


class SSWriter(Writer):
    def append(self, sid: Any, obj: Any) -> None:
        self.c.store.append_turn(sid, obj)  # type: ignore[attr-defined]


class Shardstore(Contender):
    name = SS
    schema = "shardstore"

    def setup(self) -> None:
        # a warm pool of as many connections as the peers get (one per writer thread)
        self.store = shardstore.connect(self.dsn, pool_min_size=9, pool_max_size=10)

    def writer(self) -> Writer:
        return SSWriter(self)

    def new_session(self, w: Writer) -> Any:
        return self.store.create_session("bench", "compare", uuid.uuid4().hex)

    def bulk(self, w: Writer, sid: Any, idx: Sequence[int]) -> None:
        self.store.append_turns(sid, [self.corpus.msgs[i] for i in idx])

    def tail20(self, w: Writer, sid: Any) -> list[Any]:
        return self.store.tail(sid, n=20)

    def tail_tokens(self, w: Writer, sid: Any, budget: int) -> list[Any]:
        return self.store.tail(sid, max_tokens=budget)

    def read_all(self, w: Writer, sid: Any) -> int:
        return sum(1 for _ in self.store.history(sid))

    def settle(self) -> None:
        self.store.drain_folds()

    def align(self, w: Writer, sid: Any, nxt: Callable[[], int]) -> list[int]:
        # tail's cost depends on how many of the newest turns are still in the write buffer:
        # top up to the same open-chunk fill at every size (as the core suite does)
        added: list[int] = []
        while True:
            last = self.store.chunks(sid, last=1)[-1]
            if last.is_open and last.turn_count == TAIL_FILL:
                break
            i = nxt()
            self.store.append_turn(sid, self.corpus.msgs[i])
            added.append(i)
            if len(added) > 10_000:
                raise RuntimeError("could not align the open chunk")
        self.store.drain_folds()
        return added

    def close(self) -> None:
        self.store.close()


# 2. naive: one JSONB array per conversation, appended with || ------------------


class NaiveWriter(Writer):
    def __init__(self, c: Contender) -> None:
        super().__init__(c)
        self.conn = _conn(c.dsn, autocommit=True)

    def append(self, sid: Any, obj: Any) -> None:
        self.conn.execute(
            "UPDATE naive.conversations SET messages = messages || %s::jsonb WHERE session_id = %s",
            (encode(obj), sid),
        )

    def close(self) -> None:
        self.conn.close()


class Naive(Contender):
    name = NAIVE
    schema = "naive"

    def setup(self) -> None:
        with _conn(self.dsn, autocommit=True) as c:
            c.execute(
                "CREATE SCHEMA naive; CREATE TABLE naive.conversations ("
                "session_id uuid PRIMARY KEY, messages jsonb NOT NULL DEFAULT '[]')"
            )

    def writer(self) -> Writer:
        return NaiveWriter(self)

    def new_session(self, w: Writer) -> Any:
        sid = uuid.uuid4()
        w.conn.execute("INSERT INTO naive.conversations (session_id) VALUES (%s)", (sid,))  # type: ignore[attr-defined]
        return sid

    def bulk(self, w: Writer, sid: Any, idx: Sequence[int]) -> None:
        arr = "[" + ",".join(self.corpus.texts[i] for i in idx) + "]"
        w.conn.execute(  # type: ignore[attr-defined]
            "UPDATE naive.conversations SET messages = messages || %s::jsonb WHERE session_id = %s",
            (arr, sid),
        )

    def _newest(self, w: Writer, sid: Any, k: int) -> list[Any]:
        row = w.conn.execute(  # type: ignore[attr-defined]
            "SELECT jsonb_path_query_array(messages, "
            "('$[' || greatest(jsonb_array_length(messages) - %s, 0) || ' to last]')::jsonpath) "
            "FROM naive.conversations WHERE session_id = %s",
            (k, sid),
        ).fetchone()
        return list(row[0]) if row else []

    def tail20(self, w: Writer, sid: Any) -> list[Any]:
        return self._newest(w, sid, 20)

    def tail_tokens(self, w: Writer, sid: Any, budget: int) -> list[Any]:
        k = 32
        while True:
            got = self._newest(w, sid, k)
            texts = [encode(m) for m in reversed(got)]
            n, hit = _count_newest(self.counter, texts, budget)
            if hit or len(got) < k:
                return got[len(got) - n :]
            k *= 4

    def read_all(self, w: Writer, sid: Any) -> int:
        row = w.conn.execute(  # type: ignore[attr-defined]
            "SELECT messages FROM naive.conversations WHERE session_id = %s", (sid,)
        ).fetchone()
        return len(row[0]) if row else 0


# 3. langchain-postgres PostgresChatMessageHistory ------------------------------

LC_TABLE = "chat_history"


class LCWriter(Writer):
    def __init__(self, c: Contender) -> None:
        super().__init__(c)
        # as in langchain-postgres' README: a plain (non-autocommit) psycopg connection
        self.conn = _conn(c.dsn, "lc")
        self.hist: dict[str, Any] = {}

    def h(self, sid: str) -> Any:
        from langchain_postgres import PostgresChatMessageHistory

        if sid not in self.hist:
            self.hist[sid] = PostgresChatMessageHistory(LC_TABLE, sid, sync_connection=self.conn)
        return self.hist[sid]

    def prepare(self, i: int) -> Any:
        return to_langchain(self.corpus.msgs[i])

    def append(self, sid: Any, obj: Any) -> None:
        self.h(sid).add_message(obj)

    def close(self) -> None:
        self.conn.close()


class LangchainPostgres(Contender):
    name = LC
    schema = "lc"

    def setup(self) -> None:
        from langchain_postgres import PostgresChatMessageHistory

        with _conn(self.dsn, autocommit=True) as c:
            c.execute("CREATE SCHEMA lc")
        with _conn(self.dsn, "lc") as c:
            PostgresChatMessageHistory.create_tables(c, LC_TABLE)

    def writer(self) -> Writer:
        return LCWriter(self)

    def new_session(self, w: Writer) -> Any:
        return str(uuid.uuid4())

    def bulk(self, w: Writer, sid: Any, idx: Sequence[int]) -> None:
        w.h(sid).add_messages([to_langchain(self.corpus.msgs[i]) for i in idx])  # type: ignore[attr-defined]

    def tail20(self, w: Writer, sid: Any) -> list[Any]:
        return list(w.h(sid).messages[-20:])  # type: ignore[attr-defined]

    def tail_tokens(self, w: Writer, sid: Any, budget: int) -> list[Any]:
        from langchain_core.messages import trim_messages
        from langchain_core.messages.utils import count_tokens_approximately

        return list(
            trim_messages(
                w.h(sid).messages,  # type: ignore[attr-defined]
                max_tokens=budget,
                token_counter=count_tokens_approximately,
                strategy="last",
            )
        )

    def read_all(self, w: Writer, sid: Any) -> int:
        return len(w.h(sid).messages)  # type: ignore[attr-defined]

    def after_read(self, w: Writer) -> None:
        w.conn.rollback()  # type: ignore[attr-defined]  # get_messages leaves a transaction open


# 4. LangGraph PostgresSaver with a MessagesState graph -------------------------


class LGWriter(Writer):
    def __init__(self, c: Contender) -> None:
        super().__init__(c)
        from langgraph.checkpoint.postgres import PostgresSaver

        # the connection settings PostgresSaver.from_conn_string uses
        self.conn = _conn(c.dsn, "lg", autocommit=True, prepare_threshold=0, row_factory=dict_row)
        self.saver = PostgresSaver(self.conn)
        self.graph = build_graph(self.saver)

    def prepare(self, i: int) -> Any:
        return to_langchain(self.corpus.msgs[i])  # fresh: add_messages sets its id

    def append(self, sid: Any, obj: Any) -> None:
        self.graph.invoke({"messages": [obj]}, {"configurable": {"thread_id": sid}})

    def state(self, sid: Any) -> list[Any]:
        return list(self.graph.get_state({"configurable": {"thread_id": sid}}).values["messages"])

    def close(self) -> None:
        self.conn.close()


def build_graph(saver: Any) -> Any:
    from langgraph.graph import START, MessagesState, StateGraph

    def agent(state: MessagesState) -> dict[str, Any]:
        return {}  # no LLM: the incoming message is appended by the messages reducer

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    return g.compile(checkpointer=saver)


class LangGraph(Contender):
    name = LG
    schema = "lg"
    has_bulk = False

    def setup(self) -> None:
        from langgraph.checkpoint.postgres import PostgresSaver

        with _conn(self.dsn, autocommit=True) as c:
            c.execute("CREATE SCHEMA lg")
        with _conn(self.dsn, "lg", autocommit=True, prepare_threshold=0, row_factory=dict_row) as c:
            PostgresSaver(c).setup()

    def writer(self) -> Writer:
        return LGWriter(self)

    def new_session(self, w: Writer) -> Any:
        return str(uuid.uuid4())

    def bulk(self, w: Writer, sid: Any, idx: Sequence[int]) -> None:
        for i in idx:  # no bulk path: one graph step per turn
            w.append(sid, w.prepare(i))

    def tail20(self, w: Writer, sid: Any) -> list[Any]:
        return w.state(sid)[-20:]  # type: ignore[attr-defined]

    def tail_tokens(self, w: Writer, sid: Any, budget: int) -> list[Any]:
        from langchain_core.messages import trim_messages
        from langchain_core.messages.utils import count_tokens_approximately

        return list(
            trim_messages(
                w.state(sid),  # type: ignore[attr-defined]
                max_tokens=budget,
                token_counter=count_tokens_approximately,
                strategy="last",
            )
        )

    def read_all(self, w: Writer, sid: Any) -> int:
        return len(w.state(sid))  # type: ignore[attr-defined]


# 5. the floor: bare single-row INSERT, COPY for bulk ---------------------------


class FloorWriter(Writer):
    def __init__(self, c: Contender) -> None:
        super().__init__(c)
        self.conn = _conn(c.dsn, autocommit=True)

    def append(self, sid: Any, obj: Any) -> None:
        seq = self.c.next_seq(sid, 1)  # type: ignore[attr-defined]
        self.conn.execute(
            "INSERT INTO floor.messages (session_id, seq, message) VALUES (%s, %s, %s::jsonb)",
            (sid, seq, encode(obj)),
        )

    def close(self) -> None:
        self.conn.close()


class Floor(Contender):
    name = FLOOR
    schema = "floor"

    def setup(self) -> None:
        self.seqs: dict[Any, int] = {}
        self.lock = threading.Lock()
        with _conn(self.dsn, autocommit=True) as c:
            c.execute(
                "CREATE SCHEMA floor; CREATE TABLE floor.messages (session_id uuid NOT NULL, "
                "seq bigint NOT NULL, message jsonb NOT NULL, PRIMARY KEY (session_id, seq))"
            )

    def next_seq(self, sid: Any, k: int) -> int:
        with self.lock:
            seq = self.seqs.get(sid, 0)
            self.seqs[sid] = seq + k
        return seq

    def writer(self) -> Writer:
        return FloorWriter(self)

    def new_session(self, w: Writer) -> Any:
        return uuid.uuid4()

    def bulk(self, w: Writer, sid: Any, idx: Sequence[int]) -> None:
        seq = self.next_seq(sid, len(idx))
        conn = w.conn  # type: ignore[attr-defined]
        with (
            conn.transaction(),
            conn.cursor() as cur,
            cur.copy("COPY floor.messages (session_id, seq, message) FROM STDIN") as cp,
        ):
            for k, i in enumerate(idx):
                cp.write_row((sid, seq + k, self.corpus.texts[i]))

    def _newest(self, w: Writer, sid: Any, k: int) -> list[Any]:
        rows = w.conn.execute(  # type: ignore[attr-defined]
            "SELECT message FROM floor.messages WHERE session_id = %s ORDER BY seq DESC LIMIT %s",
            (sid, k),
        ).fetchall()
        return [r[0] for r in reversed(rows)]

    def tail20(self, w: Writer, sid: Any) -> list[Any]:
        return self._newest(w, sid, 20)

    def tail_tokens(self, w: Writer, sid: Any, budget: int) -> list[Any]:
        k = 32
        while True:
            got = self._newest(w, sid, k)
            texts = [encode(m) for m in reversed(got)]
            n, hit = _count_newest(self.counter, texts, budget)
            if hit or len(got) < k:
                return got[len(got) - n :]
            k *= 4

    def read_all(self, w: Writer, sid: Any) -> int:
        n = 0
        with (
            w.conn.cursor() as cur,  # type: ignore[attr-defined]
            cur.copy(
                "COPY (SELECT message FROM floor.messages WHERE session_id = "
                f"'{uuid.UUID(str(sid))}' ORDER BY seq) TO STDOUT"
            ) as cp,
        ):
            cp.set_types(["jsonb"])
            for _row in cp.rows():
                n += 1
        return n


CONTENDERS: dict[str, type[Contender]] = {
    SS: Shardstore,
    NAIVE: Naive,
    LC: LangchainPostgres,
    LG: LangGraph,
    FLOOR: Floor,
}
