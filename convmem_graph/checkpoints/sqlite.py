"""SQLite checkpointer factory (the default: the same file as the store)."""

from __future__ import annotations

import sqlite3

from langgraph.checkpoint.sqlite import SqliteSaver

from convmem_graph.store.urls import sqlite_path

__all__ = ["sqlite_checkpointer"]

_BUSY_TIMEOUT_S = 30.0


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
    # WAL with synchronous=NORMAL stays consistent after a crash and skips an fsync per checkpoint.
    conn.execute("PRAGMA synchronous=NORMAL")
    return SqliteSaver(conn)
