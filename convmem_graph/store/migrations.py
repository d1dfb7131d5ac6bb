"""Numbered schema migrations of the store's database, each applied once and recorded.

Like LangGraph's savers: :data:`MIGRATIONS` is an ordered list; :func:`apply_migrations` runs the
ones the database has not recorded in ``cm_schema_migrations`` (one row per version), inside the
store's set-up transaction, so a migration and its record commit together or not at all.

Migration 1 is the schema of the last release before this list existed: every table of the
registry (:mod:`convmem_graph.store.registry`), the side tables of the server, replay and pull
included, plus the ``ALTER TABLE ... ADD COLUMN`` upgrades of files older still. It only creates
what is missing, so a file of any earlier version opens and is brought up to date; on such a file
it is recorded as applied without having rewritten anything.

A later change of the schema is a new :class:`Migration` appended with the next number: create a
new table with :func:`create_tables`, add columns with :func:`add_columns`. Steps must be safe on
a database where they already took effect (a newer file reopened by an older version and set up
again, then by this one), which both helpers are. The schema stamp (:func:`schema_digest`) covers
the tables and the migration list: a SQLite file stamped by this version opens without taking the
write lock; any other stamp makes the open run the pending migrations.

On SQLite the optional tables (:mod:`~convmem_graph.store._optional`: vectors, the server's inbox
and task map, the IM pull's cursors, Bailian's) are not made by the migrations: both helpers skip
them, and a step touching one must accept that it may not exist (its first write makes it as
declared then). A file that has them keeps them.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, MetaData, Table, insert, inspect, select
from sqlalchemy.schema import CreateIndex

from convmem_graph._time import now_ms
from convmem_graph.store._fact_revisions import (
    ensure_fact_revisions,
    ensure_pg_fact_revisions,
    pg_fact_revisions_per_statement,
)
from convmem_graph.store._fact_vectors import fact_vector_stamps, fact_vectors
from convmem_graph.store._fragments import index_names, upgrade_fragments
from convmem_graph.store._lang_counts import (
    ensure_language_counts,
    install_language_triggers,
    pg_language_counts_per_statement,
)
from convmem_graph.store._optional import is_optional, present
from convmem_graph.store._pgvector import enable_pgvector
from convmem_graph.store._snapshot_revisions import ensure_snapshot_revisions
from convmem_graph.store._vectors import turn_vector_stamps, turn_vectors
from convmem_graph.store._without_rowid import rebuild_without_rowid
from convmem_graph.store.episodes import INDEX_VERSION
from convmem_graph.store.registry import SIDE_TABLES, node_meta, schema_migrations
from convmem_graph.store.schema import (
    ASCENDING_INDEXES,
    METADATA,
    OBSOLETE_INDEXES,
    fragments,
    memories,
    round_interruptions,
)

__all__ = [
    "MIGRATIONS",
    "SETUP_REVISION",
    "Migration",
    "add_columns",
    "add_missing_columns",
    "applied_versions",
    "apply_migrations",
    "create_tables",
    "schema_digest",
    "set_up_schema",
    "stamp_of",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered step of the schema.

    Attributes:
        version: Its number: 1, 2, ... in list order.
        name: A short name, recorded with the number.
        apply: The step; runs in the set-up transaction of the store's open.
    """

    version: int
    name: str
    apply: Callable[[Connection], None]


