"""Export a memory as one JSON document and import it back, exactly.

The document holds every stored row of the memory (messages in processing order, fragments of
every status, the variable schema, manual and inferred values, the summary, the audit log and dead
letters) without database-local numbers: message seqs become positions, and the processing cursors
become counts of processed messages. ``import`` of an ``export`` followed by ``export`` gives the
same document. The call-start snapshot is derived data and is rebuilt, not exported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Table, delete, func, insert, select

from convmem_graph.errors import ConvMemError, MemoryNotFoundError
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

__all__ = ["EXPORT_FORMAT", "export_memory", "import_memory"]

EXPORT_FORMAT = "convmem-memory"
EXPORT_VERSION = 1

# Table -> (document key, ordering columns, columns that are database-local and left out).
_PARTS: tuple[tuple[Table, str, tuple[str, ...], frozenset[str]], ...] = (
    (messages, "messages", ("seq",), frozenset({"seq", "memory_id"})),
    (fragments, "fragments", ("id",), frozenset({"memory_id"})),
    (variable_specs, "variable_specs", ("position",), frozenset({"memory_id"})),
    (variables, "variables", ("name", "origin"), frozenset({"memory_id"})),
    (summaries, "summary", (), frozenset({"memory_id"})),
    (audit, "audit", ("id",), frozenset({"id", "memory_id"})),
    (dead_letters, "dead_letters", ("id",), frozenset({"id", "memory_id"})),
)


def _rows(
    conn: Any, table: Table, memory_id: str, order: tuple[str, ...], drop: frozenset[str]
) -> list[dict[str, Any]]:
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


def _check(doc: Mapping[str, Any]) -> None:
    if not isinstance(doc, Mapping) or doc.get("format") != EXPORT_FORMAT:
        raise ConvMemError(f"not a convmem export: $.format must be {EXPORT_FORMAT!r}")
    if doc.get("version") != EXPORT_VERSION:
        raise ConvMemError(
            f"unsupported export: $.version must be {EXPORT_VERSION}, got {doc.get('version')!r}"
        )
    memory = doc.get("memory")
    if (
        not isinstance(memory, Mapping)
        or not isinstance(memory.get("memory_id"), str)
        or not memory["memory_id"]
    ):
        raise ConvMemError("not a convmem export: $.memory.memory_id must be a non-empty string")
    for _, key, _, _ in _PARTS:
        value = doc.get(key)
        if key == "summary":
            if value is not None and not isinstance(value, Mapping):
                raise ConvMemError("not a convmem export: $.summary must be an object or null")
        elif not isinstance(value, list) or not all(isinstance(r, Mapping) for r in value):
            raise ConvMemError(f"not a convmem export: $.{key} must be a list of objects")


def import_memory(
    store: MemoryStore, doc: Mapping[str, Any], *, memory_id: str | None = None, replace: bool = False
) -> str:
    """Import an exported memory in one transaction; returns the memory id it was stored under.

    Args:
        store: The target store.
        doc: A document made by :func:`export_memory`.
        memory_id: Store under this id instead of the exported one.
        replace: Replace an existing memory of that id (otherwise that is an error).

    Raises:
        ConvMemError: The document is not a convmem export (names the field), or the memory exists
            and ``replace`` is false. Nothing is written in either case.
    """
    _check(doc)
    head = doc["memory"]
    target = memory_id or head["memory_id"]
    try:
        with store.transaction(target) as conn:
            exists = conn.execute(select(memories.c.memory_id).where(memories.c.memory_id == target)).first()
            if exists is not None:
                if not replace:
                    raise ConvMemError(
                        f"memory {target!r} exists; pass replace=True (--replace) to overwrite it"
                    )
                for table, *_ in reversed(_PARTS):
                    conn.execute(delete(table).where(table.c.memory_id == target))
                conn.execute(delete(memories).where(memories.c.memory_id == target))
            conn.execute(
                insert(memories).values(
                    memory_id=target,
                    description=head.get("description", ""),
                    created_at=head.get("created_at", 0),
                    updated_at=head.get("updated_at", 0),
                    extracted_seq=0,
                    summarized_seq=0,
                )
            )
            for table, key, _, _ in _PARTS:
                rows = doc[key] if key != "summary" else ([doc[key]] if doc[key] else [])
                for row in rows:  # one by one keeps message seqs in document order
                    conn.execute(insert(table).values({**row, "memory_id": target}))
            seqs = list(
                conn.execute(
                    select(messages.c.seq).where(messages.c.memory_id == target).order_by(messages.c.seq)
                ).scalars()
            )
            cursors = {}
            for name in ("extracted", "summarized"):
                n = int(head.get(f"{name}_messages", 0))
                cursors[f"{name}_seq"] = seqs[n - 1] if 0 < n <= len(seqs) else 0
            conn.execute(memories.update().where(memories.c.memory_id == target).values(**cursors))
    except ConvMemError:
        raise
    except Exception as exc:  # a malformed row: report it as an import error, nothing was written
        raise ConvMemError(f"import of {target!r} failed, nothing was written: {exc}") from exc
    return target
