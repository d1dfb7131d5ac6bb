"""MemoryStore: the one repository of memories, messages, fragments, variables and summaries.

Same code on SQLite (default, one file) and PostgreSQL. Each public mutating method is one
transaction, so a failure never leaves half a step written, and every query filters by memory id.
Calls made on a :class:`StoreRun` (``with store.run(memory_id) as run:``, a lifecycle run) share
the run's connection; on PostgreSQL they are parts of the run's one transaction instead, which
holds the memory's ``pg_advisory_xact_lock``. Which it is follows from the object a call is made
on, never from per-thread state.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar, cast

from sqlalchemy import (
    Connection,
    Engine,
    Row,
    Table,
    and_,
    delete,
    func,
    or_,
    select,
)
from sqlalchemy.engine import make_url

from convmem_graph._ids import check_identifier
from convmem_graph._time import now_ms as _now
from convmem_graph.errors import ConvMemError, MemoryNotFoundError, NotFoundError
from convmem_graph.models import (
    FRAGMENT_MAX_CHARS,
    EpisodeSearch,
    Fragment,
    FragmentCandidate,
    FragmentOp,
    FragmentStatus,
    MemoryInfo,
    MemorySnapshot,
    Message,
    Summary,
    VariableGuess,
    VariableSpec,
    VariableValue,
    VariableValueType,
)
from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store import _queries as Q
from convmem_graph.store import _variables as var
from convmem_graph.store._audit import audit_row, row_to_audit, write_audit
from convmem_graph.store._fragments import (
    FragmentWriter,
    manual_key,
    norm_hash,
    row_to_fragment,
    upgrade_fragments,
)
from convmem_graph.store._lang_counts import language_counts
from convmem_graph.store._messages import (
    MESSAGE_COLUMNS,
    PgFollow,
    PgStamp,
    insert_messages,
    prepare_messages,
    row_to_message,
)
from convmem_graph.store._vectors import dense_episodes, missing_vectors, write_vectors
from convmem_graph.store.engine import (
    POOL_DEFAULTS,
    WRITE_OPTION,
    PoolSettings,
    chunked,
    create_store_engine,
    end_read,
    execute_upsert,
    insert_ignore,
    upsert,
)
from convmem_graph.store.episodes import (
    delete_episodes,
    delete_message_episodes,
    ensure_episode_index,
    index_episodes,
    pg_index_terms,
    search_episodes,
)
from convmem_graph.store.locks import held_here
from convmem_graph.store.locks import memory_lock as _memory_lock
from convmem_graph.store.migrations import apply_migrations
from convmem_graph.store.postgres import PostgresBackend
from convmem_graph.store.records import AuditEntry, DeadLetter, dead_letter_key
from convmem_graph.store.registry import MEMORY_TABLES, MemoryTable
from convmem_graph.store.schema import (
    audit,
    dead_letters,
    fragments,
    memories,
    messages,
    snapshots,
    variable_specs,
    variables,
)
from convmem_graph.store.session import RunScope
from convmem_graph.store.sqlite import SqliteBackend
from convmem_graph.store.urls import is_memory_sqlite, mask_url, normalize_url
from convmem_graph.text.keys import canonical_key
from convmem_graph.text.sentences import split_to_fit

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ["MemoryStore", "StoreRun"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
#: Kinds of the run's read cache (``MemoryStore._cached``).
_CACHED = frozenset({"specs", "summary", "variables"})
#: What a write that leaves the memory's messages as they are keeps besides: the rows a run's insert
#: stored past the memory's previous newest seq (see ``messages_after``).
_SAME_MESSAGES = frozenset({"tail"})
#: What :meth:`MemoryStore._recall` answers for a kind the run's cache does not hold.
_UNKNOWN: Any = object()
#: ``object_id`` of the audit entries a retention purge of messages writes.
PURGE_OBJECT_ID = "messages"


def _read_summary(conn: Connection, memory_id: str) -> Summary | None:
    row = conn.execute(Q.SUMMARY, {"mid": memory_id}).first()
    if row is None:
        return None
    return Summary.model_validate({name: row._mapping[name] for name in Summary.model_fields})


class Cursors(NamedTuple):
    """Where processing of a memory stands."""

    max_seq: int
    extracted_seq: int
    summarized_seq: int
    #: Facts changed since variables were last inferred.
    facts_dirty: bool


#: Parsed call-start snapshots kept in process (least recently used are dropped).
_PARSED_SNAPSHOTS = 256


def _registered_column(table: Table) -> str:
    """The column naming the memory in a registered table."""
    return next(e.column for e in MEMORY_TABLES if e.table is table)


def _check_id(memory_id: str) -> str:
    # One validation of identifiers everywhere (convmem_graph._ids); raises a ValueError subclass.
    return check_identifier(memory_id, "memory_id")


class MemoryStore:
    """Repository of memories on SQLite or PostgreSQL (SQLAlchemy 2 Core).

    Example:
        >>> store = MemoryStore.from_url(":memory:")
        >>> store.add_messages("mem_1", [Message(id="m1", role="user", content="I like tea",
        ...     channel="im", source="message", timestamp_ms=1_767_268_800_000)])
        ['m1']
        >>> store.count_messages("mem_1")
        1
        >>> store.close()
    """

    url: str
    safe_url: str
    dialect: str
    engine: Engine
    #: The session this object's calls go through: ``None`` on the store itself (each call opens
    #: its own connection and transaction), set on the :class:`StoreRun` views of it.
    _scope: RunScope | None = None

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
        # memory id -> (snapshot JSON, parsed snapshot): call starts skip re-parsing an unchanged row.
        self._parsed: OrderedDict[str, tuple[str, MemorySnapshot]] = OrderedDict()
        self._parsed_lock = threading.Lock()
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
            apply_migrations(conn)
            # Facts an older version wrote since (no derived columns), and indexes it dropped.
            upgrade_fragments(conn)
            ensure_episode_index(conn)
            self._backend.end_setup(conn)
        logger.debug("memory store opened at %s", self.safe_url)

    @classmethod
    def from_url(
        cls, url: str | None = None, *, echo: bool = False, pools: PoolSettings | None = None
    ) -> MemoryStore:
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

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release every database connection of the store."""
        self.engine.dispose()

    # -- sessions, runs and transactions ----------------------------------------------------------
    def _bind(self, scope: RunScope) -> StoreRun:
        """This store as a :class:`StoreRun` whose calls go through ``scope`` (engine and caches shared)."""
        view = object.__new__(StoreRun)
        view.__dict__.update(self.__dict__)
        view._scope = scope
        return view

    @contextmanager
    def session(self) -> Iterator[StoreRun]:
        """The store bound to one connection until the block ends.

        Every call made on the yielded :class:`StoreRun` still is its own statement or transaction;
        only the connection is kept, which saves a pool checkout per call (a lifecycle run makes
        dozens of calls). Calls on the store itself are not affected. A session of a session is
        the same session.

        Example:
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.session() as s:
            ...     s.ensure_memory("mem_1").memory_id
            'mem_1'
        """
        if self._scope is not None:
            yield cast(StoreRun, self)
            return
        with self.engine.connect() as conn:
            yield self._bind(RunScope(conn))

    def pinned(self) -> AbstractContextManager[StoreRun]:
        """The earlier name of :meth:`session` (calls share the connection only when made on its value)."""
        return self.session()

    def run(self, memory_id: str) -> AbstractContextManager[StoreRun]:
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

        Example:
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.run("mem_1") as run:
            ...     run.ensure_memory("mem_1").memory_id
            'mem_1'
        """
        _check_id(memory_id)
        scope = self._scope
        if scope is not None and scope.writing:
            return self._join_run(scope, memory_id)
        return cast(
            AbstractContextManager[StoreRun],
            _memory_lock(self._lock_scope, memory_id, hold=self._open_run),
        )

    def memory_lock(self, memory_id: str) -> AbstractContextManager[StoreRun]:
        """The earlier name of :meth:`run` (store calls join the run only when made on its value)."""
        return self.run(memory_id)

    @contextmanager
    def _join_run(self, scope: RunScope, memory_id: str) -> Iterator[StoreRun]:
        """A run of ``memory_id`` inside this session's open transaction: its locks join it."""
        with _memory_lock(self._lock_scope, memory_id, hold=self._backend.hold_memory):
            if self._backend.locks_memories:
                self._lock_in(scope.conn, memory_id)
            yield cast(StoreRun, self)

    @contextmanager
    def _open_run(self, memory_id: str) -> Iterator[StoreRun]:
        """The outermost hold of :meth:`run`: the cross-process lock, the session, the PG transaction."""
        # After the in-process lock (one thread of this process at a time reaches the lock file),
        # before any store call (no write gate is held while waiting for another process).
        with self._backend.hold_memory(memory_id), self.session() as run:
            if not self._backend.locks_memories:
                yield run
                return
            scope = run._scope
            conn = scope.conn
            if conn.in_transaction():
                conn.rollback()  # an unfinished read's implicit transaction
            txn = conn.begin()
            scope.begun()
            scope.writing, scope.interrupted, scope.cache = True, False, {}
            try:
                run._lock_in(conn, memory_id)
                yield run
            except BaseException:
                scope.writing = False
                run._end_failed_run(conn, txn, memory_id)
                raise
            else:
                scope.writing = False
                txn.commit()
            finally:
                scope.writing, scope.interrupted, scope.cache = False, False, None
                scope.begun()

    def _end_failed_run(self, conn: Connection, txn: Any, memory_id: str) -> None:
        """Commit what the completed store calls of a failed block wrote, or roll it all back."""
        if not txn.is_active:
            return
        keep = not (self._scope is not None and self._scope.interrupted) and not _aborted(conn)
        try:
            if keep:
                txn.commit()
                return
        except Exception:  # noqa: BLE001 - the block's own error is the one to raise
            logger.warning("commit after a failed run of memory %r failed", memory_id, exc_info=True)
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
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.read() as conn:
            ...     conn.exec_driver_sql("SELECT count(*) FROM cm_memories").scalar()
            0
        """
        with self._read() as conn:
            yield conn

    @contextmanager
    def schema_transaction(self) -> Iterator[Connection]:
        """A :meth:`transaction` for creating or altering tables of your own beside the store's.

        On PostgreSQL it first takes the store's schema lock (transaction-scoped, so it works
        behind a transaction-mode pooler): processes starting together on a fresh database take
        turns, where two concurrent ``CREATE TABLE IF NOT EXISTS`` can fail on the catalog
        (``type ... already exists``).

        Example:
            >>> store = MemoryStore.from_url(":memory:")
            >>> with store.schema_transaction() as conn:
            ...     _ = conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS mine (k TEXT)")
        """
        with self.transaction() as conn:
            self._backend.schema_lock(conn)
            yield conn

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
            # A read inside a write of this session: it belongs to that transaction.
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

    def _lock_in(self, conn: Connection, memory_id: str) -> None:
        """Take the memory's ``pg_advisory_xact_lock`` in the current transaction, once per transaction.

        Writers of one memory take turns: concurrent inserts cannot both pass the duplicate check,
        and seqs commit in order. A run takes the same key, so its writes find it held already.
        Two-int key space: never meets the one-bigint schema and setup locks.
        """
        scope = self._scope
        if scope is None:
            self._backend.lock_memory(conn, memory_id)  # a call's own transaction: once anyway
            return
        if memory_id in scope.locked:
            return
        self._backend.lock_memory(conn, memory_id)
        scope.locked.add(memory_id)

    @contextmanager
    def _write(
        self, memory_id: str | None = None, *, keeps: frozenset[str] = frozenset()
    ) -> Iterator[Connection]:
        """A write transaction (or a part of this session's open one).

        ``keeps`` names the kinds of the run's read cache (see :meth:`_cached`) this write cannot
        change; every other kind cached for the memory (for all memories without one) is dropped.
        """
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
            try:
                yield scope.conn
            except BaseException:
                # Its statements so far stay in the enclosing transaction: a run must not commit them.
                scope.interrupted = True
                raise
            finally:
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
        with self._serial, self.engine.connect() as conn:
            with self._gate.hold() if self._gate is not None else nullcontext():
                conn.execution_options(**{WRITE_OPTION: True})
                with conn.begin():
                    if memory_id is not None and self._backend.locks_memories:
                        self._backend.lock_memory(conn, memory_id)
                    yield conn
            self._committed(conn)

    def _committed(self, conn: Connection) -> None:
        driver = conn.connection.driver_connection
        if self._gate is not None and driver is not None:
            # Outside the gate: other writers go on while a checkpoint copies pages.
            self._gate.committed(driver)

    def _ensure(self, conn: Connection, memory_id: str, now: int, description: str = "") -> bool:
        # Once per transaction: a run's steps all ensure their memory (one round trip each on PG).
        scope = self._scope
        in_txn = scope is not None and scope.writing and scope.conn is conn
        if in_txn and memory_id in scope.ensured:  # type: ignore[union-attr]
            return False
        row = {
            "memory_id": memory_id,
            "description": description,
            "created_at": now,
            "updated_at": now,
            "extracted_seq": 0,
            "summarized_seq": 0,
        }
        inserted = conn.execute(insert_ignore(self.dialect, memories), row).rowcount == 1
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

    def _recall(self, kind: str, memory_id: str) -> Any:
        """What the run's cache holds for ``kind`` of a memory, or ``_UNKNOWN`` (``None`` is a value)."""
        cache = self._cache()
        return cache.get((kind, memory_id), _UNKNOWN) if cache else _UNKNOWN

    def _forget(self, memory_id: str | None, keeps: frozenset[str]) -> None:
        cache = self._cache()
        if not cache:
            return
        for key in [k for k in cache if (memory_id is None or k[1] == memory_id) and k[0] not in keeps]:
            del cache[key]

    def _touch(self, conn: Connection, memory_id: str, now: int, *, facts_dirty: int | None = None) -> None:
        # Any change makes the cached call-start snapshot stale: drop it, the next reader rebuilds
        # it. One statement on PostgreSQL (a round trip each counts); facts_dirty rides along.
        self._backend.touch(conn, {"mid": memory_id, "now": now, "dirty": facts_dirty})

    # -- memories -------------------------------------------------------------------------------
    def ensure_memory(self, memory_id: str, description: str = "") -> MemoryInfo:
        """Create the memory if it does not exist yet, and return it."""
        _check_id(memory_id)
        with self._write(memory_id) as conn:
            self._ensure(conn, memory_id, _now(), description)
        return self.get_memory(memory_id)

    def create_memory(self, memory_id: str | None = None, description: str = "") -> MemoryInfo:
        """Create a new memory (with a generated id when none is given).

        Raises:
            ConvMemError: If a memory with this id already exists.
        """
        memory_id = _check_id(memory_id) if memory_id is not None else f"mem_{secrets.token_hex(8)}"
        with self._write(memory_id) as conn:
            if not self._ensure(conn, memory_id, _now(), description):
                raise ConvMemError(f"memory {memory_id!r} already exists")
        return self.get_memory(memory_id)

    def get_memory(self, memory_id: str) -> MemoryInfo:
        """Return a memory with its message count and active fragment count.

        Raises:
            MemoryNotFoundError: If the memory does not exist.
        """
        _check_id(memory_id)
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
        with self._write(memory_id) as conn:
            with self._backend.deleting(conn):
                # The episodic index first: its rows are found through the messages.
                delete_message_episodes(conn, memory_id)
                for entry in MEMORY_TABLES:
                    deleted += self._delete_rows(conn, entry, memory_id)
            if self._scope is not None:
                self._scope.ensured.discard(memory_id)
        if checkpointer is not None:
            checkpointer.delete_thread(memory_id)
        logger.info("deleted memory %r (%d rows)", memory_id, deleted)
        return deleted > 0

    @staticmethod
    def _delete_rows(conn: Connection, entry: MemoryTable, memory_id: str) -> int:
        """Delete one registered table's rows of a memory (the open's migrations made every table)."""
        table = entry.table
        where = table.c[entry.column] == memory_id
        if entry.fallback is not None:
            # Rows of an older version, from before the table had its memory column.
            where = or_(where, and_(table.c[entry.column].is_(None), table.c[entry.fallback] == memory_id))
        if entry.via is not None:
            column, parent, key = entry.via
            owned = select(parent.c[key]).where(parent.c[_registered_column(parent)] == memory_id)
            where = or_(where, table.c[column].in_(owned))
        return int(conn.execute(delete(table).where(where)).rowcount or 0)

    # -- messages -------------------------------------------------------------------------------
    def add_messages(
        self,
        memory_id: str,
        messages: Sequence[Message],
        *,
        dedupe_window_ms: int = 10_000,
        index: bool = True,
        interruptions: Sequence[tuple[str, str]] = (),
    ) -> list[str]:
        """Store new messages of a memory (creating the memory if needed), skipping duplicates.

        A message whose id is already stored in this memory is skipped (a stored *partial* streamed
        message is replaced by its completed version, which gets a new seq). A message whose role
        and normalized text (width, case, punctuation, spaces) equal a message stored or accepted
        from another channel or source within ``dedupe_window_ms`` is skipped too; the same text
        twice on the same channel and source is a real repeat and is kept.

        Args:
            memory_id: The memory; ``Message.memory_id`` of the inputs is ignored.
            messages: The messages, in the order they should be numbered.
            dedupe_window_ms: Cross-channel duplicate window.
            index: Write the new messages to the episodic index (same transaction);
                ``MemoryConfig(episodic=False)`` turns it off.
            interruptions: TRTC ``(TaskId, RoundId)`` pairs an interruption metric named
                (``ReadResult.interruptions``): kept, and the round's bot turn is marked now or
                when it is stored (see ``store._rounds``).

        Returns:
            The ids actually inserted, in seq order.
        """
        _check_id(memory_id)
        if dedupe_window_ms < 0:
            raise ValueError("dedupe_window_ms must be >= 0")
        now = _now()
        prepared = prepare_messages(messages)
        with self._write(memory_id, keeps=_CACHED) as conn:
            # A memory created here holds no message yet (messages reference their memory).
            created = self._ensure(conn, memory_id, now)
            # PostgreSQL's insert returns the new rows' seqs; SQLite's executemany cannot.
            returns = self._backend.returns_rows
            before = 0
            if index and not returns and not created:
                before = int(conn.execute(Q.MAX_SEQ, {"mid": memory_id}).scalar() or 0)
            replaced: list[tuple[int, str]] = []
            follow = None
            stamped: list[PgStamp] = []
            if returns:
                # The insert's own statement indexes the new rows and stamps the memory.
                terms = pg_index_terms(memory_id) if index else None
                follow = PgFollow(now, terms, stamped)
            inserted = insert_messages(
                conn,
                memory_id,
                prepared,
                window_ms=dedupe_window_ms,
                replaced_rows=replaced,
                pg_follow=follow,
                new_memory=created,
                interruptions=interruptions,
                now_ms=now,
            )
            # A replaced row's index entry goes whether or not this write indexes.
            delete_episodes(conn, memory_id, replaced)
            if inserted and not returns:
                if index:
                    # This memory's writers take turns, so every seq above ``before`` is this batch's.
                    new_rows = conn.execute(Q.SEQ_CONTENT_AFTER, {"mid": memory_id, "after": before})
                    index_episodes(conn, memory_id, ((int(seq), c) for seq, c in new_rows))
                self._touch(conn, memory_id, now)
        if stamped:
            top, extracted, summarized, dirty = stamped[0].cursors
            self._remember("cursors", memory_id, Cursors(top, extracted, summarized, bool(dirty)))
            # The run's reads past a cursor at or after prior_max are these rows (see messages_after).
            self._remember("tail", memory_id, stamped[0])
        return inserted

    def search_episodes(self, memory_id: str, query: str, *, limit: int = 32) -> EpisodeSearch:
        """Search the memory's stored turns (the episodic index) for the words of ``query``.

        Args:
            memory_id: The memory.
            query: Free text; the newest 32 terms of a long query are used.
            limit: Candidate turns returned.

        Returns:
            Candidate turns with the per-term statistics the block's ranker scores them with.
        """
        with self._read() as conn:
            return search_episodes(conn, memory_id, query, limit=limit)

    def missing_turn_vectors(self, memory_id: str, model: str, *, limit: int = 64) -> list[tuple[int, str]]:
        """Up to ``limit`` of the memory's turns with no vector by ``model`` yet, oldest first."""
        with self._read() as conn:
            return missing_vectors(conn, memory_id, model, limit)

    def save_turn_vectors(self, memory_id: str, model: str, rows: list[tuple[int, list[float]]]) -> int:
        """Store turn vectors of one memory (``(seq, vector)``); a deleted turn's vector is not kept."""
        with self._write() as conn:
            return write_vectors(conn, memory_id, model, rows)

    def dense_episodes(self, memory_id: str, model: str, vector: list[float], *, limit: int) -> EpisodeSearch:
        """The memory's stored turns nearest ``vector`` (vectors by ``model``), cosine in ``dense``."""
        with self._read() as conn:
            return dense_episodes(conn, memory_id, model, vector, limit=limit)

    def max_seq(self, memory_id: str) -> int:
        """Return the highest message seq of a memory (0 when it has none)."""
        with self._read() as conn:
            value = conn.execute(Q.MAX_SEQ, {"mid": memory_id}).scalar()
        return int(value or 0)

    def messages_after(
        self, memory_id: str, after_seq: int, *, limit: int = 500, known: Mapping[str, Message] | None = None
    ) -> list[tuple[int, Message]]:
        """Return up to ``limit`` messages with seq greater than ``after_seq``, in seq order.

        ``known`` maps ids to messages the caller holds already (a run's fresh messages): those
        rows are returned as the caller's objects instead of being rebuilt.
        """
        tail: PgStamp | None = self._peek("tail", memory_id) if known else None
        if tail is not None and after_seq >= tail.prior_max:
            # In a run that stored them: every message past the cursor is one the caller holds.
            picked = [(seq, mid) for seq, mid in tail.rows if seq > after_seq][:limit]
            if known is not None and all(mid in known for _, mid in picked):
                return [(seq, known[mid]) for seq, mid in picked]
        params = {"mid": memory_id, "after": after_seq, "limit": limit}
        with self._read() as conn:
            rows = conn.execute(Q.MESSAGES_AFTER, params)
            if not known:
                return [(int(row[0]), row_to_message(row)) for row in rows]
            return [(int(row[0]), known.get(row.id) or row_to_message(row)) for row in rows]

    def message_ids_after(self, memory_id: str, after_seq: int, *, limit: int = 500) -> list[tuple[int, str]]:
        """Return ``(seq, id)`` of up to ``limit`` messages with seq greater than ``after_seq``, in seq order.

        A cheap companion of :meth:`messages_after` for callers that already hold the messages.
        """
        params = {"mid": memory_id, "after": after_seq, "limit": limit}
        with self._read() as conn:
            return [(int(seq), str(mid)) for seq, mid in conn.execute(Q.MESSAGE_IDS_AFTER, params)]

    def recent_messages(self, memory_id: str, n: int) -> list[Message]:
        """Return the last ``n`` messages by (timestamp, seq), oldest first."""
        if n <= 0:
            return []
        with self._read() as conn:
            rows = list(conn.execute(Q.RECENT_MESSAGES, {"mid": memory_id, "limit": n}))
        return [row_to_message(r) for r in reversed(rows)]

    def get_messages(self, memory_id: str, ids: Sequence[str]) -> list[Message]:
        """Return the stored messages of this memory with these ids, in the order of ``ids``."""
        wanted = list(dict.fromkeys(ids))
        found: dict[str, Message] = {}
        with self._read() as conn:
            for part in chunked(wanted):
                stmt = select(*MESSAGE_COLUMNS).where(
                    messages.c.memory_id == memory_id, messages.c.id.in_(part)
                )
                for row in conn.execute(stmt):
                    found[row.id] = row_to_message(row)
        return [found[i] for i in wanted if i in found]

    def count_messages(self, memory_id: str) -> int:
        """Return how many messages a memory holds."""
        with self._read() as conn:
            value = conn.execute(select(func.count()).where(messages.c.memory_id == memory_id)).scalar()
        return int(value or 0)

    def purge_messages(
        self, memory_id: str, *, before_ms: int, keep_recent: int, only_processed: bool = True
    ) -> int:
        """Delete old raw messages (retention), keeping the short-term window.

        Args:
            memory_id: The memory.
            before_ms: Only messages with ``timestamp_ms`` before this are deleted.
            keep_recent: The newest ``keep_recent`` messages are always kept.
            only_processed: Only delete messages already extracted and folded into the summary
                (seq at or below both cursors), so no fact is lost before it was read.

        Returns:
            The number of messages deleted.
        """
        _check_id(memory_id)
        with self._write(memory_id) as conn:
            cond = [messages.c.timestamp_ms < before_ms]
            if only_processed:
                cursors = conn.execute(
                    select(memories.c.extracted_seq, memories.c.summarized_seq).where(
                        memories.c.memory_id == memory_id
                    )
                ).first()
                if cursors is None:
                    return 0
                cond.append(messages.c.seq <= min(cursors.extracted_seq, cursors.summarized_seq))
            if keep_recent > 0:
                keep = [
                    r.seq
                    for r in conn.execute(
                        select(messages.c.seq)
                        .where(messages.c.memory_id == memory_id)
                        .order_by(messages.c.timestamp_ms.desc(), messages.c.seq.desc())
                        .limit(keep_recent)
                    )
                ]
                if keep:
                    cond.append(messages.c.seq.not_in(keep))
            newest_purged = conn.execute(
                select(func.max(messages.c.timestamp_ms), func.max(messages.c.seq)).where(
                    messages.c.memory_id == memory_id, *cond
                )
            ).first()
            delete_message_episodes(conn, memory_id, *cond)
            count = int(
                conn.execute(delete(messages).where(messages.c.memory_id == memory_id, *cond)).rowcount
            )
            if count:
                now = _now()
                # The cached call-start snapshot quotes recent turns: it goes with them (inject
                # builds the next one from what is left).
                conn.execute(delete(snapshots).where(snapshots.c.memory_id == memory_id))
                until_ms, upto_seq = (int(v or 0) for v in (newest_purged or (0, 0)))
                # The audit entry is the purge horizon: a late copy of a purged message (a vendor's
                # retry, a history sent at call end) is recognised by it and not stored again.
                write_audit(
                    conn,
                    [
                        audit_row(
                            memory_id,
                            now,
                            "message",
                            PURGE_OBJECT_ID,
                            "purge",
                            before=None,
                            after={"messages": count, "until_ms": until_ms, "upto_seq": upto_seq},
                            cause="retention: messages summarized and extracted",
                        )
                    ],
                )
                self._touch(conn, memory_id, now)
        if count:
            logger.info("purged %d messages of memory %r", count, memory_id)
        return count

    def purged_until(self, memory_id: str) -> int:
        """Return the newest ``timestamp_ms`` of the messages a purge deleted (0: never purged)."""
        stmt = (
            select(audit.c.after)
            .where(
                audit.c.memory_id == memory_id,
                audit.c.object_id == PURGE_OBJECT_ID,
                audit.c.kind == "message",
            )
            .order_by(audit.c.id.desc())
            .limit(1)
        )
        with self._read() as conn:
            after = conn.execute(stmt).scalar()
        return int(after.get("until_ms", 0)) if isinstance(after, Mapping) else 0

    # -- fragments ------------------------------------------------------------------------------
    def list_fragments(
        self,
        memory_id: str,
        *,
        status: FragmentStatus | None = "active",
        include_expired: bool = True,
        now_ms: int | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[Fragment]:
        """List fragments of a memory, oldest first.

        Args:
            memory_id: The memory.
            status: Only this status (``None``: every status).
            include_expired: False hides transient fragments whose ``expires_at <= now_ms``.
            now_ms: Reference time for expiry (default: now).
            limit: Page size (``None``: all).
            offset: Page start.
        """
        if status is not None and limit is None and not offset:
            # The lifecycle's calls: prebuilt statements.
            params: dict[str, Any] = {"mid": memory_id, "status": status}
            query = Q.FRAGMENTS_BY_STATUS
            if not include_expired:
                params["now"] = now_ms if now_ms is not None else _now()
                query = Q.LIVE_FRAGMENTS_BY_STATUS
            with self._read() as conn:
                return [row_to_fragment(r) for r in conn.execute(query, params)]
        stmt = select(fragments).where(fragments.c.memory_id == memory_id)
        if status is not None:
            stmt = stmt.where(fragments.c.status == status)
        if not include_expired:
            now = now_ms if now_ms is not None else _now()
            stmt = stmt.where(
                (fragments.c.transient.is_(False))
                | fragments.c.expires_at.is_(None)
                | (fragments.c.expires_at > now)
            )
        stmt = stmt.order_by(fragments.c.created_at, fragments.c.id).offset(offset)
        if limit is not None:
            stmt = stmt.limit(limit)
        with self._read() as conn:
            return [row_to_fragment(r) for r in conn.execute(stmt)]

    def get_fragment(self, memory_id: str, fragment_id: str) -> Fragment:
        """Return one fragment of a memory.

        Raises:
            NotFoundError: If this memory has no such fragment.
        """
        stmt = select(fragments).where(fragments.c.memory_id == memory_id, fragments.c.id == fragment_id)
        with self._read() as conn:
            row = conn.execute(stmt).first()
        if row is None:
            raise NotFoundError(f"fragment {fragment_id!r} not found in memory {memory_id!r}")
        return row_to_fragment(row)

    # -- fragment reads of the live path: index ranges, independent of how many facts there are --
    def related_fragments(
        self, memory_id: str, keys: Collection[str], contents: Collection[str]
    ) -> list[Fragment]:
        """Active fragments with one of these keys (compared canonically) or the same normalized content.

        What reconciling candidates with these keys and contents needs, read by index.
        """
        if not keys and not contents:
            return []
        ckeys = sorted({canonical_key(k) for k in keys})
        hashes = sorted({norm_hash(c) for c in contents})
        with self._read() as conn:
            return _first_of_each(self._backend.related_fact_rows(conn, memory_id, ckeys, hashes))

    def context_fragments(
        self, memory_id: str, *, limit: int, prefixes: Sequence[str] = ("pet:", "plan:"), per_prefix: int = 50
    ) -> list[Fragment]:
        """The ``limit`` most recently updated active fragments, plus up to ``per_prefix`` under each prefix.

        What an extractor is shown as known facts (a model sees the newest; the heuristic rules
        look up known pets and plans), whatever the size of the memory.
        """
        ranges = [FQ.key_range(p) for p in prefixes] if per_prefix > 0 else []
        with self._read() as conn:
            return _first_of_each(self._backend.context_fact_rows(conn, memory_id, limit, ranges, per_prefix))

    def strongest_fragments(
        self, memory_id: str, *, limit: int, now_ms: int, transient: bool | None = None
    ) -> list[Fragment]:
        """The ``limit`` strongest live active fragments: durable first, then confidence, then recency.

        The order of :func:`convmem_graph.nodes.inject.select_fragments`, chosen by the database;
        ``transient`` keeps only temporary (True) or durable (False) facts.
        """
        params: dict[str, Any] = {"mid": memory_id, "limit": limit, "now": now_ms}
        query = FQ.STRONGEST
        if transient is not None:
            query, params["transient"] = FQ.STRONGEST_OF_KIND, transient
        with self._read() as conn:
            return [row_to_fragment(r) for r in conn.execute(query, params)]

    def durable_fragments(
        self, memory_id: str, *, now_ms: int, keys: Collection[str] = (), prefixes: Collection[str] = ()
    ) -> list[Fragment]:
        """Usable durable fragments (what variable inference reads) with these canonical keys or prefixes."""
        with self._read() as conn:
            rows = []
            if keys:
                by_key = conn.execute(FQ.ACTIVE_BY_CKEY, {"mid": memory_id, "ckeys": sorted(keys)})
                rows = [r for r in by_key if FQ.usable(r, now_ms)]
            rows += FQ.prefix_rows(conn, memory_id, prefixes, now_ms=now_ms)
            return _first_of_each(rows)

    def newest_durable_fragments(
        self, memory_id: str, *, now_ms: int, batch: int = 32, start: int = 0
    ) -> Iterator[Fragment]:
        """Usable durable fragments, newest stated first, read page by page (stop iterating to stop).

        ``start`` skips that many of the newest (a caller holding them already).
        """
        offset = start
        while True:
            with self._read() as conn:
                stmt = FQ.NEWEST_DURABLE.limit(batch).offset(offset)
                rows = list(conn.execute(stmt, {"mid": memory_id, "now": now_ms}))
            yield from (row_to_fragment(r) for r in rows)
            if len(rows) < batch:
                return
            offset += batch
            batch = min(batch * 2, 1024)

    def durable_language_counts(self, memory_id: str, *, now_ms: int) -> tuple[int, int]:
        """How many usable durable fragments are mainly Chinese, and how many are not."""
        with self._read() as conn:  # trigger-kept counts: two index reads, not a count of every fact
            return language_counts(conn, memory_id, now_ms=now_ms)

    def add_fragment(
        self,
        memory_id: str,
        content: str,
        *,
        category: str = "other",
        key: str | None = None,
        origin: Literal["manual", "api"] = "manual",
        transient: bool = False,
        expires_at: int | None = None,
        now_ms: int | None = None,
    ) -> Fragment:
        """Add a fragment by hand (or through an API); adding the same one again changes nothing.

        Args:
            memory_id: The memory (created if needed).
            content: The fact, third person, at most 200 characters.
            category: preference, profile, habit, relation, event, other ...
            key: Normalized subject; derived from category and content when omitted.
            origin: ``manual`` or ``api``.
            transient: A temporary fact.
            expires_at: Expiry of a transient fact, ms UTC.
            now_ms: Timestamp of the change.
        """
        _check_id(memory_id)
        check_identifier(category, "category", field="category")
        if key is not None:
            check_identifier(key, "key", field="key")
        now = now_ms if now_ms is not None else _now()
        candidate = FragmentCandidate(
            content=content,
            category=category,
            key=key or manual_key(category, content),
            transient=transient,
            expires_at=expires_at,
            confidence=1.0,
        )
        cause = "set by hand" if origin == "manual" else "added through the API"
        with self._write(memory_id) as conn:
            self._ensure(conn, memory_id, now)
            writer = FragmentWriter(conn, memory_id, now)
            fid, _ = writer.add(candidate, origin=origin, cause=cause, force=True)
            result = writer.get(fid)
            if writer.changed:
                writer.flush()
                self._touch(conn, memory_id, now, facts_dirty=1)
        assert result is not None
        return result

    def add_long_fragment(
        self,
        memory_id: str,
        content: str,
        *,
        category: str = "other",
        origin: Literal["manual", "api"] = "manual",
        now_ms: int | None = None,
    ) -> list[Fragment]:
        """Add a fact of any length as linked pieces of at most 200 characters, in one transaction.

        The text is cut at sentence ends (see :func:`convmem_graph.text.sentences.split_to_fit`); every piece
        is a fragment (Bailian's memory-node limit holds for each) carrying the first piece's id in
        ``part_of`` and its place in ``part``, and the memory block injects the pieces together. A
        fact that fits in one fragment is stored as one, unlinked. Adding the same text again
        changes nothing.

        Returns:
            The pieces in order.
        """
        _check_id(memory_id)
        check_identifier(category, "category", field="category")
        pieces = split_to_fit(content, FRAGMENT_MAX_CHARS)
        if not pieces:
            raise ValueError("add_long_fragment: content must be a non-empty string")
        now = now_ms if now_ms is not None else _now()
        cause = "set by hand" if origin == "manual" else "added through the API"
        with self._write(memory_id) as conn:
            self._ensure(conn, memory_id, now)
            writer = FragmentWriter(conn, memory_id, now)
            ids = []
            for piece in pieces:
                candidate = FragmentCandidate(
                    content=piece, category=category, key=manual_key(category, piece), confidence=1.0
                )
                ids.append(writer.add(candidate, origin=origin, cause=cause, force=True)[0])
            if len(ids) > 1:
                for place, fid in enumerate(ids):
                    writer.link(fid, ids[0], place)
            result = [writer.get(fid) for fid in ids]
            if writer.changed:
                writer.flush()
                self._touch(conn, memory_id, now, facts_dirty=1)
        return [f for f in result if f is not None]

    def update_fragment(
        self,
        memory_id: str,
        fragment_id: str,
        *,
        content: str | None = None,
        category: str | None = None,
        now_ms: int | None = None,
    ) -> Fragment:
        """Edit a fragment's content and/or category by hand (audited when something changed).

        Raises:
            NotFoundError: If this memory has no such fragment.
        """
        now = now_ms if now_ms is not None else _now()
        changes: dict[str, Any] = {}
        if content is not None:
            changes["content"] = content
        if category is not None:
            changes["category"] = check_identifier(category, "category", field="category")
        with self._write(memory_id) as conn:
            writer = FragmentWriter(conn, memory_id, now)
            if writer.get(fragment_id) is None:
                raise NotFoundError(f"fragment {fragment_id!r} not found in memory {memory_id!r}")
            writer.edit(fragment_id, changes, cause="edited by hand")
            result = writer.get(fragment_id)
            if writer.changed:
                writer.flush()
                self._touch(conn, memory_id, now, facts_dirty=1)
        assert result is not None
        return result

    def delete_fragment(self, memory_id: str, fragment_id: str, *, now_ms: int | None = None) -> None:
        """Mark a fragment deleted (kept for the audit trail); deleting twice changes nothing.

        Raises:
            NotFoundError: If this memory has no such fragment.
        """
        now = now_ms if now_ms is not None else _now()
        with self._write(memory_id) as conn:
            writer = FragmentWriter(conn, memory_id, now)
            if writer.get(fragment_id) is None:
                raise NotFoundError(f"fragment {fragment_id!r} not found in memory {memory_id!r}")
            if writer.set_status(fragment_id, "deleted", by=None, cause="deleted by hand"):
                writer.flush()
                self._touch(conn, memory_id, now, facts_dirty=1)

    def commit_extraction(
        self, memory_id: str, ops: Sequence[FragmentOp], *, upto_seq: int, now_ms: int
    ) -> dict[str, int]:
        """Apply one extraction step in one transaction and advance the extraction cursor.

        ``add`` creates a fragment whose id derives from (memory, key, content); ``update`` changes
        the target's content and merges source ids; ``supersede`` adds the new fragment and marks
        the target superseded by it; ``noop`` only merges source message ids. Every visible change
        is audited. Re-applying the same ops changes nothing and adds no audit row.

        Returns:
            How many ops of each kind had an effect (``add``, ``update``, ``supersede``); ops
            without effect count as ``noop``.
        """
        _check_id(memory_id)
        before: Cursors | None = self._peek("cursors", memory_id)
        with self._write(memory_id, keeps=_CACHED | _SAME_MESSAGES) as conn:
            self._ensure(conn, memory_id, now_ms)
            writer = FragmentWriter(conn, memory_id, now_ms)
            counts = writer.apply(ops)
            changed = writer.changed
            writer.flush()
            facts = bool(counts["add"] or counts["update"] or counts["supersede"])
            self._backend.advance_extracted(conn, memory_id, upto_seq, now_ms, changed=changed, facts=facts)
        if before is not None:
            # The run's next cursor read needs no round trip: what PG_EXTRACTED did is known.
            moved = before._replace(extracted_seq=max(before.extracted_seq, upto_seq))
            if changed and facts:
                moved = moved._replace(facts_dirty=True)
            self._remember("cursors", memory_id, moved)
        return counts

    def extracted_seq(self, memory_id: str) -> int:
        """Return the extraction cursor of a memory (0 when unknown)."""
        known = self._peek("cursors", memory_id)
        return int(known.extracted_seq) if known is not None else self._cursor(memory_id, Q.EXTRACTED_SEQ)

    def summarized_seq(self, memory_id: str) -> int:
        """Return the summary cursor of a memory (0 when unknown)."""
        known = self._peek("cursors", memory_id)
        return int(known.summarized_seq) if known is not None else self._cursor(memory_id, Q.SUMMARIZED_SEQ)

    def cursors(self, memory_id: str) -> Cursors:
        """Return the processing state of a memory in one query (zeros if unknown)."""

        def load(conn: Connection) -> Cursors | None:
            row = conn.execute(Q.CURSORS, {"mid": memory_id}).first()
            if row is None:
                return None
            return Cursors(int(row[0] or 0), int(row[1] or 0), int(row[2] or 0), bool(row[3]))

        found = self._cached("cursors", memory_id, load)
        return found if found is not None else Cursors(self.max_seq(memory_id), 0, 0, False)

    def _cursor(self, memory_id: str, query: Any) -> int:
        with self._read() as conn:
            value = conn.execute(query, {"mid": memory_id}).scalar()
        return int(value or 0)

    # -- variables ------------------------------------------------------------------------------
    def define_variables(self, memory_id: str, specs: Sequence[VariableSpec]) -> None:
        """Create or replace variable specs by name (new names go after the existing ones)."""
        _check_id(memory_id)
        now = _now()
        with self._write(memory_id) as conn:
            self._ensure(conn, memory_id, now)
            positions = {
                r.name: r.position
                for r in conn.execute(
                    select(variable_specs.c.name, variable_specs.c.position).where(
                        variable_specs.c.memory_id == memory_id
                    )
                )
            }
            following = max(positions.values(), default=-1) + 1
            for spec in specs:
                if spec.name not in positions:
                    positions[spec.name] = following
                    following += 1
                values = {
                    "memory_id": memory_id,
                    "name": spec.name,
                    "position": positions[spec.name],
                    "description": spec.description,
                    "infer": spec.infer,
                    "type": spec.type,
                    "allowed_values": spec.allowed_values,
                }
                execute_upsert(conn, variable_specs, ("memory_id", "name"), values)
            if specs:
                self._touch(conn, memory_id, now)

    def get_specs(self, memory_id: str) -> list[VariableSpec]:
        """Return the specs defined for a memory, in definition order (empty if none)."""

        def load(conn: Connection) -> list[VariableSpec]:
            return [var.row_to_spec(r) for r in conn.execute(Q.SPECS, {"mid": memory_id})]

        return list(self._cached("specs", memory_id, load))

    def delete_spec(self, memory_id: str, name: str) -> None:
        """Remove a variable spec (stored values stay)."""
        with self._write(memory_id) as conn:
            stmt = delete(variable_specs).where(
                variable_specs.c.memory_id == memory_id, variable_specs.c.name == name
            )
            if conn.execute(stmt).rowcount:
                self._touch(conn, memory_id, _now())

    def retire_variables(
        self, memory_id: str, names: Collection[str], *, now_ms: int | None = None
    ) -> list[str]:
        """Retire fields no longer in the schema: their specs and values go, an audit entry keeps each value.

        Returns:
            The names that had a spec or a value to retire.
        """
        now = now_ms if now_ms is not None else _now()
        retired: list[str] = []
        with self._write(memory_id) as conn:
            stored = var.read_values(conn, memory_id)
            entries = []
            for name in names:
                had_spec = conn.execute(
                    delete(variable_specs).where(
                        variable_specs.c.memory_id == memory_id, variable_specs.c.name == name
                    )
                ).rowcount
                values = [(o, stored[(name, o)]) for o in ("manual", "inferred") if (name, o) in stored]
                for origin, value in values:
                    var.delete_value(conn, memory_id, name, origin)
                    entries.append(
                        audit_row(
                            memory_id,
                            now,
                            "variable",
                            name,
                            "delete",
                            before=var.value_dict(value),
                            after=None,
                            cause="retired: the field is no longer in the schema",
                        )
                    )
                if had_spec or values:
                    retired.append(name)
            if entries:
                write_audit(conn, entries)
            if retired:
                self._touch(conn, memory_id, now)
        return retired

    def _stored_values(self, memory_id: str) -> dict[tuple[str, str], VariableValue]:
        return self._cached("variables", memory_id, lambda conn: var.read_values(conn, memory_id))

    def get_variables(self, memory_id: str) -> dict[str, VariableValue]:
        """Return the effective value of each variable: the manual one wins over the inferred one."""
        return var.effective_values(self._stored_values(memory_id))

    def inferred_variables(self, memory_id: str) -> dict[str, VariableValue]:
        """Return the stored inferred values (manual values left out, even where they win)."""
        stored = self._stored_values(memory_id)
        return {name: v for (name, origin), v in stored.items() if origin == "inferred"}

    def set_manual_variable(
        self, memory_id: str, name: str, value: VariableValueType, *, now_ms: int | None = None
    ) -> VariableValue:
        """Set a value by hand; inference never overwrites it.

        Raises:
            ValueError: Bad name, or a value that does not fit the variable's spec.
        """
        _check_id(memory_id)
        var.check_name(name)
        now = now_ms if now_ms is not None else _now()
        with self._write(memory_id) as conn:
            self._ensure(conn, memory_id, now)
            checked = var.check_value(name, value, var.spec_for(conn, memory_id, name))
            stored = var.read_values(conn, memory_id)
            old = stored.get((name, "manual"))
            if old is not None and old.value == checked:
                return old
            new = VariableValue(name=name, value=checked, origin="manual", updated_at=now)
            row = {
                "memory_id": memory_id,
                "name": name,
                "origin": "manual",
                "value": checked,
                "fragment_ids": None,
                "updated_at": now,
            }
            execute_upsert(conn, variables, ("memory_id", "name", "origin"), row)
            before = old or stored.get((name, "inferred"))
            entry = audit_row(
                memory_id,
                now,
                "variable",
                name,
                "set_manual",
                before=var.value_dict(before),
                after=var.value_dict(new),
                cause="set by hand",
            )
            write_audit(conn, [entry])
            self._touch(conn, memory_id, now)
        return new

    def clear_manual_variable(self, memory_id: str, name: str, *, now_ms: int | None = None) -> None:
        """Remove a hand-set value: the inferred value (if any) becomes effective again."""
        now = now_ms if now_ms is not None else _now()
        with self._write(memory_id) as conn:
            stored = var.read_values(conn, memory_id)
            old = stored.get((name, "manual"))
            if old is None:
                return
            var.delete_value(conn, memory_id, name, "manual")
            entry = audit_row(
                memory_id,
                now,
                "variable",
                name,
                "clear_manual",
                before=var.value_dict(old),
                after=var.value_dict(stored.get((name, "inferred"))),
                cause="cleared by hand; inference takes over",
            )
            write_audit(conn, [entry])
            self._touch(conn, memory_id, now)

    def commit_inferred_variables(
        self,
        memory_id: str,
        guesses: Mapping[str, VariableGuess],
        *,
        now_ms: int,
        inferable: Collection[str] = (),
    ) -> list[str]:
        """Store inferred values (kept apart from manual ones) in one transaction.

        Args:
            memory_id: The memory.
            guesses: New inferred values by name.
            now_ms: Current time.
            inferable: Names inference is responsible for: an inferred value of one of these
                that is not in ``guesses`` lost its supporting facts and is removed (audited).

        Returns:
            Names whose inferred value changed (a new supporting fragment list alone is stored
            without audit and is not reported).
        """
        _check_id(memory_id)
        changed: list[str] = []
        # The values as they will be after this write, for the run's cache (a later read is free).
        after: dict[tuple[str, str], VariableValue] | None = None
        before: Cursors | None = self._peek("cursors", memory_id)
        with self._write(memory_id, keeps=frozenset({"specs", "summary"}) | _SAME_MESSAGES) as conn:
            self._ensure(conn, memory_id, now_ms)
            in_run = self._cache() is not None
            stored = self._stored_values(memory_id) if in_run else var.read_values(conn, memory_id)
            after = dict(stored) if in_run else None
            entries: list[dict[str, Any]] = []
            upserts: list[dict[str, Any]] = []
            for name in sorted(guesses):
                var.check_name(name)
                guess = guesses[name]
                old = stored.get((name, "inferred"))
                if old is not None and old.value == guess.value and old.fragment_ids == guess.fragment_ids:
                    continue
                upserts.append(
                    {
                        "memory_id": memory_id,
                        "name": name,
                        "origin": "inferred",
                        "value": guess.value,
                        "fragment_ids": list(guess.fragment_ids) or None,
                        "updated_at": now_ms,
                    }
                )
                new = VariableValue(
                    name=name,
                    value=guess.value,
                    origin="inferred",
                    fragment_ids=guess.fragment_ids,
                    updated_at=now_ms,
                )
                if after is not None:
                    after[(name, "inferred")] = new
                if old is not None and old.value == guess.value:
                    continue
                changed.append(name)
                cause = f"inferred from fragments [{', '.join(guess.fragment_ids)}]"
                if (name, "manual") in stored:
                    cause += "; the manual value stays effective"
                entries.append(
                    audit_row(
                        memory_id,
                        now_ms,
                        "variable",
                        name,
                        "infer",
                        before=var.value_dict(old),
                        after=var.value_dict(new),
                        cause=cause,
                    )
                )
            if upserts:
                # One statement for all of them (executemany: one round trip on PostgreSQL).
                keys = ("memory_id", "name", "origin")
                conn.execute(upsert(self.dialect, variables, keys, tuple(upserts[0])), upserts)
            for name in sorted(set(inferable) - set(guesses)):
                old = stored.get((name, "inferred"))
                if old is None:
                    continue
                var.delete_value(conn, memory_id, name, "inferred")
                if after is not None:
                    after.pop((name, "inferred"), None)
                changed.append(name)
                entries.append(
                    audit_row(
                        memory_id,
                        now_ms,
                        "variable",
                        name,
                        "infer",
                        before=var.value_dict(old),
                        after=None,
                        cause="no active fact supports it any more",
                    )
                )
            write_audit(conn, entries)
            # Variables are inferred from the facts as they are now: the facts are not dirty any more.
            if changed:
                self._touch(conn, memory_id, now_ms, facts_dirty=0)
            else:
                conn.execute(Q.SET_FACTS_DIRTY, {"mid": memory_id, "dirty": 0})
        if after is not None:
            self._remember("variables", memory_id, after)
        if before is not None:
            self._remember("cursors", memory_id, before._replace(facts_dirty=False))
        return changed

    # -- summary --------------------------------------------------------------------------------
    def get_summary(self, memory_id: str) -> Summary | None:
        """Return the current summary of a memory, if any."""
        found = self._cached("summary", memory_id, partial(_read_summary, memory_id=memory_id))
        # A copy: the cached one answers the run's later reads.
        return found.model_copy() if found is not None else None

    def commit_summary(
        self,
        memory_id: str,
        text: str,
        *,
        tokens: int,
        covers_until_ms: int,
        upto_seq: int,
        now_ms: int,
        origin: Literal["model", "extractive"] = "model",
    ) -> Summary:
        """Store a new summary version and advance the summary cursor, in one transaction.

        The version goes up by one when the text changed; committing the same text again only
        moves the cursor and the covered time.
        """
        _check_id(memory_id)
        before: Cursors | None = self._peek("cursors", memory_id)
        known = self._recall("summary", memory_id)
        with self._write(memory_id, keeps=frozenset({"specs", "variables"}) | _SAME_MESSAGES) as conn:
            self._ensure(conn, memory_id, now_ms)
            old: Summary | None = _read_summary(conn, memory_id) if known is _UNKNOWN else known
            version = 1 if old is None else (old.version if old.text == text else old.version + 1)
            covers = max(covers_until_ms, old.covers_until_ms if old is not None else 0)
            summary = Summary(
                text=text,
                tokens=tokens,
                covers_until_ms=covers,
                version=version,
                updated_at=now_ms,
                origin=origin,
            )
            row = {"memory_id": memory_id, **summary.model_dump()}
            self._backend.store_summary(conn, row, upto_seq=upto_seq, now_ms=now_ms)
        # What the run reads next (inject's snapshot, the next chunk's cursor) is known.
        self._remember("summary", memory_id, summary.model_copy())
        if before is not None:
            moved = before._replace(summarized_seq=max(before.summarized_seq, upto_seq))
            self._remember("cursors", memory_id, moved)
        return summary

    # -- payload cache --------------------------------------------------------------------------
    def save_snapshot(self, memory_id: str, snapshot: MemorySnapshot, *, now_ms: int) -> None:
        """Cache the call-start snapshot of a memory (one row, replaced)."""
        _check_id(memory_id)
        if snapshot.memory_id != memory_id:
            raise ValueError(f"snapshot of memory {snapshot.memory_id!r} cannot be saved under {memory_id!r}")
        row = {"memory_id": memory_id, "data": snapshot.model_dump_json(), "updated_at": now_ms}
        with self._write(memory_id, keeps=_CACHED) as conn:
            self._ensure(conn, memory_id, now_ms)
            execute_upsert(conn, snapshots, ("memory_id",), row)

    def load_snapshot(self, memory_id: str) -> MemorySnapshot | None:
        """Read the cached snapshot by primary key; None when absent or made stale by a change.

        The parsed form of the last rows read is kept in process (compared by their exact text),
        so a call start on an unchanged memory costs one row read and no parsing. Treat the
        returned snapshot as read-only: it may be shared with later calls.
        """
        with self._read() as conn:
            data = conn.execute(Q.SNAPSHOT_DATA, {"mid": memory_id}).scalar()
        if data is None:
            return None
        with self._parsed_lock:
            hit = self._parsed.get(memory_id)
            if hit is not None and hit[0] == data:
                self._parsed.move_to_end(memory_id)
                return hit[1]
        snapshot = MemorySnapshot.model_validate_json(data)
        with self._parsed_lock:
            self._parsed[memory_id] = (data, snapshot)
            self._parsed.move_to_end(memory_id)
            while len(self._parsed) > _PARSED_SNAPSHOTS:
                self._parsed.popitem(last=False)
        return snapshot

    # -- dead letters and audit -----------------------------------------------------------------
    def add_dead_letter(
        self, memory_id: str | None, *, source: str, raw: str, error: str, path: str = "$"
    ) -> bool:
        """Keep a raw item that failed to parse; the same item twice is stored once.

        Returns:
            False if this (memory, raw item) was already stored.
        """
        item_key = dead_letter_key(None if memory_id is None else _check_id(memory_id), raw)
        row = {
            "memory_id": memory_id,
            "item_key": item_key,
            "source": source,
            "raw": raw,
            "error": error,
            "path": path or "$",
            "created_at": _now(),
        }
        with self._write(memory_id, keeps=_CACHED) as conn:
            inserted = conn.execute(insert_ignore(self.dialect, dead_letters), row).rowcount == 1
        if inserted:
            logger.warning("dead letter from %s at %s: %s", source, path or "$", error)
        return inserted

    def list_dead_letters(self, memory_id: str | None = None, *, limit: int = 100) -> list[DeadLetter]:
        """List dead letters, newest first (of one memory, or of all when ``memory_id`` is None)."""
        stmt = select(dead_letters).order_by(dead_letters.c.id.desc()).limit(limit)
        if memory_id is not None:
            stmt = stmt.where(dead_letters.c.memory_id == memory_id)
        with self._read() as conn:
            return [
                DeadLetter(
                    id=r.id,
                    memory_id=r.memory_id,
                    source=r.source,
                    raw=r.raw,
                    error=r.error,
                    path=r.path,
                    created_at=r.created_at,
                )
                for r in conn.execute(stmt)
            ]

    def list_audit(
        self, memory_id: str, *, limit: int = 100, object_id: str | None = None
    ) -> list[AuditEntry]:
        """List the audit entries of a memory (of one fragment id or variable name), newest first."""
        stmt = select(audit).where(audit.c.memory_id == memory_id).order_by(audit.c.id.desc()).limit(limit)
        if object_id is not None:
            stmt = stmt.where(audit.c.object_id == object_id)
        with self._read() as conn:
            return [row_to_audit(r) for r in conn.execute(stmt)]


class StoreRun(MemoryStore):
    """The store bound to one session: its calls share the session's connection.

    Made by :meth:`MemoryStore.session` and :meth:`MemoryStore.run`, never directly; it has every
    method of :class:`MemoryStore` (the record kinds, ``transaction``, ``read``), bound to the
    session's connection and, while a run's or ``transaction()``'s transaction is open on it,
    to that transaction. It is valid until its block ends, in the thread that opened it.

    Example:
        >>> store = MemoryStore.from_url(":memory:")
        >>> with store.run("mem_1") as run:
        ...     run.add_messages("mem_1", [Message(id="m1", role="user", content="I like tea",
        ...         channel="im", source="message", timestamp_ms=1_767_268_800_000)])
        ...     run.count_messages("mem_1")
        ['m1']
        1
    """

    _scope: RunScope

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise TypeError("a StoreRun is made by MemoryStore.session() or MemoryStore.run()")

    def __repr__(self) -> str:
        return f"StoreRun({self.safe_url!r})"

    @property
    def connection(self) -> Connection:
        """The session's connection (inside a run's transaction on PostgreSQL: that transaction's)."""
        return self._scope.conn


def _first_of_each(rows: Iterable[Row[Any]]) -> list[Fragment]:
    """The fragments of ``rows`` in order, each id once (the first row of it wins)."""
    found: dict[str, Fragment] = {}
    for r in rows:
        if r.id not in found:
            found[r.id] = row_to_fragment(r)
    return list(found.values())


def _aborted(conn: Connection) -> bool:
    """Whether the server failed the connection's transaction (every later statement would fail)."""
    try:
        from psycopg.pq import TransactionStatus

        status = conn.connection.driver_connection.info.transaction_status  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - an unusable connection counts as failed
        return True
    return bool(status != TransactionStatus.INTRANS)
