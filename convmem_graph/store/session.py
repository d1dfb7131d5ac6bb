"""The state of one store session: the connection a run's calls share, and what its transaction holds.

A :class:`RunScope` belongs to one :class:`~convmem_graph.store.repository.StoreRun` (made by
``MemoryStore.session()`` or ``MemoryStore.run()``) and is reached only through it: whether a store
call joins a transaction is decided by the object the call is made on, never by per-thread state.
A plain ``MemoryStore`` has no scope: each of its calls opens its own connection and transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

if TYPE_CHECKING:
    from convmem_graph.store._row_patch import RowPatch

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
        run_memory: On SQLite, the memory a :meth:`~convmem_graph.store.MemoryStore.run` on this
            session holds (its lock; ``None``: no run, or PostgreSQL, whose run is one transaction).
        run_row: ``run_memory`` once a committed transaction of the run has made sure its row
            exists (``None`` before). The row then stays for the rest of the run: the run holds the
            memory's lock, which ``delete_memory`` takes too, and a delete made inside the run (the
            lock is re-entrant) resets this. Later transactions of the run skip the insert.
        pending: On PostgreSQL, the run's changes of its memories' own rows not sent yet, by
            memory (see :mod:`convmem_graph.store._row_patch`).
        deferring: How many store calls under way keep ``pending`` pending (calls that touch no
            column a pending change sets); every other call of the run sends it first.
    """

    __slots__ = (
        "cache",
        "conn",
        "deferring",
        "ensured",
        "interrupted",
        "locked",
        "pending",
        "run_memory",
        "run_row",
        "writing",
    )

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.writing = False
        self.interrupted = False
        self.locked: set[str] = set()
        self.ensured: set[str] = set()
        self.cache: dict[tuple[str, str], Any] | None = None
        self.run_memory: str | None = None
        self.run_row: str | None = None
        self.pending: dict[str, RowPatch] = {}
        self.deferring = 0

    def begun(self) -> None:
        """Forget the previous transaction's locks and ensured memories (a new one began)."""
        self.locked = set()
        self.ensured = set()

    def committed(self) -> None:
        """The open transaction committed: what it ensured of the run's memory now holds for the run."""
        if self.run_memory is not None and self.run_memory in self.ensured:
            self.run_row = self.run_memory
