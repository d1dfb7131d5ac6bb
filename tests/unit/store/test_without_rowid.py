"""Migration 15: the small keyed tables stored ``WITHOUT ROWID`` on SQLite (one B-tree each).

Issue 24 (disk per message at 1k messages): a rowid table keyed by a non-integer primary key is
two B-trees, the rows and ``sqlite_autoindex_<table>_1``, at least a page each even when empty.
These tests hold: a new file has those tables without rowids (no key index beside them); a file
made before (the same tables with rowids, filled in any order) is rebuilt by the open, keeps every
row, its indexes and triggers, answers every read the same and passes ``integrity_check``; and a
memory's delete still removes its rows from each of them.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, Table, select

from convmem_graph.store import MemoryStore
from convmem_graph.store import _queries as Q
from convmem_graph.store._stamp import SCHEMA_STAMP
from convmem_graph.store._without_rowid import KEYED_TABLES
from convmem_graph.store.episodes import META_TABLE
from convmem_graph.store.migrations import MIGRATIONS
from convmem_graph.store.registry import OPTIONAL_TABLES

_NAMES = [t.name for t in KEYED_TABLES] + [META_TABLE]
_MEMORIES = ("m", "n")


def _schema(conn: sqlite3.Connection, kind: str) -> dict[str, str]:
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = ? AND sql IS NOT NULL", (kind,))
    return {str(n): str(s) for n, s in rows}


def _autoindexed(conn: sqlite3.Connection) -> set[str]:
    rows = conn.execute("SELECT tbl_name FROM sqlite_master WHERE name LIKE 'sqlite_autoindex_%'")
    return {str(t) for (t,) in rows}


def _with_rowids(conn: Connection) -> None:
    """Give a store's database the tables as migrations 1-14 made them (with rowids), and forget 15."""
    for name in _NAMES:
        sql = conn.exec_driver_sql("SELECT sql FROM sqlite_master WHERE name = ?", (name,)).scalar()
        assert sql is not None and sql.rstrip().endswith("WITHOUT ROWID")
        extra = [
            str(s)
            for (s,) in conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('index', 'trigger') "
                "AND sql IS NOT NULL ORDER BY type, rowid",
                (name,),
            )
        ]
        conn.exec_driver_sql(f'ALTER TABLE "{name}" RENAME TO "{name}_x"')
        for (index,) in list(
            conn.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
                (f"{name}_x",),
            )
        ):
            conn.exec_driver_sql(f'DROP INDEX "{index}"')
        conn.exec_driver_sql(str(sql).rstrip()[: -len("WITHOUT ROWID")].rstrip())
        conn.exec_driver_sql(f'INSERT INTO "{name}" SELECT * FROM "{name}_x"')
        conn.exec_driver_sql(f'DROP TABLE "{name}_x"')
        for ddl in extra:
            conn.exec_driver_sql(ddl)
    conn.exec_driver_sql("DELETE FROM cm_schema_migrations WHERE version = 15")
    conn.exec_driver_sql("PRAGMA user_version = 0")


_KEY = st.sampled_from(["a", "b", "ab", "b0", "z", "é", "用户"])
_TEXT = st.text(alphabet="xyz 用", max_size=40) | st.text(alphabet="abc", min_size=900, max_size=6000)
_MEM = st.sampled_from(_MEMORIES)
_INT = st.integers(-(2**40), 2**40)


def _values(table: Table, draw: Any) -> dict[str, Any]:
    """A row of ``table`` with its key from small alphabets (shared prefixes, many ties)."""
    row: dict[str, Any] = {}
    for column in table.columns:
        try:
            kind: Any = column.type.python_type
        except NotImplementedError:  # JSON
            kind = list
        if column.name == "memory_id":
            row[column.name] = draw(_MEM) if column.primary_key or draw(st.booleans()) else None
        elif column.primary_key:
            row[column.name] = draw(_KEY)
        elif kind is bool:
            row[column.name] = draw(st.booleans())
        elif kind is int:
            row[column.name] = draw(_INT)
        elif kind in (dict, list):
            row[column.name] = draw(st.lists(_KEY, max_size=3))
        else:
            row[column.name] = draw(_TEXT)
    return row


@st.composite
def _rows(draw: Any) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for table in KEYED_TABLES:
        keyed: dict[tuple[Any, ...], dict[str, Any]] = {}
        for _ in range(draw(st.integers(0, 6))):
            row = _values(table, draw)
            keyed[tuple(row[c.name] for c in table.primary_key.columns)] = row
        out[table.name] = list(keyed.values())
    out[META_TABLE] = [{"k": k, "v": draw(_TEXT)} for k in draw(st.sets(_KEY, max_size=4))]
    return out


def _fill(conn: Connection, rows: dict[str, list[dict[str, Any]]]) -> None:
    for memory in _MEMORIES:
        conn.exec_driver_sql(
            "INSERT INTO cm_memories (memory_id, description, created_at, updated_at, extracted_seq, "
            "summarized_seq, facts_dirty, facts_zh, facts_other) VALUES (?, '', 1, 1, 0, 0, 0, 0, 0) "
            "ON CONFLICT DO NOTHING",
            (memory,),
        )
    for table in KEYED_TABLES:
        for row in rows[table.name]:
            conn.execute(table.insert().values(**row))
    for row in rows[META_TABLE]:
        conn.exec_driver_sql(
            f"INSERT INTO {META_TABLE} (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            (row["k"], row["v"]),
        )


