"""Export a memory as one JSON document and import it back, exactly.

The document holds every stored row of the memory (messages in processing order, fragments of
every status, the variable schema, manual and inferred values, the summary, the audit log and dead
letters) without database-local numbers: message seqs become positions, and the processing cursors
become counts of processed messages. ``import`` of an ``export`` followed by ``export`` gives the
same document. The call-start snapshot is derived data and is rebuilt, not exported.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Table, delete, func, insert, select

from convmem_graph._ids import check_identifier
from convmem_graph.errors import ConvMemError, MemoryExistsError, MemoryNotFoundError
from convmem_graph.store._derived import derived_columns
from convmem_graph.store._export_schema import ExportFormatError, parse_export
from convmem_graph.store._fact_vectors import delete_fact_vectors
from convmem_graph.store._messages import content_hash
from convmem_graph.store._optional import ensure_tables, present
from convmem_graph.store.engine import insert_ignore
from convmem_graph.store.records import dead_letter_key
from convmem_graph.store.registry import MEMORY_TABLES
from convmem_graph.store.repository import MemoryStore
from convmem_graph.store.schema import (
    audit,
    dead_letters,
    fragments,
    memories,
    messages,
    summaries,
    variable_specs,
    variables,
)

__all__ = ["EXPORT_FORMAT", "ExportFormatError", "export_memory", "import_memory"]

logger = logging.getLogger(__name__)

EXPORT_FORMAT = "convmem-memory"
EXPORT_VERSION = 1

# Table -> (document key, ordering columns, columns that are database-local and left out): every
# registered memory table that says how it is exported (the registry gives the others' reasons).
_PARTS: tuple[tuple[Table, str, tuple[str, ...], frozenset[str]], ...] = tuple(
    (e.table, e.export.key, e.export.order, e.export.drop) for e in MEMORY_TABLES if e.export is not None
)


def _rows(
    conn: Any, table: Table, memory_id: str, order: tuple[str, ...], drop: frozenset[str]
) -> list[dict[str, Any]]:
    if not present(conn, table):
        return []  # an optional table a SQLite file does not have yet holds no row
    stmt = select(table).where(table.c.memory_id == memory_id)
    if order:
        stmt = stmt.order_by(*(table.c[c] for c in order))
    return [{k: v for k, v in row._mapping.items() if k not in drop} for row in conn.execute(stmt)]


def export_memory(store: MemoryStore, memory_id: str) -> dict[str, Any]:
    """Return the whole memory as a JSON-ready document.

    The rows are read in one transaction that holds the memory's write lock, so a run writing to
    the memory meanwhile cannot leave the export with, say, fragments newer than its messages.

    Raises:
        MemoryNotFoundError: If the memory does not exist.
    """
    with store.transaction(memory_id) as conn:
        row = conn.execute(select(memories).where(memories.c.memory_id == memory_id)).first()
        if row is None:
            raise MemoryNotFoundError(f"no memory {memory_id!r}")
        head = dict(row._mapping)
        doc: dict[str, Any] = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION}
        for table, key, order, drop in _PARTS:
            rows = _rows(conn, table, memory_id, order, drop)
            doc[key] = (rows[0] if rows else None) if key == "summary" else rows
        counts = {}
        for cursor in ("extracted_seq", "summarized_seq"):
            counts[cursor.replace("_seq", "_messages")] = conn.execute(
                select(func.count())
                .select_from(messages)
                .where(messages.c.memory_id == memory_id, messages.c.seq <= head[cursor])
            ).scalar_one()
    doc["memory"] = {
        "memory_id": memory_id,
        "description": head["description"],
        "created_at": head["created_at"],
        "updated_at": head["updated_at"],
        **counts,
    }
    return doc


def import_memory(
    store: MemoryStore,
    doc: Mapping[str, Any],
    *,
    memory_id: str | None = None,
    replace: bool = False,
    index: bool = True,
) -> str:
    """Import an exported memory in one transaction; returns the memory id it was stored under.

    The whole document is validated against the export schema first (ids, lengths, characters,
    enum values, sizes: see ``convmem_graph.store._export_schema``), so a bad document writes
    nothing. Database-internal keys are never taken from the file: message seqs, audit and
    dead-letter row ids are assigned by the store (a tampered ``seq`` cannot exhaust SQLite's
    AUTOINCREMENT or collide with another memory's rows on PostgreSQL), content hashes, the
    fragments' derived columns (canonical key, content hash, language) and dead-letter keys are
    recomputed, and the processing cursors are message counts.

    Args:
        store: The target store.
        doc: A document made by :func:`export_memory`.
        memory_id: Store under this id instead of the exported one.
        replace: Replace an existing memory of that id (otherwise that is an error).
        index: Write the imported messages to the episodic index (``False`` for a deployment
            with ``MemoryConfig(episodic=False)``); a replaced memory's index rows always go.

    Raises:
        ExportFormatError: The document is not a valid convmem export (one line naming the JSON
            path, e.g. ``convmem-memory: $.messages[0].seq: unknown field ...``).
        MemoryExistsError: The memory exists and ``replace`` is false. Nothing is written in either
            case.
    """
    parsed = parse_export(doc)
    target = parsed.memory.memory_id if memory_id is None else check_identifier(memory_id, "memory_id")
    head = parsed.memory
    try:
        # On SQLite a run's calls are separate transactions: without the run's lock an import
        # landing between two of them would leave the rest of that run written into the imported
        # memory. It waits for the run, as on PostgreSQL (the transaction's advisory lock).
        with store.excluding_runs(target), store.transaction(target) as conn:
            exists = conn.execute(select(memories.c.memory_id).where(memories.c.memory_id == target)).first()
            if exists is not None:
                if not replace:
                    raise MemoryExistsError(target)
                store._backend.episodes.remove_matching(conn, target)
                # Derived, not exported: the imported facts are embedded again (ids may repeat).
                delete_fact_vectors(conn, target)
                for table, *_ in reversed(_PARTS):
                    if present(conn, table):  # an optional table not made yet holds no row
                        conn.execute(delete(table).where(table.c.memory_id == target))
                conn.execute(delete(memories).where(memories.c.memory_id == target))
            conn.execute(
                insert(memories).values(
                    memory_id=target,
                    description=head.description,
                    created_at=head.created_at,
                    updated_at=head.updated_at,
                    extracted_seq=0,
                    summarized_seq=0,
                )
            )
            for m in parsed.messages:  # one by one: the store numbers seqs in document order
                row = m.model_dump()
                row["content_hash"] = content_hash(m.role, m.content)
                conn.execute(insert(messages).values({**row, "memory_id": target}))
            for table, key in (
                (fragments, "fragments"),
                (variable_specs, "variable_specs"),
                (variables, "variables"),
                (audit, "audit"),
            ):
                columns = set(table.c.keys())
                rows = [
                    {k: v for k, v in r.model_dump().items() if k in columns} | {"memory_id": target}
                    for r in getattr(parsed, key)
                ]
                if table is fragments:
                    # Derived from key and content by this version's rules, whatever the file says:
                    # the live path finds facts through them.
                    for row in rows:
                        row.update(derived_columns(row["key"], row["content"]))
                if rows:
                    conn.execute(insert(table), rows)
            if parsed.summary is not None:
                conn.execute(insert(summaries).values({**parsed.summary.model_dump(), "memory_id": target}))
            letters = [
                {
                    **d.model_dump(exclude={"item_key"}),
                    "memory_id": target,
                    "item_key": dead_letter_key(target, d.raw),
                }
                for d in parsed.dead_letters
            ]
            if letters:
                ensure_tables(conn, dead_letters)  # an optional table (store._optional)
                conn.execute(insert_ignore(store.dialect, dead_letters), letters)
            stored = conn.execute(
                select(messages.c.seq, messages.c.content)
                .where(messages.c.memory_id == target)
                .order_by(messages.c.seq)
            ).all()
            seqs = [int(seq) for seq, _ in stored]
            if index:
                store._backend.episodes.add(conn, target, [(int(seq), content) for seq, content in stored])
            cursors = {}
            for name in ("extracted", "summarized"):
                n = getattr(head, f"{name}_messages")
                cursors[f"{name}_seq"] = seqs[n - 1] if 0 < n <= len(seqs) else 0
            conn.execute(memories.update().where(memories.c.memory_id == target).values(**cursors))
    except ConvMemError:
        raise
    except Exception as exc:  # a database error: nothing was written; the driver text names no value
        logger.debug("import of %r failed", target, exc_info=True)
        raise ConvMemError(f"import of {target!r} failed, nothing was written: {type(exc).__name__}") from exc
    return target
