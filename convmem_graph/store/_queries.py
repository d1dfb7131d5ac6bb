"""Statements of the lifecycle's hot path, built once with bound parameters.

Building a Core statement per call (and computing its cache key) cost several times what SQLite
spends executing it; a lifecycle run makes dozens of these calls. Each statement here is built at
import and executed with a parameter dict, so SQLAlchemy's compiled cache answers at once.
"""

from __future__ import annotations

from sqlalchemy import BindParameter, bindparam, delete, func, insert, select, text, update

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