def _reads(conn: Connection, rows: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The store's own reads of these tables, each row by its key, each memory's rows and snapshot stamps."""
    out: dict[str, Any] = {}
    for memory in _MEMORIES:
        for name, stmt in (("specs", Q.SPECS), ("values", Q.VALUES), ("summary", Q.SUMMARY)):
            out[f"{name} {memory}"] = [tuple(r) for r in conn.execute(stmt, {"mid": memory})]
        out[f"snapshot {memory}"] = [tuple(r) for r in conn.execute(Q.SNAPSHOT_DATA, {"mid": memory})]
        out[f"snap_rev {memory}"] = conn.exec_driver_sql(
            "SELECT snap_rev FROM cm_memories WHERE memory_id = ?", (memory,)
        ).all()
    for table in KEYED_TABLES:
        for row in rows[table.name]:
            where = [c == row[c.name] for c in table.primary_key.columns]
            out[f"{table.name} {row}"] = [tuple(r) for r in conn.execute(select(table).where(*where))]
        if "memory_id" in table.c:
            for memory in _MEMORIES:
                stmt = select(table).where(table.c.memory_id == memory)
                out[f"{table.name} of {memory}"] = sorted(map(repr, conn.execute(stmt)))
    for row in rows[META_TABLE]:
        out[f"meta {row['k']}"] = conn.exec_driver_sql(
            f"SELECT v FROM {META_TABLE} WHERE k = ?", (row["k"],)
        ).all()
    return out


def _dump(path: Path) -> dict[str, list[str]]:
    """Every row of every table but the migration record, in a fixed order whatever the scan order."""
    with closing(sqlite3.connect(path)) as conn:
        names = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND sql NOT LIKE '%VIRTUAL%'"
            )
        ]
        return {
            n: sorted(map(repr, conn.execute(f'SELECT * FROM "{n}"')))
            for n in names
            if n != "cm_schema_migrations"
        }


def test_a_new_file_keeps_the_keyed_tables_in_one_b_tree_each(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    store = MemoryStore.from_url(str(path))
    # The optional ones as their first write makes them (store._optional): as declared too.
    store.ensure_tables(*OPTIONAL_TABLES)
    store.close()
    with closing(sqlite3.connect(path)) as conn:
        tables = _schema(conn, "table")
        assert all(tables[name].rstrip().endswith("WITHOUT ROWID") for name in _NAMES)
        assert not _autoindexed(conn) & set(_NAMES)
        # A parent of foreign keys, a rowid that is read, rows that can pass ~1 KB: rowids kept.
        for name in ("cm_memories", "cm_messages", "cm_summaries", "cm_snapshots", "cm_variables"):
            assert not tables[name].rstrip().endswith("WITHOUT ROWID"), name


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
)
@given(rows=_rows())
def test_an_upgraded_file_keeps_every_row_and_answers_every_read_the_same(
    tmp_path_factory: pytest.TempPathFactory, rows: dict[str, list[dict[str, Any]]]
) -> None:
    path = tmp_path_factory.mktemp("keyed") / "m.db"
    store = MemoryStore.from_url(str(path))
    try:
        store.ensure_tables(*OPTIONAL_TABLES)  # as a file of an older version has them
        with store.transaction() as conn:
            _with_rowids(conn)
        with store.transaction() as conn:
            _fill(conn, rows)
        with store.read() as conn:
            before_reads = _reads(conn, rows)
    finally:
        store.close()
    with closing(sqlite3.connect(path)) as conn:
        assert _autoindexed(conn) >= {t.name for t in KEYED_TABLES} | {META_TABLE}
        before_indexes = {n: s for n, s in _schema(conn, "index").items()}
        before_triggers = _schema(conn, "trigger")
    before = _dump(path)

    store = MemoryStore.from_url(str(path))  # the open runs migration 15
    try:
        with store.read() as conn:
            assert _reads(conn, rows) == before_reads
            versions = [
                v for (v,) in conn.exec_driver_sql("SELECT version FROM cm_schema_migrations ORDER BY 1")
            ]
        assert versions == [m.version for m in MIGRATIONS]
        assert _dump(path) == before  # nothing lost, nothing added
        with closing(sqlite3.connect(path)) as conn:
            tables = _schema(conn, "table")
            assert all(tables[name].rstrip().endswith("WITHOUT ROWID") for name in _NAMES)
            assert not _autoindexed(conn) & set(_NAMES)
            assert _schema(conn, "index") == before_indexes
            assert _schema(conn, "trigger") == before_triggers
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_STAMP
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        # The snapshot triggers still move the memory's stamp.
        with store.transaction() as conn:
            stamp = conn.exec_driver_sql("SELECT snap_rev FROM cm_memories WHERE memory_id = 'm'").scalar()
            conn.exec_driver_sql(
                "INSERT INTO cm_snapshots (memory_id, data, updated_at) VALUES ('m', '{}', 2) "
                "ON CONFLICT (memory_id) DO UPDATE SET data = excluded.data"
            )
            assert (
                conn.exec_driver_sql("SELECT snap_rev FROM cm_memories WHERE memory_id = 'm'").scalar()
                != stamp
            )
        # A memory's delete still reaches each table (the registry's delete path).
        assert store.delete_memory("m")
        with store.read() as conn:
            for table in KEYED_TABLES:
                if "memory_id" in table.c:
                    left = conn.execute(select(table).where(table.c.memory_id == "m")).all()
                    assert left == [], table.name
            assert before_reads["specs n"] == [tuple(r) for r in conn.execute(Q.SPECS, {"mid": "n"})]
    finally:
        store.close()
