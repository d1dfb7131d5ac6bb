"""How many durable facts of a memory are mainly Chinese, kept up to date by the database itself.

Variable inference decides ``language`` by the majority of a memory's usable durable facts. Counting
them per turn (``CJK_COUNTS``, an index-only scan) cost ~3.4 ms at 30k facts and grew with every
fact. The counts now live on the memory's row (``cm_memories.facts_zh`` / ``facts_other``: active,
non-temporary facts) and triggers on ``cm_fragments`` keep them: every write path (extraction,
manual edits, deletes, merges, an older version's writes) goes through the table, so none can
forget them. A durable fact may carry an expiry (rare: an API-added fact); the expired ones still
counted are subtracted by one read of the partial index ``ix_cm_fragments_expiring``, which holds
only facts with an expiry. A turn's language count is therefore two indexed reads, whatever the
number of facts.

The triggers are created, and the counts computed once from the facts, when an open finds them
missing (a database set up by an older version); :func:`ensure_language_counts` does both in the
open's set-up transaction.
"""

from __future__ import annotations

from sqlalchemy import Connection, and_, bindparam, case, false, func, select

from convmem_graph.store.schema import fragments, memories

__all__ = ["LANGUAGE_TRIGGERS", "ensure_language_counts", "language_counts", "recount_languages"]

_F = fragments.c

#: Names of the triggers (SQLite: one per statement kind; PostgreSQL: one, and its function).
LANGUAGE_TRIGGERS = ("cm_fragments_lang_ins", "cm_fragments_lang_del", "cm_fragments_lang_upd")
_PG_TRIGGER = "cm_fragments_lang"

# In SQLite, booleans are 0/1 and comparisons are 0/1 integers: the deltas are arithmetic. A NULL
# ``cjk`` (a row an older version wrote, before the open fills it) counts as not Chinese, as
# CJK_COUNTS counted it.
_SQLITE_DELTA = (
    "UPDATE cm_memories SET facts_zh = facts_zh {sign} (COALESCE({row}.cjk, 0) = 1), "
    "facts_other = facts_other {sign} (COALESCE({row}.cjk, 0) = 0) WHERE memory_id = {row}.memory_id"
)
_SQLITE_COUNTED = "{row}.status = 'active' AND {row}.transient = 0"
_SQLITE_DDL = (
    f"CREATE TRIGGER IF NOT EXISTS cm_fragments_lang_ins AFTER INSERT ON cm_fragments "
    f"WHEN {_SQLITE_COUNTED.format(row='NEW')} "
    f"BEGIN {_SQLITE_DELTA.format(sign='+', row='NEW')}; END",
    f"CREATE TRIGGER IF NOT EXISTS cm_fragments_lang_del AFTER DELETE ON cm_fragments "
    f"WHEN {_SQLITE_COUNTED.format(row='OLD')} "
    f"BEGIN {_SQLITE_DELTA.format(sign='-', row='OLD')}; END",
    # Only when a counted column changes (most updates touch confidence or timestamps).
    "CREATE TRIGGER IF NOT EXISTS cm_fragments_lang_upd "
    "AFTER UPDATE OF status, transient, cjk, memory_id ON cm_fragments "
    "BEGIN "
    + _SQLITE_DELTA.format(sign="-", row="OLD")
    + f" AND {_SQLITE_COUNTED.format(row='OLD')}; "
    + _SQLITE_DELTA.format(sign="+", row="NEW")
    + f" AND {_SQLITE_COUNTED.format(row='NEW')}; END",
)

