"""A per-memory revision of its facts, moved by the database on every write.

The live turn of a memory with thousands of facts refreshes its summary, and that read the
strongest ~400 facts again every turn (the summary's fact read, then ``inject``'s snapshot from
the same rows) although from one turn to the next only the few facts the turn wrote change. To
read only those, the store must know which rows changed since its last read, whoever wrote them:
this process through the store, raw SQL through ``store.transaction()``, another process. An
in-process counter cannot see the last two, and ``PRAGMA data_version`` cannot tell them from the
LangGraph checkpointer's commits, which go to the same file on another connection every turn.

So triggers on ``cm_fragments`` keep, like the language counts (:mod:`._lang_counts`):

- ``cm_memories.facts_rev``: one more for every fact row written or deleted;
- ``cm_fragments.rev``: the memory's ``facts_rev`` when the row was last written (inserted or
  updated in any column but ``rev`` itself), so the rows changed since revision ``r`` are
  ``rev > r`` (the index ``ix_cm_fragments_rev``);
- ``cm_memories.facts_cut``: the revision of the memory's last fact row deleted (or moved to
  another memory): a deleted row leaves no row to find, so a reader that kept rows from before
  it must read them all again. A new memory row starts with a random one: a memory deleted and
  made again under its id (by any process) starts its revisions over, and must not pass for
  the memory a reader kept rows of.

Writers of a SQLite file take turns, so revisions follow commit order. A rolled-back write takes
its revisions back with it: a reader that read inside a transaction that failed forgets what it
kept (see ``StoreCore._write``).

PostgreSQL (migration 16, :func:`ensure_pg_fact_revisions`) keeps the same three columns. A fact
row's ``rev`` is set by a ``BEFORE`` row trigger from the memory row's ``facts_rev``, which the
same trigger moves with an ``UPDATE``: that row lock is held until the writer commits, so two
transactions writing facts of one memory take their revisions in commit order (the second waits
for the first, then reads its committed value), whoever writes (the store's runs hold the
memory's advisory lock anyway). A delete moves ``facts_cut`` once per statement (a transition
table names the memories). Since migration 18 (:func:`pg_fact_revisions_per_statement`) the row
trigger only reads ``facts_rev + 1`` under that lock and statement triggers move ``facts_rev``
once per memory and statement: the rows of one statement share a revision, and a bulk write no
longer updates the memory row once per fact. Before it the PostgreSQL summary read was the ~400 rows of
:data:`~convmem_graph.store._summary_facts.STRONGEST_BOTH` every turn: on a 5k-fact memory
several ms of a turn's client and server CPU that an empty memory did not pay.

The columns are not in the SQLAlchemy tables, which every dialect shares; only the reads of
:class:`~convmem_graph.store._summary_facts.StrongestRows` name them.
"""

from __future__ import annotations

from sqlalchemy import Connection

__all__ = [
    "FACT_REVISION_TRIGGERS",
    "PG_FACT_REVISION_TRIGGERS",
    "ensure_fact_revisions",
    "PG_FACT_REVISION_BUMPS",
    "ensure_pg_fact_revisions",
    "pg_fact_revisions_per_statement",
]

#: The triggers (one per statement kind on the facts, one for a new memory row).
FACT_REVISION_TRIGGERS = (
    "cm_fragments_rev_ins",
    "cm_fragments_rev_upd",
    "cm_fragments_rev_del",
    "cm_memories_rev_ins",
)

_COLUMNS = (
    ("cm_memories", "facts_rev"),
    ("cm_memories", "facts_cut"),
    ("cm_fragments", "rev"),
)

# A memory row's ``facts_rev`` moves first, then the written row takes it. A fact of a memory
# without its row (no foreign key enforced) gets 0: readers of such a memory read every row.
_STAMP = (
    "UPDATE cm_memories SET facts_rev = facts_rev + 1 WHERE memory_id = NEW.memory_id; "
    "UPDATE cm_fragments SET rev = COALESCE("
    "(SELECT facts_rev FROM cm_memories WHERE memory_id = NEW.memory_id), 0) "
    "WHERE memory_id = NEW.memory_id AND id = NEW.id;"
)
# Both sides of the SET read the old row: the cut is the new revision.
_CUT = (
    "UPDATE cm_memories SET facts_rev = facts_rev + 1, facts_cut = facts_rev + 1 "
    "WHERE memory_id = OLD.memory_id"
)

