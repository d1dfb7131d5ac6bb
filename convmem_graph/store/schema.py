"""SQLAlchemy Core tables of the memory store (same definitions on SQLite and PostgreSQL).

Every table is prefixed ``cm_`` because the default SQLite file also holds LangGraph's
``checkpoints`` and ``writes`` tables, and every row carries ``memory_id``: the isolation unit.
Indexes are few on purpose (bytes per message matter): each one leads with ``memory_id`` so every
per-memory query and the delete of a memory are index range scans.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
    literal_column,
    text,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement

from convmem_graph.store._derived import column_default

__all__ = [
    "ASCENDING_INDEXES",
    "DIET_PREFIXES",
    "HOBBY_PREFIXES",
    "METADATA",
    "OBSOLETE_INDEXES",
    "PER_MEMORY_TABLES",
    "RECENT_FAMILIES",
    "add_postgres_options",
    "audit",
    "dead_letters",
    "fragments",
    "key_family",
    "key_head",
    "memories",
    "messages",
    "round_interruptions",
    "snapshots",
    "summaries",
    "variable_specs",
    "variables",
]

METADATA = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s",
        "pk": "pk_%(table_name)s",
    }
)

# Empty values are stored as SQL NULL, not the JSON text 'null' (smaller, and "no metadata" reads back as {}).
_Json = JSON(none_as_null=True)
# 64-bit integers: millisecond timestamps overflow 32 bits.
_Ms = BigInteger().with_variant(Integer(), "sqlite")


def _memory_fk() -> ForeignKey:
    return ForeignKey("cm_memories.memory_id", ondelete="CASCADE")


memories = Table(
    "cm_memories",
    METADATA,
    Column("memory_id", String, primary_key=True),
    Column("description", Text, nullable=False, default=""),
    Column("created_at", _Ms, nullable=False),
    Column("updated_at", _Ms, nullable=False),
    # Processing cursors: the highest message seq already extracted / folded into the summary.
    Column("extracted_seq", _Ms, nullable=False, default=0),
    Column("summarized_seq", _Ms, nullable=False, default=0),
    # 1 when facts changed after the last variable inference (a run that stopped in between
    # leaves it set, so the next run infers variables even with nothing new to extract).
    Column("facts_dirty", Integer, nullable=False, default=0),
    # Active durable facts mainly in Chinese / not, kept by triggers on cm_fragments (see
    # store/_lang_counts.py): the language majority without counting every fact per turn.
    Column("facts_zh", Integer, nullable=False, default=0),
    Column("facts_other", Integer, nullable=False, default=0),
    # Of those, the ones whose expiry is at or before ``expired_through`` (the expiry mark, ms),
    # kept by the same triggers: ``language`` subtracts them and reads only the facts expiring
    # between the mark and its ``now``, never every expired fact a memory keeps. Server defaults:
    # an older version inserting a memory without these columns still writes a valid row.
    Column("expired_through", _Ms, nullable=False, default=0, server_default=text("0")),
    Column("expired_zh", Integer, nullable=False, default=0, server_default=text("0")),
    Column("expired_other", Integer, nullable=False, default=0, server_default=text("0")),
)

messages = Table(
    "cm_messages",
    METADATA,
    # Insertion order and processing cursor. AUTOINCREMENT on SQLite so a purged tail never lets a
    # later message reuse a seq at or below a memory's cursor.
    Column("seq", _Ms, primary_key=True, autoincrement=True),
    Column("memory_id", String, _memory_fk(), nullable=False),
    Column("id", String, nullable=False),
    Column("role", String(16), nullable=False),
    Column("content", Text, nullable=False),
    Column("channel", String(16), nullable=False),
    Column("source", String(32), nullable=False),
    Column("timestamp_ms", _Ms, nullable=False),
    Column("turn_id", BigInteger().with_variant(Integer(), "sqlite"), nullable=True),
    Column("round_id", String, nullable=True),
    Column("speaker_id", String, nullable=True),
    Column("partial", Boolean, nullable=False, default=False),
    Column("interrupted", Boolean, nullable=False, default=False),
    Column("original", Text, nullable=True),
    Column("metadata", _Json, nullable=True),
    # 64-bit hash of role + normalized text, for cross-channel duplicate detection; NULL when the
    # normalized text is empty (pure punctuation is never collapsed).
    Column("content_hash", BigInteger().with_variant(Integer(), "sqlite"), nullable=True),
    UniqueConstraint("memory_id", "id"),
    Index(None, "memory_id", "seq"),
    Index(None, "memory_id", "timestamp_ms"),
    Index(None, "memory_id", "content_hash"),
    sqlite_autoincrement=True,
)

fragments = Table(
    "cm_fragments",
    METADATA,
    Column("memory_id", String, _memory_fk(), primary_key=True),
    Column("id", String, primary_key=True),
    Column("content", Text, nullable=False),
    Column("category", String(32), nullable=False),
    Column("key", String, nullable=False),
    Column("status", String(16), nullable=False),
    Column("transient", Boolean, nullable=False, default=False),
    Column("expires_at", _Ms, nullable=True),
    Column("source_message_ids", _Json, nullable=True),
    Column("origin", String(16), nullable=False),
    Column("superseded_by", String, nullable=True),
    Column("confidence", Float, nullable=False, default=1.0),
    Column("created_at", _Ms, nullable=False),
    Column("updated_at", _Ms, nullable=False),
    Column("observed_at", _Ms, nullable=False, default=0),
    # Pieces of one long fact: the first piece's id and the piece's place (NULL for a whole fact).
    Column("part_of", String, nullable=True),
    Column("part", Integer, nullable=True),
    # Derived on write (see store/_fragments.py) so the live path reads only the facts it needs:
    # the canonical key (reconcile, variable inference; bytewise order on PostgreSQL so a prefix
    # is an index range), a 64-bit hash of the normalized content (same fact under another key)
    # and whether the text is mainly Chinese (the ``language`` variable). NULL in rows written by
    # older versions until the store fills them in when it opens.
    Column(
        "ckey",
        String().with_variant(String(collation="C"), "postgresql"),
        nullable=True,
        default=column_default("ckey"),
    ),
    Column(
        "norm_hash",
        BigInteger().with_variant(Integer(), "sqlite"),
        nullable=True,
        default=column_default("norm_hash"),
    ),
    Column("cjk", Boolean, nullable=True, default=column_default("cjk")),
    # Status before key: the planner (SQLite has no statistics) must see three equalities here
    # and only two in the indexes below, or it walks every active fact of the memory instead.
    Index(None, "memory_id", "status", "ckey"),
    Index(None, "memory_id", "status", "norm_hash"),
    # The indexes read newest first are stored oldest first (ASCENDING_INDEXES, below) and read
    # backwards: the order every ORDER BY here asks for, reversed in every column.
    # The call-start snapshot's strongest facts and newest-first walks, read in index order
    # (backwards: durable first, then confidence, recency, id).
    Index(
        "ix_cm_fragments_rank",
        "memory_id",
        "status",
        text("transient DESC"),
        "confidence",
        "observed_at",
        "updated_at",
        text("id DESC"),
    ),
    # Also covers the language count (cjk, expires_at): an index-only scan, no table reads.
    Index("ix_cm_fragments_newest", "memory_id", "status", "transient", "observed_at", "cjk", "expires_at"),
    Index("ix_cm_fragments_recent", "memory_id", "status", "updated_at"),
    # Facts with an expiry only (mostly temporary ones): the durable ones already expired are
    # subtracted from the trigger-kept language counts by a range of this index.
    Index(
        "ix_cm_fragments_expiring",
        "memory_id",
        "transient",
        "expires_at",
        sqlite_where=text("expires_at IS NOT NULL"),
    ),
    # Rows written without the derived columns (older versions), which every open fills: a partial
    # index, empty once they are, so that check is not a scan of every memory's facts.
    Index("ix_cm_fragments_underived", "memory_id", sqlite_where=text("ckey IS NULL")),
)

#: Canonical-key prefixes of the facts the ``hobbies`` variable reads: ``_HOBBY_PREFIXES`` of
#: :mod:`convmem_graph.extractors.variables` (a unit test keeps the two equal; not imported, so the
#: schema does not pull in the extractors' rules). Its walk reads these families' ranges of
#: ``ix_cm_fragments_family`` (below), both in one statement per page.
HOBBY_PREFIXES = ("habit:", "pref:")

#: Canonical-key prefixes of the facts the ``diet`` variable reads: ``_DIET_PREFIXES`` of
#: :mod:`convmem_graph.extractors.variables` (a unit test keeps the two equal); each family walked
#: as a range of ``ix_cm_fragments_family``.
DIET_PREFIXES = ("allergy:", "food:")


def key_head(prefix: str) -> ColumnElement[bool]:
    """Canonical keys starting with ``prefix``: the predicate of a key family's partial index.

    Not a range of ``ckey``: with one range, SQLite's planner prefers the (memory, status, ckey)
    index and sorts the whole family for the ORDER BY; this form no other index serves, so the
    family's own partial index is used (its WHERE repeated as written: literals).
    """
    head = func.substr(fragments.c.ckey, literal_column("1"), literal_column(str(len(prefix))))
    return head == literal_column(f"'{prefix}'")


#: Partial indexes of earlier versions that ``ix_cm_fragments_family`` replaced (the hobby, food
#: and allergy walks now read it): migration 10 drops them, and so does every open that finds one
#: (an older version reopening a file creates them again).
OBSOLETE_INDEXES = ("ix_cm_fragments_hobby", "ix_cm_fragments_food", "ix_cm_fragments_allergy")

#: Key families whose most recently updated facts ``extract`` shows the heuristic rules (known
#: pets and plans: ``KNOWN_PREFIXES`` of :mod:`convmem_graph.nodes._extract_reads`, a unit test
#: keeps the two equal), each with an index in that order.
RECENT_FAMILIES = ("pet:", "plan:")

# Each family's facts most recently updated first, the ORDER BY of ``extract``'s per-family read
# (LIMIT 50): before, that read was the (memory, status, ckey) range of the whole family, sorted,
# on every run (~9k ``plan:`` facts of a 1M-message memory: most of what still grew with it).
for _prefix in RECENT_FAMILIES:
    Index(
        f"ix_cm_fragments_recent_{_prefix[:-1]}",
        fragments.c.memory_id,
        fragments.c.status,
        fragments.c.updated_at,
        fragments.c.created_at,
        fragments.c.id,
        sqlite_where=key_head(_prefix),
    )


class key_family(FunctionElement[str]):  # noqa: N801 - a SQL function, named as one
    """A canonical key's family: its text up to and including the first ``:`` (``like:tea`` -> ``like:``).

    ``''`` for a key without ``:``. Compiled per dialect (SQLite's ``instr`` is PostgreSQL's
    ``strpos``), with literals only: an expression index serves a query only when the query
    repeats its expression as written.
    """

    type = String()
    name = "key_family"
    inherit_cache = True


def _family_sql(element: key_family, compiler: SQLCompiler, position: str, **kw: Any) -> str:
    (column,) = element.clauses
    arg = compiler.process(column, **kw)
    return f"substr({arg}, 1, {position}({arg}, ':'))"


@compiles(key_family)
def _family_default(element: key_family, compiler: SQLCompiler, **kw: Any) -> str:
    return _family_sql(element, compiler, "instr", **kw)


@compiles(key_family, "postgresql")
def _family_postgres(element: key_family, compiler: SQLCompiler, **kw: Any) -> str:
    return _family_sql(element, compiler, "strpos", **kw)


# Every fact by its key's family, newest stated first within it (read backwards: see
# ``ASCENDING_INDEXES``): a custom list variable ("like",
# "books", any family a user names) walks its family through this keyset-paged and stops at its
# MAX_LIST_ITEMS items (it read every active fact of the family per turn), and so do ``hobbies``
# (``pref:`` and ``habit:``, one UNION ALL) and ``diet`` (``food:``, ``allergy:``), whose partial indexes
# it replaced: one index for every family, so no user-defined name needs one of its own, and on
# disk about what those three cost where most facts are preferences and foods.
Index(
    "ix_cm_fragments_family",
    fragments.c.memory_id,
    fragments.c.status,
    fragments.c.transient,
    key_family(fragments.c.ckey),
    fragments.c.observed_at,
    fragments.c.updated_at,
    fragments.c.created_at,
    fragments.c.id,
)

# The newest usable durable facts in one language (``cjk``), in inference's newest-first order (read
# backwards, as the family index): the
# ``language`` variable's supporting facts are the first rows of one range (before: an OFFSET walk
# over every durable fact until enough of the majority's language turned up).
Index(
    "ix_cm_fragments_lang",
    fragments.c.memory_id,
    fragments.c.status,
    fragments.c.transient,
    fragments.c.cjk,
    fragments.c.observed_at,
    fragments.c.updated_at,
    fragments.c.created_at,
    fragments.c.id,
)

#: Indexes that are read newest first and were declared so (``DESC``) before migration 13, which
#: rebuilds them oldest first. Facts arrive in time order, so each new entry lands after the last
#: one of its range; in a ``DESC`` index it lands before the first, and SQLite's B-tree split there
#: left every page about half full (measured: 50 % against 89 % for the same entries ascending).
#: Every statement asks for the exact reverse of the new order in every column, which SQLite and
#: PostgreSQL serve by reading the index backwards, with the same plans.
ASCENDING_INDEXES = (
    "ix_cm_fragments_rank",
    "ix_cm_fragments_newest",
    "ix_cm_fragments_recent",
    *(f"ix_cm_fragments_recent_{_p[:-1]}" for _p in RECENT_FAMILIES),
    "ix_cm_fragments_family",
    "ix_cm_fragments_lang",
)

variable_specs = Table(
    "cm_variable_specs",
    METADATA,
    Column("memory_id", String, _memory_fk(), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("position", Integer, nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("infer", Boolean, nullable=False, default=True),
    Column("type", String(16), nullable=False),
    Column("allowed_values", _Json, nullable=True),
    sqlite_with_rowid=False,
)

variables = Table(
    "cm_variables",
    METADATA,
    Column("memory_id", String, _memory_fk(), primary_key=True),
    Column("name", String(64), primary_key=True),
    # Manual and inferred values live side by side so clearing a manual value reveals the inferred one.
    Column("origin", String(16), primary_key=True),
    Column("value", _Json, nullable=False),
    Column("fragment_ids", _Json, nullable=True),
    Column("updated_at", _Ms, nullable=False),
)

summaries = Table(
    "cm_summaries",
    METADATA,
    Column("memory_id", String, _memory_fk(), primary_key=True),
    Column("text", Text, nullable=False),
    Column("tokens", Integer, nullable=False),
    Column("covers_until_ms", _Ms, nullable=False),
    Column("version", Integer, nullable=False),
    Column("updated_at", _Ms, nullable=False),
    Column("origin", String(16), nullable=False, default="model"),
)

snapshots = Table(
    "cm_snapshots",
    METADATA,
    Column("memory_id", String, _memory_fk(), primary_key=True),
    Column("data", Text, nullable=False),
    Column("updated_at", _Ms, nullable=False),
)

audit = Table(
    "cm_audit",
    METADATA,
    Column("id", _Ms, primary_key=True, autoincrement=True),
    Column("memory_id", String, _memory_fk(), nullable=False),
    Column("at", _Ms, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("object_id", String, nullable=False),
    Column("action", String(16), nullable=False),
    Column("before", _Json, nullable=True),
    Column("after", _Json, nullable=True),
    Column("cause", Text, nullable=False, default=""),
    Index(None, "memory_id", "id"),
)

dead_letters = Table(
    "cm_dead_letters",
    METADATA,
    Column("id", _Ms, primary_key=True, autoincrement=True),
    # No foreign key: an item can fail before its memory exists, or without any memory id at all.
    Column("memory_id", String, nullable=True),
    # Hash of (memory_id, raw): the same bad item reported twice is stored once.
    Column("item_key", String(40), nullable=False, unique=True),
    Column("source", String(64), nullable=False),
    Column("raw", Text, nullable=False),
    Column("error", Text, nullable=False),
    Column("path", Text, nullable=False),
    Column("created_at", _Ms, nullable=False),
    Index(None, "memory_id"),
)

#: TRTC rounds an interruption metric (906/908) named: kept so that the round's bot turn is marked
#: whether it was stored before the metric or comes in a later run (``store._rounds``).
round_interruptions = Table(
    "cm_round_interruptions",
    METADATA,
    Column("memory_id", String, _memory_fk(), primary_key=True),
    Column("task_id", String, primary_key=True),
    Column("round_id", String, primary_key=True),
    Column("at", _Ms, nullable=False),
    sqlite_with_rowid=False,
)

#: The store's own tables holding rows of one memory, children first. The delete of a memory is
#: driven by :data:`convmem_graph.store.registry.MEMORY_TABLES`, which adds the side tables.
PER_MEMORY_TABLES: tuple[Table, ...] = (
    messages,
    round_interruptions,
    fragments,
    variable_specs,
    variables,
    summaries,
    snapshots,
    audit,
    dead_letters,
    memories,
)


def add_postgres_options() -> None:
    """Set the table options only PostgreSQL's DDL reads; called when a PostgreSQL store opens.

    Declared in the tables, a ``postgresql_*`` option makes SQLAlchemy import its PostgreSQL
    dialects (asyncpg's pulls in asyncio and ssl: ~17 ms) at every start, SQLite ones included.
    """
    underived = next(i for i in fragments.indexes if i.name == "ix_cm_fragments_underived")
    underived.dialect_options["postgresql"]["where"] = text("ckey IS NULL")
    families = [(f"ix_cm_fragments_recent_{p[:-1]}", key_head(p)) for p in RECENT_FAMILIES]
    for name, keys in families:
        family = next(i for i in fragments.indexes if i.name == name)
        family.dialect_options["postgresql"]["where"] = keys
    expiring = next(i for i in fragments.indexes if i.name == "ix_cm_fragments_expiring")
    expiring.dialect_options["postgresql"]["where"] = text("expires_at IS NOT NULL")
