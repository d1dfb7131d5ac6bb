"""The memory store: SQLAlchemy schema and repository, on SQLite (default) or PostgreSQL.

Example:
    >>> from convmem_graph.store import MemoryStore
    >>> store = MemoryStore.from_url(":memory:")
    >>> store.ensure_memory("mem_1").message_count
    0
    >>> store.close()
"""

from __future__ import annotations

from convmem_graph.store.records import AuditAction, AuditEntry, AuditKind, DeadLetter
from convmem_graph.store.repository import MemoryStore
from convmem_graph.store.urls import DEFAULT_DB_FILE, mask_url, normalize_url

__all__ = [
    "DEFAULT_DB_FILE",
    "AuditAction",
    "AuditEntry",
    "AuditKind",
    "DeadLetter",
    "MemoryStore",
    "mask_url",
    "normalize_url",
]