_PG_DDL = (
    f"""
CREATE OR REPLACE FUNCTION {_PG_TRIGGER}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP <> 'INSERT' AND OLD.status = 'active' AND NOT OLD.transient THEN
    UPDATE cm_memories
       SET facts_zh = facts_zh - (CASE WHEN COALESCE(OLD.cjk, false) THEN 1 ELSE 0 END),
           facts_other = facts_other - (CASE WHEN COALESCE(OLD.cjk, false) THEN 0 ELSE 1 END)
     WHERE memory_id = OLD.memory_id;
  END IF;
  IF TG_OP <> 'DELETE' AND NEW.status = 'active' AND NOT NEW.transient THEN
    UPDATE cm_memories
       SET facts_zh = facts_zh + (CASE WHEN COALESCE(NEW.cjk, false) THEN 1 ELSE 0 END),
           facts_other = facts_other + (CASE WHEN COALESCE(NEW.cjk, false) THEN 0 ELSE 1 END)
     WHERE memory_id = NEW.memory_id;
  END IF;
  RETURN NULL;
END $$""",
    f"DROP TRIGGER IF EXISTS {_PG_TRIGGER} ON cm_fragments",
    f"CREATE TRIGGER {_PG_TRIGGER} AFTER INSERT OR DELETE OR UPDATE OF status, transient, cjk, memory_id "
    f"ON cm_fragments FOR EACH ROW EXECUTE FUNCTION {_PG_TRIGGER}()",
)

_COUNTED = and_(_F.memory_id == memories.c.memory_id, _F.status == "active", _F.transient == false())
_ZH = func.coalesce(_F.cjk, false())


def recount_languages(conn: Connection) -> None:
    """Compute every memory's counts from its facts (once, when the triggers are created)."""
    zh = select(func.count()).where(_COUNTED, _ZH).scalar_subquery()
    other = select(func.count()).where(_COUNTED, ~_ZH).scalar_subquery()
    conn.execute(memories.update().values(facts_zh=zh, facts_other=other))


def _has_triggers(conn: Connection) -> bool:
    if conn.dialect.name == "sqlite":
        found = conn.exec_driver_sql(
            "SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name IN (?, ?, ?)",
            LANGUAGE_TRIGGERS,
        ).scalar()
        return found == len(LANGUAGE_TRIGGERS)
    found = conn.exec_driver_sql(
        "SELECT count(*) FROM pg_trigger WHERE tgname = %(name)s AND tgrelid = 'cm_fragments'::regclass",
        {"name": _PG_TRIGGER},
    ).scalar()
    return bool(found)


def ensure_language_counts(conn: Connection) -> bool:
    """Create the counting triggers and fill the counts if the database lacks them; True if it did.

    Runs inside the store's set-up transaction (PostgreSQL: under its advisory lock), so the
    triggers and the counts they start from commit together.
    """
    if _has_triggers(conn):
        return False
    for ddl in _SQLITE_DDL if conn.dialect.name == "sqlite" else _PG_DDL:
        conn.exec_driver_sql(ddl)
    recount_languages(conn)
    return True


_COUNTS = select(memories.c.facts_zh, memories.c.facts_other).where(memories.c.memory_id == bindparam("mid"))
#: Durable facts already expired at ``now`` (counted by the triggers, not usable): a range of the
#: partial index on facts with an expiry, empty in most memories.
_EXPIRED = select(func.count(), func.coalesce(func.sum(case((_ZH, 1), else_=0)), 0)).where(
    _F.memory_id == bindparam("mid"),
    _F.transient == false(),
    _F.expires_at.is_not(None),
    _F.expires_at <= bindparam("now"),
    _F.status == "active",
)


def language_counts(conn: Connection, memory_id: str, *, now_ms: int) -> tuple[int, int]:
    """How many usable durable facts (at ``now_ms``) of ``memory_id`` are mainly Chinese, and how many not."""
    row = conn.execute(_COUNTS, {"mid": memory_id}).first()
    if row is None:
        return 0, 0
    expired, expired_zh = conn.execute(_EXPIRED, {"mid": memory_id, "now": now_ms}).one()
    zh = int(row.facts_zh) - int(expired_zh)
    return zh, int(row.facts_other) - (int(expired) - int(expired_zh))
