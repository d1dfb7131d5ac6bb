"""MemoryStore: the one repository of memories, messages, facts, variables, summaries and dead letters.

Same code on SQLite (default, one file) and PostgreSQL; where the two differ in what they must do,
the store asks its backend (:mod:`convmem_graph.store.sqlite`, :mod:`convmem_graph.store.postgres`).
Each public mutating method is one transaction, so a failure never leaves half a step written, and
every query filters by memory id. :class:`MemoryStore` combines the record kinds, each in a module
of its own behind the interface of :mod:`convmem_graph.store.base`: messages and the episodic index
(``message_records``), facts and audit (``fact_records``), variables (``variable_records``),
summaries and snapshots (``summary_records``), dead letters (``dead_letter_records``), on the
engine, sessions and transactions of :mod:`convmem_graph.store.core`. The memories themselves
(create, list, delete) are here.

Calls made on a :class:`StoreRun` (``with store.run(memory_id) as run:``, a lifecycle run) share
the run's connection; on PostgreSQL they are parts of the run's one transaction instead, which
holds the memory's ``pg_advisory_xact_lock``. Which it is follows from the object a call is made
on, never from per-thread state.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Connection,
    Table,
    and_,
    delete,
    func,
    or_,
    select,
)

from convmem_graph._time import now_ms as _now
from convmem_graph.errors import ConvMemError, MemoryNotFoundError
from convmem_graph.models import (
    MemoryInfo,
)
from convmem_graph.store._optional import ensure_tables, present
from convmem_graph.store.core import Cursors, check_memory_id
from convmem_graph.store.dead_letter_records import DeadLetterRecords
from convmem_graph.store.engine import (
    chunked,
)
from convmem_graph.store.fact_records import FactRecords
from convmem_graph.store.locks import memory_lock as _memory_lock
from convmem_graph.store.message_records import MessageRecords
from convmem_graph.store.registry import MEMORY_TABLES, MemoryTable
from convmem_graph.store.schema import (
    fragments,
    memories,
    messages,
)
from convmem_graph.store.summary_records import SummaryRecords
from convmem_graph.store.variable_records import VariableRecords

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from convmem_graph.store.base import Store

__all__ = ["Cursors", "MemoryStore", "StoreRun"]

logger = logging.getLogger(__name__)


def _registered_column(table: Table) -> str:
    """The column naming the memory in a registered table."""
    return next(e.column for e in MEMORY_TABLES if e.table is table)


class MemoryStore(MessageRecords, FactRecords, VariableRecords, SummaryRecords, DeadLetterRecords):
    """Repository of memories on SQLite or PostgreSQL (SQLAlchemy 2 Core).

    Example:
        >>> from convmem_graph.models import Message
        >>> store = MemoryStore.from_url(":memory:")
        >>> store.add_messages("mem_1", [Message(id="m1", role="user", content="I like tea",
        ...     channel="im", source="message", timestamp_ms=1_767_268_800_000)])
        ['m1']
        >>> store.count_messages("mem_1")
        1
        >>> store.close()
    """

    # -- memories -------------------------------------------------------------------------------
    def ensure_memory(self, memory_id: str, description: str = "") -> MemoryInfo:
        """Create the memory if it does not exist yet, and return it."""
        check_memory_id(memory_id)
        with self._write(memory_id) as conn:
            self._ensure(conn, memory_id, _now(), description)
        return self.get_memory(memory_id)

    def create_memory(self, memory_id: str | None = None, description: str = "") -> MemoryInfo:
        """Create a new memory (with a generated id when none is given).

        Raises:
            ConvMemError: If a memory with this id already exists.
        """
        memory_id = check_memory_id(memory_id) if memory_id is not None else f"mem_{secrets.token_hex(8)}"
        with self._write(memory_id) as conn:
            if not self._ensure(conn, memory_id, _now(), description):
                raise ConvMemError(f"memory {memory_id!r} already exists")
        return self.get_memory(memory_id)

    def get_memory(self, memory_id: str) -> MemoryInfo:
        """Return a memory with its message count and active fragment count.

        Raises:
            MemoryNotFoundError: If the memory does not exist.
        """
        check_memory_id(memory_id)
        with self._read() as conn:
            row = conn.execute(select(memories).where(memories.c.memory_id == memory_id)).first()
            if row is None:
                raise MemoryNotFoundError(f"memory {memory_id!r} not found")
            counts = self._counts(conn, [memory_id])
        return self._info(row, counts)

    def list_memories(self, *, limit: int = 100, offset: int = 0) -> list[MemoryInfo]:
        """List memories, oldest first, with their counters."""
        stmt = (
            select(memories).order_by(memories.c.created_at, memories.c.memory_id).limit(limit).offset(offset)
        )
        with self._read() as conn:
            rows = list(conn.execute(stmt))
            counts = self._counts(conn, [r.memory_id for r in rows])
        return [self._info(r, counts) for r in rows]

    @staticmethod
    def _counts(conn: Connection, ids: Sequence[str]) -> dict[tuple[str, str], int]:
        out: dict[tuple[str, str], int] = {}
        for part in chunked(ids):
            msg_stmt = (
                select(messages.c.memory_id, func.count())
                .where(messages.c.memory_id.in_(part))
                .group_by(messages.c.memory_id)
            )
            for mid, n in conn.execute(msg_stmt):
                out[(mid, "messages")] = int(n)
            frag_stmt = (
                select(fragments.c.memory_id, func.count())
                .where(fragments.c.memory_id.in_(part), fragments.c.status == "active")
                .group_by(fragments.c.memory_id)
            )
            for mid, n in conn.execute(frag_stmt):
                out[(mid, "fragments")] = int(n)
        return out

    @staticmethod
    def _info(row: Any, counts: dict[tuple[str, str], int]) -> MemoryInfo:
        return MemoryInfo(
            memory_id=row.memory_id,
            description=row.description,
            created_at=row.created_at,
            updated_at=row.updated_at,
            message_count=counts.get((row.memory_id, "messages"), 0),
            fragment_count=counts.get((row.memory_id, "fragments"), 0),
        )

    def ensure_tables(self, *tables: Table) -> None:
        """Make a feature's optional tables before it reads or writes them (SQLite, see ``store._optional``).

        What a feature's entry point calls (the server's inbox, Bailian's stores): a read of the
        catalog when they exist, one write transaction when one is missing. Nothing on PostgreSQL,
        whose migrations made them.
        """
        with self._read() as conn:
            if all(present(conn, table) for table in tables):
                return
        with self.schema_transaction() as conn:
            ensure_tables(conn, *tables)

    def delete_memory(self, memory_id: str, *, checkpointer: BaseCheckpointSaver[Any] | None = None) -> bool:
        """Delete every row of a memory in every store table, and its checkpoints.

        Args:
            memory_id: The memory (also the LangGraph thread id).
            checkpointer: When given, ``delete_thread(memory_id)`` is called after the store commit.

        Returns:
            True if the store held anything of this memory.
        """
        if not isinstance(memory_id, str) or not memory_id:
            raise ValueError("memory_id must be a non-empty string")
        # Not the identifier rule: ids stored by older versions (300 characters, NUL) must be deletable.
        deleted = 0
        with self.excluding_runs(memory_id) as held:
            with self._write(memory_id) as conn:
                with self._backend.deleting(conn):
                    # The episodic index first: its rows are found through the messages.
                    self._backend.episodes.remove_matching(conn, memory_id)
                    for entry in MEMORY_TABLES:
                        deleted += self._delete_rows(conn, entry, memory_id)
                # This session, and this thread's run of the memory (the lock is re-entrant, and
                # yields the run), must insert the memory's row again before writing to it.
                for scope in (self._scope, getattr(held, "_scope", None)):
                    if scope is not None:
                        scope.ensured.discard(memory_id)
                        if scope.run_row == memory_id:
                            scope.run_row = None
        self._forget_in_process(memory_id)
        if checkpointer is not None:
            checkpointer.delete_thread(memory_id)
        logger.info("deleted memory %r (%d rows)", memory_id, deleted)
        return deleted > 0

    def excluding_runs(self, memory_id: str) -> AbstractContextManager[Any]:
        """Hold a memory against its runs: a write made inside never lands between a run's transactions.

        What ``delete_memory`` and ``import_memory`` hold around their transaction on SQLite.

        On SQLite each call of a run is its own transaction: a delete between two of them left
        the run's next transaction to make the memory's row again and write the rest of the run
        into the "deleted" memory. Holding the lock a run holds (in-process, then the memory's
        lock file) makes a delete wait for the run, as PostgreSQL's delete waits for the run's
        ``pg_advisory_xact_lock``; a delete inside this thread's own run re-enters it and yields
        that run (whose cursor of ensured rows it resets). On PostgreSQL the writer's transaction
        takes the advisory lock itself: nothing here.

        Args:
            memory_id: The memory to hold.

        Returns:
            A context manager; on SQLite it yields the run this thread holds, if any.
        """
        if self._backend.locks_memories:
            return nullcontext()
        return _memory_lock(self._lock_scope, memory_id, hold=self._backend.hold_memory)

    @staticmethod
    def _delete_rows(conn: Connection, entry: MemoryTable, memory_id: str) -> int:
        """Delete one registered table's rows of a memory.

        The open's migrations made every table but the optional ones (SQLite,
        :mod:`~convmem_graph.store._optional`): one not made yet holds no row. The check is in
        the delete's write transaction, so no writer can make it and fill it in between.
        """
        table = entry.table
        if not present(conn, table):
            return 0
        where = table.c[entry.column] == memory_id
        if entry.fallback is not None:
            # Rows of an older version, from before the table had its memory column.
            where = or_(where, and_(table.c[entry.column].is_(None), table.c[entry.fallback] == memory_id))
        if entry.via is not None and present(conn, entry.via[1]):
            column, parent, key = entry.via
            owned = select(parent.c[key]).where(parent.c[_registered_column(parent)] == memory_id)
            where = or_(where, table.c[column].in_(owned))
        return int(conn.execute(delete(table).where(where)).rowcount or 0)


class StoreRun(MemoryStore):
    """The store bound to one session: its calls share the session's connection.

    Made by :meth:`MemoryStore.session` and :meth:`MemoryStore.run`, never directly; it has every
    method of :class:`MemoryStore` (the record kinds, ``transaction``, ``read``), bound to the
    session's connection and, while a run's or ``transaction()``'s transaction is open on it,
    to that transaction. It is valid until its block ends, in the thread that opened it.

    Example:
        >>> from convmem_graph.models import Message
        >>> store = MemoryStore.from_url(":memory:")
        >>> with store.run("mem_1") as run:
        ...     run.add_messages("mem_1", [Message(id="m1", role="user", content="I like tea",
        ...         channel="im", source="message", timestamp_ms=1_767_268_800_000)])
        ...     run.count_messages("mem_1")
        ['m1']
        1
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a StoreRun is made by MemoryStore.session() or MemoryStore.run()")

    def __repr__(self) -> str:
        return f"StoreRun({self.safe_url!r})"


MemoryStore._view_type = StoreRun

if TYPE_CHECKING:
    # Not run: mypy checks here that MemoryStore implements every record kind of store/base.py.
    _IMPLEMENTS: type[Store] = MemoryStore
