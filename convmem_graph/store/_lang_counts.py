"""How many durable facts of a memory are mainly Chinese, kept up to date by the database itself.

Variable inference decides ``language`` by the majority of a memory's usable durable facts. Counting
them per turn (``CJK_COUNTS``, an index-only scan) cost ~3.4 ms at 30k facts and grew with every
fact. The counts now live on the memory's row (``cm_memories.facts_zh`` / ``facts_other``: active,
non-temporary facts) and triggers on ``cm_fragments`` keep them: every write path (extraction,
manual edits, deletes, merges, an older version's writes) goes through the table, so none can
forget them.

A durable fact may carry an expiry (an API-added fact); an expired one is still counted above and
must be subtracted. The row also keeps an *expiry mark* (``expired_through``, ms) and how many of
the counted facts expire at or before it (``expired_zh`` / ``expired_other``), kept by the same
triggers (a fact written with an expiry behind the mark counts there at once). A turn at ``now``
reads only the facts expiring between the mark and ``now`` (a range of the partial index
``ix_cm_fragments_expiring``) and at most :data:`EXPIRY_BACKLOG` of them; past that, the caller
moves the mark to ``now`` (:func:`move_expiry_mark`, a write that counts that range once), so the
subtraction no longer grows with the expired facts a memory keeps (it did: one count over every
one of them per turn). A turn's language count is therefore two short indexed reads.

The triggers are created, and the counts computed once from the facts, when an open finds them
missing (a database set up by an older version); :func:`ensure_language_counts` does both in the
open's set-up transaction, :func:`install_language_triggers` replaces them (migration 10).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, and_, bindparam, case, false, func, select

from convmem_graph.store._driver import select_rows
from convmem_graph.store.schema import fragments, memories

__all__ = [
    "EXPIRY_BACKLOG",
    "LANGUAGE_TRIGGERS",
    "PG_LANGUAGE_TRIGGERS",
    "bounded_language_counts",
    "ensure_language_counts",
    "install_language_triggers",
    "language_counts",
    "move_expiry_mark",
    "pg_language_counts_per_statement",
    "recount_languages",
]

_F = fragments.c

#: Names of the triggers (SQLite: one per statement kind; PostgreSQL: one, and its function).
LANGUAGE_TRIGGERS = ("cm_fragments_lang_ins", "cm_fragments_lang_del", "cm_fragments_lang_upd")
_PG_TRIGGER = "cm_fragments_lang"

# In SQLite, booleans are 0/1 and comparisons are 0/1 integers: the deltas are arithmetic. A NULL
# ``cjk`` (a row an older version wrote, before the open fills it) counts as not Chinese, as
# CJK_COUNTS counted it. ``expired_through`` in the SET list is the memory row's own mark; a fact
# without an expiry never counts as expired (IS NOT NULL first: ``NULL <= x`` would make it NULL).
_SQLITE_EXPIRED = "({row}.expires_at IS NOT NULL AND {row}.expires_at <= expired_through)"
_SQLITE_DELTA = (
    "UPDATE cm_memories SET facts_zh = facts_zh {sign} (COALESCE({row}.cjk, 0) = 1), "
    "facts_other = facts_other {sign} (COALESCE({row}.cjk, 0) = 0), "
    "expired_zh = expired_zh {sign} (COALESCE({row}.cjk, 0) = 1 AND " + _SQLITE_EXPIRED + "), "
    "expired_other = expired_other {sign} (COALESCE({row}.cjk, 0) = 0 AND " + _SQLITE_EXPIRED + ") "
    "WHERE memory_id = {row}.memory_id"
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
    "AFTER UPDATE OF status, transient, cjk, memory_id, expires_at ON cm_fragments "
    "BEGIN "
    + _SQLITE_DELTA.format(sign="-", row="OLD")
    + f" AND {_SQLITE_COUNTED.format(row='OLD')}; "
    + _SQLITE_DELTA.format(sign="+", row="NEW")
    + f" AND {_SQLITE_COUNTED.format(row='NEW')}; END",
)

# PostgreSQL: one update of each memory row a statement changed the counts of, from the
# statement's transition tables (``added`` / ``gone``, a sign per row), instead of one per fact
# row: a statement writing n facts of one memory left n versions of its row, each update walking
# the chain the earlier ones left (~n^2 for a bulk write). An update's counted columns may not
# change (its old and new rows cancel): a memory whose deltas are all 0 is not written. A fact
# counts as expired against its memory's mark as the row's trigger counted it; a fact of a memory
# without its row (no foreign key enforced) counts nowhere.
_PG_ROWS = (
    "SELECT memory_id, COALESCE(cjk, false) AS zh, expires_at, {sign} AS s FROM {table} "
    "WHERE status = 'active' AND NOT transient"
)
# The mark is read from the updated row itself (not a join): when the update waits for a
# concurrent move of the mark (``move_expiry_mark`` holds the row), PostgreSQL evaluates the
# SET list and the condition again on the row as that move left it, as the row trigger did.
_PG_DELTA = (
    "SELECT sum(CASE WHEN r.zh THEN r.s ELSE 0 END) AS zh, sum(CASE WHEN r.zh THEN 0 ELSE r.s END) AS other,"
    " sum(CASE WHEN r.zh AND r.expires_at <= m.expired_through THEN r.s ELSE 0 END) AS ezh,"
    " sum(CASE WHEN NOT r.zh AND r.expires_at <= m.expired_through THEN r.s ELSE 0 END) AS eother"
    " FROM r WHERE r.memory_id = m.memory_id"
)
_PG_APPLY = f"""
  WITH r AS ({{rows}})
  UPDATE cm_memories m
     SET (facts_zh, facts_other, expired_zh, expired_other) = (
         SELECT m.facts_zh + d.zh, m.facts_other + d.other, m.expired_zh + d.ezh, m.expired_other + d.eother
           FROM ({_PG_DELTA}) d)
   WHERE m.memory_id IN (SELECT memory_id FROM r)
     AND (SELECT (d.zh, d.other, d.ezh, d.eother) <> (0, 0, 0, 0) FROM ({_PG_DELTA}) d);"""
_PG_ADDED = _PG_ROWS.format(sign="1", table="added")
_PG_GONE = _PG_ROWS.format(sign="-1", table="gone")
#: PostgreSQL's triggers, one per statement kind (a transition table needs one trigger per event).
#: The insert trigger keeps the name of the row trigger it replaced (migration 18), so an older
#: version's open, which looks for that name, finds the counts kept and does not add its own.
PG_LANGUAGE_TRIGGERS = (_PG_TRIGGER, "cm_fragments_lang_del", "cm_fragments_lang_upd")
_PG_FUNCTIONS = (
    ("cm_fragments_lang_added", _PG_ADDED),
    ("cm_fragments_lang_gone", _PG_GONE),
    ("cm_fragments_lang_changed", f"{_PG_GONE} UNION ALL {_PG_ADDED}"),
)
_PG_DDL = (
    *(
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN"
        f"{_PG_APPLY.format(rows=rows)}\n  RETURN NULL;\nEND $$"
        for name, rows in _PG_FUNCTIONS
    ),
    *(f"DROP TRIGGER IF EXISTS {name} ON cm_fragments" for name in PG_LANGUAGE_TRIGGERS),
    f"CREATE TRIGGER {_PG_TRIGGER} AFTER INSERT ON cm_fragments REFERENCING NEW TABLE AS added "
    "FOR EACH STATEMENT EXECUTE FUNCTION cm_fragments_lang_added()",
    "CREATE TRIGGER cm_fragments_lang_del AFTER DELETE ON cm_fragments REFERENCING OLD TABLE AS gone "
    "FOR EACH STATEMENT EXECUTE FUNCTION cm_fragments_lang_gone()",
    # Transition tables rule out a column list (``UPDATE OF``): every update statement fires it.
    "CREATE TRIGGER cm_fragments_lang_upd AFTER UPDATE ON cm_fragments "
    "REFERENCING OLD TABLE AS gone NEW TABLE AS added "
    "FOR EACH STATEMENT EXECUTE FUNCTION cm_fragments_lang_changed()",
    f"DROP FUNCTION IF EXISTS {_PG_TRIGGER}()",
)

_COUNTED = and_(_F.memory_id == memories.c.memory_id, _F.status == "active", _F.transient == false())
_ZH = func.coalesce(_F.cjk, false())
_BEHIND_MARK = and_(_F.expires_at.is_not(None), _F.expires_at <= memories.c.expired_through)


def recount_languages(conn: Connection) -> None:
    """Compute every memory's counts from its facts (once, when the triggers are created or replaced).

    The expired counts are taken at each memory's own mark (0 on a database that had none).
    """

    def count(*where: Any) -> Any:
        return select(func.count()).where(_COUNTED, *where).scalar_subquery()

    conn.execute(
        memories.update().values(
            facts_zh=count(_ZH),
            facts_other=count(~_ZH),
            expired_zh=count(_ZH, _BEHIND_MARK),
            expired_other=count(~_ZH, _BEHIND_MARK),
        )
    )


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


def pg_language_counts_per_statement(conn: Connection) -> None:
    """Migration 18's half for the counts: the row trigger replaced by statement triggers (PostgreSQL only).

    The counts the row trigger kept stay: both count the same facts, so nothing is recounted.
    """
    if conn.dialect.name != "postgresql":
        return
    for ddl in _PG_DDL:
        conn.exec_driver_sql(ddl)


def install_language_triggers(conn: Connection) -> None:
    """Create (or replace) the counting triggers as this version defines them, and recount.

    Migration 10 replaces the triggers of migration 2 (they now keep the expired counts too);
    the recount makes the counts agree with the new triggers from the start.
    """
    if conn.dialect.name == "sqlite":
        for name in LANGUAGE_TRIGGERS:
            conn.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
    for ddl in _SQLITE_DDL if conn.dialect.name == "sqlite" else _PG_DDL:
        conn.exec_driver_sql(ddl)
    recount_languages(conn)


def ensure_language_counts(conn: Connection) -> bool:
    """Create the counting triggers and fill the counts if the database lacks them; True if it did.

    Runs inside the store's set-up transaction (PostgreSQL: under its advisory lock), so the
    triggers and the counts they start from commit together.
    """
    if _has_triggers(conn):
        return False
    install_language_triggers(conn)
    return True


#: Facts expiring between the mark and ``now`` a turn reads at most before it moves the mark
#: instead (a write that counts them once): the read's bound, whatever the memory holds.
EXPIRY_BACKLOG = 64

_COUNTS = select(
    memories.c.facts_zh,
    memories.c.facts_other,
    memories.c.expired_through,
    memories.c.expired_zh,
    memories.c.expired_other,
).where(memories.c.memory_id == bindparam("mid"))
#: Counted facts whose expiry is in ``(lo, hi]``: a range of the partial index on facts with an
#: expiry (``ix_cm_fragments_expiring``), the first ``cap`` of them when ``cap`` is set.
_BETWEEN = and_(
    _F.memory_id == bindparam("mid"),
    _F.transient == false(),
    _F.expires_at.is_not(None),
    _F.expires_at > bindparam("lo"),
    _F.expires_at <= bindparam("hi"),
    _F.status == "active",
)
_ZH_ROW = case((_ZH, 1), else_=0)
_GAP = select(func.count(), func.coalesce(func.sum(_ZH_ROW), 0)).where(_BETWEEN)
_FIRST_OF_GAP = select(_ZH_ROW.label("zh")).where(_BETWEEN).limit(bindparam("cap")).subquery()
_GAP_CAPPED = select(func.count(), func.coalesce(func.sum(_FIRST_OF_GAP.c.zh), 0))


def _counts(conn: Connection, memory_id: str, now_ms: int, cap: int | None) -> tuple[int, int] | None:
    found = select_rows(conn, _COUNTS, {"mid": memory_id})
    if not found:
        return 0, 0
    row = found[0]
    mark = int(row.expired_through)
    # Behind the mark: the facts expiring in (mark, now] are expired too; before it (a clock that
    # went back, another process's older now): those in (now, mark] are not expired yet.
    lo, hi, sign = (mark, now_ms, 1) if now_ms >= mark else (now_ms, mark, -1)
    params = {"mid": memory_id, "lo": lo, "hi": hi}
    if cap is None:
        gap, gap_zh = select_rows(conn, _GAP, params)[0]
    else:
        gap, gap_zh = select_rows(conn, _GAP_CAPPED, {**params, "cap": cap + 1})[0]
        if int(gap) > cap:
            return None
    expired_zh = int(row.expired_zh) + sign * int(gap_zh)
    expired_other = int(row.expired_other) + sign * (int(gap) - int(gap_zh))
    return int(row.facts_zh) - expired_zh, int(row.facts_other) - expired_other


def language_counts(conn: Connection, memory_id: str, *, now_ms: int) -> tuple[int, int]:
    """How many usable durable facts (at ``now_ms``) of ``memory_id`` are mainly Chinese, and how many not.

    Exact, whatever the mark: reads every fact expiring between the mark and ``now_ms`` (see
    :func:`bounded_language_counts` for the turn's bounded read).
    """
    counts = _counts(conn, memory_id, now_ms, None)
    assert counts is not None  # no cap: always counted
    return counts


def bounded_language_counts(
    conn: Connection, memory_id: str, *, now_ms: int, cap: int = EXPIRY_BACKLOG
) -> tuple[int, int] | None:
    """:func:`language_counts` reading at most ``cap + 1`` fact rows; ``None`` when that is not enough.

    ``None`` means more than ``cap`` counted facts expire between the memory's mark and
    ``now_ms``: move the mark (:func:`move_expiry_mark`) and ask again.
    """
    return _counts(conn, memory_id, now_ms, cap)


_LOCK_MARK = (
    select(memories.c.expired_through).where(memories.c.memory_id == bindparam("mid")).with_for_update()
)


def move_expiry_mark(conn: Connection, memory_id: str, *, now_ms: int) -> None:
    """Move the memory's expiry mark to ``now_ms``, counting the facts expiring in between once.

    Runs in a write transaction. The memory's row is locked first (PostgreSQL: ``FOR UPDATE``;
    SQLite has one writer): a fact written concurrently either committed before the count (and
    is in it) or has its trigger wait for this transaction and then see the new mark, never
    neither.
    """
    row = conn.execute(_LOCK_MARK, {"mid": memory_id}).first()
    if row is None or int(row.expired_through) == now_ms:
        return
    mark = int(row.expired_through)
    lo, hi, sign = (mark, now_ms, 1) if now_ms > mark else (now_ms, mark, -1)
    gap, gap_zh = conn.execute(_GAP, {"mid": memory_id, "lo": lo, "hi": hi}).one()
    conn.execute(
        memories.update()
        .where(memories.c.memory_id == bindparam("mid"))
        .values(
            expired_through=now_ms,
            expired_zh=memories.c.expired_zh + sign * int(gap_zh),
            expired_other=memories.c.expired_other + sign * (int(gap) - int(gap_zh)),
        ),
        {"mid": memory_id},
    )
