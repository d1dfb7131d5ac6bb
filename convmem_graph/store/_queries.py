"""Statements of the lifecycle's hot path, built once with bound parameters.

Building a Core statement per call (and computing its cache key) cost several times what SQLite
spends executing it; a lifecycle run makes dozens of these calls. Each statement here is built at
import and executed with a parameter dict, so SQLAlchemy's compiled cache answers at once.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from sqlalchemy import (
    BindParameter,
    ColumnClause,
    Select,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    select,
    text,
    tuple_,
    update,
)

from convmem_graph.store._messages import MESSAGE_COLUMNS
from convmem_graph.store.schema import (
    audit,
    fragments,
    memories,
    messages,
    snapshots,
    summaries,
    variable_specs,
    variables,
)

_MEMORY: BindParameter[str] = bindparam("mid")

MESSAGES_AFTER = (
    select(*MESSAGE_COLUMNS)
    .where(messages.c.memory_id == _MEMORY, messages.c.seq > bindparam("after"))
    .order_by(messages.c.seq)
    .limit(bindparam("limit"))
)
MESSAGE_IDS_AFTER = (
    select(messages.c.seq, messages.c.id)
    .where(messages.c.memory_id == _MEMORY, messages.c.seq > bindparam("after"))
    .order_by(messages.c.seq)
    .limit(bindparam("limit"))
)
MESSAGE_TEXTS_AFTER = (
    select(messages.c.seq, messages.c.id, messages.c.content)
    .where(messages.c.memory_id == _MEMORY, messages.c.seq > bindparam("after"))
    .order_by(messages.c.seq)
    .limit(bindparam("limit"))
)
RECENT_MESSAGES = (
    select(*MESSAGE_COLUMNS)
    .where(messages.c.memory_id == _MEMORY)
    .order_by(messages.c.timestamp_ms.desc(), messages.c.seq.desc())
    .limit(bindparam("limit"))
)
MAX_SEQ = select(func.max(messages.c.seq)).where(messages.c.memory_id == _MEMORY)
CURSORS = select(
    MAX_SEQ.scalar_subquery(),
    memories.c.extracted_seq,
    memories.c.summarized_seq,
    memories.c.facts_dirty,
).where(memories.c.memory_id == _MEMORY)


class SeqReads(NamedTuple):
    """A backend's statements reading a memory's messages by seq (``mid``, ``after``, ``limit``)."""

    messages_after: Select[Any]
    message_ids_after: Select[Any]
    message_texts_after: Select[Any]
    max_seq: Select[Any]
    cursors: Select[Any]


#: SQLite's (and any backend's) reads by seq: the memory by equality, ordered by seq.
SEQ_READS = SeqReads(MESSAGES_AFTER, MESSAGE_IDS_AFTER, MESSAGE_TEXTS_AFTER, MAX_SEQ, CURSORS)

# PostgreSQL's forms of the same reads, for plans made for any memory (psycopg prepares the store's
# statements, and the server plans a prepared statement generically after five executions). With
# ``memory_id = $1 AND seq > $2`` such a plan may walk the seq primary key and filter by memory,
# expecting a match within a few rows, as it does when the statistics say one memory holds most
# messages; for a memory whose rows are not the newest (a new one, a returning small one) that
# reads every newer row of the table. Measured by ``benchmarks/pg_generic_plans.py``:
# - after a cursor: the equality and the seq range as two comparisons of the row
#   ``(memory_id, seq)``, ordered by both columns. Only the ``(memory_id, seq)`` index can start
#   and stop at them; the walk of the primary key would filter on them. With one row comparison
#   alone (the cursor) the walk was still chosen once the table held 370 memories under
#   one-memory statistics (101,174 rows read); without the equality, ``ANALYZE``'s own statistics
#   chose another memory_id index and sorted the whole memory (H6, issue 24);
# - the newest seq: the memory named by two row comparisons alone (together exactly
#   ``memory_id = $1``), ordered by both columns: with an equality the backward walk of the
#   primary key is still chosen when the statistics say one memory.
# Rows and their order are those of the equality forms.
_KEY = tuple_(messages.c.memory_id, messages.c.seq)
#: The seq type's bounds (BIGINT): a range between them names every seq of a memory.
SEQ_LOW, SEQ_HIGH = -(2**63), 2**63 - 1
_SEQ_MIN: ColumnClause[Any] = literal_column(str(SEQ_LOW))
_SEQ_MAX: ColumnClause[Any] = literal_column(str(SEQ_HIGH))
_PG_AFTER = (
    messages.c.memory_id == _MEMORY,
    _KEY > tuple_(_MEMORY, bindparam("after")),
    _KEY <= tuple_(_MEMORY, _SEQ_MAX),
)


def pg_memory_range_sql(memory: str) -> str:
    """SQL text of :func:`pg_memory_seqs` over all seqs, for statements written as text.

    ``memory`` is the SQL expression naming the memory id (a placeholder or a column).
    """
    return f"(memory_id, seq) >= ({memory}, {SEQ_LOW}) AND (memory_id, seq) <= ({memory}, {SEQ_HIGH})"


def pg_memory_seqs(memory_id: Any, low: Any = _SEQ_MIN, high: Any = _SEQ_MAX) -> tuple[Any, Any]:
    """PostgreSQL: a memory's messages with ``low <= seq <= high``, as two row comparisons.

    Together exactly ``memory_id = :memory_id AND seq BETWEEN low AND high``, and one range of the
    ``(memory_id, seq)`` index: no generic plan answers them by walking the seq primary key, which
    could only filter on them (see ``PG_SEQ_READS`` above). ``memory_id``, ``low``, ``high``:
    values or SQL expressions (another table's columns too: ``pg_seq_range``).
    """
    return pg_seq_range(messages.c.memory_id, messages.c.seq, memory_id, low, high)


def pg_seq_range(
    memory_column: Any, seq_column: Any, memory_id: Any, low: Any = _SEQ_MIN, high: Any = _SEQ_MAX
) -> tuple[Any, Any]:
    """:func:`pg_memory_seqs` on any table keyed by ``(memory_id, seq, ...)`` (turn vectors)."""
    key = tuple_(memory_column, seq_column)
    return key >= tuple_(memory_id, low), key <= tuple_(memory_id, high)


def _pg_after(*columns: Any) -> Select[Any]:
    return (
        select(*columns)
        .where(*_PG_AFTER)
        .order_by(messages.c.memory_id, messages.c.seq)
        .limit(bindparam("limit"))
    )


#: The memory's newest seq on PostgreSQL (no row: it has none).
PG_MAX_SEQ = (
    select(messages.c.seq)
    .where(*pg_memory_seqs(_MEMORY))
    .order_by(messages.c.memory_id.desc(), messages.c.seq.desc())
    .limit(1)
)
PG_SEQ_READS = SeqReads(
    _pg_after(*MESSAGE_COLUMNS),
    _pg_after(messages.c.seq, messages.c.id),
    _pg_after(messages.c.seq, messages.c.id, messages.c.content),
    PG_MAX_SEQ,
    select(
        PG_MAX_SEQ.scalar_subquery(),
        memories.c.extracted_seq,
        memories.c.summarized_seq,
        memories.c.facts_dirty,
    ).where(memories.c.memory_id == _MEMORY),
)

EXTRACTED_SEQ = select(memories.c.extracted_seq).where(memories.c.memory_id == _MEMORY)
SUMMARIZED_SEQ = select(memories.c.summarized_seq).where(memories.c.memory_id == _MEMORY)

_ORDERED_FRAGMENTS = select(fragments).where(fragments.c.memory_id == _MEMORY)
#: Fragments of one status, oldest first.
FRAGMENTS_BY_STATUS = _ORDERED_FRAGMENTS.where(fragments.c.status == bindparam("status")).order_by(
    fragments.c.created_at, fragments.c.id
)
#: Fragments of one status that have not expired at ``now``, oldest first.
LIVE_FRAGMENTS_BY_STATUS = (
    _ORDERED_FRAGMENTS.where(fragments.c.status == bindparam("status"))
    .where(
        fragments.c.transient.is_(False)
        | fragments.c.expires_at.is_(None)
        | (fragments.c.expires_at > bindparam("now"))
    )
    .order_by(fragments.c.created_at, fragments.c.id)
)
FRAGMENTS_BY_ID = select(fragments).where(
    fragments.c.memory_id == _MEMORY, fragments.c.id.in_(bindparam("ids", expanding=True))
)
INSERT_FRAGMENTS = insert(fragments)
INSERT_AUDIT = insert(audit)

SPECS = (
    select(variable_specs).where(variable_specs.c.memory_id == _MEMORY).order_by(variable_specs.c.position)
)
VALUES = select(variables).where(variables.c.memory_id == _MEMORY).order_by(variables.c.name)
SUMMARY = select(summaries).where(summaries.c.memory_id == _MEMORY)

DROP_SNAPSHOT = delete(snapshots).where(snapshots.c.memory_id == _MEMORY)
#: The cached snapshot's text (every call start reads it: built once, not per call).
SNAPSHOT_DATA = select(snapshots.c.data).where(snapshots.c.memory_id == _MEMORY)
SET_UPDATED_AT = update(memories).where(memories.c.memory_id == _MEMORY).values(updated_at=bindparam("now"))
SET_UPDATED_AT_DIRTY = (
    update(memories)
    .where(memories.c.memory_id == _MEMORY)
    .values(updated_at=bindparam("now"), facts_dirty=bindparam("dirty"))
)
#: PostgreSQL: drop the snapshot and stamp the memory in one round trip (``dirty`` NULL keeps
#: ``facts_dirty`` as it is).
PG_TOUCH = text(
    f"WITH gone AS (DELETE FROM {snapshots.name} WHERE memory_id = :mid) "
    f"UPDATE {memories.name} SET updated_at = :now, "
    "facts_dirty = COALESCE(CAST(:dirty AS INTEGER), facts_dirty) WHERE memory_id = :mid"
)
#: PostgreSQL: a committed extraction in one round trip: move the cursor, stamp the memory when
#: anything changed (dropping the snapshot when facts did) and set ``facts_dirty`` (NULL keeps it).
#: Every SET expression reads the row as it was.
PG_EXTRACTED = text(
    f"WITH gone AS (DELETE FROM {snapshots.name} WHERE memory_id = :mid AND CAST(:changed AS BOOLEAN)) "
    f"UPDATE {memories.name} SET extracted_seq = GREATEST(extracted_seq, :upto), "
    "updated_at = CASE WHEN CAST(:changed AS BOOLEAN) OR extracted_seq < :upto "
    "THEN :now ELSE updated_at END, "
    "facts_dirty = COALESCE(CAST(:dirty AS INTEGER), facts_dirty) WHERE memory_id = :mid"
)
#: PostgreSQL: a committed summary in one round trip: the new version, the summary cursor moved
#: (never back), the memory stamped and its call-start snapshot dropped, with the run's held-back
#: changes of the row (the extraction cursor, ``facts_dirty``; NULL: none).
PG_SUMMARIZED = text(
    f"WITH up AS (INSERT INTO {summaries.name} "
    "(memory_id, text, tokens, covers_until_ms, version, updated_at, origin) "
    "VALUES (:mid, :text, :tokens, :covers_until_ms, :version, :updated_at, :origin) "
    "ON CONFLICT (memory_id) DO UPDATE SET text = excluded.text, tokens = excluded.tokens, "
    "covers_until_ms = excluded.covers_until_ms, version = excluded.version, "
    "updated_at = excluded.updated_at, origin = excluded.origin), "
    f"gone AS (DELETE FROM {snapshots.name} WHERE memory_id = :mid) "
    f"UPDATE {memories.name} SET summarized_seq = GREATEST(summarized_seq, :upto), "
    "updated_at = :updated_at, "
    # The run's held-back row changes (convmem_graph.store._row_patch), NULL when none: GREATEST
    # ignores a NULL argument.
    "extracted_seq = GREATEST(extracted_seq, CAST(:held_upto AS BIGINT)), "
    "facts_dirty = COALESCE(CAST(:held_dirty AS INTEGER), facts_dirty) WHERE memory_id = :mid"
)
SET_FACTS_DIRTY = (
    update(memories).where(memories.c.memory_id == _MEMORY).values(facts_dirty=bindparam("dirty"))
)
ADVANCE_EXTRACTED = (
    update(memories)
    .where(memories.c.memory_id == _MEMORY, memories.c.extracted_seq < bindparam("upto"))
    .values(extracted_seq=bindparam("upto"))
)
ADVANCE_SUMMARIZED = (
    update(memories)
    .where(memories.c.memory_id == _MEMORY, memories.c.summarized_seq < bindparam("upto"))
    .values(summarized_seq=bindparam("upto"))
)
DELETE_VALUE = delete(variables).where(
    variables.c.memory_id == _MEMORY,
    variables.c.name == bindparam("name"),
    variables.c.origin == bindparam("origin"),
)
