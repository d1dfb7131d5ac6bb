"""A new SQLite file gets 2 KB pages; a file made with other pages keeps them and opens as before.

Issue 24 (disk per message): every table and index of the store takes at least one page, most of
them empty side tables, so a new memory's fixed cost is set by the page size. The size is chosen
when the file is created (before WAL mode writes the header) and never changed on an open.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from convmem_graph import ConvMemory
from convmem_graph.store import MemoryStore
from convmem_graph.store.engine import NEW_FILE_PAGE_SIZE


def _page_size(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


def test_a_new_file_gets_the_new_page_size_and_wal(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    with ConvMemory.open(str(path)) as mem:
        mem.ingest("u1", [{"role": "user", "content": "我喜欢喝茶"}])
    assert NEW_FILE_PAGE_SIZE == 2048
    assert _page_size(path) == NEW_FILE_PAGE_SIZE
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_file_with_other_pages_keeps_them_and_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA page_size=4096")
        conn.execute("CREATE TABLE unrelated (x INTEGER)")
        conn.execute("INSERT INTO unrelated VALUES (1)")
        conn.commit()
    with ConvMemory.open(str(path)) as mem:
        mem.ingest("u1", [{"role": "user", "content": "I like green tea"}])
    store = MemoryStore.from_url(str(path))  # a second open of the set-up file
    try:
        assert store.count_messages("u1") == 1
    finally:
        store.close()
    assert _page_size(path) == 4096
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT x FROM unrelated").fetchall() == [(1,)]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
