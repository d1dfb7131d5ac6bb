"""Pruning: keep only the newest checkpoints of a thread (a memory), so checkpoint storage stays bounded.

LangGraph savers can delete a whole thread but keep every checkpoint otherwise; a memory runs the
lifecycle once per batch, forever. ``prune_checkpoints`` deletes all but the newest ``keep``
checkpoints of each namespace of a thread, with their pending writes and (PostgreSQL, in-memory)
the channel blobs no kept checkpoint references. The newest kept checkpoint is the one a resumed run
starts from, and its pending writes stay, so pruning never loses a resumable run.

Threads whose graph uses a ``DeltaChannel`` are refused: such channels rebuild their value from
older checkpoints.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from convmem_graph.errors import DeltaChannelPruneError

if TYPE_CHECKING:
    from convmem_graph.store.write_gate import WriteGate

__all__ = ["prune_checkpoints", "supports_pruning"]

logger = logging.getLogger(__name__)

_DELTA_MARKERS = ("counters_since_delta_snapshot", "delta_writes_versioned")
_CHUNK = 500


def supports_pruning(saver: BaseCheckpointSaver[Any]) -> bool:
    """Whether :func:`prune_checkpoints` can prune this saver (SQLite, PostgreSQL, in-memory).

    Example:
        >>> supports_pruning(InMemorySaver())
        True
    """
    return isinstance(saver, SqliteSaver | InMemorySaver) or _is_postgres(saver)


def prune_checkpoints(saver: BaseCheckpointSaver[Any], thread_id: str, keep: int = 3) -> int:
    """Delete all but the newest ``keep`` checkpoints of a thread, in each checkpoint namespace.

    Supports :class:`SqliteSaver`, ``PostgresSaver`` and :class:`InMemorySaver`.

    Args:
        saver: The checkpointer.
        thread_id: The thread (in convmem_graph, the memory id).
        keep: How many of the newest checkpoints to keep per namespace (at least 1).

    Returns:
        The number of checkpoints deleted.

    Raises:
        ValueError: If ``keep`` is below 1.
        TypeError: If the saver type is not supported.
        DeltaChannelPruneError: If the thread uses a ``DeltaChannel`` (a ``NotImplementedError``).

    Example:
        >>> from langgraph.checkpoint.memory import InMemorySaver
        >>> prune_checkpoints(InMemorySaver(), "mem_1", keep=3)
        0
    """
    if keep < 1:
        raise ValueError("keep must be at least 1 (use delete_thread to drop every checkpoint)")
    thread_id = str(thread_id)
    if isinstance(saver, SqliteSaver):
        deleted = _prune_sqlite(saver, thread_id, keep)
    elif isinstance(saver, InMemorySaver):
        deleted = _prune_memory(saver, thread_id, keep)
    elif _is_postgres(saver):
        deleted = _prune_postgres(saver, thread_id, keep)
    else:
        raise TypeError(f"cannot prune checkpoints of {type(saver).__name__}")
    if deleted:
        logger.debug("pruned %d checkpoints of thread %r (kept %d)", deleted, thread_id, keep)
    return deleted


def _doomed(rows: Iterable[tuple[str, str]], keep: int) -> dict[str, list[str]]:
    """Group (namespace, checkpoint id) pairs and return the ids beyond the newest ``keep`` per namespace."""
    by_ns: dict[str, list[str]] = {}
    for ns, cid in rows:
        by_ns.setdefault(ns, []).append(cid)
    # Checkpoint ids are UUIDv6: their order is their creation order (what get_tuple calls latest).
    return {ns: sorted(ids, reverse=True)[keep:] for ns, ids in by_ns.items() if len(ids) > keep}


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _refuse_delta(thread_id: str, metadata: Iterable[Any]) -> None:
    for meta in metadata:
        text = meta.decode("utf-8", "ignore") if isinstance(meta, bytes) else str(meta)
        if any(marker in text for marker in _DELTA_MARKERS):
            raise DeltaChannelPruneError(thread_id)


# -- SQLite -------------------------------------------------------------------------------------
def _prune_sqlite(saver: SqliteSaver, thread_id: str, keep: int) -> int:
    gate: WriteGate | None = getattr(saver, "gate", None)
    with saver.lock:
        saver.setup()
        count = saver.conn.execute(
            "SELECT count(DISTINCT checkpoint_id) FROM checkpoints WHERE thread_id = ?", (thread_id,)
        ).fetchone()[0]
    if count <= keep:
        return 0  # the common case: nothing to cut, so no write lock is taken
    with gate.hold() if gate is not None else nullcontext(), saver.lock:
        conn = saver.conn
        cur = conn.cursor()
        try:
            if not conn.in_transaction:
                # Take the write lock first: the ids read below are the ids deleted.
                cur.execute("BEGIN IMMEDIATE")
            deleted = prune_sqlite_in(cur, thread_id, keep)
            conn.commit()
            return deleted
        except BaseException:
            conn.rollback()
            raise
        finally:
            cur.close()


def prune_sqlite_in(cur: sqlite3.Cursor, thread_id: str, keep: int) -> int:
    """:func:`prune_checkpoints`' statements on a SQLite saver's cursor, in its open write transaction.

    The caller holds the write lock (``BEGIN IMMEDIATE``, or a write already made in the
    transaction), so the ids read here are the ids deleted, and commits (or rolls back).
    Returns the number of checkpoints deleted.
    """
    rows = cur.execute(
        "SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread_id = ?", (thread_id,)
    ).fetchall()
    doomed = _doomed(rows, keep)
    if doomed:
        newest = cur.execute(
            "SELECT metadata FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id DESC LIMIT 1",
            (thread_id,),
        ).fetchall()
        _refuse_delta(thread_id, (r[0] for r in newest))
    deleted = 0
    for ns, ids in doomed.items():
        for part in _chunks(ids):
            marks = ",".join("?" * len(part))
            params = (thread_id, ns, *part)
            cur.execute(
                "DELETE FROM writes WHERE thread_id = ? AND checkpoint_ns = ? "
                f"AND checkpoint_id IN ({marks})",
                params,
            )
            cur.execute(
                "DELETE FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
                f"AND checkpoint_id IN ({marks})",
                params,
            )
            deleted += cur.rowcount
            cur.execute(
                "UPDATE checkpoints SET parent_checkpoint_id = NULL WHERE thread_id = ? "
                f"AND checkpoint_ns = ? AND parent_checkpoint_id IN ({marks})",
                params,
            )
    return deleted


# -- in memory ----------------------------------------------------------------------------------
def _versions(saver: InMemorySaver, blob: tuple[str, bytes], ns: str) -> set[tuple[str, str, Any]]:
    checkpoint = saver.serde.loads_typed(blob)
    return {(ns, ch, ver) for ch, ver in checkpoint.get("channel_versions", {}).items()}


def _prune_memory(saver: InMemorySaver, thread_id: str, keep: int) -> int:
    namespaces = saver.storage.get(thread_id)
    if not namespaces:
        return 0
    rows = [(ns, cid) for ns, cps in namespaces.items() for cid in cps]
    doomed = _doomed(rows, keep)
    if doomed:
        newest_ns, newest_id = max(rows, key=lambda r: r[1])
        meta = namespaces[newest_ns][newest_id][1]
        _refuse_delta(thread_id, [saver.serde.loads_typed(meta)])
    deleted = 0
    for ns, ids in doomed.items():
        cps = namespaces[ns]
        freed: set[tuple[str, str, Any]] = set()
        gone = set(ids)
        for cid in ids:
            checkpoint, _meta, _parent = cps.pop(cid)
            freed |= _versions(saver, checkpoint, ns)
            saver.writes.pop((thread_id, ns, cid), None)
            deleted += 1
        referenced: set[tuple[str, str, Any]] = set()
        for cid, (checkpoint, meta, parent) in list(cps.items()):
            referenced |= _versions(saver, checkpoint, ns)
            if parent in gone:
                cps[cid] = (checkpoint, meta, None)
        for _ns, ch, ver in freed - referenced:
            saver.blobs.pop((thread_id, ns, ch, ver), None)
    return deleted


# -- PostgreSQL ---------------------------------------------------------------------------------
def _is_postgres(saver: BaseCheckpointSaver[Any]) -> bool:
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError:  # pragma: no cover - depends on the installed extras
        return False
    return isinstance(saver, PostgresSaver)


# One statement: rank the thread's checkpoints per namespace (ids are UUIDv6: their text order is
# their creation order), refuse when there is something to prune and the newest checkpoint belongs
# to a DeltaChannel graph (nothing is deleted then; as on SQLite), and otherwise remove those past
# ``keep`` with their pending writes and the blobs no kept checkpoint of their namespace
# references, unlinking kept children of removed parents.
# Every part reads the same snapshot, so "kept" is "not doomed", computed from it.
_PG_PRUNE_SQL = """
WITH ranked AS (
    SELECT checkpoint_ns AS ns, checkpoint_id AS id,
           row_number() OVER (PARTITION BY checkpoint_ns ORDER BY checkpoint_id DESC) AS rank,
           checkpoint_id = max(checkpoint_id) OVER () AS newest,
           metadata::text AS meta
    FROM checkpoints WHERE thread_id = %(thread)s
),
refused AS (
    SELECT 1 FROM ranked WHERE newest AND (meta LIKE %(marker_a)s OR meta LIKE %(marker_b)s)
      AND EXISTS (SELECT 1 FROM ranked WHERE rank > %(keep)s)
),
doomed AS (
    SELECT ns, id FROM ranked WHERE rank > %(keep)s AND NOT EXISTS (SELECT 1 FROM refused)
),
gone_writes AS (
    DELETE FROM checkpoint_writes w USING doomed d
    WHERE w.thread_id = %(thread)s AND w.checkpoint_ns = d.ns AND w.checkpoint_id = d.id
),
gone AS (
    DELETE FROM checkpoints c USING doomed d
    WHERE c.thread_id = %(thread)s AND c.checkpoint_ns = d.ns AND c.checkpoint_id = d.id
    RETURNING c.checkpoint_ns AS ns, c.checkpoint -> 'channel_versions' AS versions
),
orphans AS (
    UPDATE checkpoints c SET parent_checkpoint_id = NULL FROM doomed d
    WHERE c.thread_id = %(thread)s AND c.checkpoint_ns = d.ns AND c.parent_checkpoint_id = d.id
      AND NOT EXISTS (
          SELECT 1 FROM doomed x WHERE x.ns = c.checkpoint_ns AND x.id = c.checkpoint_id
      )
),
freed AS (
    SELECT DISTINCT g.ns, v.key AS channel, v.value AS version
    FROM gone g CROSS JOIN LATERAL jsonb_each_text(g.versions) AS v
),
kept AS (
    SELECT DISTINCT c.checkpoint_ns AS ns, v.key AS channel, v.value AS version
    FROM checkpoints c CROSS JOIN LATERAL jsonb_each_text(c.checkpoint -> 'channel_versions') AS v
    WHERE c.thread_id = %(thread)s
      AND NOT EXISTS (
          SELECT 1 FROM doomed x WHERE x.ns = c.checkpoint_ns AND x.id = c.checkpoint_id
      )
),
gone_blobs AS (
    DELETE FROM checkpoint_blobs b USING freed f
    WHERE b.thread_id = %(thread)s AND b.checkpoint_ns = f.ns AND b.channel = f.channel
      AND b.version = f.version
      AND NOT EXISTS (
          SELECT 1 FROM kept k WHERE k.ns = f.ns AND k.channel = f.channel AND k.version = f.version
      )
)
SELECT (SELECT count(*) FROM doomed) AS deleted, EXISTS (SELECT 1 FROM refused) AS refused
"""


def _prune_postgres(saver: Any, thread_id: str, keep: int) -> int:
    # One round trip. Inside a lifecycle run the saver's cursor is on the run's transaction;
    # elsewhere the statement is atomic by itself in autocommit.
    params = {
        "thread": thread_id,
        "keep": keep,
        "marker_a": f"%{_DELTA_MARKERS[0]}%",
        "marker_b": f"%{_DELTA_MARKERS[1]}%",
    }
    with saver._cursor() as cur:
        if saver.pipe:
            # A statement must not be absorbed by what was queued in pipeline mode before it.
            saver.pipe.sync()
        row = cur.execute(_PG_PRUNE_SQL, params).fetchone()
    if row is not None and row["refused"]:
        raise DeltaChannelPruneError(thread_id)
    return int(row["deleted"]) if row is not None else 0
