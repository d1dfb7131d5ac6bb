"""Engine creation and dialect helpers shared by the store modules.

SQLite gets WAL, a busy timeout, foreign keys and ``synchronous=NORMAL`` on every connection, and
transactions are begun by us (``BEGIN IMMEDIATE`` for writes) instead of by the ``sqlite3`` module:
a write transaction that reads first (find existing ids, then insert) must hold the write lock from
its start, or a concurrent writer makes its commit fail with a busy-snapshot error.

Inside :func:`~convmem_graph.store.write_gate.bounded_writes` the ``BEGIN IMMEDIATE`` of a write
waits at most that bound for another process's write lock (a program that does not pass the
write gate) and raises :class:`~convmem_graph.store.write_gate.WriteTimeout`; elsewhere the busy
timeout is 30 s. In WAL mode only ``BEGIN IMMEDIATE`` can meet that lock: a commit does not wait
and a reader never does.

On PostgreSQL the same bound covers the waits a request can meet there: a pool checkout (the
pool's own timeout stays 30 s for background work), a connect (libpq ``connect_timeout``, at
least 2 s, ``CONVMEM_PG_CONNECT_TIMEOUT_S`` outside a bound) and, through ``lock_timeout`` set
before the first statement of a bounded transaction that can wait for a lock (reads pay nothing),
a memory's advisory lock or a row lock another session holds. Each ends with
:class:`~convmem_graph.store.write_gate.WriteTimeout` (the server's 503 with ``Retry-After``), and
so does a connection lost or refused inside a bound.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from sqlalchemy import Connection, Engine, Table, create_engine, event
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.pool import ConnectionPoolEntry, QueuePool, StaticPool
from sqlalchemy.sql.dml import Insert

from convmem_graph.store._driver import _compact, driver_execute, driver_safe, execute_rows
from convmem_graph.store.urls import is_memory_sqlite
from convmem_graph.store.write_gate import WriteTimeout, remaining_wait, write_timeout

__all__ = [
    "IN_CHUNK",
    "POOL_DEFAULTS",
    "WRITE_OPTION",
    "PoolSettings",
    "advisory_key",
    "chunked",
    "connect_timeout",
    "create_store_engine",
    "dumps",
    "end_read",
    "execute_upsert",
    "insert_ignore",
    "pool_settings",
    "upsert",
]

#: Execution option that makes the SQLite begin hook take the write lock up front.
WRITE_OPTION = "convmem_write"
#: Bound parameters per ``IN (...)`` list, below SQLite's historical limit of 999.
IN_CHUNK = 500
_BUSY_TIMEOUT_MS = 30_000

_T = TypeVar("_T")

logger = logging.getLogger(__name__)


class PoolSettings(NamedTuple):
    """Connection pool sizes of one process on PostgreSQL, and psycopg's prepared statements.

    A process holds at most ``store_size + store_overflow`` store connections: one per thread
    running store calls, or one per lifecycle run in progress, which pins its connection for the
    run's one transaction (the per-memory lock, every store write and, on the store's database,
    the run's checkpoint writes). The checkpointer keeps its own pool of at most
    ``checkpoint_size`` connections for checkpoint reads and deletes outside runs (and for runs
    whose checkpoints are on another database). ``prepare_threshold`` is psycopg's: a statement
    run that many times on a connection is prepared on the server; ``None`` never prepares (what
    PgBouncer before 1.21 needs in transaction mode). The default 0 prepares at first use, as
    LangGraph's checkpointer does: a run repeats the same few dozen statements, and psycopg's 5
    left each connection parsing and planning them five times over (replay on PostgreSQL ran
    x0.66 of SQLite with 5, x0.71 with 0, same benchmark, interleaved rounds).
    """

    store_size: int
    store_overflow: int
    checkpoint_size: int
    prepare_threshold: int | None
    #: libpq's ``connect_timeout`` (s) outside a bounded context (``CONVMEM_PG_CONNECT_TIMEOUT_S``).
    connect_timeout_s: int = 10


#: Defaults, overridden by ``CONVMEM_PG_POOL_SIZE``, ``CONVMEM_PG_MAX_OVERFLOW``,
#: ``CONVMEM_PG_CHECKPOINT_POOL_SIZE`` and ``CONVMEM_PG_PREPARE_THRESHOLD`` (``none`` or a count).
POOL_DEFAULTS = PoolSettings(store_size=5, store_overflow=10, checkpoint_size=4, prepare_threshold=0)
_POOL_ENV = {
    "store_size": "CONVMEM_PG_POOL_SIZE",
    "store_overflow": "CONVMEM_PG_MAX_OVERFLOW",
    "checkpoint_size": "CONVMEM_PG_CHECKPOINT_POOL_SIZE",
}
_PREPARE_ENV = "CONVMEM_PG_PREPARE_THRESHOLD"
#: Settings of the session advisory-lock pool, which no longer exists (the lock lives in the run's
#: transaction): setting them is reported once, not an error.
_RETIRED_ENV = ("CONVMEM_PG_LOCK_POOL_SIZE", "CONVMEM_PG_LOCK_MAX_OVERFLOW")
_CONNECT_ENV = "CONVMEM_PG_CONNECT_TIMEOUT_S"
#: libpq's connect timeout outside a bounded context: a database host gone silent fails a
#: background connect after this instead of never (libpq's default), and the caller retries.
_CONNECT_DEFAULT_S = 10
#: libpq (and psycopg) treat a connect timeout under 2 s as 2 s.
_CONNECT_MIN_S = 2
#: SQLSTATE of a lock wait ended by ``lock_timeout`` (lock_not_available).
_LOCK_NOT_AVAILABLE = "55P03"
#: ``Connection.info`` key: the ``lock_timeout`` still to set in this transaction (None: none).
_LOCK_TIMEOUT_KEY = "convmem_lock_timeout"
_retired_warned: set[str] = set()


def _may_wait_for_a_lock(statement: str) -> bool:
    """Whether a statement can wait for a lock another session holds (a write, an advisory lock).

    A plain SELECT reads a snapshot and waits for no row lock, so it runs without the timeout.

    Example:
        >>> _may_wait_for_a_lock("SELECT a FROM t WHERE k = %(k)s")
        False
        >>> _may_wait_for_a_lock("SELECT pg_advisory_xact_lock(%(a)s, %(b)s)")
        True
        >>> _may_wait_for_a_lock("UPDATE t SET a = 1")
        True
    """
    head = statement.lstrip()[:6].upper()
    if head != "SELECT":
        return True
    return "pg_advisory" in statement or " FOR UPDATE" in statement or " FOR SHARE" in statement


def pool_settings(environ: Mapping[str, str]) -> PoolSettings:
    """Return the pool sizes: :data:`POOL_DEFAULTS` overridden by ``CONVMEM_PG_*`` entries of ``environ``.

    The store never reads the process environment itself: the settings of the CLI and the server
    (:class:`convmem_graph.settings.ConvMemSettings`) call this with the values they read, and the
    result is passed to :class:`~convmem_graph.store.MemoryStore` and the checkpointer.

    Raises:
        ValueError: A variable is not a non-negative integer (the message names it);
            ``CONVMEM_PG_PREPARE_THRESHOLD`` also takes ``none``.

    Example:
        >>> pool_settings({"CONVMEM_PG_POOL_SIZE": "20"}).store_size
        20
        >>> pool_settings({"CONVMEM_PG_PREPARE_THRESHOLD": "none"}).prepare_threshold is None
        True
    """
    env = environ
    values: dict[str, Any] = POOL_DEFAULTS._asdict()
    for field, name in _POOL_ENV.items():
        raw = env.get(name, "").strip()
        if not raw:
            continue
        if not raw.isdigit():
            raise ValueError(f"{name} must be a non-negative integer, got {raw!r}")
        values[field] = int(raw)
    if values["store_size"] < 1 or values["checkpoint_size"] < 2:
        raise ValueError(
            "CONVMEM_PG_POOL_SIZE must be at least 1 and CONVMEM_PG_CHECKPOINT_POOL_SIZE at least 2"
        )
    raw = env.get(_PREPARE_ENV, "").strip().lower()
    if raw in ("none", "off"):
        values["prepare_threshold"] = None
    elif raw:
        if not raw.isdigit():
            raise ValueError(f"{_PREPARE_ENV} must be a non-negative integer or 'none', got {raw!r}")
        values["prepare_threshold"] = int(raw)
    for name in _RETIRED_ENV:
        if env.get(name, "").strip() and name not in _retired_warned:
            _retired_warned.add(name)
            logger.warning(
                "%s is no longer used: the per-memory lock is taken inside each run's transaction", name
            )
    values["connect_timeout_s"] = connect_timeout(env)
    return PoolSettings(**values)


def connect_timeout(environ: Mapping[str, str]) -> int:
    """Return libpq's ``connect_timeout`` in seconds for connects outside a bounded context.

    ``CONVMEM_PG_CONNECT_TIMEOUT_S`` (default 10; at least 2, libpq's floor). Inside
    :func:`~convmem_graph.store.write_gate.bounded_writes` the bound, rounded up, is used when it
    is shorter.

    Raises:
        ValueError: The variable is not an integer of at least 2 (the message names it).

    Example:
        >>> connect_timeout({})
        10
        >>> connect_timeout({"CONVMEM_PG_CONNECT_TIMEOUT_S": "3"})
        3
    """
    raw = environ.get(_CONNECT_ENV, "").strip()
    if not raw:
        return _CONNECT_DEFAULT_S
    if not raw.isdigit() or int(raw) < _CONNECT_MIN_S:
        raise ValueError(f"{_CONNECT_ENV} must be an integer of at least {_CONNECT_MIN_S}, got {raw!r}")
    return int(raw)


class _BoundedQueuePool(QueuePool):
    """A ``QueuePool`` whose checkout waits at most the bounded context's wait.

    Background work (the worker, replays) keeps the pool's timeout; a request inside
    :func:`~convmem_graph.store.write_gate.bounded_writes` that finds every connection in use (held
    by runs waiting for a lock, say) gives up after its bound with
    :class:`~convmem_graph.store.write_gate.WriteTimeout` instead of 30 s of ``QueuePool`` limit.
    """

    @property
    def _timeout(self) -> float:
        left = remaining_wait()
        return self._base_timeout if left is None else min(self._base_timeout, left)

    @_timeout.setter
    def _timeout(self, value: float) -> None:
        self._base_timeout = value

    def recreate(self) -> QueuePool:
        """The pool's replacement after ``dispose()``, with the pool's own timeout (never a bound)."""
        pool = super().recreate()
        pool._timeout = self._base_timeout
        return pool

    def _do_get(self) -> ConnectionPoolEntry:
        try:
            return super()._do_get()
        except PoolTimeout as exc:
            bound = write_timeout()
            if bound is None:
                raise
            logger.warning(
                "no free PostgreSQL connection within %.1f s (pool of %d in use)", bound, self.size()
            )
            raise WriteTimeout(
                f"every database connection is in use; gave up after {bound:g} s", bound
            ) from exc


#: Serialize JSON compactly and keep non-ASCII text as is (CJK would triple in size escaped).
#: The driver's multi-row insert relies on this being the one serializer of JSON columns.
dumps = _compact


def create_store_engine(url: str, *, echo: bool = False, pools: PoolSettings = POOL_DEFAULTS) -> Engine:
    """Create the SQLAlchemy engine for a normalized store URL.

    Args:
        url: A URL from :func:`convmem_graph.store.urls.normalize_url`.
        echo: Log every SQL statement (SQLAlchemy's own logging; parameters may contain user text).
        pools: PostgreSQL pool sizes and prepared statements (unused on SQLite).

    Returns:
        An engine whose connections are configured for the store.
    """
    backend = make_url(url).get_backend_name()
    if backend == "sqlite":
        memory = is_memory_sqlite(url)
        engine = create_engine(
            url,
            echo=echo,
            json_serializer=dumps,
            # One shared connection for an in-memory database: each new connection would be a new,
            # empty database.
            poolclass=StaticPool if memory else None,
            connect_args={"check_same_thread": False, "timeout": _BUSY_TIMEOUT_MS / 1000},
            # A file database: 5 connections kept, any number more while threads need them. A
            # lifecycle run keeps one for its duration, model calls included, so a bounded pool
            # (SQLAlchemy's 5 + 10) capped a replay's --model-concurrency at 15 per process; the
            # write gate, not the pool, serializes writers.
            **({} if memory else {"pool_size": 5, "max_overflow": -1}),
        )
        _install_sqlite_hooks(engine, wal=not memory)
        return engine
    engine = create_engine(
        url,
        echo=echo,
        json_serializer=dumps,
        pool_pre_ping=True,
        poolclass=_BoundedQueuePool,
        pool_size=pools.store_size,
        max_overflow=pools.store_overflow,
        connect_args={
            "prepare_threshold": pools.prepare_threshold,
            "connect_timeout": pools.connect_timeout_s,
        },
    )
    _install_postgres_hooks(engine)
    return engine


def _install_postgres_hooks(engine: Engine) -> None:
    """Bound a request's connects and lock waits on PostgreSQL (see the module docstring)."""

    @event.listens_for(engine, "do_connect")
    def _on_connect(_dialect: Any, _record: Any, _cargs: Any, cparams: dict[str, Any]) -> None:
        left = remaining_wait()
        if left is not None:
            bounded = max(_CONNECT_MIN_S, math.ceil(left))
            cparams["connect_timeout"] = min(int(cparams.get("connect_timeout") or bounded), bounded)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # A transaction begun in a bounded context bounds its lock waits; noted here, set before
        # its first statement that can wait for a lock (below), so reads pay no round trip.
        left = remaining_wait()
        conn.info[_LOCK_TIMEOUT_KEY] = None if left is None else f"{max(1, int(left * 1000))}ms"

    # Driver-safe: the store's statements sent on psycopg's connection directly
    # (convmem_graph.store._driver) call it themselves, with the cursor they use.
    @event.listens_for(engine, "before_cursor_execute", retval=True)
    @driver_safe
    def _before_execute(
        conn: Connection, cursor: Any, statement: str, params: Any, _context: Any, _many: bool
    ) -> tuple[str, Any]:
        timeout = conn.info.get(_LOCK_TIMEOUT_KEY)
        if timeout is None or not _may_wait_for_a_lock(statement):
            return statement, params
        conn.info[_LOCK_TIMEOUT_KEY] = None
        # SET LOCAL (set_config(..., true)): it ends with this transaction, and the pooled
        # connection, shared with the unbounded worker, keeps no timeout. Same cursor, run first.
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", (timeout,))
        return statement, params

    @event.listens_for(engine, "handle_error")
    def _on_error(context: ExceptionContext) -> BaseException | None:
        bound = write_timeout()
        if bound is None or context.is_pre_ping:
            return None
        original = context.original_exception
        if getattr(original, "sqlstate", None) == _LOCK_NOT_AVAILABLE:
            logger.warning("a lock wait gave up after %.1f s: another session holds the lock", bound)
            return WriteTimeout(
                f"the memory is locked by another database session; gave up after {bound:g} s", bound
            )
        if context.is_disconnect or context.connection is None:
            # The database is unreachable (or went away mid-request): the caller retries later.
            logger.warning("a request gave up on the database (%s)", type(original).__name__)
            return WriteTimeout(f"the database did not answer; gave up after {bound:g} s", bound)
        return None


def _enable_wal(cursor: Any) -> None:
    """Put the database in WAL mode, waiting while another process switches a new file.

    SQLite answers "database is locked" at once, without its busy handler, when two connections
    switch a new database at the same time (forked replay workers opening a fresh file).
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)


def _install_sqlite_hooks(engine: Engine, *, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Autocommit at the driver level; the begin hook below emits BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            # The timeout first; then WAL, which a new file shared with other processes may refuse
            # for a moment while one of them switches it (see _enable_wal).
            cursor.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            # A new (empty) file only: it can then give back the pages the episodic index's
            # merge frees (MemoryStore.compact_episodes), which would otherwise stay in it as free
            # pages. On a file with tables the pragma changes nothing, yet waits for the write
            # lock another process may hold.
            if cursor.execute("PRAGMA page_count").fetchone()[0] == 0:
                cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
            if wal:
                _enable_wal(cursor)
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA synchronous=NORMAL")
            # Freed cells zeroed on every connection, whatever the build's default (Debian's is
            # ON, SQLite's own OFF): a purged message, a dropped snapshot or a deleted memory must
            # not linger in free pages depending on which pooled connection did the work.
            cursor.execute("PRAGMA secure_delete=ON")
            if wal:
                # The store checkpoints the WAL itself, outside the write gate (see write_gate).
                cursor.execute("PRAGMA wal_autocheckpoint=0")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the write lock up front (no read-then-upgrade deadlocks). Readers run each
        # statement in autocommit: every store read is one statement, consistent by itself, and
        # skipping BEGIN/ROLLBACK halves the round trips of a lifecycle run.
        if not conn.get_execution_options().get(WRITE_OPTION):
            return
        left = remaining_wait()
        if left is None:
            # On the driver: a live turn begins five writes, and SQLAlchemy's statement
            # machinery cost more than SQLite's BEGIN itself (errors raised as SQLAlchemy's).
            driver_execute(conn, "BEGIN IMMEDIATE")
            return
        _begin_bounded(conn, left, write_timeout() or left)


def _begin_bounded(conn: Connection, left: float, timeout: float) -> None:
    """``BEGIN IMMEDIATE`` waiting at most ``left`` seconds for another process's write lock.

    ``left`` is what the write gate's wait left of the bound ``timeout`` (one bound for both).
    The busy timeout is lowered for this one statement and put back, so the connection (pooled,
    shared with the unbounded worker) keeps the usual 30 s.
    """
    conn.exec_driver_sql(f"PRAGMA busy_timeout={max(1, int(left * 1000))}")
    try:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    except OperationalError as exc:
        message = str(exc.orig).lower()
        if "locked" not in message and "busy" not in message:
            raise
        logger.warning("BEGIN IMMEDIATE gave up after %.1f s: another process holds the write lock", timeout)
        raise WriteTimeout(
            f"the database is locked by another process; gave up after {timeout:g} s", timeout
        ) from exc
    finally:
        conn.exec_driver_sql(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")


def advisory_key(memory_id: str) -> int:
    """Return a signed 64-bit key for PostgreSQL advisory locks on one memory.

    Example:
        >>> advisory_key("mem_1") == advisory_key("mem_1")
        True
    """
    digest = hashlib.blake2b(memory_id.encode("utf-8"), digest_size=8, person=b"convmem-lock").digest()
    return int.from_bytes(digest, "big", signed=True)


def end_read(conn: Connection) -> None:
    """End a read's implicit transaction with COMMIT, not the ROLLBACK closing it would send.

    psycopg forgets every statement it prepared on a connection when that connection rolls back
    (it cannot tell what the rolled-back work changed), so the server parsed and planned them all
    again after each read: the plans of a 500-memory replay were nine in ten of its executions. A
    read-only transaction commits at the same cost and leaves them prepared.
    """
    if conn.in_transaction():
        conn.commit()


def chunked(items: Sequence[_T], size: int = IN_CHUNK) -> Iterator[Sequence[_T]]:
    """Yield consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


@functools.cache
def insert_ignore(dialect: str, table: Table) -> Insert:
    """Return an INSERT that silently skips rows conflicting with a unique constraint.

    Built once per (dialect, table); execute it with the row as parameters. Its result's
    ``rowcount`` tells whether the row was inserted (SQLAlchemy only keeps the rowcount of INSERT
    statements when asked to).
    """
    # Dialect modules are imported on first use: PostgreSQL's costs ~25 ms at a SQLite call start.
    stmt: Insert
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql as pg_dialect

        stmt = pg_dialect.insert(table).on_conflict_do_nothing()
    else:
        from sqlalchemy.dialects import sqlite as sqlite_dialect

        stmt = sqlite_dialect.insert(table).on_conflict_do_nothing()
    return stmt.execution_options(preserve_rowcount=True)


@functools.cache
def upsert(dialect: str, table: Table, keys: tuple[str, ...], columns: tuple[str, ...]) -> Insert:
    """Return an INSERT of ``columns`` that updates the non-key ones when ``keys`` already exist.

    Built once per shape (statement construction cost more than SQLite's own work on the hot
    path); execute it with the row as parameters.
    """
    if dialect == "postgresql":
        from sqlalchemy.dialects import postgresql as pg_dialect

        pg_stmt = pg_dialect.insert(table)
        update = {c: pg_stmt.excluded[c] for c in columns if c not in keys}
        return pg_stmt.on_conflict_do_update(index_elements=list(keys), set_=update)
    from sqlalchemy.dialects import sqlite as sqlite_dialect

    lite_stmt = sqlite_dialect.insert(table)
    lite_update = {c: lite_stmt.excluded[c] for c in columns if c not in keys}
    return lite_stmt.on_conflict_do_update(index_elements=list(keys), set_=lite_update)


def execute_upsert(conn: Connection, table: Table, keys: tuple[str, ...], row: Mapping[str, Any]) -> None:
    """Insert ``row`` into ``table`` or update the non-key columns of the row with the same ``keys``."""
    execute_rows(conn, upsert(conn.dialect.name, table, keys, tuple(row)), row)