_DDL = (
    "CREATE INDEX IF NOT EXISTS ix_cm_fragments_rev ON cm_fragments (memory_id, rev)",
    f"CREATE TRIGGER IF NOT EXISTS cm_fragments_rev_ins AFTER INSERT ON cm_fragments BEGIN {_STAMP} END",
    # ``WHEN``: the stamp's own update of ``rev`` is not a change (with recursive triggers on,
    # it would fire this trigger again).
    "CREATE TRIGGER IF NOT EXISTS cm_fragments_rev_upd AFTER UPDATE ON cm_fragments "
    f"WHEN NEW.rev IS OLD.rev BEGIN {_CUT} AND OLD.memory_id IS NOT NEW.memory_id; {_STAMP} END",
    f"CREATE TRIGGER IF NOT EXISTS cm_fragments_rev_del AFTER DELETE ON cm_fragments BEGIN {_CUT}; END",
    "CREATE TRIGGER IF NOT EXISTS cm_memories_rev_ins AFTER INSERT ON cm_memories BEGIN "
    "UPDATE cm_memories SET facts_cut = random() WHERE memory_id = NEW.memory_id; END",
)


def ensure_fact_revisions(conn: Connection) -> None:
    """Add the revision columns, their index and the triggers where missing (SQLite; else nothing).

    Safe to run again: a column is added only when the table lacks it, the rest is ``IF NOT
    EXISTS``. Existing rows start at revision 0 (a reader keeps nothing from before).
    """
    if conn.dialect.name != "sqlite":
        return
    for table, column in _COLUMNS:
        present = {row[1] for row in conn.exec_driver_sql(f"PRAGMA table_info({table})")}
        if column not in present:
            conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
    for ddl in _DDL:
        conn.exec_driver_sql(ddl)


#: PostgreSQL's triggers (``cm_fragments``: the stamp of a written row and the cut of a delete;
#: ``cm_memories``: a new memory row's random cut).
PG_FACT_REVISION_TRIGGERS = ("cm_fragments_rev_stamp", "cm_fragments_rev_cut", "cm_memories_rev_new")

_PG_DDL = (
    "ALTER TABLE cm_memories ADD COLUMN IF NOT EXISTS facts_rev BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE cm_memories ADD COLUMN IF NOT EXISTS facts_cut BIGINT NOT NULL DEFAULT 0",
    "ALTER TABLE cm_fragments ADD COLUMN IF NOT EXISTS rev BIGINT NOT NULL DEFAULT 0",
    "CREATE INDEX IF NOT EXISTS ix_cm_fragments_rev ON cm_fragments (memory_id, rev)",
    # A row moved to another memory leaves the old one as a delete does. ``RETURNING``: the
    # value this transaction's update wrote (after waiting for any other writer of the row).
    # No memory row (no foreign key enforced): revision 0, so readers of it read every row.
    """CREATE OR REPLACE FUNCTION cm_fragments_rev_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r BIGINT;
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.memory_id IS DISTINCT FROM NEW.memory_id THEN
    UPDATE cm_memories SET facts_rev = facts_rev + 1, facts_cut = facts_rev + 1
     WHERE memory_id = OLD.memory_id;
  END IF;
  UPDATE cm_memories SET facts_rev = facts_rev + 1 WHERE memory_id = NEW.memory_id
  RETURNING facts_rev INTO r;
  NEW.rev := COALESCE(r, 0);
  RETURN NEW;
END $$""",
    """CREATE OR REPLACE FUNCTION cm_fragments_rev_cut() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE cm_memories SET facts_rev = facts_rev + 1, facts_cut = facts_rev + 1
   WHERE memory_id IN (SELECT DISTINCT memory_id FROM gone);
  RETURN NULL;
END $$""",
    # Any 63-bit value: a memory made again under its id must not reuse a cut a reader kept.
    """CREATE OR REPLACE FUNCTION cm_memories_rev_new() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.facts_cut := (random() * 9.2e18)::bigint;
  RETURN NEW;
END $$""",
    "DROP TRIGGER IF EXISTS cm_fragments_rev_stamp ON cm_fragments",
    "CREATE TRIGGER cm_fragments_rev_stamp BEFORE INSERT OR UPDATE ON cm_fragments "
    "FOR EACH ROW EXECUTE FUNCTION cm_fragments_rev_stamp()",
    "DROP TRIGGER IF EXISTS cm_fragments_rev_cut ON cm_fragments",
    "CREATE TRIGGER cm_fragments_rev_cut AFTER DELETE ON cm_fragments REFERENCING OLD TABLE AS gone "
    "FOR EACH STATEMENT EXECUTE FUNCTION cm_fragments_rev_cut()",
    "DROP TRIGGER IF EXISTS cm_memories_rev_new ON cm_memories",
    "CREATE TRIGGER cm_memories_rev_new BEFORE INSERT ON cm_memories "
    "FOR EACH ROW EXECUTE FUNCTION cm_memories_rev_new()",
    # Memories made before the triggers keep cut 0 and rows revision 0: a reader of a store
    # upgraded while it ran reads every row again (it kept nothing under these columns).
)


