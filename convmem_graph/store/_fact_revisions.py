"""A per-memory revision of its facts, moved by the database on every write (SQLite only).

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
kept (see ``StoreCore._write``). PostgreSQL has neither the columns nor the triggers: its
summary read stays one statement (:data:`~convmem_graph.store._summary_facts.STRONGEST_BOTH`).
The columns are not in the SQLAlchemy tables, which every dialect shares; only the SQLite reads
of :class:`~convmem_graph.store._summary_facts.StrongestRows` name them.
"""

from __future__ import annotations

from sqlalchemy import Connection

__all__ = ["FACT_REVISION_TRIGGERS", "ensure_fact_revisions"]

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
