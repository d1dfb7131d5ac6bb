"""SQLite checkpointer factory (the default: the same file as the store)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.sqlite import SqliteSaver

from convmem_graph.store.urls import sqlite_path
from convmem_graph.store.write_gate import WriteGate, write_gate

__all__ = ["GatedSqliteSaver", "PruneWithPut", "sqlite_checkpointer"]

logger = logging.getLogger(__name__)

_BUSY_TIMEOUT_S = 30.0


@dataclass
class PruneWithPut:
    """A prune asked of the next checkpoint a :class:`GatedSqliteSaver` writes for ``thread_id``.

    ``done`` tells whether a write took it (then ``deleted`` checkpoints went in its transaction);
    otherwise the caller prunes on its own, as before.
    """

    saver: GatedSqliteSaver
    thread_id: str
    keep: int
    done: bool = False
    deleted: int = 0


#: The prune the current run asks of its checkpoint write (see :meth:`GatedSqliteSaver.pruning`).
_PRUNE: ContextVar[PruneWithPut | None] = ContextVar("convmem_prune_with_put", default=None)
#: Set by :meth:`GatedSqliteSaver.put` while its own write is open: the cursor prunes before the commit.
_PUTTING: ContextVar[PruneWithPut | None] = ContextVar("convmem_putting", default=None)


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
                if transaction:
                    self._prune_before_commit(cur)
            return
        with self.gate.hold(), super().cursor(transaction) as cur:
            yield cur
            self._prune_before_commit(cur)
        with self.lock:
            self.gate.committed(self.conn)

    @contextmanager
    def pruning(self, thread_id: str, keep: int) -> Iterator[PruneWithPut]:
        """Within the block, the checkpoint written for ``thread_id`` also prunes it to ``keep``.

        The prune's statements run in the checkpoint's own write transaction, after its insert:
        one transaction, one commit and one pass of the write gate less than pruning after the
        run, and the thread never holds more than ``keep`` checkpoints between the two (a kill
        between them used to leave one more until the next run). With durability ``"exit"`` a run
        writes one checkpoint, its end state. The yielded request says whether a write took it.
        """
        request = PruneWithPut(self, thread_id, keep)
        token = _PRUNE.set(request)
        try:
            yield request
        finally:
            _PRUNE.reset(token)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Save a checkpoint; a prune asked for its thread (see :meth:`pruning`) goes with it."""
        request = _PRUNE.get()
        configurable: dict[str, Any] = config.get("configurable") or {}
        if (
            request is None
            or request.saver is not self
            or str(configurable.get("thread_id")) != request.thread_id
            or configurable.get("checkpoint_ns")  # a subgraph's checkpoint: the root's prunes
        ):
            return super().put(config, checkpoint, metadata, new_versions)
        token = _PUTTING.set(request)
        try:
            return super().put(config, checkpoint, metadata, new_versions)
        finally:
            _PUTTING.reset(token)

    def _prune_before_commit(self, cur: sqlite3.Cursor) -> None:
        """Run the prune :meth:`put` carries, in its transaction; a failure costs only the prune."""
        request = _PUTTING.get()
        if request is None:
            return
        _PUTTING.set(None)  # once per put, whatever else its transaction does
        from convmem_graph.checkpoints.prune import prune_sqlite_in

        # A savepoint: a failed prune (a DeltaChannel thread, a database error) is undone alone,
        # and the checkpoint still commits, as pruning after the run never failed a run.
        cur.execute("SAVEPOINT convmem_prune")
        try:
            request.deleted = prune_sqlite_in(cur, request.thread_id, request.keep)
        except Exception:  # noqa: BLE001 - the run's checkpoint must commit; pruning is housekeeping
            cur.execute("ROLLBACK TO SAVEPOINT convmem_prune")
            logger.warning("pruning checkpoints of thread %r failed", request.thread_id, exc_info=True)
        cur.execute("RELEASE SAVEPOINT convmem_prune")
        request.done = True


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
