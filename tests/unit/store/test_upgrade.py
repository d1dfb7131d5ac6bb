"""Opening an older database brings it up to date; a current one opens without setting anything up."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from sqlalchemy import Column, Index, Integer, MetaData, String, Table, Text

from convmem_graph.nodes._extract_reads import related_facts
from convmem_graph.store import MemoryStore
from convmem_graph.store._lang_counts import LANGUAGE_TRIGGERS
from convmem_graph.store._stamp import SCHEMA_STAMP
from convmem_graph.store.migrations import schema_digest
from convmem_graph.store.migrations import stamp_of as _stamp_of

_DERIVED = ("ckey", "norm_hash", "cjk")


def test_an_older_database_gains_the_derived_columns_filled(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    store = MemoryStore.from_url(str(db))
    fact = store.add_fragment("u1", "User likes green tea.", category="preference")
    store.close()
    with sqlite3.connect(db) as conn:  # as a version before the derived columns left it
        for name in LANGUAGE_TRIGGERS:  # (and before the language counts)
            conn.execute(f"DROP TRIGGER {name}")
        indexes = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'cm_fragments'"
        ).fetchall()
        for name, sql in indexes:
            if sql and any(column in sql for column in _DERIVED):
                conn.execute(f'DROP INDEX "{name}"')
        for column in _DERIVED:
            conn.execute(f"ALTER TABLE cm_fragments DROP COLUMN {column}")
        conn.execute("PRAGMA user_version = 0")  # versions before the schema stamp set none
        conn.execute("DROP TABLE cm_schema_migrations")  # nor had a record of migrations

    store = MemoryStore.from_url(str(db))  # failed: a Python-computed default is no SQL literal
    try:
        assert [f.id for f in related_facts(store, "u1", [fact.key], [])] == [fact.id]
        assert [f.id for f in related_facts(store, "u1", [], [fact.content])] == [fact.id]
    finally:
        store.close()


def _tables() -> MetaData:
    metadata = MetaData()
    Table("t", metadata, Column("memory_id", String, primary_key=True), Column("n", Integer))
    return metadata


def test_the_schema_stamp_follows_tables_columns_indexes_and_steps() -> None:
    base = _stamp_of(_tables(), "setup 1")
    assert base == _stamp_of(_tables(), "setup 1") and 0 < base < 2**31
    more = _tables()
    more.tables["t"].append_column(Column("extra", Text, nullable=True))
    indexed = _tables()
    Index(None, indexed.tables["t"].c.n)
    retyped = MetaData()
    Table("t", retyped, Column("memory_id", String, primary_key=True), Column("n", Text))
    others = {_stamp_of(more, "setup 1"), _stamp_of(indexed, "setup 1"), _stamp_of(retyped, "setup 1")}
    assert base not in others and len(others) == 3
    assert _stamp_of(_tables(), "setup 2") != base


def test_a_current_file_opens_without_the_write_lock(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    MemoryStore.from_url(str(db)).close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_STAMP
    # Another process holds the write lock (a replay's transaction): a reader still opens and reads.
    writer = sqlite3.connect(db, timeout=0, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        store = MemoryStore.from_url(str(db))
        try:
            assert store.load_snapshot("u1") is None
        finally:
            store.close()
        assert time.monotonic() - started < 5  # the set-up would wait for the lock (busy timeout)
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_a_file_stamped_by_another_schema_is_set_up_again(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    MemoryStore.from_url(str(db)).close()
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX ix_cm_fragments_underived")
        conn.execute("PRAGMA user_version = 12345")
    MemoryStore.from_url(str(db)).close()
    with sqlite3.connect(db) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "ix_cm_fragments_underived" in names
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_STAMP


@pytest.mark.parametrize("start", ["empty", "holding a table"])
def test_a_failed_set_up_leaves_no_stamp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str) -> None:
    """Whether the set-up is replayed (an empty file) or walked (anything in it), a failure stamps nothing."""
    import convmem_graph.store.core as core
    from convmem_graph.store.migrations import apply_migrations

    def broken(conn: object) -> None:
        raise RuntimeError("disk full")

    db = tmp_path / "m.db"
    if start != "empty":
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE unrelated (x INTEGER)")
    # A new function: an empty file's replay has no script of it and records it, which fails too.
    monkeypatch.setattr(core, "set_up_schema", lambda conn: (apply_migrations(conn), broken(conn)))
    with pytest.raises(RuntimeError):
        MemoryStore.from_url(str(db))
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    monkeypatch.undo()
    MemoryStore.from_url(str(db)).close()  # the next open sets up
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_STAMP


def test_the_schema_stamp_is_the_digest_of_this_versions_tables() -> None:
    digest = schema_digest()
    assert SCHEMA_STAMP == digest, (
        f"the store's tables or open-time steps changed: set SCHEMA_STAMP = {digest} in "
        "convmem_graph/store/_stamp.py (files stamped with the old value are set up again)"
    )


def test_facts_an_older_version_wrote_since_are_filled_in_on_open(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    store = MemoryStore.from_url(str(db))
    fact = store.add_fragment("u1", "User likes green tea.", category="preference")
    store.close()
    with sqlite3.connect(db) as conn:  # the stamp stays: an older version does not know it
        conn.execute("UPDATE cm_fragments SET ckey = NULL, norm_hash = NULL, cjk = NULL")
        plan = " ".join(
            r[-1]
            for r in conn.execute("EXPLAIN QUERY PLAN SELECT id FROM cm_fragments WHERE ckey IS NULL LIMIT 1")
        )
        assert "ix_cm_fragments_underived" in plan  # the probe on every open is not a scan
    store = MemoryStore.from_url(str(db))
    try:
        assert [f.id for f in related_facts(store, "u1", [fact.key], [])] == [fact.id]
    finally:
        store.close()
