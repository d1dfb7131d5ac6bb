"""Numbered schema migrations: applied once, recorded, and a file of the last release opens intact.

``tests/fixtures/store_v0_1_0.sqlite`` was written by the release before migrations existed
(``tests/fixtures/make_store_fixture.py``): it opens with this version, every row it held reads
back unchanged, and a delete of its memory leaves nothing of it in any table, the server inbox
included. :class:`TestMigrations` runs on SQLite and on PostgreSQL (``backend_url``).
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
from collections.abc import Collection, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, select, text

from convmem_graph import ConvMemory
from convmem_graph.server.bailian_schemas import ProfileSchemaStore
from convmem_graph.server.inbox import Inbox
from convmem_graph.store import MemoryStore
from convmem_graph.store._fragments import index_names
from convmem_graph.store._stamp import SCHEMA_STAMP
from convmem_graph.store.migrations import MIGRATIONS, Migration, apply_migrations, create_tables
from convmem_graph.store.registry import (
    MEMORY_TABLES,
    OPTIONAL_TABLES,
    SIDE_TABLES,
    profile_schemas,
    pull_cursors,
    replay_progress,
    schema_migrations,
)
from tests.unit.store.test_registry import find, live_tables

FIXTURE = Path(__file__).parents[2] / "fixtures" / "store_v0_1_0.sqlite"
MEMORY_ID = "mem_fixture"


def _records(store: MemoryStore) -> list[tuple[Any, ...]]:
    with store.read() as conn:
        query = select(schema_migrations.c.version, schema_migrations.c.name, schema_migrations.c.applied_at)
        return [tuple(r) for r in conn.execute(query.order_by(schema_migrations.c.version))]


def _columns(store: MemoryStore, table: str) -> set[str]:
    with store.read() as conn:
        return set(live_tables(conn)[table])


class TestMigrations:
    """What every backend's open does with the migration list (``backend_url``: a database of its own)."""

    @pytest.fixture
    def url(self, backend_url: str) -> str:
        return backend_url

    @pytest.fixture
    def store(self, url: str) -> Iterator[MemoryStore]:
        s = MemoryStore.from_url(url)
        try:
            yield s
        finally:
            s.close()

    def forget_setup(self, store: MemoryStore) -> None:
        """Make the next open set up again (SQLite: clear the stamp; PostgreSQL always does)."""
        if store.dialect == "sqlite":
            with store.transaction() as conn:
                conn.exec_driver_sql("PRAGMA user_version = 0")

    def test_a_fresh_database_records_each_migration_once(self, url: str, store: MemoryStore) -> None:
        first = _records(store)
        assert [(v, n) for v, n, _ in first] == [(m.version, m.name) for m in MIGRATIONS]
        self.forget_setup(store)
        MemoryStore.from_url(url).close()  # set up again: nothing is applied twice
        assert _records(store) == first
        # Every registered table exists from the open on but, on SQLite, the optional ones, which
        # their first write makes (store._optional); PostgreSQL makes those at the open too.
        with store.read() as conn:
            present = set(live_tables(conn))
            sqlite = conn.dialect.name == "sqlite"
        registered = {e.table.name for e in MEMORY_TABLES} | {t.name for t in SIDE_TABLES}
        optional = {t.name for t in OPTIONAL_TABLES}
        assert registered - (optional if sqlite else set()) <= present
        assert (present & optional) == (set() if sqlite else optional)

    def test_a_database_without_a_record_is_brought_up_to_date(self, url: str, store: MemoryStore) -> None:
        Inbox(store)  # the server's tables (optional on SQLite: made by their first user)
        with store.schema_transaction() as conn:  # as the last release before round ids left it
            conn.execute(text("ALTER TABLE cm_serve_inbox DROP COLUMN round_id"))
            conn.execute(text("DROP TABLE cm_schema_migrations"))
        self.forget_setup(store)
        assert "round_id" not in _columns(store, "cm_serve_inbox")
        reopened = MemoryStore.from_url(url)
        try:
            assert "round_id" in _columns(reopened, "cm_serve_inbox")
            assert [v for v, _, _ in _records(reopened)] == [m.version for m in MIGRATIONS]
            inbox = Inbox(reopened)
            assert inbox.add("trtc", "k1", "{}", task_id="t1", round_id="r1", memory_id="u1", status="done")
            with reopened.read() as conn:
                assert conn.execute(text("SELECT round_id FROM cm_serve_inbox")).scalars().all() == ["r1"]
        finally:
            reopened.close()

    def test_the_unread_inbox_index_is_dropped(self, url: str, store: MemoryStore) -> None:
        # As version 13 left a database: the inbox's round index present, migration 14 not applied.
        Inbox(store)
        with store.schema_transaction() as conn:
            conn.execute(
                text("CREATE INDEX ix_cm_serve_inbox_task_round ON cm_serve_inbox (task_id, round_id)")
            )
            conn.execute(schema_migrations.delete().where(schema_migrations.c.version == 14))
        self.forget_setup(store)
        reopened = MemoryStore.from_url(url)
        try:
            with reopened.read() as conn:
                assert "ix_cm_serve_inbox_task_round" not in index_names(conn, "cm_serve_inbox")
                assert "ix_cm_serve_inbox_task_id" in index_names(conn, "cm_serve_inbox")
            assert 14 in {v for v, _, _ in _records(reopened)}
            assert Inbox(reopened).add("trtc", "k2", "{}", task_id="t2", round_id="r2", status="done")
        finally:
            reopened.close()

    def test_only_pending_migrations_run_in_order(self, store: MemoryStore) -> None:
        extra = Table("cm_migration_probe", MetaData(), Column("k", Integer, primary_key=True))
        later = (*MIGRATIONS, Migration(len(MIGRATIONS) + 1, "probe table", create_tables(extra)))
        with store.schema_transaction() as conn:
            assert apply_migrations(conn, later) == [len(later)]
            assert apply_migrations(conn, later) == []
            assert conn.execute(select(extra)).all() == []
            conn.execute(text("DROP TABLE cm_migration_probe"))
            conn.execute(schema_migrations.delete().where(schema_migrations.c.version == len(later)))

    def test_a_misnumbered_list_is_refused(self, store: MemoryStore) -> None:
        skipped = (*MIGRATIONS, Migration(len(MIGRATIONS) + 2, "gap", create_tables()))
        with store.schema_transaction() as conn, pytest.raises(ValueError, match=r"numbered 1, 2, \.\.\."):
            apply_migrations(conn, skipped)

    def test_a_database_of_a_newer_version_opens_with_a_warning(
        self, url: str, store: MemoryStore, caplog: pytest.LogCaptureFixture
    ) -> None:
        with store.schema_transaction() as conn:
            conn.execute(schema_migrations.insert().values(version=999, name="from the future", applied_at=1))
        self.forget_setup(store)
        with caplog.at_level(logging.WARNING, logger="convmem_graph.store.migrations"):
            MemoryStore.from_url(url).close()
        assert "[999]" in caplog.text
        with store.schema_transaction() as conn:
            conn.execute(schema_migrations.delete().where(schema_migrations.c.version == 999))


