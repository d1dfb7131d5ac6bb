"""The one registry of the database's tables: which column names the memory, which hold none.

:func:`convmem_graph.store.MemoryStore.delete_memory` deletes from every table listed in
:data:`MEMORY_TABLES`, in that order, in one transaction, and
:func:`convmem_graph.store.transfer.export_memory` exports the ones whose entry says how
(:attr:`MemoryTable.export`); a unit test scans the live schema (SQLite and PostgreSQL) and fails
when a table with a memory-naming column is not listed here, so a new table cannot keep a deleted
memory's rows by omission.

The *side tables* below belong to layers above the store (the server's inbox and task map, the
replay's progress, the IM pull's cursors, Bailian's profile schemas and node metadata). Their
definitions live here, on :data:`SIDE_METADATA`, so that the store can create and delete them
without importing those layers (layers import downward). Every table, side tables included, is
created by the store's numbered migrations (:mod:`convmem_graph.store.migrations`) when the store
opens, and the applied migrations are recorded in :data:`schema_migrations`; on SQLite but for the
:data:`OPTIONAL_TABLES`, which the first write that needs one makes
(:mod:`convmem_graph.store._optional`): the delete skips one that does not exist (it holds no row).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Index, Integer, MetaData, String, Table, Text

from convmem_graph.store._fact_vectors import fact_vector_stamps, fact_vectors
from convmem_graph.store._optional import OPTIONAL_TABLE_NAMES
from convmem_graph.store._pgvector import PGVECTOR_TABLE
from convmem_graph.store._vectors import turn_vector_stamps, turn_vectors
from convmem_graph.store.schema import (
    audit,
    dead_letters,
    fragments,
    memories,
    messages,
    round_interruptions,
    snapshots,
    summaries,
    variable_specs,
    variables,
)

__all__ = [
    "CHECKPOINT_TABLES",
    "MEMORY_TABLES",
    "SHARED_TABLES",
    "VECTOR_COPIES",
    "MIGRATIONS_METADATA",
    "OPTIONAL_TABLES",
    "SIDE_METADATA",
    "SIDE_TABLES",
    "ExportPart",
    "MemoryTable",
    "inbox_table",
    "node_meta",
    "profile_schemas",
    "pull_cursors",
    "replay_progress",
    "schema_migrations",
    "tasks_table",
]

_Seq = BigInteger().with_variant(Integer(), "sqlite")

#: Tables of the modules above the store (created by the store's migrations, like its own).
SIDE_METADATA = MetaData()

#: The record of applied migrations (apart: it must exist before migration 1 runs).
MIGRATIONS_METADATA = MetaData()

#: One row per applied migration of :data:`convmem_graph.store.migrations.MIGRATIONS`.
schema_migrations = Table(
    "cm_schema_migrations",
    MIGRATIONS_METADATA,
    Column("version", Integer, primary_key=True, autoincrement=False),
    Column("name", String(64), nullable=False),
    Column("applied_at", _Seq, nullable=False),
)

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
    # The TRTC round a delivery belongs to (903/904/905 RoundId, 906/908 Tag.RoundId), for an
    # operator's queries. The worker no longer reads a round's deliveries again: the store
    # completes a stored round (store._rounds, store._messages), for the library's runs too. Not
    # indexed (migration 14 dropped ix_cm_serve_inbox_task_round): nothing in the package reads
    # it, every delivery paid the index's write, and an operator's query by task is served by
    # ix_cm_serve_inbox_task_id.
    Column("round_id", String(256), nullable=True),
    Index("ix_cm_serve_inbox_status_seq", "status", "seq"),
    Index("ix_cm_serve_inbox_task_id", "task_id"),
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
    sqlite_with_rowid=False,
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
    sqlite_with_rowid=False,
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
    sqlite_with_rowid=False,
)

#: Bailian profile schemas: one per workspace, shared by every user (no memory's data).
profile_schemas = Table(
    "cm_bailian_profile_schemas",
    SIDE_METADATA,
    Column("id", String(64), primary_key=True),
    Column("body", Text, nullable=False),
    Column("created_at", Integer, nullable=False),
    sqlite_with_rowid=False,
)

#: Bailian memory-node ``meta_data`` keys convmem has no column for (``location_name`` ...), per fact.
node_meta = Table(
    "cm_bailian_node_meta",
    SIDE_METADATA,
    Column("memory_id", String(256), primary_key=True),
    Column("node_id", String(256), primary_key=True),
    Column("body", Text, nullable=False),
    Column("updated_at", _Seq, nullable=False),
    sqlite_with_rowid=False,
)

#: The side tables, in creation order.
SIDE_TABLES: tuple[Table, ...] = (
    inbox_table,
    tasks_table,
    replay_progress,
    pull_cursors,
    profile_schemas,
    node_meta,
)


#: Tables a SQLite file has only once a feature wrote to them (vectors, the server's inbox and
#: task map, the IM pull's cursors, Bailian's, dead letters): see :mod:`convmem_graph.store._optional`.
OPTIONAL_TABLES: tuple[Table, ...] = (
    turn_vectors,
    turn_vector_stamps,
    fact_vectors,
    fact_vector_stamps,
    inbox_table,
    tasks_table,
    pull_cursors,
    profile_schemas,
    node_meta,
    dead_letters,
)
assert {t.name for t in OPTIONAL_TABLES} == OPTIONAL_TABLE_NAMES, "store._optional lists other tables"


@dataclass(frozen=True, slots=True)
class ExportPart:
    """How a memory table's rows appear in an export document.

    Attributes:
        key: The document key.
        order: Columns ordering the rows (none: at most one row, exported as an object or null).
        drop: Database-local columns left out (seqs, the memory id, keys recomputed on import).
    """

    key: str
    order: tuple[str, ...]
    drop: frozenset[str]


@dataclass(frozen=True, slots=True)
class MemoryTable:
    """A table holding a memory's rows and the column that names the memory.

    Attributes:
        table: The table.
        column: The column whose value is the memory id.
        export: How an export carries its rows, or ``None`` with the reason in ``not_exported``.
        not_exported: Why the table is left out of an export (derived data, server plumbing).
        fallback: Optional column standing in for ``column`` in rows written before it existed.
        via: Optional ``(column, parent, parent_column)``: rows whose ``column`` is a key of the
            memory's rows in ``parent`` belong to the memory too (TRTC deliveries stored before
            their task was mapped carry only the ``task_id``). ``parent`` must come later in
            :data:`MEMORY_TABLES` so its rows still exist when these are deleted.
    """

    table: Table
    column: str
    export: ExportPart | None = None
    not_exported: str = ""
    via: tuple[str, Table, str] | None = None
    #: A column naming the memory where ``column`` is NULL or absent (rows of older versions).
    fallback: str | None = None


#: Every table holding a memory's data, children first (the delete order of a memory). The
#: episodic index (``cm_episodes``: FTS5 on SQLite, keyed by message seq) is not listed: it is found
#: through the messages and deleted first, by the backend's
#: :meth:`~convmem_graph.store.episodes.EpisodeIndex.remove_matching`.
_PLUMBING = "server or ingestion bookkeeping of this database, not the memory's content"
_MEMORY_ONLY = frozenset({"memory_id"})

MEMORY_TABLES: tuple[MemoryTable, ...] = (
    MemoryTable(
        turn_vectors,
        "memory_id",
        not_exported="derived data: embedded again from the turns",
    ),
    MemoryTable(turn_vector_stamps, "memory_id", not_exported="the turn vectors' cache token: derived data"),
    MemoryTable(fact_vectors, "memory_id", not_exported="derived data: embedded again from the facts"),
    MemoryTable(fact_vector_stamps, "memory_id", not_exported="the fact vectors' cache token: derived data"),
    MemoryTable(messages, "memory_id", ExportPart("messages", ("seq",), frozenset({"seq", "memory_id"}))),
    # Interruptions of TRTC rounds, kept so a late copy of a round is marked too; already applied to
    # the exported messages' ``interrupted``.
    MemoryTable(round_interruptions, "memory_id", not_exported=_PLUMBING),
    MemoryTable(fragments, "memory_id", ExportPart("fragments", ("id",), _MEMORY_ONLY)),
    MemoryTable(variable_specs, "memory_id", ExportPart("variable_specs", ("position",), _MEMORY_ONLY)),
    MemoryTable(variables, "memory_id", ExportPart("variables", ("name", "origin"), _MEMORY_ONLY)),
    MemoryTable(summaries, "memory_id", ExportPart("summary", (), _MEMORY_ONLY)),
    MemoryTable(snapshots, "memory_id", not_exported="derived data: rebuilt from the rest on the next read"),
    MemoryTable(audit, "memory_id", ExportPart("audit", ("id",), frozenset({"id", "memory_id"}))),
    # item_key is recomputed on import from the target memory id and the raw item.
    MemoryTable(
        dead_letters,
        "memory_id",
        ExportPart("dead_letters", ("id",), frozenset({"id", "memory_id", "item_key"})),
    ),
    MemoryTable(inbox_table, "memory_id", not_exported=_PLUMBING, via=("task_id", tasks_table, "task_id")),
    MemoryTable(tasks_table, "memory_id", not_exported=_PLUMBING),
    MemoryTable(replay_progress, "memory_id", not_exported=_PLUMBING),
    MemoryTable(pull_cursors, "memory_id", not_exported=_PLUMBING, fallback="user_id"),
    # Deleted with the memory; the export document has no part for it yet.
    MemoryTable(node_meta, "memory_id", not_exported="Bailian clients' free-form metadata of memory nodes"),
    MemoryTable(memories, "memory_id", not_exported="the document's head (``memory``), written apart"),
)

#: Searchable copies of ``cm_turn_vectors`` made where a database extension allows (not every
#: database has them, so they are not in :data:`MEMORY_TABLES`): deleted row for row with it by
#: :mod:`convmem_graph.store._vectors`, whatever removes the turns (delete, purge, import).
VECTOR_COPIES: dict[str, str] = {
    PGVECTOR_TABLE: "pgvector's copy of the turn vectors (PostgreSQL with the extension)",
}

#: Tables known to hold no memory's data, with the reason (the schema scan accepts only these).
SHARED_TABLES: dict[str, str] = {
    profile_schemas.name: "Bailian profile schemas apply to every user of a workspace",
    schema_migrations.name: "the store's applied schema migrations",
    "cm_episode_meta": "the episodic index's format versions",
    "cm_snapshot_clock": "the clock of the call-start snapshots' revisions (one row)",
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
