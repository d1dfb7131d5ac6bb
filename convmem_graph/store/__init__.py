"""The memory store: SQLAlchemy schema and repository, on SQLite (default) or PostgreSQL.

Example:
    >>> from convmem_graph.store import MemoryStore
    >>> store = MemoryStore.from_url(":memory:")
    >>> store.ensure_memory("mem_1").message_count
    0
    >>> store.close()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from convmem_graph._lazy import lazy_exports

if TYPE_CHECKING:
    from convmem_graph.store.records import AuditAction, AuditEntry, AuditKind, DeadLetter
    from convmem_graph.store.repository import MemoryStore, StoreRun
    from convmem_graph.store.sqlite_reader import SqliteSnapshotReader
    from convmem_graph.store.urls import DEFAULT_DB_FILE, mask_url, normalize_url

# Imported on first use: the call-start reader (store.sqlite_reader) runs without SQLAlchemy.
_LAZY = {
    "DEFAULT_DB_FILE": "convmem_graph.store.urls",
    "AuditAction": "convmem_graph.store.records",
    "AuditEntry": "convmem_graph.store.records",
    "AuditKind": "convmem_graph.store.records",
    "DeadLetter": "convmem_graph.store.records",
    "MemoryStore": "convmem_graph.store.repository",
    "SqliteSnapshotReader": "convmem_graph.store.sqlite_reader",
    "StoreRun": "convmem_graph.store.repository",
    "mask_url": "convmem_graph.store.urls",
    "normalize_url": "convmem_graph.store.urls",
}


__getattr__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "DEFAULT_DB_FILE",
    "AuditAction",
    "AuditEntry",
    "AuditKind",
    "DeadLetter",
    "MemoryStore",
    "SqliteSnapshotReader",
    "StoreRun",
    "mask_url",
    "normalize_url",
]
