"""Optional tables: on SQLite, made by the first write that needs them, not by the open.

The tables of features a memory file may never use (turn and fact vectors, ``convmem serve``'s
inbox and task map, ``convmem pull im``'s cursors, Bailian's profile schemas and node metadata,
dead letters: items no source could parse)
cost a B-tree page each, and their indexes one more, in every SQLite file: 16 of the 175 pages of
a replayed 1k-message file (issue 24, disk per message). On SQLite the migrations therefore leave
them out of a new file (:func:`~convmem_graph.store.migrations.create_tables` skips them), and
the code that writes them first calls :func:`ensure_tables` in its write transaction; the code
that reads or deletes them asks :func:`present` first and treats a missing table as an empty one
(it holds no row of anything). A file made by an older version keeps the tables it has; nothing
drops one (a process of that version may be using it).

Safe with several processes: :func:`ensure_tables` runs in the caller's write transaction, which
on SQLite holds the file's write lock from ``BEGIN IMMEDIATE`` on, so the check and the
``CREATE`` cannot interleave with another writer's; a reader sees the table once that
transaction commits. A table made here has this version's definition (columns, indexes,
``WITHOUT ROWID``), which is what the migrations would have left on a new file.

On PostgreSQL nothing changes: the migrations make every table at the open, and both helpers
answer without a statement.
"""

from __future__ import annotations

from sqlalchemy import Connection, Table
from sqlalchemy.exc import OperationalError
from sqlalchemy.schema import CreateIndex, CreateTable

__all__ = ["OPTIONAL_TABLE_NAMES", "ensure_tables", "is_missing", "is_optional", "present"]

#: The tables SQLite makes on first write (the registry lists them as ``OPTIONAL_TABLES``).
OPTIONAL_TABLE_NAMES: frozenset[str] = frozenset(
    {
        "cm_turn_vectors",
        "cm_turn_vector_stamps",
        "cm_fact_vectors",
        "cm_fact_vector_stamps",
        "cm_serve_inbox",
        "cm_serve_tasks",
        "cm_im_pull_cursors",
        "cm_bailian_profile_schemas",
        "cm_bailian_node_meta",
        "cm_dead_letters",
    }
)

_EXISTS_SQL = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"


def is_optional(conn: Connection, table: Table) -> bool:
    """Whether ``table`` may be missing from ``conn``'s database (an optional table, on SQLite)."""
    return table.name in OPTIONAL_TABLE_NAMES and conn.dialect.name == "sqlite"


def present(conn: Connection, table: Table) -> bool:
    """Whether ``table`` exists: always for a table that is not optional and on PostgreSQL.

    One read of SQLite's catalog for an optional table (not remembered: a transaction that made
    the table may still roll back).
    """
    if not is_optional(conn, table):
        return True
    return conn.exec_driver_sql(_EXISTS_SQL, (table.name,)).first() is not None


def ensure_tables(conn: Connection, *tables: Table) -> None:
    """Make the optional ``tables`` that do not exist yet, with their indexes (caller's write transaction).

    The others (and every table on PostgreSQL) are left alone: the migrations made them.
    """
    for table in tables:
        if present(conn, table):
            continue
        conn.execute(CreateTable(table))
        for index in sorted(table.indexes, key=lambda i: str(i.name)):
            conn.execute(CreateIndex(index))


def is_missing(conn: Connection, error: Exception, *tables: Table) -> bool:
    """Whether ``error`` is SQLite's "no such table" for one of the optional ``tables``.

    For the reads on a call start's path, which try the statement instead of asking
    :func:`present` first (a catalog read each time): a statement SQLite could not prepare
    changed nothing, and the transaction goes on.
    """
    if not isinstance(error, OperationalError) or conn.dialect.name != "sqlite":
        return False
    text = str(error.orig)
    return any(t.name in OPTIONAL_TABLE_NAMES and text == f"no such table: {t.name}" for t in tables)
