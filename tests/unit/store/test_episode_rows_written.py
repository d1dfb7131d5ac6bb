"""SQLite's message insert indexes its new rows from what it wrote, not from a read-back.

The rows' seqs come from the connection's last rowid (``seq`` is ``INTEGER PRIMARY KEY
AUTOINCREMENT``, so one ``executemany`` numbers its rows consecutively). Issue 24 item 3: the
read-back of a batch's ``(seq, content)`` cost a statement and a row object per message.

The index is checked against one built from scratch out of the stored rows, after every write
of interleaved memories (the seq is global: another memory's rows sit between a memory's
batches), repeated ids, partial messages completed later (deleted and stored again with a new
seq) and cross-channel copies, so a seq off by one or a row indexed twice or never shows.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convmem_graph.models import Message
from convmem_graph.store import MemoryStore
from convmem_graph.store._episode_search import EPISODE_TABLE, rowid_range
from convmem_graph.store.episodes import episode_text
from tests.statements import statements_from

T0 = 1_767_000_000_000
WORDS = ["tea", "chess", "Lisbon", "running", "ok", "好的", "羽毛球", "pottery", "jazz", "!"]


def _message(memory: str, key: int, words: list[str], *, partial: bool, channel: str, at: int) -> Message:
    return Message(
        id=f"{memory}-{key}",
        role="user" if key % 3 else "assistant",
        content=" ".join(words),
        channel=channel,  # type: ignore[arg-type]
        source="message",
        timestamp_ms=T0 + at * 1000,
        partial=partial,
    )


MESSAGES = st.builds(
    lambda memory, key, words, partial, channel, at: _message(
        memory, key, words, partial=partial, channel=channel, at=at
    ),
    st.sampled_from(["a", "b"]),
    st.integers(0, 6),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
    st.booleans(),
    st.sampled_from(["api", "im"]),
    st.integers(0, 30),
)
#: Writes: (memory, its batch); a batch holds only its memory's messages.
WRITES = st.lists(
    st.tuples(st.sampled_from(["a", "b"]), st.lists(MESSAGES, min_size=1, max_size=6)), min_size=1, max_size=6
)


def _indexed(conn: sqlite3.Connection) -> set[tuple[str, int]]:
    """(term, rowid) of every row the store's episodic index holds."""
    conn.execute(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.v USING fts5vocab(main, {EPISODE_TABLE}, instance)"
    )
    return {(term, doc) for term, doc in conn.execute("SELECT term, doc FROM temp.v")}


def _from_scratch(conn: sqlite3.Connection) -> set[tuple[str, int]]:
    """What an index built now from every stored row holds (same tokenizer, same rowids)."""
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (EPISODE_TABLE,)).fetchone()[0]
    conn.execute("DROP TABLE IF EXISTS temp.ref")
    conn.execute(re.sub(rf"TABLE (IF NOT EXISTS )?{EPISODE_TABLE}\b", "TABLE temp.ref", sql, count=1))
    for memory, seq, content in conn.execute("SELECT memory_id, seq, content FROM cm_messages").fetchall():
        conn.execute(
            "INSERT INTO temp.ref (rowid, body) VALUES (?, ?)",
            (rowid_range(memory)[0] | seq, episode_text(content)),
        )
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.w USING fts5vocab(temp, ref, instance)")
    return {(term, doc) for term, doc in conn.execute("SELECT term, doc FROM temp.w")}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=WRITES)
def test_the_index_holds_every_stored_row_under_its_seq(tmp_path: Path, writes: list[Any]) -> None:
    db = tmp_path / f"w{abs(hash(repr(writes)))}.db"
    store = MemoryStore.from_url(f"sqlite:///{db}")
    try:
        for memory, batch in writes:
            mine = [m.model_copy(update={"id": f"{memory}:{m.id}"}) for m in batch]
            store.add_messages(memory, mine, dedupe_window_ms=5_000)
            with sqlite3.connect(db) as conn:
                assert _indexed(conn) == _from_scratch(conn)
    finally:
        store.close()
        for p in tmp_path.glob(db.name + "*"):
            p.unlink()


def test_a_batch_is_indexed_without_reading_its_rows_back(tmp_path: Path) -> None:
    store = MemoryStore.from_url(f"sqlite:///{tmp_path / 'm.db'}")
    try:
        store.add_messages("m", [_message("m", 1, ["tea"], partial=False, channel="api", at=0)])
        batch = [
            _message("m", k, ["chess", str(k)], partial=False, channel="api", at=k) for k in range(2, 40)
        ]
        with statements_from(store, "add_messages") as seen:
            store.add_messages("m", batch)
        reads = [
            s
            for s in seen
            if s.lstrip().upper().startswith("SELECT") and "content" in s and "cm_messages" in s
        ]
        # The duplicate lookups read the stored copies' text; nothing reads the batch's own rows.
        assert not [s for s in reads if "seq >" in s or "max(" in s.lower()], reads
        with sqlite3.connect(tmp_path / "m.db") as conn:
            assert _indexed(conn) == _from_scratch(conn)
    finally:
        store.close()
