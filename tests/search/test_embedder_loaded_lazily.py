"""The embedding model is made and loaded only when there is work (issue 15): ``embed`` and
``maintain`` with nothing queued, and ``search`` with a vector, never touch it. Also the
caps on maintain's embedding step (``max_embed``, ``embed_seconds``), the backlog it
reports, and ``seconds`` covering the whole run."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest

import shardstore
from shardstore.cli.app import main
from shardstore.search import embedding
from shardstore.search import vectors as vector_ops
from tests.embedders import HashEmbedder

SMALL: dict[str, Any] = {"chunk_tokens": 300}  # ~250-token chunks: many chunks from few turns
MINILM_DIM = 384
WORDS = "the weather in the harbour was grey and windy all morning and then it rained"


class ModelClock:
    """A stand-in for vector_ops' ``time``: its clock moves only while the model runs."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class CountingEmbedder(HashEmbedder):
    """A HashEmbedder that counts how often a model would have been loaded: its first use
    for anything but its name and declared dimension is a load."""

    def __init__(
        self, *, delay: float = 0.0, clock: ModelClock | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.loads = 0
        self.delay = delay  # seconds per embed call: a slow model
        self.clock = clock  # moved on by each call's delay
        self._loaded = False

    def _load(self) -> None:
        if not self._loaded:
            self._loaded = True
            self.loads += 1

    @property
    def window_tokens(self) -> int:
        self._load()
        return self._window

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        self._load()
        return super().token_counts(texts)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self._load()
        if self.delay:
            time.sleep(self.delay)
            if self.clock is not None:
                self.clock.now += self.delay
        return super().embed(texts)


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every embedder the store makes from a model name (none may load a real model)."""
    made: list[Any] = []

    def make(spec: Any) -> Any:
        if embedding.is_embedder(spec):
            return spec  # an Embedder given to connect(): not made here
        made.append(spec)
        return CountingEmbedder(dimension=MINILM_DIM, name=str(spec))

    def refuse(self: Any) -> Any:
        raise AssertionError("a real embedding model was loaded")

    monkeypatch.setattr(vector_ops, "make_embedder", make)
    monkeypatch.setattr(embedding.SentenceTransformerEmbedder, "_load", refuse)
    yield made


def fill(store: shardstore.Store, sid: uuid.UUID, n: int) -> None:
    store.append_turns(sid, [{"role": "user", "content": f"{WORDS} ({i})"} for i in range(n)])
    store.flush(sid)
    store.drain_folds()


def queued(store: shardstore.Store) -> int:
    report = store.maintain(dry_run=True)
    assert report.embedding_backlog is not None
    return report.embedding_backlog


def test_nothing_queued_loads_nothing(dsn: str, made: list[Any]) -> None:
    with shardstore.connect(dsn, embedding_model="all-MiniLM-L6-v2") as store:
        assert store.embed() == 0
        assert store.embed(progress=True) == 0
        assert store.search([0.1] * MINILM_DIM, tenant_id="acme") == []
        with pytest.raises(shardstore.InvalidInput, match="dimensions"):
            store.search([0.1] * 3, tenant_id="acme")  # the model's declared size, unloaded
        report = store.maintain()
        assert report.chunks_embedded is None and report.embedding_backlog == 0
        assert made == []  # never even constructed


@pytest.mark.slow
def test_search_by_vector_never_loads_the_model(dsn: str, made: list[Any]) -> None:
    # record "all-MiniLM-L6-v2" (384 dimensions) with a stand-in, then open by its name
    stand_in = CountingEmbedder(dimension=MINILM_DIM, name="all-MiniLM-L6-v2")
    with shardstore.connect(dsn, embedding_model=stand_in, **SMALL) as writer:
        sid = writer.create_session("acme")
        fill(writer, sid, 30)
        assert writer.embed() > 0 and stand_in.loads == 1
        vector = stand_in.embed([WORDS])[0]
    with shardstore.connect(dsn, embedding_model="all-MiniLM-L6-v2") as store:
        assert store.search(vector, tenant_id="acme", k=2)
        assert store.search(vector, session_id=sid, k=1)
        assert store.embed() == 0  # the queue is empty again
        assert made == []
        store.search("harbour weather", session_id=sid, k=1)  # a text query: made, loaded
        assert len(made) == 1


def test_embed_and_maintain_load_once_when_there_is_work(dsn: str) -> None:
    model = CountingEmbedder()
    with shardstore.connect(dsn, embedding_model=model, **SMALL) as store:
        assert store.embed() == 0 and store.maintain().chunks_embedded is None
        assert model.loads == 0
        sid = store.create_session("acme")
        fill(store, sid, 30)
        assert queued(store) > 0 and model.loads == 0  # a dry run counts, loads nothing
        report = store.maintain()
        assert report.chunks_embedded and report.embedding_backlog == 0
        assert model.loads == 1


@pytest.mark.slow
def test_max_embed_caps_the_step_and_reports_the_backlog(dsn: str) -> None:
    model = CountingEmbedder()
    with shardstore.connect(dsn, embedding_model=model, **SMALL) as store:
        sid = store.create_session("acme")
        fill(store, sid, 40)
        total = queued(store)
        assert total >= 4
        report = store.maintain(max_embed=2)
        assert report.chunks_embedded == 2 and report.embedding_stopped == "max_embed"
        assert report.embedding_backlog == total - 2
        doc = report.to_json()
        assert doc["embedding_backlog"] == total - 2 and doc["embedding_stopped"] == "max_embed"
        none = store.maintain(max_embed=0)
        assert none.chunks_embedded == 0 and none.embedding_backlog == total - 2
        rest = store.maintain()
        assert rest.chunks_embedded == total - 2 and rest.embedding_stopped is None
        assert rest.embedding_backlog == 0


@pytest.mark.slow
def test_embed_seconds_stops_the_step_and_seconds_is_the_whole_run(
    dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the embedding step keeps its time on a clock that only the model moves (0.3 s a call):
    # the database's share, which a loaded machine stretches, cannot use up the budget
    # before a batch has run (it did: 0 chunks embedded), so when the step stops is set
    clock = ModelClock()
    monkeypatch.setattr(vector_ops, "time", clock)
    model = CountingEmbedder(delay=0.3, clock=clock)
    with shardstore.connect(dsn, embedding_model=model, **SMALL) as store:
        sid = store.create_session("acme")
        fill(store, sid, 90)
        total = queued(store)
        assert total >= 8
        started = time.monotonic()
        report = store.maintain(embed_seconds=0.5)
        wall = time.monotonic() - started
        assert report.embedding_stopped == "embed_seconds", report.to_json()
        assert report.chunks_embedded is not None and 0 < report.chunks_embedded < total
        assert report.embedding_backlog == total - report.chunks_embedded
        assert report.embedding_seconds is not None and report.embedding_seconds >= 0.3
        # `seconds` (the report's "took") covers the embedding step too
        assert report.seconds >= report.embedding_seconds and report.seconds <= wall
        # the first batch is small (0.3 s, 0.2 s left), the next sized to the time left,
        # and none starts once it is up
        assert model.calls == 2
        logged = store.maintain(embed_seconds=timedelta(seconds=0.5))
        assert logged.embedding_stopped in ("embed_seconds", None)


@pytest.mark.slow
@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_embed": -1},
        {"max_embed": True},
        {"max_embed": "3"},
        {"max_embed": 1.5},
        {"embed_seconds": 0},
        {"embed_seconds": -1},
        {"embed_seconds": float("nan")},
        {"embed_seconds": float("inf")},
        {"embed_seconds": 10**9},
        {"embed_seconds": "5"},
        {"embed_seconds": True},
        {"embed_seconds": timedelta(0)},
        {"progress": "yes"},
    ],
)
def test_hostile_caps_are_refused(dsn: str, kwargs: dict[str, Any]) -> None:
    with shardstore.connect(dsn) as store, pytest.raises(shardstore.InvalidInput):
        store.maintain(**kwargs)


@pytest.mark.slow
def test_async_store_has_the_caps(dsn: str) -> None:
    async def go() -> None:
        model = CountingEmbedder()
        store = await shardstore.connect_async(dsn, embedding_model=model, **SMALL)
        try:
            sid = await store.create_session("acme")
            await store.append_turns(
                sid, [{"role": "user", "content": f"{WORDS} ({i})"} for i in range(40)]
            )
            await store.flush(sid)
            dry = await store.maintain(dry_run=True)
            assert dry.embedding_backlog and model.loads == 0
            report = await store.maintain(max_embed=1, embed_seconds=60)
            assert report.chunks_embedded == 1 and report.embedding_stopped == "max_embed"
            assert report.embedding_backlog is not None and report.embedding_backlog >= 1
            with pytest.raises(shardstore.InvalidInput):
                await store.maintain(embed_seconds=-5)
        finally:
            await store.close()

    asyncio.run(go())


@pytest.mark.slow
def test_maintain_cli_caps_and_reports_the_backlog(
    dsn: str, made: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in = CountingEmbedder(dimension=MINILM_DIM, name="all-MiniLM-L6-v2")
    with shardstore.connect(dsn, embedding_model=stand_in, **SMALL) as store:
        sid = store.create_session("acme")
        fill(store, sid, 40)
        assert store.embed(limit=1) == 1  # records the model in the database
        total = queued(store)
    capsys.readouterr()
    assert main(["--dsn", dsn, "maintain", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert re.search(rf"embedding backlog\s+{total} chunks queued", out), out
    assert main(["--dsn", dsn, "maintain", "--max-embed", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"embedded\s+2 chunks in ", out) and "stopped at max_embed" in out, out
    assert f"{total - 2} chunks left queued" in out
    # the drain rate and what the backlog needs at it, for sizing workers
    assert re.search(r"embedded\s+2 chunks in [\d.]+ s \([\d,.]+ chunks/s\)", out), out
    assert re.search(r"takes them, about [\d,]+ s at this run's rate\)", out), out
    assert main(["--dsn", dsn, "--json", "maintain", "--max-embed", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["chunks_embedded"] == 1 and doc["embedding_backlog"] == total - 3
    assert doc["seconds"] >= doc["embedding_seconds"] > 0
    assert len(made) == 2  # one model per command that had work; none for the dry run
    for bad in (["--max-embed", "-1"], ["--embed-seconds", "-3"], ["--embed-seconds", "nan"]):
        assert main(["--dsn", dsn, "maintain", *bad]) == 2
