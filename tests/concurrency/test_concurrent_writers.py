"""Many writers on one session: every turn stored exactly once, turn_seq gap-free."""

from __future__ import annotations

import threading
from collections.abc import Callable

import shardstore


def test_eight_threads_on_one_session(make_store: Callable[..., shardstore.Store]) -> None:
    store = make_store(chunk_tokens=300, pool_max_size=8)
    sid = store.create_session("acme", "user:1")
    threads, per_thread = 8, 60
    results: dict[int, list[shardstore.AppendResult]] = {i: [] for i in range(threads)}
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def writer(w: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                msg = {"role": "user", "content": f"writer {w} message {i} " + "word " * (i % 40)}
                if i % 10 == 9:
                    results[w].extend(
                        store.append_turns(
                            sid, [msg, {"role": "assistant", "content": f"w{w} r{i}"}]
                        )
                    )
                else:
                    results[w].append(store.append_turn(sid, msg, idempotency_key=f"{w}-{i}"))
                if i % 25 == 0:
                    store.tail(sid, n=5)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=writer, args=(w,)) for w in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert errors == []
    turns = list(store.history(sid))
    expected_total = threads * (per_thread + per_thread // 10)
    assert [t.turn_seq for t in turns] == list(range(expected_total))
    contents = [t.message["content"] for t in turns]
    assert len(set(contents)) == expected_total, "every turn stored exactly once"
    for w in range(threads):
        seqs = [r.turn_seq for r in results[w]]
        assert seqs == sorted(seqs), "a writer's own appends keep their order"
        mine = [t for t in turns if t.message["content"].startswith(f"writer {w} ")]
        assert [t.message["content"].split()[3] for t in mine] == [
            str(i) for i in range(per_thread)
        ]
    chunks = store.chunks(sid)
    assert sum(c.turn_count for c in chunks) == expected_total
    assert [c.chunk_seq for c in chunks] == list(range(len(chunks)))
    # a retry of any acknowledged append stores nothing
    again = store.append_turn(sid, {"role": "user", "content": "ignored"}, idempotency_key="3-0")
    assert again.duplicate and again.turn_seq == results[3][0].turn_seq
    assert store.session(sid).turn_count == expected_total