def add_missing_columns(conn: Connection, tables: Sequence[Table] | None = None) -> None:
    """Bring tables made by an older version up to date by adding the columns they lack.

    New columns are always nullable or carry a default, so adding them is enough; nothing is
    rewritten or dropped. A column whose default is computed in Python (the derived fragment
    columns) is added nullable, and filled by the store's open
    (:func:`~convmem_graph.store._fragments.upgrade_fragments`). ``tables`` defaults to the
    store's own. Indexes of the tables missing from the database are created too.
    """
    # One catalog read for every table (a read per table cost a round trip each on every open).
    tables = list(tables) if tables is not None else METADATA.sorted_tables
    found = inspect(conn).get_multi_columns(filter_names=[t.name for t in tables])
    for table in tables:
        if (None, table.name) not in found and is_optional(conn, table):
            continue  # not made yet: its first write makes it as declared (store._optional)
        present = {c["name"] for c in found.get((None, table.name), [])}
        added = False
        for column in table.columns:
            if column.name in present:
                continue
            ddl = column.type.compile(dialect=conn.dialect)
            scalar = column.default is not None and column.default.is_scalar
            default = getattr(column.default, "arg", None) if scalar else None
            clause = ""
            if default is not None:
                literal = f"'{default}'" if isinstance(default, str) else str(int(default))
                clause = f" NOT NULL DEFAULT {literal}"
            conn.exec_driver_sql(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {ddl}{clause}')
            logger.info("added column %s.%s to an older database", table.name, column.name)
            added = True
        if added:
            present = index_names(conn, table.name)  # not checkfirst: it misses SQLite's expression indexes
            for index in table.indexes:
                if index.name not in present:
                    index.create(conn)


def create_tables(*tables: Table) -> Callable[[Connection], None]:
    """A migration step creating ``tables`` (and their indexes) where they do not exist yet.

    On SQLite an optional table (:mod:`~convmem_graph.store._optional`) is skipped: its first
    write makes it, with the definition of the version that writes.
    """

    def step(conn: Connection) -> None:
        # One catalog read per metadata (a check per table cost a round trip each).
        by_metadata: dict[int, tuple[MetaData, list[Table]]] = {}
        for table in tables:
            if is_optional(conn, table):
                continue
            by_metadata.setdefault(id(table.metadata), (table.metadata, []))[1].append(table)
        for metadata, listed in by_metadata.values():
            metadata.create_all(conn, tables=listed, checkfirst=True)

    return step


def add_columns(*tables: Table) -> Callable[[Connection], None]:
    """A migration step adding the declared columns ``tables`` lack (see :func:`add_missing_columns`)."""

    def step(conn: Connection) -> None:
        add_missing_columns(conn, tables)

    return step


#: The store's own tables and the side tables as of migration 1 (frozen: a table added later is
#: created by its own migration, not here).
_V1_STORE = (
    "cm_memories",
    "cm_messages",
    "cm_fragments",
    "cm_variable_specs",
    "cm_variables",
    "cm_summaries",
    "cm_snapshots",
    "cm_audit",
    "cm_dead_letters",
)
_V1_SIDE = (
    "cm_serve_inbox",
    "cm_serve_tasks",
    "cm_replay_progress",
    "cm_im_pull_cursors",
    "cm_bailian_profile_schemas",
)


def _v1_tables() -> list[Table]:
    side = {t.name: t for t in SIDE_TABLES}
    return [METADATA.tables[name] for name in _V1_STORE] + [side[name] for name in _V1_SIDE]


def _initial_schema(conn: Connection) -> None:
    """Migration 1: the schema of the last release without migrations, from nothing or from any older file."""
    tables = _v1_tables()
    create_tables(*tables)(conn)
    # Files of older versions: tables that exist but lack later columns (derived fact columns,
    # the inbox's round, the replay progress' and pull cursors' memory column).
    add_missing_columns(conn, tables)


def _language_counts(conn: Connection) -> None:
    """Migration 2: trigger-kept language counts of durable facts (:mod:`~convmem_graph.store._lang_counts`).

    Adds ``cm_memories.facts_zh`` / ``facts_other``, the two indexes the counts are read and
    corrected through, then the triggers, and counts every memory's facts once.
    """
    add_missing_columns(conn, [memories])
    present = index_names(conn)
    for index in fragments.indexes:
        if index.name in ("ix_cm_fragments_expiring", "ix_cm_fragments_lang") and index.name not in present:
            index.create(conn)
    ensure_language_counts(conn)


def _expired_counts(conn: Connection) -> None:
    """Migration 10: bounded per-turn reads of ``language`` and of custom list variables.

    Adds the expiry mark and the expired counts to ``cm_memories`` (kept by the replaced triggers,
    :func:`~convmem_graph.store._lang_counts.install_language_triggers`, which recounts) and the
    key-family index the inference walks read (``ix_cm_fragments_family``), and drops the partial
    indexes it replaces (``OBSOLETE_INDEXES``: hobby, food, allergy).
    """
    add_missing_columns(conn, [memories])
    present = index_names(conn)
    if "ix_cm_fragments_family" not in present:
        next(i for i in fragments.indexes if i.name == "ix_cm_fragments_family").create(conn)
    for name in OBSOLETE_INDEXES:
        if name in present:
            conn.exec_driver_sql(f"DROP INDEX {name}")
    install_language_triggers(conn)


def _ascending_fact_indexes(conn: Connection) -> None:
    """Migration 13: the fact indexes read newest first, rebuilt oldest first (``ASCENDING_INDEXES``).

    Same names and columns, every column's direction reversed: each statement's ORDER BY is then
    served by reading the index backwards (the same plan), and facts written in time order fill
    its pages instead of leaving them half empty. Dropped and created again in the set-up's
    transaction, so a file holds either the old indexes or the new ones. On SQLite an index
    already as declared is left alone (a new file, made by migration 1 with this version's
    indexes: rebuilding them would only leave free pages behind); PostgreSQL rebuilds each.
    """
    sqlite = conn.dialect.name == "sqlite"
    found: dict[str, str] = {}
    if sqlite:
        rows = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (fragments.name,)
        )
        found = {str(name): str(sql) for name, sql in rows}
    for index in sorted(fragments.indexes, key=lambda i: str(i.name)):
        name = str(index.name)
        if name not in ASCENDING_INDEXES:
            continue
        if sqlite and found.get(name) == str(CreateIndex(index).compile(dialect=conn.dialect)):
            continue
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
        index.create(conn)


