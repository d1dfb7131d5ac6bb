"""Small tables keyed by their primary key stored ``WITHOUT ROWID`` on SQLite (migration 15).

A rowid table whose primary key is not an ``INTEGER PRIMARY KEY`` is two B-trees: the rows by
rowid and ``sqlite_autoindex_<table>_1``, the key's index pointing at them. A ``WITHOUT ROWID``
table is one B-tree ordered by its key: every key read is one seek, and each such table costs one
page less on every file (a new file's side tables are empty: a page each for the table and its
key). Used for the tables whose rows are small, whose rowid nothing reads (no FTS rowids, no
``seq``) and that no foreign key references. Left as they are:

- rows that can pass ~1 KB: an index B-tree (which a ``WITHOUT ROWID`` table is) keeps at most
  ~1 KB of a row in its page and spills the rest to an overflow page of its own, where a table
  B-tree keeps up to ~4 KB: measured, a 1.2 kB summary took an overflow page, and the snapshot
  (tens of kB) one page more. So not ``cm_summaries``, ``cm_snapshots``, ``cm_variables`` (an
  inferred list with its fragment ids was ~1 kB), nor the vector tables;
- ``cm_memories``: rebuilding a parent table inside the set-up's transaction (foreign keys on)
  would cascade its deletes to every child;
- LangGraph's ``checkpoints`` / ``writes``, which are not ours.

A new file gets the tables this way from migration 1 (``sqlite_with_rowid=False``); an older file
has them rebuilt by :func:`rebuild_without_rowid`: the rows copied into the new table, the
table's indexes and triggers made again, in the set-up's transaction. PostgreSQL has no rowids:
nothing to do there.
"""

from __future__ import annotations

from sqlalchemy import Connection, Table

from convmem_graph.store._fact_vectors import fact_vector_stamps
from convmem_graph.store._vectors import turn_vector_stamps
from convmem_graph.store.episodes import META_TABLE
from convmem_graph.store.registry import (
    node_meta,
    profile_schemas,
    pull_cursors,
    replay_progress,
    tasks_table,
)
from convmem_graph.store.schema import round_interruptions, variable_specs

__all__ = ["KEYED_TABLES", "rebuild_without_rowid"]

#: The store's tables declared ``sqlite_with_rowid=False`` (and ``cm_episode_meta``, made by the
#: episodic index's set-up).
KEYED_TABLES: tuple[Table, ...] = (
    variable_specs,
    round_interruptions,
    tasks_table,
    replay_progress,
    pull_cursors,
    profile_schemas,
    node_meta,
    turn_vector_stamps,
    fact_vector_stamps,
)

_META_DDL = f"CREATE TABLE {META_TABLE} (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID"
_OLD = "__rowid"


def _has_rowid(sql: str) -> bool:
    return not sql.rstrip().upper().endswith("WITHOUT ROWID")


def _rebuild(conn: Connection, name: str, create: str | Table) -> None:
    """Move ``name``'s rows into the table ``create`` makes (under the same name), keeping its triggers."""
    triggers = [
        str(sql)
        for (sql,) in conn.exec_driver_sql(
            "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? ORDER BY rowid", (name,)
        )
    ]
    indexes = [
        str(n)
        for (n,) in conn.exec_driver_sql(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
            (name,),
        )
    ]
    old = name + _OLD
    conn.exec_driver_sql(f'ALTER TABLE "{name}" RENAME TO "{old}"')
    for index in indexes:  # the new table makes its own (same names)
        conn.exec_driver_sql(f'DROP INDEX "{index}"')
    if isinstance(create, Table):
        create.create(conn)  # its key columns are NOT NULL in the old table too
        wanted, where = [c.name for c in create.columns], ""
    else:
        conn.exec_driver_sql(create)
        # ``k TEXT PRIMARY KEY`` of a rowid table takes a NULL (SQLite's old quirk), which no
        # read by key finds and the new table refuses.
        wanted, where = ["k", "v"], ' WHERE "k" IS NOT NULL'
    present = {str(row[1]) for row in conn.exec_driver_sql(f'PRAGMA table_info("{old}")')}
    columns = ", ".join(f'"{c}"' for c in wanted if c in present)
    conn.exec_driver_sql(f'INSERT INTO "{name}" ({columns}) SELECT {columns} FROM "{old}"{where}')
    conn.exec_driver_sql(f'DROP TABLE "{old}"')  # its triggers go with it; no foreign key names it
    for sql in triggers:
        conn.exec_driver_sql(sql)


def rebuild_without_rowid(conn: Connection) -> None:
    """Migration 15: rebuild each of :data:`KEYED_TABLES` (and ``cm_episode_meta``) that still has rowids.

    A table already ``WITHOUT ROWID`` (a new file) or not there is left alone; PostgreSQL: nothing.
    """
    if conn.dialect.name != "sqlite":
        return
    found = {
        str(name): str(sql)
        for name, sql in conn.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
    }
    for table in KEYED_TABLES:
        if table.name in found and _has_rowid(found[table.name]):
            _rebuild(conn, table.name, table)
    if META_TABLE in found and _has_rowid(found[META_TABLE]):
        _rebuild(conn, META_TABLE, _META_DDL)