#: Migration 18's statement-level triggers: the memory row moves once per statement and memory.
PG_FACT_REVISION_BUMPS = ("cm_fragments_rev_ins", "cm_fragments_rev_upd")

# Migration 18: a written row takes ``facts_rev + 1`` under the memory row's lock (``FOR NO KEY
# UPDATE``, the strength of the update it replaces: a message insert's foreign-key check, ``FOR
# KEY SHARE``, does not wait for it), and the memory row moves once per statement, after it,
# from the statement's transition table. Every row a statement writes to one memory shares one
# revision, ``facts_rev`` after the statement equals it, and the next statement's rows take the
# next one. Migration 16 moved the row once per fact: a statement writing n facts of one memory
# left n versions of its row, each update walking the chain the earlier ones left (~n^2).
_PG_STATEMENT_DDL = (
    """CREATE OR REPLACE FUNCTION cm_fragments_rev_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE r BIGINT;
BEGIN
  IF TG_OP = 'UPDATE' AND OLD.memory_id IS DISTINCT FROM NEW.memory_id THEN
    UPDATE cm_memories SET facts_rev = facts_rev + 1, facts_cut = facts_rev + 1
     WHERE memory_id = OLD.memory_id;
  END IF;
  SELECT facts_rev + 1 INTO r FROM cm_memories WHERE memory_id = NEW.memory_id FOR NO KEY UPDATE;
  NEW.rev := COALESCE(r, 0);
  RETURN NEW;
END $$""",
    """CREATE OR REPLACE FUNCTION cm_fragments_rev_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE cm_memories SET facts_rev = facts_rev + 1
   WHERE memory_id IN (SELECT DISTINCT memory_id FROM written);
  RETURN NULL;
END $$""",
    # A transition table needs one trigger per event.
    "DROP TRIGGER IF EXISTS cm_fragments_rev_ins ON cm_fragments",
    "CREATE TRIGGER cm_fragments_rev_ins AFTER INSERT ON cm_fragments REFERENCING NEW TABLE AS written "
    "FOR EACH STATEMENT EXECUTE FUNCTION cm_fragments_rev_bump()",
    "DROP TRIGGER IF EXISTS cm_fragments_rev_upd ON cm_fragments",
    "CREATE TRIGGER cm_fragments_rev_upd AFTER UPDATE ON cm_fragments REFERENCING NEW TABLE AS written "
    "FOR EACH STATEMENT EXECUTE FUNCTION cm_fragments_rev_bump()",
)


def ensure_pg_fact_revisions(conn: Connection) -> None:
    """Migration 16: the revision columns, their index and triggers on PostgreSQL (elsewhere nothing).

    SQLite has had them since migration 9 (:func:`ensure_fact_revisions`). Safe to run again.
    """
    if conn.dialect.name != "postgresql":
        return
    for ddl in _PG_DDL:
        conn.exec_driver_sql(ddl)


def pg_fact_revisions_per_statement(conn: Connection) -> None:
    """Migration 18's half for the revisions: the memory row moves once per statement (PostgreSQL only).

    Replaces migration 16's stamp function (the row now reads the revision under the memory row's
    lock instead of moving it) and adds the statement triggers that move it. Safe to run again.
    """
    if conn.dialect.name != "postgresql":
        return
    for ddl in _PG_STATEMENT_DDL:
        conn.exec_driver_sql(ddl)