def _pgvector_vectors(conn: Connection) -> None:
    """Migration 7: turn vectors searched by pgvector where the server has it.

    See :mod:`~convmem_graph.store._pgvector`. Elsewhere (SQLite, a server without the
    extension) it is recorded having changed nothing.
    """
    enable_pgvector(conn)


def _turn_vectors_by_model(conn: Connection) -> None:
    """Migration 11: ``ix_cm_turn_vectors_model``, the turn vectors by memory, model and seq.

    Vectors are keyed by the vector text's form too (``_vectors.vector_key``): a store upgraded
    from before holds every vector under another key, and the search's check of its newest
    vector must not walk them all.
    """
    if not present(conn, turn_vectors):
        return  # an optional table not made yet (SQLite): made with the index by its first write
    if "ix_cm_turn_vectors_model" not in index_names(conn, turn_vectors.name):
        next(i for i in turn_vectors.indexes if i.name == "ix_cm_turn_vectors_model").create(conn)


#: Indexes a migration dropped because nothing reads through them (migration 14).
_UNREAD_INDEXES = ("ix_cm_serve_inbox_task_round",)


def _drop_unread_indexes(conn: Connection) -> None:
    """Migration 14: drop the indexes nothing reads (``_UNREAD_INDEXES``).

    ``ix_cm_serve_inbox_task_round`` was written for every TRTC delivery and read by nothing
    since the store completes a stored round itself; the column it covered stays.
    """
    present = index_names(conn, "cm_serve_inbox")
    for name in _UNREAD_INDEXES:
        if name in present:  # a new database never had it
            conn.exec_driver_sql(f"DROP INDEX {name}")


def _snapshots_lz4(conn: Connection) -> None:
    """Migration 17: on PostgreSQL, ``cm_snapshots.data`` compressed with lz4 instead of pglz.

    A run writes its memory's snapshot (13-18 kB of JSON after a replay run, ~90 kB on a memory
    with 200 facts, every live turn), and the server compresses it before storing it out of line:
    pglz cost 0.17-0.23 ms of server CPU more than lz4 per 15 kB upsert and 1.2-1.9 ms more per
    90 kB one, and stored them in no fewer pages (``benchmarks/README.md``, issue 24, eleventh
    session). Only the compression of values written from now on changes: what a read returns is
    the same text. A server built without lz4, or older than PostgreSQL 14, keeps pglz (the
    migration is recorded having changed nothing); so does SQLite, which compresses nothing.
    """
    if conn.dialect.name != "postgresql":
        return
    has_lz4 = conn.exec_driver_sql(
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
    ).scalar()
    if has_lz4:
        conn.exec_driver_sql("ALTER TABLE cm_snapshots ALTER COLUMN data SET COMPRESSION lz4")


def _fact_triggers_per_statement(conn: Connection) -> None:
    """Migration 18: PostgreSQL's fact triggers move the memory row once per statement, not per fact.

    Migration 16's revision stamp and migration 10's language counts each updated the memory's
    row once for every fact row written (the counts also for every one deleted): a commit of n
    facts to one memory left 2n versions of that row in its transaction, each update walking the
    chain the earlier ones left (+~0.5 ms of server CPU a fact at 5k facts, ``benchmarks/README.md``,
    issue 24, eleventh session). Now statement triggers apply each statement's changes from its
    transition tables: one update per memory per statement for each (the stamp reads the revision
    under the row's lock). What the columns hold is unchanged but for one thing: rows one
    statement writes to one memory share a revision (readers need only ``rev`` > what they read,
    :mod:`~convmem_graph.store._fact_revisions`). SQLite's triggers are per row by nature and stay.
    """
    pg_fact_revisions_per_statement(conn)
    pg_language_counts_per_statement(conn)


