"""store.export_sessions / store.import_jsonl (``shardstore export``, ``shardstore import
jsonl``): an exact round trip into a fresh database under hypothesis (mixed message
formats, hard strings and numbers, keys, several chunks), streaming of a long session,
existing sessions refused or skipped, hostile files naming their line and writing nothing
of that session, and asyncio parity."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardstore
from shardstore.errors import ImportRejected, InvalidInput, SessionExists
from tests.history.test_message_formats import FORMATS, PLAIN

SMALL = {"chunk_tokens": 120, "background_fold": False}

HARD_STRINGS = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "\x00",
            "a\x00b",
            "\ud800",
            "x\udfffy",
            "\ue000lead",
            "\ue001\ue002",
            '\\"\\n',
            "\u2028\u2029",
            "𝄞",
            "\t\r\n",
        ]
    ),
)
HARD_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([1e308, -1e308, -0.0, 0.0, 5e-324, 1e16, 2.5e-10, 10**40, -(10**30)]),
    st.floats(allow_nan=False, allow_infinity=False),
)


@st.composite
def messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i in range(draw(st.integers(0, 14))):
        pick = draw(st.integers(0, 3))
        if pick == 0:
            out.extend(FORMATS[draw(st.sampled_from(sorted(FORMATS)))](i))
        elif pick == 1:
            out.append(PLAIN[draw(st.sampled_from(sorted(PLAIN)))](i))
        else:
            out.append(
                {
                    "role": draw(st.sampled_from(["user", "assistant", "x\ud800"])),
                    "content": draw(HARD_STRINGS),
                    "n": draw(HARD_NUMBERS),
                    "nested": {draw(HARD_STRINGS): [draw(HARD_NUMBERS), None, True]},
                    "pad": "word " * draw(st.integers(0, 60)),
                }
            )
    return out


@st.composite
def scenarios(draw: st.DrawFn) -> list[dict[str, Any]]:
    sessions = []
    for s in range(draw(st.integers(1, 3))):
        msgs = draw(messages())
        keyed = draw(st.booleans())
        keys = [f"k{s}-{i}-{draw(HARD_STRINGS)}".replace("\x00", "0") for i in range(len(msgs))]
        sessions.append(
            {
                "subject": draw(st.one_of(st.none(), st.just(f"user:{s}"))),
                "agent": draw(st.one_of(st.none(), st.just("agent é"))),
                "metadata": {
                    "k": draw(HARD_STRINGS),
                    "n": draw(HARD_NUMBERS),
                    "l": [1, {"a": None}],
                },
                "messages": msgs,
                "keys": [
                    k if keyed and "\ud800" not in k and "\udfff" not in k else None for k in keys
                ],
                "batches": draw(st.integers(1, 4)),
                "flush": draw(st.booleans()),
            }
        )
    return sessions


def fill(store: shardstore.Store, scenario: list[dict[str, Any]]) -> list[uuid.UUID]:
    ids = []
    for spec in scenario:
        sid = store.create_session(
            "acme", spec["subject"], spec["agent"], metadata=spec["metadata"]
        )
        msgs, keys = spec["messages"], spec["keys"]
        step = max(1, len(msgs) // spec["batches"])
        for at in range(0, len(msgs), step):
            store.append_turns(sid, msgs[at : at + step], keys[at : at + step])
        if spec["flush"]:
            store.flush(sid)
        ids.append(sid)
    return ids


def records(store: shardstore.Store, sid: uuid.UUID) -> tuple[Any, ...]:
    info = store.session(sid)
    # a chunk's partition is None while it sits in the buffer: whether the source had
    # flushed its open chunk is not part of the history
    chunks = [dataclasses.replace(c, partition=None) for c in store.chunks(sid)]
    return (info, list(store.history(sid)), chunks)


def export_text(store: shardstore.Store, ids: list[uuid.UUID]) -> str:
    out = io.StringIO()
    store.export_sessions(ids, out=out)
    return out.getvalue()


def body(text: str) -> str:
    """An export less its first line, the export line (its id and time are each export's)."""
    first, _, rest = text.partition("\n")
    assert '"kind":"export"' in first
    return rest


@pytest.mark.slow
@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_round_trip_into_a_fresh_database(
    new_database: Callable[[], str], scenario: list[dict[str, Any]]
) -> None:
    with (
        shardstore.connect(new_database(), **SMALL) as a,
        shardstore.connect(new_database(), **SMALL) as b,
    ):
        ids = fill(a, scenario)
        text = export_text(a, ids)
        report = b.import_jsonl(io.StringIO(text))
        assert report.sessions == len(ids) and report.skipped == ()
        assert report.turns == sum(len(s["messages"]) for s in scenario)
        for sid in ids:
            assert records(b, sid) == records(a, sid)
        assert body(export_text(b, ids)) == body(text)


@pytest.mark.slow
def test_round_trip_of_the_hard_values(new_database: Callable[[], str], tmp_path: Path) -> None:
    """The quick, not-slow version of the property above, with every hard value at once."""
    hard = {
        "role": "user",
        "content": 'a\x00b\ud800 \ue000 é 𝄞 \\"\n',
        "floats": [1e308, -0.0, 5e-324, 1e16, -1e308, 0.1],
        "ints": [10**40, -(2**63)],
        "\ud800k": {"\x00": None},
    }
    msgs = [hard, *FORMATS["responses"](1), *FORMATS["langchain"](2), PLAIN["chat"](3)] * 8
    scenario = [
        {
            "subject": "s",
            "agent": None,
            "metadata": {"m": hard["content"], "f": -0.0},
            "messages": msgs,
            "keys": [f"key-{i}" for i in range(len(msgs))],
            "batches": 3,
            "flush": True,
        }
    ]
    path = tmp_path / "out.jsonl"
    with (
        shardstore.connect(new_database(), **SMALL) as a,
        shardstore.connect(new_database(), **SMALL) as b,
    ):
        (sid,) = fill(a, scenario)
        assert len(a.chunks(sid)) > 2
        exported = a.export_sessions([sid], out=path)
        assert (exported.sessions, exported.turns) == (1, len(msgs))
        assert exported.bytes == path.stat().st_size
        path.read_text("utf-8").encode("ascii")  # pure ASCII
        b.import_jsonl(path)
        assert records(b, sid) == records(a, sid)
        assert b.history(sid).__next__().message == hard
        # keys came along: a retry of an exported append is a duplicate in the new home
        again = b.append_turn(sid, {"role": "user", "content": "x"}, "key-3")
        assert again.duplicate and again.turn_seq == 3


def _one(store: shardstore.Store, n: int = 5, **kw: Any) -> tuple[uuid.UUID, str]:
    sid = store.create_session("acme", "s", metadata={"m": 1})
    store.append_turns(sid, [PLAIN["chat"](i) for i in range(n)], [f"k{i}" for i in range(n)])
    return sid, export_text(store, [sid])


@pytest.mark.slow
def test_existing_sessions_refused_or_skipped(new_database: Callable[[], str]) -> None:
    with shardstore.connect(new_database()) as a, shardstore.connect(new_database()) as b:
        s1, t1 = _one(a)
        s2, t2 = _one(a, 3)
        text = t1 + t2
        assert b.import_jsonl(io.StringIO(t1)).sessions == 1
        before = records(b, s1)
        with pytest.raises(SessionExists, match="line 2: session"):
            b.import_jsonl(io.StringIO(text))
        with pytest.raises(shardstore.SessionNotFound):
            b.session(s2)
        report = b.import_jsonl(io.StringIO(text), on_existing="skip")
        assert (report.sessions, report.turns) == (1, 3)
        assert [s.source for s in report.skipped] == ["line 2"]
        assert records(b, s1) == before and records(b, s2) == records(a, s2)
        b.purge_session(s2)  # a purged session's tombstone counts as existing
        with pytest.raises(SessionExists):
            b.import_jsonl(io.StringIO(t2))


def _turn(seq: int, **over: Any) -> dict[str, Any]:
    doc = {
        "kind": "turn",
        "turn_seq": seq,
        "created_at": "2024-01-01T00:00:00+00:00",
        "idempotency_key": None,
        "tokens": 5,
        "message": {"role": "user", "content": "x"},
    }
    doc.update(over)
    return doc


SID = "0b7e3c4a-1f2d-4e5f-8a9b-0c1d2e3f4a5b"
HEAD = {
    "kind": "session",
    "format": "shardstore.jsonl",
    "version": 1,
    "session_id": SID,
    "tenant_id": "acme",
    "subject_id": None,
    "agent_id": None,
    "metadata": {},
    "created_at": "2024-01-01T00:00:00+00:00",
}
END = {"kind": "end", "session_id": SID, "turns": 2}


def _file(*docs: Any) -> str:
    return "".join((d if isinstance(d, str) else json.dumps(d)) + "\n" for d in docs)


HOSTILE: list[tuple[str, str, str]] = [
    ("not json", _file(HEAD, "{nope", END), "line 2: not JSON"),
    ("nan", _file(HEAD, '{"kind": "turn", "turn_seq": 0, "x": NaN}', END), "line 2: NaN"),
    (
        "infinity",
        _file(
            HEAD, _turn(0), '{"kind":"turn","turn_seq":1,"message":{"role":"u","n":-Infinity}}', END
        ),
        "line 3: -Infinity",
    ),
    ("huge int", _file(HEAD, '{"kind":"turn","n":' + "9" * 5000 + "}", END), "line 2:"),
    ("not an object", _file(HEAD, "[1, 2]", END), "line 2: not an object"),
    ("no kind", _file(HEAD, {"turn_seq": 0}, END), "line 2: not an object with a string"),
    ("turn first", _file(_turn(0), END), "line 1: a 'turn' line outside a session"),
    ("bad format", _file({**HEAD, "format": "other"}, _turn(0), END), "line 1: not a"),
    ("newer", _file({**HEAD, "version": 5}, END), "format version 5"),
    ("bad id", _file({**HEAD, "session_id": "x'; DROP TABLE x"}, END), "line 1: session_id"),
    ("no tenant", _file({**HEAD, "tenant_id": ""}, END), "line 1: tenant_id"),
    ("bad metadata", _file({**HEAD, "metadata": [1]}, END), "line 1: metadata must be"),
    ("naive time", _file({**HEAD, "created_at": "2024-01-01T00:00:00"}, END), "UTC offset"),
    ("gap", _file(HEAD, _turn(0), _turn(2), END), "line 3: turn_seq 2 where 1"),
    ("seq type", _file(HEAD, _turn(0), _turn(True), END), "line 3: turn_seq must be"),
    (
        "time back",
        _file(HEAD, _turn(0), _turn(1, created_at="2023-01-01T00:00:00+00:00"), END),
        "line 3: created_at 2023-01-01T00:00:00+00:00 is earlier",
    ),
    (
        "future",
        _file(HEAD, _turn(0), _turn(1, created_at="2999-01-01T00:00:00+00:00"), END),
        "line 3: created_at 2999",
    ),
    ("bad time", _file(HEAD, _turn(0, created_at="yesterday"), END), "not an ISO 8601"),
    (
        "dup key",
        _file(HEAD, _turn(0, idempotency_key="k"), _turn(1, idempotency_key="k"), END),
        "line 3: idempotency key 'k' is used",
    ),
    ("bad key", _file(HEAD, _turn(0, idempotency_key=5), END), "line 2: idempotency_key"),
    ("no role", _file(HEAD, _turn(0, message={"content": "x"}), END), "line 2: a message needs"),
    ("message list", _file(HEAD, _turn(0, message=[1]), END), "line 2: a message must be a dict"),
    (
        "too big",
        _file(HEAD, _turn(0, message={"role": "u", "c": "x" * 3000}), END),
        "line 2: the message is",
    ),
    (
        "over the line cap",
        _file(HEAD, _turn(0, message={"role": "u", "c": "x" * 1_100_000}), END),
        "line 2: longer than",
    ),
    ("truncated", _file(HEAD, _turn(0), _turn(1)), "the file ends inside session"),
    ("wrong end", _file(HEAD, _turn(0), END), "line 3: the end line does not close"),
    ("other kind", _file(HEAD, _turn(0), {"kind": "session"}, END), "line 3: a 'session' line"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "text", "error"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_files_name_the_line_and_write_nothing_of_the_session(
    make_store: Callable[..., shardstore.Store], name: str, text: str, error: str
) -> None:
    store = make_store(chunk_max_bytes=2048)
    good_sid = "1b7e3c4a-1f2d-4e5f-8a9b-0c1d2e3f4a5b"
    good = _file(
        {**HEAD, "session_id": good_sid}, _turn(0), _turn(1), {**END, "session_id": good_sid}
    )
    with pytest.raises(ImportRejected) as caught:
        store.import_jsonl(io.StringIO(good + text))
    # the session before the bad one stays; line numbers count from the file's start
    message = str(caught.value)
    if error.startswith("line "):
        number, rest = error.removeprefix("line ").split(":", 1)
        error = f"line {int(number) + 4}:{rest}"
    assert error in message, message
    assert store.session(good_sid).turn_count == 2
    with pytest.raises(shardstore.SessionNotFound):
        store.session(SID)
    assert store.stats().sessions == 1


def test_hostile_arguments(store: shardstore.Store, tmp_path: Path) -> None:
    for bad in ({"on_existing": "overwrite"}, {"batch_size": 0}, {"progress": 1}):
        with pytest.raises(InvalidInput):
            store.import_jsonl(io.StringIO(""), **bad)
    with pytest.raises(InvalidInput):
        store.import_jsonl(io.BytesIO(b""))
    with pytest.raises(InvalidInput):
        store.import_jsonl(5)
    with pytest.raises(InvalidInput, match="cannot read"):
        store.import_jsonl(tmp_path / "missing.jsonl")
    (tmp_path / "latin1.jsonl").write_bytes(b"\xff\xfe\n")
    with pytest.raises(ImportRejected, match="line 1: not UTF-8"):
        store.import_jsonl(tmp_path / "latin1.jsonl")
    assert store.import_jsonl(io.StringIO("\n\n")).sessions == 0  # blank lines: nothing
    sid = store.create_session("acme")
    for args, kw in (
        ((), {}),
        (([sid],), {"tenant_id": "acme"}),
        (([],), {}),
        (([sid],), {"progress": "y"}),
        (([sid],), {"out": 5}),
        ((["nope"],), {}),
    ):
        kw.setdefault("out", io.StringIO())
        with pytest.raises(InvalidInput):
            store.export_sessions(*args, **kw)
    with pytest.raises(shardstore.SessionNotFound):
        store.export_sessions([uuid.uuid4()], out=io.StringIO())
    store.purge_session(sid)
    with pytest.raises(shardstore.SessionPurged):
        store.export_sessions([sid], out=io.StringIO())


def test_export_by_tenant_and_subject(store: shardstore.Store) -> None:
    ids = [store.create_session("t1", f"s{i % 2}") for i in range(5)]
    other = store.create_session("t2", "s0")
    for sid in [*ids, other]:
        store.append_turn(sid, {"role": "user", "content": str(sid)})

    def exported(**kw: Any) -> set[str]:
        out = io.StringIO()
        store.export_sessions(out=out, **kw)
        lines = [json.loads(line) for line in out.getvalue().splitlines()]
        return {d["session_id"] for d in lines if d["kind"] == "session"}

    assert exported(tenant_id="t1") == {str(s) for s in ids}
    assert exported(subject_id="s0") == {str(s) for s in ids[::2]} | {str(other)}
    assert exported(tenant_id="t1", subject_id="s1") == {str(s) for s in ids[1::2]}
    assert exported(tenant_id="none") == set()


@pytest.mark.slow
def test_long_session_streams_on_export(
    make_store: Callable[..., shardstore.Store], new_database: Callable[[], str]
) -> None:
    """A 6,000-turn session: the exporter holds a chunk batch at a time (peak memory well
    under the export's size), the importer a batch; the copy is identical."""
    import tracemalloc

    a = make_store(chunk_tokens=400)
    sid = a.create_session("acme")
    msgs = [{"role": "user", "content": f"turn {i} " + "lorem ipsum " * 20} for i in range(6000)]
    for at in range(0, 6000, 1000):
        a.append_turns(sid, msgs[at : at + 1000])
    a.drain_folds()

    class Counting(io.TextIOBase):
        size = 0

        def write(self, text: str) -> int:
            self.size += len(text)
            return len(text)

    sink = Counting()
    tracemalloc.start()
    a.export_sessions([sid], out=sink)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert sink.size > 1_500_000 and peak < sink.size / 2, (peak, sink.size)
    with shardstore.connect(new_database(), chunk_tokens=400) as b:
        b.import_jsonl(io.StringIO(export_text(a, [sid])), batch_size=250)
        assert records(b, sid) == records(a, sid)


@pytest.mark.slow
def test_async_parity(new_database: Callable[[], str]) -> None:
    src, dst = new_database(), new_database()
    with shardstore.connect(src) as a:
        sid, text = _one(a, 12)
        before = records(a, sid)

    async def go() -> tuple[Any, Any, str]:
        astore = await shardstore.connect_async(dst)
        try:
            report = await astore.import_jsonl(io.StringIO(text))
            again = await astore.import_jsonl(io.StringIO(text), on_existing="skip")
            out = io.StringIO()
            await astore.export_sessions([sid], out=out)
            return report, again, out.getvalue()
        finally:
            await astore.close()

    report, again, exported = asyncio.run(go())
    assert (report.sessions, report.turns, len(again.skipped)) == (1, 12, 1)
    assert body(exported) == body(text)
    with shardstore.connect(dst) as b:
        assert records(b, sid) == before


@pytest.mark.slow
def test_cli_export_and_import(
    new_database: Callable[[], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardstore.cli import main

    src, dst = new_database(), new_database()
    with shardstore.connect(src) as a:
        s1, _ = _one(a, 4)
        s2, _ = _one(a, 2)
    path = str(tmp_path / "x.jsonl")
    assert main(["--dsn", src, "export", str(s1), str(s2), "-o", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["turns"] == 6
    assert main(["--dsn", src, "export", "--tenant", "acme", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert captured.out.count('"kind":"session"') == 2 and captured.err == ""
    assert main(["--dsn", src, "export"]) == 2
    assert "name the sessions" in capsys.readouterr().err
    assert main(["--dsn", dst, "import", "jsonl", path, "--quiet"]) == 0
    assert "imported 2 sessions, 6 turns" in capsys.readouterr().out
    assert main(["--dsn", dst, "import", "jsonl", path, "--json"]) == 2
    assert json.loads(capsys.readouterr().err)["error"]["type"] == "SessionExists"
    assert main(["--dsn", dst, "import", "jsonl", path, "--on-existing", "skip", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["skipped"]) == 2
