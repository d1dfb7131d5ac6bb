"""A call start's two reads on SQLite go through the driver: the same answers as before.

The snapshot row is read as bytes on the driver's connection (the store's pool's, or its
session's); the episodic search reads every term's postings in one statement and counts the
memory's messages with the cheaper statement. These tests hold the search equal to the portable
path (a statement per term, the count with a LIMIT subquery) across the count's cap, and the
snapshot reads equal inside and outside sessions, on a file and in memory.
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from convmem_graph._query_dates import date_spans
from convmem_graph.models import EpisodeSearch, MemorySnapshot, Message
from convmem_graph.store import MemoryStore
from convmem_graph.store._episode_search import (
    COUNT_CAP,
    EPISODE_TABLE,
    PER_TERM,
    SEQ_MASK,
    collect,
    rowid_range,
    search_sqlite,
)
from convmem_graph.text.terms import search_terms

T0 = 1_709_460_000_000
WORDS = ["kayak", "soup", "lake", "dog", "成都", "火锅", "朋友", "jazz", "tea", "March"]


def msg(mid: str, content: str, ts: int, role: str = "user") -> Message:
    return Message(id=mid, role=role, content=content, channel="im", source="message", timestamp_ms=ts)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    s = MemoryStore.from_url(str(tmp_path / "reads.db"))
    yield s
    s.close()


def _portable(conn: sqlite3.Connection, memory_id: str, query: str, limit: int) -> EpisodeSearch:
    """The search as it was: one statement per term, the count as a LIMIT subquery."""
    terms = search_terms(query)
    spans = date_spans(query)
    if not (terms or spans):
        return EpisodeSearch(terms=terms)
    lo, hi = rowid_range(memory_id)
    sql = (
        f"SELECT rowid FROM {EPISODE_TABLE} WHERE {EPISODE_TABLE} MATCH ? "
        "AND rowid BETWEEN ? AND ? ORDER BY rowid DESC LIMIT ?"
    )
    postings = {t: [r[0] & SEQ_MASK for r in conn.execute(sql, (f'"{t}"', lo, hi, PER_TERM))] for t in terms}
    return collect(conn.execute, "?", memory_id, terms, postings, limit=limit, spans=spans)


def _texts(rng: random.Random, n: int) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5))) + f" {i % 7}" for i in range(n)]


@pytest.mark.parametrize("size", [0, 3, COUNT_CAP - 1, COUNT_CAP, COUNT_CAP + 1])
def test_the_one_statement_search_equals_the_statement_per_term(store: MemoryStore, size: int) -> None:
    rng = random.Random(size)
    texts = _texts(rng, size)
    store.add_messages(
        "a", [msg(f"m{i}", t, T0 + i * 60_000, "user" if i % 2 else "assistant") for i, t in enumerate(texts)]
    )
    store.add_messages("b", [msg("x", "kayak soup 成都 on the lake", T0)])  # another memory
    queries = [
        "kayak",
        "soup lake dog",
        "成都 朋友 火锅",
        "jazz tea March 2024",
        "nothing here",
        "",
        "3 March 2024",
    ]
    pooled = store.engine.raw_connection()
    try:
        driver = cast(sqlite3.Connection, pooled.driver_connection)
        for query in queries:
            for limit in (3, 25):
                new = store.search_episodes("a", query, limit=limit)
                assert new == _portable(driver, "a", query, limit), (size, query, limit)
                assert new == search_sqlite(driver, "a", query, limit=limit)
    finally:
        pooled.close()
    if size:
        assert store.search_episodes("a", "kayak soup lake dog").total == min(size, COUNT_CAP)


def test_reads_inside_sessions_and_writes_see_the_same(store: MemoryStore) -> None:
    store.add_messages("a", [msg("1", "kayak on the lake", T0), msg("2", "soup again", T0 + 1)])
    snap = MemorySnapshot(memory_id="a", recent=store.recent_messages("a", 5))
    store.save_snapshot("a", snap, now_ms=T0)
    loaded = store.load_snapshot("a")
    assert loaded == snap
    assert store.load_snapshot("a") is loaded  # one parsed object per version of the row
    alone = store.search_episodes("a", "kayak soup")
    with store.session() as session:
        assert session.load_snapshot("a") is loaded
        assert session.search_episodes("a", "kayak soup") == alone
    with store.run("a") as run:
        assert run.search_episodes("a", "kayak soup") == alone
        run.add_messages("a", [msg("3", "kayak again", T0 + 2)])  # drops the snapshot row
        assert run.load_snapshot("a") is None
        assert len(run.search_episodes("a", "kayak").hits) == 2
    changed = MemorySnapshot(memory_id="a", recent=store.recent_messages("a", 5))
    store.save_snapshot("a", changed, now_ms=T0 + 3)
    again = store.load_snapshot("a")
    assert again == changed and again is not loaded


def test_an_in_memory_store_reads_its_one_connection() -> None:
    store = MemoryStore.from_url(":memory:")
    try:
        store.add_messages("a", [msg("1", "kayak on the lake", T0)])
        snap = MemorySnapshot(memory_id="a", recent=store.recent_messages("a", 5))
        store.save_snapshot("a", snap, now_ms=T0)
        assert store.load_snapshot("a") == snap
        assert [h.message.id for h in store.search_episodes("a", "kayak").hits] == ["1"]
        assert store.load_snapshot("nobody") is None
    finally:
        store.close()