#: Every migration, in order. Append only; never renumber or edit an applied one.
MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "initial schema", _initial_schema),
    Migration(2, "language counts", _language_counts),
    Migration(3, "turn vectors", create_tables(turn_vectors)),
    Migration(4, "round interruptions", create_tables(round_interruptions)),
    Migration(5, "bailian node metadata", create_tables(node_meta)),
    Migration(6, "turn vector stamps", create_tables(turn_vector_stamps)),
    Migration(7, "pgvector turn vectors", _pgvector_vectors),
    Migration(8, "fact vectors", create_tables(fact_vectors, fact_vector_stamps)),
    Migration(9, "fact revisions", ensure_fact_revisions),
    Migration(10, "expired language counts, key families", _expired_counts),
    Migration(11, "turn vectors by model", _turn_vectors_by_model),
    Migration(12, "snapshot revisions", ensure_snapshot_revisions),
    Migration(13, "fact indexes stored oldest first", _ascending_fact_indexes),
    Migration(14, "unread inbox index dropped", _drop_unread_indexes),
    Migration(15, "small keyed tables without rowid", rebuild_without_rowid),
    Migration(16, "fact revisions on postgresql", ensure_pg_fact_revisions),
    Migration(17, "snapshots compressed with lz4 on PostgreSQL", _snapshots_lz4),
    Migration(18, "fact triggers once per statement on PostgreSQL", _fact_triggers_per_statement),
)


def applied_versions(conn: Connection) -> set[int]:
    """The migration versions recorded in the database (empty when it has no record table)."""
    if not inspect(conn).has_table(schema_migrations.name):
        return set()
    return set(conn.execute(select(schema_migrations.c.version)).scalars())


def apply_migrations(conn: Connection, migrations: Iterable[Migration] = MIGRATIONS) -> list[int]:
    """Apply the migrations the database has not recorded, in order, and record each one.

    Runs inside the caller's transaction (the store's set-up, which holds the write lock on
    SQLite and the schema lock on PostgreSQL), so concurrent opens take turns.

    Returns:
        The versions applied now.
    """
    migrations = list(migrations)
    _check_order(migrations)
    schema_migrations.create(conn, checkfirst=True)
    done = set(conn.execute(select(schema_migrations.c.version)).scalars())
    known = {m.version for m in migrations}
    if done - known:
        logger.warning(
            "the database has schema migrations %s this version does not know (written by a newer version)",
            sorted(done - known),
        )
    applied = []
    for migration in migrations:
        if migration.version in done:
            continue
        migration.apply(conn)
        conn.execute(
            insert(schema_migrations).values(
                version=migration.version, name=migration.name, applied_at=now_ms()
            )
        )
        logger.info("applied schema migration %d (%s)", migration.version, migration.name)
        applied.append(migration.version)
    return applied


def _check_order(migrations: Sequence[Migration]) -> None:
    numbers = [m.version for m in migrations]
    if numbers != list(range(1, len(numbers) + 1)):
        raise ValueError(f"schema migrations must be numbered 1, 2, ... in order, got {numbers}")


def stamp_of(tables: MetaData | Iterable[Table], *steps: str) -> int:
    """A 31-bit digest of tables (columns, types, nullability, indexes) and named steps."""
    parts = list(steps)
    listed = tables.sorted_tables if isinstance(tables, MetaData) else sorted(tables, key=lambda t: t.name)
    for table in listed:
        parts.append(f"table {table.name}")
        parts += [f"  {c.name} {type(c.type).__name__} null={c.nullable}" for c in table.columns]
        parts += sorted(f"  index {i.name} {[str(e) for e in i.expressions]}" for i in table.indexes)
    digest = hashlib.blake2b("\n".join(parts).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") & 0x7FFFFFFF or 1


#: Bump when what an open sets up changes in a way neither the tables nor the migrations show.
#: 2: a new SQLite file no longer gets the optional tables (made by their first write, see
#: :mod:`~convmem_graph.store._optional`).
SETUP_REVISION = 2


def schema_digest() -> int:
    """A 31-bit digest of every registered table, of :data:`MIGRATIONS` and of the open-time steps.

    :data:`~convmem_graph.store._stamp.SCHEMA_STAMP` holds it (a test keeps the two equal). A
    SQLite database set up by this version carries the stamp as ``PRAGMA user_version``; an open
    that finds it there skips the set-up (the migration record, column and index checks: catalog
    reads and the write lock, which a call start would otherwise wait for behind a running
    replay). A file with any other stamp is set up: its pending migrations run.
    """
    tables = [
        *METADATA.sorted_tables,
        *SIDE_TABLES,
        turn_vectors,
        turn_vector_stamps,
        fact_vectors,
        fact_vector_stamps,
        schema_migrations,
    ]
    named = [f"migration {m.version} {m.name}" for m in MIGRATIONS]
    return stamp_of(tables, *named, f"setup {SETUP_REVISION}", f"episodes {INDEX_VERSION}")


def set_up_schema(conn: Connection) -> None:
    """Bring the database to this version's tables: pending migrations, then the open-time steps.

    The episodic index is its backend's to set up (after these, see ``set_up`` of the backends).
    """
    apply_migrations(conn)
    # Facts an older version wrote since (no derived columns), and indexes it dropped.
    upgrade_fragments(conn)
