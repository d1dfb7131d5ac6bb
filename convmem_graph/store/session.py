"""The state of one store session: the connection a run's calls share, and what its transaction holds.

A :class:`RunScope` belongs to one :class:`~convmem_graph.store.repository.StoreRun` (made by
``MemoryStore.session()`` or ``MemoryStore.run()``) and is reached only through it: whether a store
call joins a transaction is decided by the object the call is made on, never by per-thread state.
A plain ``MemoryStore`` has no scope: each of its calls opens its own connection and transaction.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

__all__ = ["RunScope"]


class RunScope:
    """The connection of a session and the bookkeeping of the transaction open on it.

    Attributes:
        conn: The session's connection (checked out once for all its calls).
        writing: A transaction is open on ``conn`` (a write or a PostgreSQL run): calls join it.
        interrupted: A call inside that transaction raised half-way; the run must not commit it.
        locked: Memories whose ``pg_advisory_xact_lock`` the open transaction holds.
        ensured: Memories the open transaction has made sure exist (one insert each).
        cache: The run's read cache (``(kind, memory_id) -> value``); ``None`` outside a run.
    """

    __slots__ = ("cache", "conn", "ensured", "interrupted", "locked", "writing")

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.writing = False
        self.interrupted = False
        self.locked: set[str] = set()
        self.ensured: set[str] = set()
        self.cache: dict[tuple[str, str], Any] | None = None

    def begun(self) -> None:
        """Forget the previous transaction's locks and ensured memories (a new one began)."""
        self.locked = set()
        self.ensured = set()
