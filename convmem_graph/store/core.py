"""StoreCore: the memory store's engine, backend, sessions, runs and transactions.

Every record kind (``store/*_records.py``) makes its calls through :meth:`StoreCore._write` and
:meth:`StoreCore._read`; which connection and transaction those are follows from the object the
call is made on (the store itself, or a :class:`~convmem_graph.store.StoreRun` of it), never
from per-thread state. The interface each kind implements is in :mod:`convmem_graph.store.base`.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, ClassVar, NamedTuple, Self, TypeVar, cast

from sqlalchemy import (
    Connection,
    Engine,
)
from sqlalchemy.engine import make_url
from sqlalchemy.pool import PoolProxiedConnection

from convmem_graph._ids import check_identifier
from convmem_graph._text_caches import forget_texts
from convmem_graph.errors import ConvMemError
from convmem_graph.models import (
    MemorySnapshot,
)
from convmem_graph.store._driver import driver_of, driver_read, execute_rows
from convmem_graph.store._row_patch import PG_ROW_PATCH, RowPatch
from convmem_graph.store._snapshot_json import SnapshotJson
from convmem_graph.store._summary_facts import StrongestRows
from convmem_graph.store._vectors import forget_matrices
from convmem_graph.store.engine import (
    POOL_DEFAULTS,
    WRITE_OPTION,
    PoolSettings,
    create_store_engine,
    end_read,
)
from convmem_graph.store.locks import held_here
from convmem_graph.store.locks import memory_lock as _memory_lock
from convmem_graph.store.migrations import set_up_schema
from convmem_graph.store.postgres import PostgresBackend
from convmem_graph.store.session import RunScope
from convmem_graph.store.sqlite import SqliteBackend
from convmem_graph.store.urls import is_memory_sqlite, mask_url, normalize_url

__all__ = ["Cursors", "StoreCore"]

# The store logs under one name, as before its record kinds had modules of their own
# (``convmem ingest`` and log configurations name it).
logger = logging.getLogger("convmem_graph.store.repository")

_T = TypeVar("_T")
#: Kinds of the run's read cache (``MemoryStore._cached``).
CACHED_KINDS = frozenset({"specs", "summary", "variables"})
#: What a write that leaves the memory's messages as they are keeps besides: the rows a run's insert
#: stored past the memory's previous newest seq (see ``messages_after``).
SAME_MESSAGES = frozenset({"tail"})
#: The run's cache kind saying the memory has no fact yet (see ``MemoryStore.holds_no_facts``).
NO_FACTS = "no_facts"
#: What :meth:`MemoryStore._recall` answers for a kind the run's cache does not hold.
UNKNOWN: Any = object()


class Cursors(NamedTuple):
    """Where processing of a memory stands."""

    max_seq: int
    extracted_seq: int
    summarized_seq: int
    #: Facts changed since variables were last inferred.
    facts_dirty: bool


#: Parsed call-start snapshots kept in process (least recently used are dropped).
PARSED_SNAPSHOTS = 256


def check_memory_id(memory_id: str) -> str:
    # One validation of identifiers everywhere (convmem_graph._ids); raises a ValueError subclass.
    return check_identifier(memory_id, "memory_id")


class StoreCore:
    """What every record kind of the store stands on: the engine, the backend and the transactions.

    Opening (migrations), sessions and runs (:meth:`session`, :meth:`run`), the write and read
    scopes each call uses, the run's read cache, and the processing cursors every kind moves. The
    record kinds (``store/*_records.py``) subclass it; :class:`~convmem_graph.store.MemoryStore`
    combines them.
    """

    #: The view type :meth:`_bind` makes (``StoreRun``, a subclass of the store, set where it is
    #: defined: this module cannot import it without an import cycle).
    _view_type: ClassVar[type[StoreCore]]

    url: str
    safe_url: str
    dialect: str
    engine: Engine
    #: The session this object's calls go through: ``None`` on the store itself (each call opens
    #: its own connection and transaction), set on the :class:`StoreRun` views of it.
    _scope: RunScope | None = None
    #: Write transactions begun through this object (a view counts its own: see :meth:`write_count`).
    _writes: int = 0

    def __init__(
        self, url: str | None = None, *, echo: bool = False, pools: PoolSettings | None = None
    ) -> None:
        self.url = normalize_url(url)
        self.safe_url = mask_url(self.url)
        self.dialect = make_url(self.url).get_backend_name()
        if self.dialect not in ("sqlite", "postgresql"):
            raise ValueError(f"unsupported database {self.dialect!r}")
        #: PostgreSQL pool settings (arguments, never read from the environment here).
        self.pools = pools or POOL_DEFAULTS
        self.engine = create_store_engine(self.url, echo=echo, pools=self.pools)
        memory = is_memory_sqlite(self.url)
        # One shared connection backs an in-memory database: transactions must take turns.
        self._serial: AbstractContextManager[Any] = threading.RLock() if memory else nullcontext()
        self._lock_scope = f"memory:{id(self)}" if memory else self.url
        # memory id -> (snapshot revision or None, snapshot JSON, parsed snapshot): call starts skip
        # re-reading (by the revision, SQLite) and re-parsing (by the JSON) an unchanged row.
        self._parsed: OrderedDict[str, tuple[int | None, str | bytes, MemorySnapshot]] = OrderedDict()
        self._parsed_lock = threading.Lock()
        # The driver connection each thread's call start reads through (``call_start_reads``),
        # and the idle ones: taken out of the pool once (detached), so a call start pays no
        # checkout. Those of the process that opened them only (a forked child opens its own).
        self._pinned = threading.local()
        self._pins = self.dialect == "sqlite" and not memory
        self._spare: list[tuple[PoolProxiedConnection, sqlite3.Connection]] = []
        self._spare_pid = os.getpid()
        # Each memory's ranked summary fact rows, moved by the facts' revision (shared by the
        # store's run views).
        self._strongest = StrongestRows(PARSED_SNAPSHOTS)
        # Each memory's snapshot facts' JSON from its last save (``save_snapshot``).
        self._snapshot_json = SnapshotJson()
        # Where the two databases differ in what they must do: store/sqlite.py, store/postgres.py.
        self._backend: SqliteBackend | PostgresBackend = (
            SqliteBackend(self.url, memory=memory) if self.dialect == "sqlite" else PostgresBackend()
        )
        self._gate = self._backend.gate
        if self._backend.is_set_up(self.engine):
            logger.debug("memory store opened at %s (schema current)", self.safe_url)
            return
        with self._write() as conn:
            self._backend.begin_setup(conn)
            self._backend.set_up(conn, set_up_schema)
            self._backend.end_setup(conn)
        logger.debug("memory store opened at %s", self.safe_url)

    @classmethod
    def from_url(
        cls, url: str | None = None, *, echo: bool = False, pools: PoolSettings | None = None
    ) -> Self:
        """Open (and create if needed) the store at a database URL.

        Args:
            url: ``None`` for ``convmem.db`` in the current directory, a filesystem path, ``:memory:``,
                a ``sqlite:///`` URL or a ``postgresql://`` URL (psycopg 3 is used).
            echo: Log SQL statements.
            pools: PostgreSQL pool sizes (default :data:`~convmem_graph.store.engine.POOL_DEFAULTS`).
        """
        return cls(url, echo=echo, pools=pools)

    def __repr__(self) -> str:
        return f"MemoryStore({self.safe_url!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release every database connection of the store."""
        spare, self._spare = self._spare, []
        if self._spare_pid == os.getpid():
            for pooled, _ in spare:
                pooled.close()
        self.engine.dispose()

    def _forget_in_process(self, memory_id: str) -> None:
        """Drop what this process keeps of ``memory_id``'s texts: it was deleted, or turns were purged.

        The parsed snapshot and fact rows kept for call starts, the memory's cached vector
        matrices, and the memos of stored text (:mod:`convmem_graph._text_caches`, shared by every
        memory, so emptied whole). Other processes keep theirs until they read the memory again.
        """
        with self._parsed_lock:
            self._parsed.pop(memory_id, None)
        self._strongest.forget(memory_id)
        self._snapshot_json.forget(memory_id)
        forget_matrices(memory_id)
        forget_texts()

    @property
    def backend(self) -> SqliteBackend | PostgresBackend:
        """This database's policy: the statements and locks whose form differs by database.

        For reads a node shapes itself (``nodes/_extract_reads.py``): the node decides which rows
        it needs, the backend how to read them in the fewest round trips, inside :meth:`read`.
        """
        return self._backend

    # -- sessions, runs and transactions ----------------------------------------------------------
    @property
    def connection(self) -> Connection:
        """The connection of this session or run (inside a run's transaction on PostgreSQL, that one's).

        On a PostgreSQL run the run's held-back changes of its memory's row (see
        :mod:`convmem_graph.store._row_patch`) are sent first, so a statement of the caller's on it
        reads what the run's calls wrote.

        Raises:
            ConvMemError: On the store itself, which has none (each call opens its own).
        """
        scope = self._scope
        if scope is None:
            raise ConvMemError("the store itself has no connection; use store.session() or store.run()")
        if scope.pending and not scope.deferring:
            self._flush_rows(scope.conn)
        return scope.conn

    def _bind(self, scope: RunScope) -> Self:
        """This store as a :class:`StoreRun` whose calls go through ``scope`` (engine and caches shared)."""
        view = cast(Self, object.__new__(self._view_type))
        view.__dict__.update(self.__dict__)
        view._scope = scope
        return view

    @contextmanager
    def session(self) -> Iterator[Self]:
        """The store bound to one connection until the block ends.

        Every call made on the yielded :class:`StoreRun` still is its own statement or transaction;
        only the connection is kept, which saves a pool checkout per call (a lifecycle run makes
        dozens of calls). Calls on the store itself are not affected. A session of a session is
        the same session.

        Example:
            >>> from convmem_graph.store import MemoryStore
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.session() as s:
            ...     s.ensure_memory("mem_1").memory_id
            'mem_1'
        """
        if self._scope is not None:
            yield self
            return
        with self.engine.connect() as conn:
            yield self._bind(RunScope(conn))

    def pinned(self) -> AbstractContextManager[Self]:
        """The earlier name of :meth:`session` (calls share the connection only when made on its value)."""
        return self.session()

    def run(self, memory_id: str, *, flush_commit: bool = True) -> AbstractContextManager[Self]:
        """Serialize work on one memory; the yielded :class:`StoreRun` is the run's view of the store.

        The run owns the memory's lock (re-entrant in-process; across processes the memory's lock
        file on a SQLite file, the transaction's ``pg_advisory_xact_lock`` on PostgreSQL), one
        connection, and on PostgreSQL one transaction with a read cache: every call made on the
        run joins that transaction (a lifecycle run's checkpoint writes too, see
        :mod:`convmem_graph.checkpoints.postgres`), which commits when the block ends. Other
        processes and hosts wait for the commit; no session-level lock is taken, so this works
        behind PgBouncer in transaction mode. When the block raises, what the completed calls
        wrote is committed (as each call's own transaction would have been), unless a call was
        interrupted half-way or the database failed the transaction: then all of it is rolled
        back. On SQLite each call on the run is its own transaction on the run's connection.

        Calls made on the store itself inside the block are their own transactions, as anywhere;
        on PostgreSQL a write of the held memory that way would wait for the run forever, so it
        raises :class:`~convmem_graph.errors.ConvMemError` instead. A run of the same memory
        inside the block (on the store or the run) is the same run; a run of another memory
        made on a run whose transaction is open joins that transaction. Different memories never
        block each other.

        ``flush_commit=False`` lets the run's PostgreSQL transaction commit without waiting for
        the server's WAL flush (``synchronous_commit = off`` for that transaction only; a run
        joining an open transaction keeps that one's setting). A crash of the database server can
        then lose the run's commit (with later commits only, never part of one): for a caller that
        redoes lost runs anyway, as a replay does for every file not yet marked done (the marks
        commit with the flush, and a mark's flush covers every earlier commit). SQLite's commits
        never sync a run anyway (``synchronous=NORMAL`` in WAL mode): there it changes nothing.

        Example:
            >>> from convmem_graph.store import MemoryStore
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.run("mem_1") as run:
            ...     run.ensure_memory("mem_1").memory_id
            'mem_1'
        """
        check_memory_id(memory_id)
        scope = self._scope
        if scope is not None and scope.writing:
            return self._join_run(scope, memory_id)
        hold = self._open_run if flush_commit else self._open_run_unflushed
        return cast("AbstractContextManager[Self]", _memory_lock(self._lock_scope, memory_id, hold=hold))

    def memory_lock(self, memory_id: str) -> AbstractContextManager[Self]:
        """The earlier name of :meth:`run` (store calls join the run only when made on its value)."""
        return self.run(memory_id)

    @contextmanager
    def _join_run(self, scope: RunScope, memory_id: str) -> Iterator[Self]:
        """A run of ``memory_id`` inside this session's open transaction: its locks join it."""
        with _memory_lock(self._lock_scope, memory_id, hold=self._backend.hold_memory):
            if self._backend.locks_memories:
                self._lock_in(scope.conn, memory_id)
            yield self

    def _open_run_unflushed(self, memory_id: str) -> AbstractContextManager[Self]:
        """:meth:`_open_run` for ``run(..., flush_commit=False)``."""
        return self._open_run(memory_id, flush_commit=False)

    @contextmanager
    def _open_run(self, memory_id: str, *, flush_commit: bool = True) -> Iterator[Self]:
        """The outermost hold of :meth:`run`: the cross-process lock, the session, the PG transaction."""
        # After the in-process lock (one thread of this process at a time reaches the lock file),
        # before any store call (no write gate is held while waiting for another process).
        with self._backend.hold_memory(memory_id), self.session() as run:
            if not self._backend.locks_memories:
                scope = run._scope
                assert scope is not None  # a session's view always has one
                if scope.run_memory is not None:  # a run of another memory inside a run: the outer's
                    yield run
                    return
                scope.run_memory, scope.run_row = memory_id, None
                try:
                    yield run
                finally:
                    scope.run_memory, scope.run_row = None, None
                return
            scope = run._scope
            assert scope is not None  # a session's view always has one
            conn = scope.conn
            if conn.in_transaction():
                conn.rollback()  # an unfinished read's implicit transaction
            txn = conn.begin()
            scope.begun()
            scope.writing, scope.interrupted, scope.cache = True, False, {}
            try:
                run._lock_in(conn, memory_id, flush=flush_commit)
                yield run
            except BaseException:
                scope.writing = False
                run._end_failed_run(conn, txn, memory_id)
                raise
            else:
                # The run's memory-row changes still held back go with its transaction.
                try:
                    run._flush_rows(conn)
                    scope.writing = False
                    txn.commit()
                except BaseException:
                    self._strongest.clear()  # what the run's reads saw may be rolled back
                    raise
            finally:
                scope.writing, scope.interrupted, scope.cache = False, False, None
                scope.pending.clear()
                scope.begun()

    def _end_failed_run(self, conn: Connection, txn: Any, memory_id: str) -> None:
        """Commit what the completed store calls of a failed block wrote, or roll it all back."""
        if not txn.is_active:
            return
        keep = not (self._scope is not None and self._scope.interrupted) and not _aborted(conn)
        try:
            if keep:
                # What the completed calls changed of the memory's row is theirs too; a failure
                # here rolls the whole run back (below), as a failed commit would.
                self._flush_rows(conn)
                txn.commit()
                return
        except Exception:  # noqa: BLE001 - the block's own error is the one to raise
            logger.warning("commit after a failed run of memory %r failed", memory_id, exc_info=True)
        # The summary's kept rows may hold what the run wrote (``_write`` clears them when its
        # own block fails; a run can fail between its store calls).
        self._strongest.clear()
        if txn.is_active:
            try:
                txn.rollback()
            except Exception:  # noqa: BLE001 - a broken connection: the pool discards it
                logger.warning("rollback of a failed run of memory %r failed", memory_id, exc_info=True)
        logger.info("rolled back the unfinished run of memory %r", memory_id)

    def run_connection(self) -> Any | None:
        """The psycopg connection of this run's PostgreSQL transaction, or ``None``.

        On a :class:`StoreRun` of :meth:`run` on PostgreSQL, the DBAPI connection whose transaction
        holds the memory's lock; the lifecycle writes its checkpoints on it so they commit with the
        store. ``None`` on the store itself, on SQLite, and outside the run's transaction.
        """
        scope = self._scope
        if not self._backend.locks_memories or scope is None or not scope.writing:
            return None
        return scope.conn.connection.driver_connection

    @contextmanager
    def transaction(self, memory_id: str | None = None) -> Iterator[Connection]:
        """A write transaction on the store's database, committed when the block ends.

        For tables of your own beside the store's (replay progress) and multi-step changes
        (import): on SQLite it takes the write lock up front and queues at the write gate, like
        every store write; with ``memory_id`` on PostgreSQL it also takes that memory's
        transaction-scoped advisory lock. A plain ``engine.begin()`` does neither (and, on SQLite,
        would run each statement in autocommit). Store calls made on a :class:`StoreRun` inside
        its own ``transaction()`` join it: an exception undoes them too. Calls on the store itself
        are their own transactions (on SQLite one would wait for this one's write lock).

        Example:
            >>> from convmem_graph.store import MemoryStore
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.session() as s, s.transaction() as conn:
            ...     _ = conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS mine (k TEXT)")
            ...     s.ensure_memory("mem_1").memory_id
            'mem_1'
        """
        with self._write(memory_id) as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reads of tables of your own beside the store's (replay progress).

        On a :class:`StoreRun` inside its :meth:`transaction` it is that transaction's connection.
        Its implicit transaction ends with COMMIT (see :func:`~convmem_graph.store.engine.end_read`):
        a plain ``engine.connect()`` block rolls back on close, which makes psycopg prepare every
        statement of the connection again.

        Example:
            >>> from convmem_graph.store import MemoryStore
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.read() as conn:
            ...     conn.exec_driver_sql("SELECT count(*) FROM cm_memories").scalar()
            0
        """
        with self._read() as conn:
            yield conn

    @contextmanager
    def read_facts(self) -> Iterator[Connection]:
        """:meth:`read` for reads of facts, messages and variables only, never of the memory's row.

        The nodes' own fact reads (extraction's known and related facts, inference's) use it: on
        a PostgreSQL run they leave the run's held-back memory-row changes unsent (see
        :mod:`convmem_graph.store._row_patch`), where :meth:`read` sends them first, since a
        caller's read may look at the row. Elsewhere it is :meth:`read`.

        Example:
            >>> from convmem_graph.store import MemoryStore
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.read_facts() as conn:
            ...     conn.exec_driver_sql("SELECT count(*) FROM cm_fragments").scalar()
            0
        """
        with self._read_keeping_row() as conn:
            yield conn

    @contextmanager
    def schema_transaction(self) -> Iterator[Connection]:
        """A :meth:`transaction` for creating or altering tables of your own beside the store's.

        On PostgreSQL it first takes the store's schema lock (transaction-scoped, so it works
        behind a transaction-mode pooler): processes starting together on a fresh database take
        turns, where two concurrent ``CREATE TABLE IF NOT EXISTS`` can fail on the catalog
        (``type ... already exists``).

        Example:
            >>> from convmem_graph.store import MemoryStore
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.schema_transaction() as conn:
            ...     _ = conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS mine (k TEXT)")
        """
        with self.transaction() as conn:
            self._backend.schema_lock(conn)
            yield conn

    def _driver(self) -> AbstractContextManager[sqlite3.Connection]:
        """A read on SQLite's driver connection, chosen as :meth:`_read` chooses its connection."""
        if self._scope is None:
            pinned: sqlite3.Connection | None = getattr(self._pinned, "conn", None)
            if pinned is not None:
                return nullcontext(pinned)
        return driver_read(self.engine, self._scope, self._serial)

    @contextmanager
    def call_start_reads(self) -> Iterator[None]:
        """Inside, this thread's driver-level reads on the store itself share one connection.

        A call start makes two such reads (the snapshot's row, the episodic search), each a
        statement or two of a few microseconds; a pool checkout and return cost about as much
        again. So they share one connection, kept for call starts apart from the pool (a store
        connection like the pool's, detached from it) and reused by the next call start. Each
        read is still its own statement in autocommit mode, as on separate connections. A
        SQLite file only (elsewhere, and when already inside, it does nothing); reads of a
        session or run keep their own connection.

        Example:
            >>> from convmem_graph.store import MemoryStore
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.call_start_reads():
            ...     store.load_snapshot("m1") is None
            True
        """
        if not self._pins or self._scope is not None or getattr(self._pinned, "conn", None) is not None:
            yield
            return
        if self._spare_pid != os.getpid():
            self._spare, self._spare_pid = [], os.getpid()  # the parent's: never used here
        try:
            kept = self._spare.pop()  # atomic: each thread takes its own
        except IndexError:
            pooled = self.engine.raw_connection()
            # Its driver connection is the pool record's, which detaching forgets.
            kept = (pooled, cast(sqlite3.Connection, pooled.driver_connection))
            pooled.detach()  # closed by close(), never returned to the pool
        self._pinned.conn = kept[1]
        try:
            yield
        finally:
            self._pinned.conn = None
            self._spare.append(kept)

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        scope = self._scope
        if scope is None:
            with self._serial, self.engine.connect() as fresh:
                yield fresh
                end_read(fresh)  # not reached after an error: closing rolls back
            return
        conn = scope.conn
        if conn.in_transaction():
            # A read inside a write of this session: it belongs to that transaction, and sees
            # the run's memory-row changes (unless a call that reads none of them holds them back).
            if scope.pending and not scope.deferring:
                self._flush_rows(conn)
            yield conn
            return
        with self._serial:
            try:
                yield conn
            except BaseException:
                if conn.in_transaction():
                    conn.rollback()
                raise
            end_read(conn)

    def _lock_in(self, conn: Connection, memory_id: str, *, flush: bool = True) -> None:
        """Take the memory's ``pg_advisory_xact_lock`` in the current transaction, once per transaction.

        Writers of one memory take turns: concurrent inserts cannot both pass the duplicate check,
        and seqs commit in order. A run takes the same key, so its writes find it held already.
        Two-int key space: never meets the one-bigint schema and setup locks. ``flush=False``: the
        transaction commits without waiting for its WAL flush (see :meth:`run`).
        """
        scope = self._scope
        if scope is None:
            self._backend.lock_memory(conn, memory_id)  # a call's own transaction: once anyway
            return
        if memory_id in scope.locked:
            return
        self._backend.lock_memory(conn, memory_id, flush=flush)
        scope.locked.add(memory_id)

    @contextmanager
    def _write(
        self, memory_id: str | None = None, *, keeps: frozenset[str] = frozenset(), keeps_row: bool = False
    ) -> Iterator[Connection]:
        """A write transaction (or a part of this session's open one).

        ``keeps`` names the kinds of the run's read cache (see :meth:`_cached`) this write cannot
        change; every other kind cached for the memory (for all memories without one) is dropped.
        ``keeps_row``: the write reads and sets no column of a memory's row that a held-back
        change sets, nor the call-start snapshot, except through the steps that fold into that
        change (:meth:`_held_row`); inside a PostgreSQL run it neither sends the run's held-back
        changes first nor lets its reads do so.
        """
        self._writes += 1
        try:
            with self._write_in(memory_id, keeps, keeps_row) as conn:
                yield conn
        except BaseException:
            # What a read inside this transaction saw may be rolled back: rows kept from it go.
            self._strongest.clear()
            raise

    @contextmanager
    def _write_in(
        self, memory_id: str | None, keeps: frozenset[str], keeps_row: bool
    ) -> Iterator[Connection]:
        """:meth:`_write`'s transaction: the call's own, or a part of this session's open one."""
        scope = self._scope
        if scope is None:
            with self._own_write(memory_id) as conn:
                yield conn
            return
        if scope.writing:
            # A write inside a write of this session joins it (a second transaction on one
            # connection cannot be begun, and on another one would wait for this one forever).
            if memory_id is not None and self._backend.locks_memories:
                self._lock_in(scope.conn, memory_id)
            if keeps_row:
                scope.deferring += 1
            elif scope.pending and not scope.deferring:
                self._flush_rows(scope.conn)
            try:
                yield scope.conn
            except BaseException:
                # Its statements so far stay in the enclosing transaction: a run must not commit them.
                scope.interrupted = True
                raise
            finally:
                if keeps_row:
                    scope.deferring -= 1
                self._forget(memory_id, keeps)
            return
        conn = scope.conn
        with self._serial:
            with self._gate.hold() if self._gate is not None else nullcontext():
                end_read(conn)  # an unfinished read's implicit transaction, never a write's
                conn.execution_options(**{WRITE_OPTION: True})
                scope.writing = True
                scope.begun()
                try:
                    with conn.begin():
                        if memory_id is not None and self._backend.locks_memories:
                            self._lock_in(conn, memory_id)
                        yield conn
                    scope.committed()
                finally:
                    scope.writing = False
                    conn.execution_options(**{WRITE_OPTION: False})
            self._committed(conn)

    @contextmanager
    def _own_write(self, memory_id: str | None) -> Iterator[Connection]:
        """A call's own write transaction, on a connection of its own."""
        if memory_id is not None and self._backend.locks_memories and held_here(self._lock_scope, memory_id):
            # Its advisory lock is held by this thread's run, which waits for this call: never ends.
            raise ConvMemError(
                f"a write of memory {memory_id!r} on the store itself inside this thread's run of it "
                "would wait for the run; make the call on the run (with store.run(...) as run: run.<call>)"
            )
        if self._gate is not None and self._gate.held_by_this_thread():
            # This thread's write transaction (store.transaction(), a run) holds SQLite's write
            # lock: a second one on another connection would wait for it until the busy timeout.
            raise ConvMemError(
                "a write on the store itself inside this thread's open write transaction would wait "
                "for that transaction; make the call on its session or run (with store.session() as "
                "s, s.transaction(): s.<call>, or with store.run(memory_id) as run: run.<call>)"
            )
        with self._serial, self.engine.connect() as conn:
            with self._gate.hold() if self._gate is not None else nullcontext():
                conn.execution_options(**{WRITE_OPTION: True})
                with conn.begin():
                    if memory_id is not None and self._backend.locks_memories:
                        self._backend.lock_memory(conn, memory_id)
                    yield conn
            self._committed(conn)

    def _give_back_free_pages(self) -> int:
        """On a SQLite file made with ``auto_vacuum=INCREMENTAL``, return its free pages to the disk.

        For after a rewrite that frees many pages at once (the episodic index's merge frees the
        old segments: 7-9 % of a replayed file). Runs at the write gate, outside any transaction:
        ``executescript`` is the one way Python's ``sqlite3`` runs ``incremental_vacuum`` to its
        end (``execute`` frees a single page), and it commits an open transaction first. Files
        made without it (older versions) keep their free pages for later writes. Returns the
        pages given back.
        """
        if self.dialect != "sqlite" or self._scope is not None:
            return 0
        with self._serial, self.engine.connect() as conn:
            with self._gate.hold() if self._gate is not None else nullcontext():
                raw = driver_of(conn)
                if raw.in_transaction or raw.execute("PRAGMA auto_vacuum").fetchone()[0] != 2:
                    return 0
                free = int(raw.execute("PRAGMA freelist_count").fetchone()[0])
                if free:
                    raw.executescript("PRAGMA incremental_vacuum;")
                    free -= int(raw.execute("PRAGMA freelist_count").fetchone()[0])
            if free and self._gate is not None:
                self._gate.committed(raw)
        return free

    def write_count(self) -> int:
        """How many writes were begun through this object (the store, or one run or session of it).

        A node holding rows it read (see :mod:`convmem_graph._held`) compares it with the count at
        its read: equal means the run wrote nothing since. Writes through other objects (another
        run, the store itself, another process) are not counted here.

        Example:
            >>> from convmem_graph.store import MemoryStore
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.run("mem_1") as run:
            ...     before = run.write_count()
            ...     _ = run.ensure_memory("mem_1")
            ...     run.write_count() - before
            1
        """
        return self._writes

    def _committed(self, conn: Connection) -> None:
        driver = conn.connection.driver_connection
        if self._gate is not None and driver is not None:
            # Outside the gate: other writers go on while a checkpoint copies pages.
            self._gate.committed(driver)

    def _ensure(self, conn: Connection, memory_id: str, now: int, description: str = "") -> bool:
        # Once per transaction: a run's steps all ensure their memory (one round trip each on PG).
        # On SQLite, where each call of a run is its own transaction, once per run: see
        # ``RunScope.run_row``.
        scope = self._scope
        in_txn = scope is not None and scope.writing and scope.conn is conn
        if in_txn and (memory_id in scope.ensured or memory_id == scope.run_row):  # type: ignore[union-attr]
            return False
        row = {
            "memory_id": memory_id,
            "description": description,
            "created_at": now,
            "updated_at": now,
            "extracted_seq": 0,
            "summarized_seq": 0,
        }
        inserted = self._backend.ensure_memory_row(conn, row)
        if in_txn:
            scope.ensured.add(memory_id)  # type: ignore[union-attr]
        return inserted

    def _cached(self, kind: str, memory_id: str, load: Callable[[Connection], _T]) -> _T:
        """Read ``kind`` of a memory through the run's cache when this is a PostgreSQL run.

        Inside a run's transaction nobody else can change the memory (other writers wait for its
        lock, and its uncommitted rows are its own), so a read answers for the whole run until one
        of the run's own writes drops it (``_write(keeps=...)``). Outside a run: a plain read.
        Values are shared between callers: treat them as read-only.
        """
        cache = self._cache()
        if cache is not None and (kind, memory_id) in cache:
            return cast(_T, cache[(kind, memory_id)])
        with self._read() as conn:
            value = load(conn)
        if cache is not None:
            cache[(kind, memory_id)] = value
        return value

    def _cache(self) -> dict[tuple[str, str], Any] | None:
        """The run's read cache while its transaction is open, else ``None``."""
        scope = self._scope
        return scope.cache if scope is not None and scope.writing else None

    def _peek(self, kind: str, memory_id: str) -> Any | None:
        """What the run's cache holds for ``kind`` of a memory (``None``: nothing, or not in a run)."""
        cache = self._cache()
        return cache.get((kind, memory_id)) if cache else None

    def _remember(self, kind: str, memory_id: str, value: Any) -> None:
        """Put what a write of this run just stored in the run's cache (nothing outside a run).

        For writes whose effect on a cached kind is known without reading it back.
        """
        cache = self._cache()
        if cache is not None:
            cache[(kind, memory_id)] = value

    def _remember_new_memory(self, memory_id: str) -> None:
        """Note in the run's cache that the run's last write created the memory (nothing outside a run).

        For the end of a write that inserted the memory's row in the run's transaction and wrote
        no fact: specs, variables, summary and facts all reference ``cm_memories`` (foreign keys),
        so none of their rows can predate the row, and until the run commits no other writer can
        add one (the memory's lock; a foreign key check on the uncommitted row would wait too).
        The specs, variables and summary are cached empty, replaced or dropped by the run's own
        later writes as any cached read; :data:`NO_FACTS` is dropped by the memory's next write of
        any kind (no write keeps it). A replay's first run of a memory saves its reads.
        """
        cache = self._cache()
        if cache is not None:
            cache[("specs", memory_id)] = []
            cache[("variables", memory_id)] = {}
            cache[("summary", memory_id)] = None
            cache[(NO_FACTS, memory_id)] = True

    def _recall(self, kind: str, memory_id: str) -> Any:
        """What the run's cache holds for ``kind`` of a memory, or ``UNKNOWN`` (``None`` is a value)."""
        cache = self._cache()
        return cache.get((kind, memory_id), UNKNOWN) if cache else UNKNOWN

    def _forget(self, memory_id: str | None, keeps: frozenset[str]) -> None:
        cache = self._cache()
        if not cache:
            return
        for key in [k for k in cache if (memory_id is None or k[1] == memory_id) and k[0] not in keeps]:
            del cache[key]

    def _touch(self, conn: Connection, memory_id: str, now: int, *, facts_dirty: int | None = None) -> None:
        # Any change makes the cached call-start snapshot stale: drop it, the next reader rebuilds
        # it. One statement on PostgreSQL (a round trip each counts); facts_dirty rides along.
        held = self._held_row(memory_id)
        if held is not None:
            held.touched(now, dirty=facts_dirty)
            return
        self._backend.touch(conn, {"mid": memory_id, "now": now, "dirty": facts_dirty})

    def _held_row(self, memory_id: str) -> RowPatch | None:
        """The held-back change of ``memory_id``'s row to fold a step into, or ``None``: send it now.

        Only inside a PostgreSQL run's call that keeps the row (``_write(keeps_row=True)``): the
        run's later calls that might read the row send it first (:meth:`_flush_rows`), and so
        does its commit. Everywhere else the step is its own statement, as before.
        """
        scope = self._scope
        if scope is None or not scope.deferring or scope.cache is None or not self._backend.locks_memories:
            return None
        held = scope.pending.get(memory_id)
        if held is None:
            held = scope.pending[memory_id] = RowPatch()
        return held

    def _take_held_row(self, memory_id: str) -> RowPatch | None:
        """The held-back change of ``memory_id``'s row, taken to go inside a statement of the caller's."""
        scope = self._scope
        return None if scope is None else scope.pending.pop(memory_id, None)

    def _flush_rows(self, conn: Connection) -> None:
        """Send the run's held-back memory-row changes: one statement per memory (one in a run)."""
        scope = self._scope
        if scope is None or not scope.pending:
            return
        pending = list(scope.pending.items())
        scope.pending.clear()
        for memory_id, held in pending:
            execute_rows(conn, PG_ROW_PATCH, held.params(memory_id))

    @contextmanager
    def _read_keeping_row(self) -> Iterator[Connection]:
        """:meth:`_read` for rows other than the memories' own and their snapshots (facts, messages).

        Inside a PostgreSQL run it leaves the run's held-back memory-row changes held back, so a
        fact read between two extraction batches costs no statement of them.
        """
        scope = self._scope
        if scope is None:
            with self._read() as conn:
                yield conn
            return
        scope.deferring += 1
        try:
            with self._read() as conn:
                yield conn
        finally:
            scope.deferring -= 1


def _aborted(conn: Connection) -> bool:
    """Whether the server failed the connection's transaction (every later statement would fail)."""
    try:
        from psycopg.pq import TransactionStatus

        status = conn.connection.driver_connection.info.transaction_status  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - an unusable connection counts as failed
        return True
    return bool(status != TransactionStatus.INTRANS)
