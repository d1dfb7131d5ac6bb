"""A database written before the derived fragment columns existed opens, and gains them filled."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from convmem_graph.store import MemoryStore

_DERIVED = ("ckey", "norm_hash", "cjk")


def test_an_older_database_gains_the_derived_columns_filled(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    store = MemoryStore.from_url(str(db))
    fact = store.add_fragment("u1", "User likes green tea.", category="preference")
    store.close()
    with sqlite3.connect(db) as conn:  # as a version before the derived columns left it
        indexes = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'cm_fragments'"
        ).fetchall()
        for name, sql in indexes:
            if sql and any(column in sql for column in _DERIVED):
                conn.execute(f'DROP INDEX "{name}"')
        for column in _DERIVED:
            conn.execute(f"ALTER TABLE cm_fragments DROP COLUMN {column}")

    store = MemoryStore.from_url(str(db))  # failed: a Python-computed default is no SQL literal
    try:
        assert [f.id for f in store.related_fragments("u1", [fact.key], [])] == [fact.id]
        assert [f.id for f in store.related_fragments("u1", [], [fact.content])] == [fact.id]
    finally:
        store.close()
