"""The durable inbox of ``convmem serve``: every accepted delivery is a row before the 200 goes out.

Webhook deliveries and finished proxy turns are written here in one committed transaction, then a
worker (:mod:`convmem_graph.server.worker`) runs the lifecycle on them off the request path and
marks them done. A crash between the two leaves the row ``pending``; the next start picks it up,
and re-reading a delivery changes nothing (message ids come from the vendor's own keys). A retry of
a delivery has the same ``delivery_key`` and is not stored twice.

The table ``cm_serve_tasks`` remembers, per TRTC ``TaskId``, the memory id and the two speakers once
they are known: a bot sentence or a 902 of a task maps to the memory of the task's human.

Example:
    >>> from convmem_graph.store import MemoryStore
    >>> inbox = Inbox(MemoryStore.from_url("sqlite://"))
    >>> inbox.add("trtc", "k1", '{"EventType": 903}', task_id="t1", event=903)
    True
    >>> inbox.add("trtc", "k1", '{"EventType": 903}', task_id="t1", event=903)
    False
    >>> [(d.vendor, d.task_id, d.status) for d in inbox.pending()]
    [('trtc', 't1', 'pending')]
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    Select,
    func,
    select,
    update,
)

from convmem_graph._time import now_ms
from convmem_graph.store import MemoryStore
from convmem_graph.store.engine import execute_upsert, insert_ignore
from convmem_graph.store.registry import inbox_table, tasks_table

__all__ = ["Delivery", "Inbox", "TaskInfo", "inbox_table", "tasks_table"]

# The definitions live in the store's registry, which deletes a memory's rows from them.


# The columns of a Delivery, in its fields' order.
_DELIVERIES = select(
    *inbox_table.c[
        "seq", "vendor", "received_ms", "event", "task_id", "memory_id", "status", "body", "round_id"
    ]
)


@dataclass(frozen=True, slots=True)
class Delivery:
    """One stored delivery (a webhook body or a proxy turn)."""

    seq: int
    vendor: str
    received_ms: int
    event: int | None
    task_id: str | None
    memory_id: str | None
    status: str
    body: str
    round_id: str | None = None


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """What is known about one TRTC task."""

    task_id: str
    memory_id: str | None = None
    human_id: str | None = None
    bot_id: str | None = None


class Inbox:
    """Durable delivery rows and TRTC task routing, in the memory store's database."""

    def __init__(self, store: MemoryStore) -> None:
        # The tables are the store's registry's (upgraded by its migrations when it opened);
        # optional ones, which a SQLite file gets here, before the first read of them.
        self.store = store
        store.ensure_tables(inbox_table, tasks_table)
        self._lock = threading.Lock()
        self._pending = self._count_pending()

    # -- deliveries -----------------------------------------------------------------------
    def add(
        self,
        vendor: str,
        delivery_key: str,
        body: str,
        *,
        event: int | None = None,
        task_id: str | None = None,
        memory_id: str | None = None,
        status: str = "pending",
        note: str | None = None,
        round_id: str | None = None,
    ) -> bool:
        """Store one delivery durably; ``False`` when a delivery with the same key is already stored."""
        row = {
            "round_id": round_id,
            "vendor": vendor,
            "delivery_key": delivery_key,
            "received_ms": now_ms(),
            "event": event,
            "task_id": task_id,
            "memory_id": memory_id,
            "status": status,
            "note": note,
            "body": body,
        }
        with self.store.transaction() as conn:
            added = conn.execute(insert_ignore(self.store.dialect, inbox_table), row).rowcount == 1
        if added and status == "pending":
            with self._lock:
                self._pending += 1
        return added

    def pending(self, limit: int = 500) -> list[Delivery]:
        """Return the oldest pending deliveries, in arrival order."""
        query = _DELIVERIES.where(inbox_table.c.status == "pending").order_by(inbox_table.c.seq).limit(limit)
        return self._deliveries(query)

    def get(self, seqs: Sequence[int]) -> list[Delivery]:
        """Return the deliveries with these seqs, in seq order."""
        query = _DELIVERIES.where(inbox_table.c.seq.in_(list(seqs))).order_by(inbox_table.c.seq)
        return self._deliveries(query)

    def waiting(self, task_id: str) -> list[Delivery]:
        """Return the deliveries of a TRTC task parked until its memory id is known, in seq order."""
        query = _DELIVERIES.where(
            inbox_table.c.task_id == task_id, inbox_table.c.status == "waiting"
        ).order_by(inbox_table.c.seq)
        return self._deliveries(query)

    def ended_tasks(self, task_ids: Collection[str]) -> set[str]:
        """Return those of ``task_ids`` whose 902 (the call ended) was already processed.

        A delivery of such a task that comes later (a late sentence, a 905, a retry with new words)
        belongs to a session that has ended: it is ingested as the 902's batch was.
        """
        if not task_ids:
            return set()
        # The status is checked here, not in SQL: a status filter would lead SQLite to the status
        # index (every done row) instead of the task's few rows.
        query = select(inbox_table.c.task_id, inbox_table.c.status).where(
            inbox_table.c.task_id.in_(sorted(task_ids)),
            inbox_table.c.vendor == "trtc",
            inbox_table.c.event == 902,
        )
        with self.store.read() as conn:
            return {str(task_id) for task_id, status in conn.execute(query) if status == "done"}

    def _deliveries(self, query: Select[Any]) -> list[Delivery]:
        with self.store.read() as conn:
            return [Delivery(*row) for row in conn.execute(query)]

    def finish(
        self,
        seqs: Sequence[int],
        *,
        memory_id: str | None = None,
        status: str = "done",
        note: str | None = None,
    ) -> None:
        """Mark deliveries processed (``done``), given up on (``failed``, with a note) or ``waiting``.

        ``waiting`` parks TRTC deliveries whose memory id is not known yet (see :meth:`waiting`).
        """
        if not seqs:
            return
        values: dict[str, object] = {"status": status, "note": note}
        if memory_id is not None:
            values["memory_id"] = memory_id
        with self.store.transaction() as conn:
            conn.execute(
                update(inbox_table)
                .where(inbox_table.c.seq.in_(list(seqs)), inbox_table.c.status.in_(("pending", "waiting")))
                .values(**values)
            )
        self.refresh_count()

    @property
    def pending_count(self) -> int:
        """Deliveries stored and not yet processed (kept in step by this process)."""
        with self._lock:
            return self._pending

    def refresh_count(self) -> int:
        """Re-read the number of pending deliveries from the database and return it."""
        count = self._count_pending()
        with self._lock:
            self._pending = count
        return count

    def _count_pending(self) -> int:
        query = select(func.count()).select_from(inbox_table).where(inbox_table.c.status == "pending")
        with self.store.read() as conn:
            return int(conn.execute(query).scalar_one())

    def counts(self) -> dict[str, int]:
        """Return the number of deliveries per status."""
        query = select(inbox_table.c.status, func.count()).group_by(inbox_table.c.status)
        with self.store.read() as conn:
            return {status: int(n) for status, n in conn.execute(query)}

    # -- TRTC tasks -----------------------------------------------------------------------
    def task(self, task_id: str) -> TaskInfo | None:
        """Return what is known about a TRTC task."""
        query = select(*tasks_table.c["task_id", "memory_id", "human_id", "bot_id"]).where(
            tasks_table.c.task_id == task_id
        )
        with self.store.read() as conn:
            row = conn.execute(query).first()
        return TaskInfo(*row) if row is not None else None

    def save_task(self, info: TaskInfo) -> None:
        """Insert or update one task's routing."""
        row = {
            "task_id": info.task_id,
            "memory_id": info.memory_id,
            "human_id": info.human_id,
            "bot_id": info.bot_id,
            "updated_ms": now_ms(),
        }
        with self.store.transaction() as conn:
            execute_upsert(conn, tasks_table, ("task_id",), row)

    def register_task(
        self, task_id: str, memory_id: str, *, human_id: str | None = None, bot_id: str | None = None
    ) -> None:
        """Record that a TRTC task (started by us) belongs to ``memory_id``.

        ``human_id`` and ``bot_id`` are the call's ``AgentConfig.TargetUserId`` and
        ``AgentConfig.UserId``: with them every callback's speaker is known from the first one.
        """
        known = self.task(task_id) or TaskInfo(task_id)
        self.save_task(TaskInfo(task_id, memory_id, human_id or known.human_id, bot_id or known.bot_id))
        with self.store.transaction() as conn:
            # Deliveries parked for want of a memory id can go now.
            conn.execute(
                update(inbox_table)
                .where(inbox_table.c.task_id == task_id, inbox_table.c.status == "waiting")
                .values(status="pending", note=None)
            )
        self.refresh_count()