def dump_tables(path: Path, skip: Collection[str] = ()) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table of the file but ``skip`` (FTS5 shadow tables included), in rowid order."""
    with closing(sqlite3.connect(path)) as conn:
        names = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE '%VIRTUAL%'"
            )
        ]
        return {n: conn.execute(f'SELECT * FROM "{n}" ORDER BY 1').fetchall() for n in names if n not in skip}


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    """A copy of the file the last release without migrations wrote."""
    path = tmp_path / "v0_1_0.sqlite"
    shutil.copyfile(FIXTURE, path)
    return path


def test_the_last_release_s_file_opens_and_migrates_with_its_data_intact(old_file: Path) -> None:
    before = dump_tables(old_file)
    assert "cm_schema_migrations" not in before and "cm_serve_inbox" in before
    with ConvMemory.open(str(old_file)) as mem:
        store = mem.store
        assert [v for v, _, _ in _records(store)] == [m.version for m in MIGRATIONS]
        assert store.count_messages(MEMORY_ID) == len(before["cm_messages"])
        assert len(store.list_fragments(MEMORY_ID, status=None)) == len(before["cm_fragments"])
        assert mem.variables(MEMORY_ID)["city"].value == "Hangzhou"
        assert mem.summary(MEMORY_ID) is not None
        assert store.load_snapshot(MEMORY_ID) is not None
        assert len(store.list_dead_letters(MEMORY_ID)) == 1
        assert len(store.list_audit(MEMORY_ID, limit=1000)) == len(before["cm_audit"])
        assert store.search_episodes(MEMORY_ID, "peanuts").hits  # the episodic index still answers
        inbox = Inbox(store)
        assert inbox.counts() == {"pending": 1}
        task = inbox.task("task-1")
        assert task is not None and task.memory_id == MEMORY_ID
        with store.read() as conn:
            schema_id = conn.execute(select(profile_schemas.c.id)).scalar_one()
            assert conn.execute(select(replay_progress.c.memory_id)).scalars().all() == [MEMORY_ID]
            assert conn.execute(select(pull_cursors.c.memory_id)).scalars().all() == [MEMORY_ID]
        assert ProfileSchemaStore(store).get(schema_id).name == "fixture"
    after = dump_tables(old_file)
    after.pop("cm_schema_migrations")
    # Migration 12's clock of snapshot revisions (store/_snapshot_revisions.py) starts at 1.
    assert after.pop("cm_snapshot_clock") == [(1, 1)]
    for name in set(after) - set(before):  # tables of later migrations start empty
        assert after.pop(name) == [], name
    # Migration 2 appended the language counts to each memory row: the old columns are unchanged.
    width = len(before["cm_memories"][0])
    after["cm_memories"] = [row[:width] for row in after["cm_memories"]]
    # Migration 9 appended each fact's revision (store/_fact_revisions.py), and its index may
    # order the dump's ties on memory id another way: the old columns, by (memory, id).
    width = len(before["cm_fragments"][0])
    after["cm_fragments"] = sorted(row[:width] for row in after["cm_fragments"])
    before["cm_fragments"] = sorted(before["cm_fragments"])
    assert after == before  # nothing rewritten, nothing lost
    with closing(sqlite3.connect(old_file)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_STAMP


def test_deleting_the_old_file_s_memory_leaves_nothing_of_it_inbox_included(old_file: Path) -> None:
    with ConvMemory.open(str(old_file)) as mem:
        assert mem.delete(MEMORY_ID)
        with mem.store.read() as conn:
            tables = live_tables(conn)
            # The webhook body, task routing, replay progress and pull cursor named the memory too.
            assert find(conn, tables, MEMORY_ID) == []
            assert find(conn, tables, "task-1") == []
            assert conn.execute(select(profile_schemas.c.id)).all()  # shared: not the memory's


def _schema_of(path: Path) -> tuple[list[Any], list[Any], list[Any], int]:
    with closing(sqlite3.connect(path)) as conn:
        objects = sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master"))
        records = sorted(conn.execute("SELECT version, name FROM cm_schema_migrations"))
        meta = sorted(conn.execute("SELECT k, v FROM cm_episode_meta"))
        stamp = conn.execute("PRAGMA user_version").fetchone()[0]
    return objects, records, meta, stamp


def test_a_new_file_gets_exactly_the_schema_the_migrations_make(tmp_path: Path) -> None:
    """The replayed set-up of an empty file equals the migrations' own path on a file holding a table."""
    fresh = tmp_path / "fresh.db"
    MemoryStore.from_url(str(fresh)).close()
    # A file with anything in it takes the migrations' own path (compiled DDL, catalog checks).
    walked = tmp_path / "walked.db"
    with closing(sqlite3.connect(walked)) as conn:
        conn.execute("CREATE TABLE unrelated (x INTEGER)")
    MemoryStore.from_url(str(walked)).close()
    objects, records, meta, stamp = _schema_of(walked)
    objects = [o for o in objects if o[1] != "unrelated"]
    assert _schema_of(fresh) == (objects, records, meta, stamp)
    assert [v for v, _ in records] == [m.version for m in MIGRATIONS]
    assert stamp == SCHEMA_STAMP


def test_a_replayed_set_up_records_its_own_time_and_a_second_open_changes_nothing(tmp_path: Path) -> None:
    first, second = tmp_path / "a.db", tmp_path / "b.db"
    MemoryStore.from_url(str(first)).close()
    with closing(sqlite3.connect(first)) as conn:
        conn.execute("UPDATE cm_schema_migrations SET applied_at = 1")
        conn.commit()
    MemoryStore.from_url(str(second)).close()  # replays the script recorded for the first
    with closing(sqlite3.connect(second)) as conn:
        times = {t for (t,) in conn.execute("SELECT applied_at FROM cm_schema_migrations")}
    assert min(times) > 1_700_000_000_000
    before = _schema_of(first)
    MemoryStore.from_url(str(first)).close()
    assert _schema_of(first) == before
