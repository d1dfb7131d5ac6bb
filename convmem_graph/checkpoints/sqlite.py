"""SQLite checkpointer factory (the default: the same file as the store)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from langgraph.checkpoint.sqlite import SqliteSaver

from convmem_graph.store.urls import sqlite_path
from convmem_graph.store.write_gate import WriteGate, write_gate

__all__ = ["GatedSqliteSaver", "sqlite_checkpointer"]

_BUSY_TIMEOUT_S = 30.0


class GatedSqliteSaver(SqliteSaver):
    """A :class:`SqliteSaver` whose writes pass the file's :func:`write_gate`.

    The saver shares its file with the store; queueing its commits with the store's keeps several
    replay processes from sleeping in SQLite's busy handler.
    """

    gate: WriteGate | None = None

    @contextmanager
    def cursor(self, transaction: bool = True) -> Iterator[sqlite3.Cursor]:
        """The saver's cursor; a writing one holds the write gate until its commit."""
        if not transaction or self.gate is None:
            with super().cursor(transaction) as cur:
                yield cur
            return
        with self.gate.hold(), super().cursor(transaction) as cur:
            yield cur
        with self.lock:
            self.gate.committed(self.conn)


def sqlite_checkpointer(path_or_url: str | None = None) -> SqliteSaver:
    """Return a :class:`SqliteSaver` on a SQLite file (WAL), shareable across threads.

    Args:
        path_or_url: A filesystem path, ``:memory:``, a ``sqlite:///`` URL, or ``None`` for the
            default ``convmem.db`` in the current directory (the store's default file).

    Returns:
        The saver; close it with ``saver.conn.close()``.

    Example:
        >>> saver = sqlite_checkpointer(":memory:")
        >>> saver.delete_thread("mem_1")
        >>> saver.conn.close()
    """
    path = sqlite_path(path_or_url)
    conn = sqlite3.connect(path, check_same_thread=False, timeout=_BUSY_TIMEOUT_S)
    if path != ":memory:":
        conn.execute("PRAGMA journal_mode=WAL")
        # Checkpoints run outside the write gate (see GatedSqliteSaver.cursor), not inside commits.
        conn.execute("PRAGMA wal_autocheckpoint=0")
    # WAL with synchronous=NORMAL stays consistent after a crash and skips an fsync per checkpoint.
    conn.execute("PRAGMA synchronous=NORMAL")
    # As the store's connections (store.engine): a deleted thread's checkpoints (its messages)
    # leave zeroed free pages whatever the build's default.
    conn.execute("PRAGMA secure_delete=ON")
    saver = GatedSqliteSaver(conn)
    saver.gate = None if path == ":memory:" else write_gate(path)
    return saver
