"""The one registry of every table that holds a memory's data, and the tables declared beside the store.

:func:`convmem_graph.store.MemoryStore.delete_memory` deletes from every table listed in
:data:`MEMORY_TABLES`, in that order, in one transaction; a unit test scans the live schema (SQLite
and PostgreSQL) and fails when a table with a memory-naming column is not listed here, so a new table
cannot keep a deleted memory's rows by omission.

The *side tables* below belong to layers above the store (the server's inbox and task map, the
replay's progress, the IM pull's cursors, Bailian's profile schemas and node metadata). Their
definitions live here, on :data:`SIDE_METADATA`, so that the store can delete from them without
importing those layers (layers import downward). They are not part of the store's schema stamp:
each module creates its own tables on first use, as before, and a delete skips a side table that
does not exist yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, String, Table, Text

from convmem_graph.store.schema import (
    audit,
    dead_letters,
    fragments,
    memories,
    messages,
    snapshots,
    summaries,
    variable_specs,
    variables,
)

__all__ = [
    "CHECKPOINT_TABLES",
    "MEMORY_TABLES",
    "SHARED_TABLES",
    "SIDE_METADATA",
    "MemoryTable",
    "inbox_table",
    "node_meta",
    "profile_schemas",
    "pull_cursors",
    "replay_progress",
    "tasks_table",
]

_Seq = BigInteger().with_variant(Integer(), "sqlite")

#: Tables created on first use by the modules above the store (not by the store's open).
SIDE_METADATA = MetaData()

#: ``convmem serve``'s durable inbox: raw webhook bodies and finished proxy turns.
inbox_table = Table(
    "cm_serve_inbox",
    SIDE_METADATA,
    Column("seq", _Seq, primary_key=True, autoincrement=True),
    Column("vendor", String(16), nullable=False),
    Column("delivery_key", String(128), nullable=False, unique=True),
    Column("received_ms", _Seq, nullable=False),
    Column("event", Integer, nullable=True),
    Column("task_id", String(256), nullable=True),
    Column("memory_id", String(256), nullable=True),
    Column("status", String(16), nullable=False),
    Column("note", Text, nullable=True),
    Column("body", Text, nullable=False),
    # The TRTC round a delivery belongs to (903/904/905 RoundId, 906/908 Tag.RoundId): a round's
    # earlier deliveries are read again with a later one, so the round comes out whole in any order.
    Column("round_id", String(256), nullable=True),
    Index("ix_cm_serve_inbox_status_seq", "status", "seq"),
    Index("ix_cm_serve_inbox_task_id", "task_id"),
    Index("ix_cm_serve_inbox_task_round", "task_id", "round_id"),
)

#: Per TRTC ``TaskId``: the memory and the two speakers once known.
tasks_table = Table(
    "cm_serve_tasks",
    SIDE_METADATA,
    Column("task_id", String(256), primary_key=True),
    Column("memory_id", String(256), nullable=True),
    Column("human_id", String(256), nullable=True),
    Column("bot_id", String(256), nullable=True),
    Column("updated_ms", _Seq, nullable=False),
)

#: Files whose every batch committed: a rerun skips them (keyed by path, size, mtime, shard and grouping).
replay_progress = Table(
    "cm_replay_progress",
    SIDE_METADATA,
    Column("file_key", String(64), primary_key=True),
    Column("path", String(1024), nullable=False),
    Column("messages", Integer, nullable=False),
    Column("finished_at", Integer, nullable=False),
    # The memory the file fed when it fed exactly one (so deleting that memory forgets the row).
    Column("memory_id", String, nullable=True, index=True),
)

#: ``convmem pull im``: the newest message time pulled per (user, bot), and the memory it fed.
pull_cursors = Table(
    "cm_im_pull_cursors",
    SIDE_METADATA,
    Column("user_id", String(256), primary_key=True),
    Column("bot_id", String(256), primary_key=True),
    Column("last_time", Integer, nullable=False),
    # A pull into another memory id than the user's: deleting that memory forgets the cursor.
    # Rows of older versions have none; the user id (a pull's default memory id) stands in.
    Column("memory_id", String(256), nullable=True, index=True),
)

#: Bailian profile schemas: one per workspace, shared by every user (no memory's data).
profile_schemas = Table(
    "cm_bailian_profile_schemas",
    SIDE_METADATA,
    Column("id", String(64), primary_key=True),
    Column("body", Text, nullable=False),
    Column("created_at", Integer, nullable=False),
)

#: Bailian memory-node ``meta_data`` keys convmem has no column for (``location_name`` ...), per fact.
node_meta = Table(
    "cm_bailian_node_meta",
    SIDE_METADATA,
    Column("memory_id", String(256), primary_key=True),
    Column("node_id", String(256), primary_key=True),
    Column("body", Text, nullable=False),
    Column("updated_at", _Seq, nullable=False),
)


@dataclass(frozen=True, slots=True)
class MemoryTable:
    """A table holding a memory's rows and the column that names the memory.

    Attributes:
        table: The table.
        column: The column whose value is the memory id.
        side: True for a side table (created by a module above the store; may not exist yet).
        fallback: Optional column standing in for ``column`` in rows written before it existed.
        via: Optional ``(column, parent, parent_column)``: rows whose ``column`` is a key of the
            memory's rows in ``parent`` belong to the memory too (TRTC deliveries stored before
            their task was mapped carry only the ``task_id``). ``parent`` must come later in
            :data:`MEMORY_TABLES` so its rows still exist when these are deleted.
    """

    table: Table
    column: str
    side: bool = False
    via: tuple[str, Table, str] | None = None
    #: A column naming the memory where ``column`` is NULL or absent (rows of older versions).
    fallback: str | None = None


#: Every table holding a memory's data, children first (the delete order of a memory). The
#: episodic index (``cm_episodes``: FTS5 on SQLite, keyed by message seq) is not listed: it is found
#: through the messages and deleted first, by :func:`~convmem_graph.store.episodes.delete_message_episodes`.
MEMORY_TABLES: tuple[MemoryTable, ...] = (
    MemoryTable(messages, "memory_id"),
    MemoryTable(fragments, "memory_id"),
    MemoryTable(variable_specs, "memory_id"),
    MemoryTable(variables, "memory_id"),
    MemoryTable(summaries, "memory_id"),
    MemoryTable(snapshots, "memory_id"),
    MemoryTable(audit, "memory_id"),
    MemoryTable(dead_letters, "memory_id"),
    MemoryTable(inbox_table, "memory_id", side=True, via=("task_id", tasks_table, "task_id")),
    MemoryTable(tasks_table, "memory_id", side=True),
    MemoryTable(replay_progress, "memory_id", side=True),
    MemoryTable(pull_cursors, "memory_id", side=True, fallback="user_id"),
    MemoryTable(node_meta, "memory_id", side=True),
    MemoryTable(memories, "memory_id"),
)

#: Tables known to hold no memory's data, with the reason (the schema scan accepts only these).
SHARED_TABLES: dict[str, str] = {
    profile_schemas.name: "Bailian profile schemas apply to every user of a workspace",
    "cm_episode_meta": "the episodic index's format versions",
    "checkpoint_migrations": "the LangGraph PostgreSQL saver's applied migrations",
    # Its ``owner`` column is a setup process's random token, not a memory.
    "convmem_setup_leases": "the PostgreSQL checkpoint setup's lease",
}

#: LangGraph's saver tables (SQLite and PostgreSQL savers) and the column naming the thread
#: (``convmem:<memory id>``): not the store's to delete; ``ConvMemory.delete`` deletes the memory's
#: threads through the checkpointer (``delete_memory_checkpoints``).
CHECKPOINT_TABLES: dict[str, str] = {
    "checkpoints": "thread_id",
    "writes": "thread_id",
    "checkpoint_blobs": "thread_id",
    "checkpoint_writes": "thread_id",
}
