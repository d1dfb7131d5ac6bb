"""Call-start reads of a SQLite store file, read-only, through the standard library's driver.

``convmem inject`` is one process per call start, and importing SQLAlchemy was a third of its wall
time (~0.1 s of ~0.34 s). A call start reads two things: the memory's cached snapshot (one
primary-key row, fetched again only when its revision moved) and, with a query, its episodic
search. This reader answers both on a file that this version set up (its schema stamp), with the
same SQL and the same search code as :class:`~convmem_graph.store.MemoryStore`, and declines
everything else: another version's file, a memory without a cached snapshot. The caller then
opens the full store, which sets up, builds and reports what is missing.

Example:
    >>> reader = SqliteSnapshotReader.open("no-such-file.db")
    >>> reader is None
    True
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from convmem_graph.models import EpisodeSearch, MemorySnapshot
from convmem_graph.store._episode_search import search_sqlite
from convmem_graph.store._snapshot_revisions import read_snapshot_row
from convmem_graph.store._stamp import SCHEMA_STAMP

__all__ = ["SqliteSnapshotReader"]

logger = logging.getLogger(__name__)

#: Seconds a read waits for a lock (WAL readers only wait while a checkpoint restarts the log).
_BUSY_TIMEOUT_S = 5.0


class SqliteSnapshotReader:
    """Read a memory's call-start snapshot and search its turns in a SQLite store, read-only."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        # memory id -> (snapshot revision, parsed snapshot): a reader kept open for several call
        # starts reads the row again only when the memory's snapshot changed (any writer).
        self._parsed: dict[str, tuple[int, MemorySnapshot]] = {}

    @classmethod
    def open(cls, path: str | Path) -> SqliteSnapshotReader | None:
        """Open the SQLite file at ``path`` read-only, or return None when this reader cannot serve it.

        None means: no such regular file, not a SQLite database, or one set up by a version with
        other tables (its stamp differs): open :class:`~convmem_graph.store.MemoryStore` instead.
        Nothing is created or changed either way.
        """
        file = Path(path)
        if not file.is_file():
            return None
        conn: sqlite3.Connection | None = None
        try:
            # mode=rw never creates the file (the URI form quotes any path), and query_only refuses
            # any change. Not mode=ro: a read-only connection cannot remove the WAL files it makes
            # when it is the last to close, which a store's connection does (as this one now does).
            conn = sqlite3.connect(file.resolve().as_uri() + "?mode=rw", uri=True, timeout=_BUSY_TIMEOUT_S)
            conn.execute("PRAGMA query_only = ON")
            stamp = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as exc:
            logger.debug("no read-only call start for %s: %s", file, exc)
            if conn is not None:
                conn.close()
            return None
        if stamp != SCHEMA_STAMP:
            logger.debug("no read-only call start for %s: schema stamp %s, not %s", file, stamp, SCHEMA_STAMP)
            conn.close()
            return None
        return cls(conn)

    def load_snapshot(self, memory_id: str) -> MemorySnapshot | None:
        """The memory's cached snapshot; None when it has none (unknown memory, or a change cleared it).

        Treat it as read-only: the next call returns the same object while the row is unchanged.
        """
        hit = self._parsed.get(memory_id)
        found = read_snapshot_row(self._conn, memory_id, hit[0] if hit is not None else None)
        if found is None:
            self._parsed.pop(memory_id, None)
            return None
        if found.data is None and hit is not None:
            return hit[1]  # the stamp read equals the kept one
        assert found.data is not None  # fetched unless the stamp equals a kept one (handled above)
        snapshot = MemorySnapshot.model_validate_json(found.data)
        if found.rev is not None and found.committed:
            self._parsed[memory_id] = (found.rev, snapshot)
        else:
            self._parsed.pop(memory_id, None)
        return snapshot

    def search_episodes(self, memory_id: str, query: str, *, limit: int = 32) -> EpisodeSearch:
        """Search the memory's stored turns for the words of ``query`` (as the store does)."""
        return search_sqlite(self._conn, memory_id, query, limit=limit)

    def close(self) -> None:
        """Close the file."""
        self._conn.close()

    def __enter__(self) -> SqliteSnapshotReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
