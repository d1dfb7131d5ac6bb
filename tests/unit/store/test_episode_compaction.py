"""The episodic index folded together after bulk writes (``compact_episodes``), and at a replay's end.

On SQLite every write transaction adds an FTS5 segment and a MATCH looks each term up in every
segment; ``compact_episodes`` merges them into one. What a search finds must not change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph.models import Message
from convmem_graph.replay import Replayer
from convmem_graph.runner import Lifecycle
from convmem_graph.store import MemoryStore
from convmem_graph.store.sqlite import SQLITE_EPISODES
from convmem_graph.text import terms as T

T0 = 1_767_268_800_000
WORDS = ["chess", "pottery", "jazz", "Lisbon", "羽毛球", "成都", "朋友", "火锅", "violin", "ramen"]


def _segments(store: MemoryStore) -> int:
    with store.read() as conn:
        return SQLITE_EPISODES.segments(conn)


def _message(k: int, text: str) -> Message:
    role = "user" if k % 2 == 0 else "assistant"
    return Message(id=f"m{k}", role=role, content=text, channel="im", source="t", timestamp_ms=T0 + k * 1000)


def _found(store: MemoryStore, memory_id: str, query: str) -> object:
    result = store.search_episodes(memory_id, query)
    return result.model_dump()


batches = st.lists(
    st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), min_size=1, max_size=5),
    min_size=2,
    max_size=8,
)
queries = st.lists(
    st.lists(st.sampled_from([*WORDS, "nothing", "桌球"]), min_size=1, max_size=3), min_size=1, max_size=4
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=batches, queries=queries, memories=st.integers(min_value=1, max_value=2))
def test_a_compacted_index_finds_what_it_found_before(
    tmp_path: Path, batches: list[list[list[str]]], queries: list[list[str]], memories: int
) -> None:
    db = tmp_path / f"c{abs(hash((str(batches), str(queries), memories)))}.db"
    store = MemoryStore.from_url(str(db))
    try:
        k = 0
        for b, batch in enumerate(batches):
            memory_id = f"mem_{b % memories}"
            rows = []
            for words in batch:
                rows.append(_message(k, " ".join(words)))
                k += 1
            store.add_messages(memory_id, rows)  # one transaction each: one more segment
        asked = [" ".join(q) for q in queries]
        before = {(m, q): _found(store, f"mem_{m}", q) for m in range(memories) for q in asked}
        store.compact_episodes()
        assert _segments(store) == 1
        T._LAST[0] = None  # the searches split their queries again
        after = {(m, q): _found(store, f"mem_{m}", q) for m in range(memories) for q in asked}
        assert after == before
        store.compact_episodes()  # one segment already: nothing to do, nothing changes
        assert {(m, q): _found(store, f"mem_{m}", q) for m in range(memories) for q in asked} == before
    finally:
        store.close()


def test_the_live_path_keeps_its_segments_bounded_without_a_compaction(tmp_path: Path) -> None:
    """One transaction per turn: FTS5's own merges keep the segments few (measured: <= 19 at 10k turns)."""
    store = MemoryStore.from_url(str(tmp_path / "live.db"))
    try:
        seen = []
        for k in range(600):
            store.add_messages("mem_1", [_message(k, f"{WORDS[k % len(WORDS)]} turn {k}")])
            seen.append(_segments(store))
        assert max(seen) <= 24
        assert seen[-1] < 600 // 10
    finally:
        store.close()


def _archive(folder: Path, sessions: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "a.jsonl").open("w", encoding="utf-8") as fh:
        for s in range(sessions):
            messages = [
                {
                    "role": "user",
                    "content": f"I played {WORDS[s % len(WORDS)]} today",
                    "timestamp": T0 + s * 10_000,
                },
                {"role": "assistant", "content": "Nice.", "timestamp": T0 + s * 10_000 + 500},
            ]
            fh.write(json.dumps({"user": "ana", "messages": messages}) + "\n")
    return folder


@pytest.mark.parametrize("compact", [True, False])
def test_a_replay_ends_with_one_segment(tmp_path: Path, compact: bool) -> None:
    archive = _archive(tmp_path / "archive", sessions=12)
    store = MemoryStore.from_url(str(tmp_path / "r.db"))
    try:
        # A batch per session: one transaction, one segment each, before the end's merge.
        report = Replayer(Lifecycle(store), group_by="user", batch_messages=2, compact=compact).run([archive])
        assert report.new_messages == 24 and report.runs == 12
        if compact:
            assert _segments(store) == 1 and report.compact_seconds > 0
        else:
            assert _segments(store) > 1 and report.compact_seconds == 0
        hits = store.search_episodes("ana", "pottery").hits
        assert hits[0].message.content == "I played pottery today"  # (and its reply)
        # A rerun stores nothing new: no merge (the file is done).
        again = Replayer(Lifecycle(store), group_by="user", batch_messages=2).run([archive])
        assert again.new_messages == 0 and again.compact_seconds == 0
    finally:
        store.close()


def _pages(db: Path) -> tuple[int, int, int]:
    """``auto_vacuum`` mode, page count and free pages of the file (read with a connection of its own)."""
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return tuple(
            conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("auto_vacuum", "page_count", "freelist_count")
        )  # type: ignore[return-value]
    finally:
        conn.close()


def _fill_in_many_transactions(store: MemoryStore, n: int = 60) -> None:
    for k in range(n):  # one transaction each: one segment each, merged by FTS5 as they come
        words = " ".join(WORDS[(k + j) % len(WORDS)] for j in range(6)) + f" word{k} 第{k}次"
        store.add_messages("mem_0", [_message(k, words * 4)])


def test_a_new_file_gives_the_merge_s_free_pages_back(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    store = MemoryStore.from_url(str(db))
    try:
        _fill_in_many_transactions(store)
        assert _segments(store) > 1
        before = _found(store, "mem_0", "chess 成都")
        store.compact_episodes()
        assert _segments(store) == 1
        T._LAST[0] = None
        assert _found(store, "mem_0", "chess 成都") == before
    finally:
        store.close()
    mode, _, free = _pages(db)
    assert mode == 2  # incremental: set when the store made the file
    assert free == 0


def test_a_file_made_without_auto_vacuum_keeps_its_free_pages(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "old.db"
    conn = sqlite3.connect(db)  # a file with a table already: auto_vacuum can no longer change
    conn.execute("CREATE TABLE mine (k TEXT)")
    conn.close()
    store = MemoryStore.from_url(str(db))
    try:
        _fill_in_many_transactions(store)
        store.compact_episodes()
        assert _segments(store) == 1
    finally:
        store.close()
    mode, _, free = _pages(db)
    assert mode == 0
    assert free > 0  # the merge's old segments, kept for later writes
