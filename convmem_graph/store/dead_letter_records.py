"""Payloads that could not be read, kept for inspection (dead letters)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import (
    select,
)

from convmem_graph._time import now_ms as _now
from convmem_graph.store._optional import ensure_tables, present
from convmem_graph.store.core import (
    CACHED_KINDS,
    StoreCore,
    check_memory_id,
)
from convmem_graph.store.engine import (
    insert_ignore,
)
from convmem_graph.store.records import DeadLetter, dead_letter_key
from convmem_graph.store.schema import (
    dead_letters,
)

if TYPE_CHECKING:
    pass

__all__ = ["DeadLetterRecords"]

# The store logs under one name, as before its record kinds had modules of their own
# (``convmem ingest`` and log configurations name it).
logger = logging.getLogger("convmem_graph.store.repository")


class DeadLetterRecords(StoreCore):
    """Dead letters (see :class:`convmem_graph.store.base.DeadLetterStore`)."""

    # -- dead letters and audit -----------------------------------------------------------------
    def add_dead_letter(
        self, memory_id: str | None, *, source: str, raw: str, error: str, path: str = "$"
    ) -> bool:
        """Keep a raw item that failed to parse; the same item twice is stored once.

        Returns:
            False if this (memory, raw item) was already stored.
        """
        item_key = dead_letter_key(None if memory_id is None else check_memory_id(memory_id), raw)
        row = {
            "memory_id": memory_id,
            "item_key": item_key,
            "source": source,
            "raw": raw,
            "error": error,
            "path": path or "$",
            "created_at": _now(),
        }
        with self._write(memory_id, keeps=CACHED_KINDS) as conn:
            ensure_tables(conn, dead_letters)  # a SQLite file's first dead letter makes the table
            inserted = conn.execute(insert_ignore(self.dialect, dead_letters), row).rowcount == 1
        if inserted:
            logger.warning("dead letter from %s at %s: %s", source, path or "$", error)
        return inserted

    def list_dead_letters(self, memory_id: str | None = None, *, limit: int = 100) -> list[DeadLetter]:
        """List dead letters, newest first (of one memory, or of all when ``memory_id`` is None)."""
        stmt = select(dead_letters).order_by(dead_letters.c.id.desc()).limit(limit)
        if memory_id is not None:
            stmt = stmt.where(dead_letters.c.memory_id == memory_id)
        with self._read() as conn:
            if not present(conn, dead_letters):
                return []  # a SQLite file that never kept one (store._optional)
            return [
                DeadLetter(
                    id=r.id,
                    memory_id=r.memory_id,
                    source=r.source,
                    raw=r.raw,
                    error=r.error,
                    path=r.path,
                    created_at=r.created_at,
                )
                for r in conn.execute(stmt)
            ]
