"""A per-memory revision of its cached call-start snapshot, moved by the database (SQLite only).

A call start on a memory that did not change reparses nothing (the parsed snapshot is kept in
process), but it still fetched the whole snapshot row (~93 kB on a full memory) to learn that it
had not changed, comparing it byte for byte with the row it parsed. A stamp read by primary key
does the same job, provided it moves on every change of the row, whoever makes it: this process
through the store, raw SQL, another process, another ``ConvMemory`` on the file. An in-process
counter cannot see the last three, and ``PRAGMA data_version`` cannot tell a snapshot write from
the LangGraph checkpointer's commits, which go to the same file every turn.

So triggers keep, like the facts' revisions (:mod:`._fact_revisions`):

- ``cm_snapshot_clock``: one row whose ``rev`` goes up by one at every snapshot write;
- ``cm_memories.snap_rev``: the clock's value when the memory's snapshot row was last inserted,
  updated or deleted, or when the memory row itself was inserted.

A value is never given twice (the clock only goes up), so a kept ``(snap_rev, parsed snapshot)``
pair is current exactly when the memory's ``snap_rev`` still reads the same: a snapshot changed
while its memory row was missing (no foreign key is enforced) leaves the next memory row a new
value, and a memory deleted and made again under its id starts from a new one. ``snap_rev`` is
``NULL`` where the stamp cannot be trusted (the clock row gone); readers then compare the row's
bytes as before. A rolled-back write takes its clock values back with it, and the next write may
reuse them: a pair is therefore only kept from a read outside any open transaction
(:func:`read_snapshot_row`). PostgreSQL has neither the columns nor the triggers: its call start
compares the row's text.

Written with no SQLAlchemy import at run time: the call-start reader
(:mod:`convmem_graph.store.sqlite_reader`) shares :func:`read_snapshot_row`.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from sqlalchemy import Connection

__all__ = ["SNAPSHOT_REVISION_TRIGGERS", "SnapshotRow", "ensure_snapshot_revisions", "read_snapshot_row"]

#: The triggers (one per statement kind on the snapshots, one for a new memory row).
SNAPSHOT_REVISION_TRIGGERS = (
    "cm_snapshots_rev_ins",
    "cm_snapshots_rev_upd",
    "cm_snapshots_rev_del",
    "cm_memories_snap_ins",
)

_CLOCK = "cm_snapshot_clock"


def _stamp(memory: str) -> str:
    # The clock moves first, then the memory takes its value (NULL when the clock row is gone).
    return (
        f"UPDATE {_CLOCK} SET rev = rev + 1 WHERE id = 1; "
        f"UPDATE cm_memories SET snap_rev = (SELECT rev FROM {_CLOCK} WHERE id = 1) "
        f"WHERE memory_id = {memory};"
    )


_DDL = (
    f"CREATE TABLE IF NOT EXISTS {_CLOCK} (id INTEGER PRIMARY KEY, rev INTEGER NOT NULL)",
    f"CREATE TRIGGER IF NOT EXISTS cm_snapshots_rev_ins AFTER INSERT ON cm_snapshots BEGIN "
    f"{_stamp('NEW.memory_id')} END",
    # A row moved to another memory changes both memories' snapshots.
    f"CREATE TRIGGER IF NOT EXISTS cm_snapshots_rev_upd AFTER UPDATE ON cm_snapshots BEGIN "
    f"{_stamp('OLD.memory_id')} {_stamp('NEW.memory_id')} END",
    f"CREATE TRIGGER IF NOT EXISTS cm_snapshots_rev_del AFTER DELETE ON cm_snapshots BEGIN "
    f"{_stamp('OLD.memory_id')} END",
    f"CREATE TRIGGER IF NOT EXISTS cm_memories_snap_ins AFTER INSERT ON cm_memories BEGIN "
    f"{_stamp('NEW.memory_id')} END",
)


def ensure_snapshot_revisions(conn: Connection) -> None:
    """Add the clock, the ``snap_rev`` column and the triggers where missing (SQLite; else nothing).

    Safe to run again. Memories present before get the clock's current value: any later change
    of their snapshot moves it past that.
    """
    if conn.dialect.name != "sqlite":
        return
    present = {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(cm_memories)")}
    for ddl in _DDL:
        conn.exec_driver_sql(ddl)
    conn.exec_driver_sql(f"INSERT OR IGNORE INTO {_CLOCK} (id, rev) VALUES (1, 1)")
    if "snap_rev" not in present:
        conn.exec_driver_sql("ALTER TABLE cm_memories ADD COLUMN snap_rev INTEGER")
        conn.exec_driver_sql(f"UPDATE cm_memories SET snap_rev = (SELECT rev FROM {_CLOCK} WHERE id = 1)")


class SnapshotRow(NamedTuple):
    """What :func:`read_snapshot_row` found of a memory's cached snapshot."""

    #: The memory's ``snap_rev`` as read with the row (None: no stamp to trust).
    rev: int | None
    #: The row's JSON (bytes on SQLite, text on PostgreSQL); None when the stamp read equals the
    #: kept one (not fetched).
    data: str | bytes | None
    #: Whether the read ran outside any open transaction (only then may ``rev`` be kept).
    committed: bool


# One statement, so the stamp and the row come from the same read. The row's bytes are fetched
# only when the stamp differs from the kept one (``?2``; NULL never equals).
_ROW = (
    "SELECT m.snap_rev, CASE WHEN m.snap_rev = ?2 THEN NULL ELSE CAST(s.data AS BLOB) END "
    "FROM cm_snapshots s LEFT JOIN cm_memories m ON m.memory_id = s.memory_id WHERE s.memory_id = ?1"
)


def read_snapshot_row(conn: sqlite3.Connection, memory_id: str, kept_rev: int | None) -> SnapshotRow | None:
    """The memory's snapshot row as of one read, its bytes only if its stamp is not ``kept_rev``.

    None when the memory has no cached snapshot (or a NULL one). A ``kept_rev`` must come from
    an earlier result whose ``committed`` was true.
    """
    row = conn.execute(_ROW, (memory_id, kept_rev)).fetchone()
    if row is None:
        return None
    rev, data = row
    if data is None and (rev is None or rev != kept_rev):
        # NULL in the row itself (a NOT NULL column, but raw SQL can store one): no snapshot, as
        # the plain read of the row answered.
        return None
    return SnapshotRow(rev, data, not conn.in_transaction)
