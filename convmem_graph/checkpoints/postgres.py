"""PostgreSQL checkpointer factory (needs the ``postgres`` extra), and its place in a run's transaction.

On PostgreSQL a lifecycle run is one transaction on one pooled store connection, opened by
``MemoryStore.run`` with the memory's ``pg_advisory_xact_lock``. The saver made here
(:class:`RunScopedPostgresSaver`) writes the run's checkpoints on that same connection when the
checkpoints live in the store's database (:func:`bind_run_connection`): a run commits its store
writes, its checkpoints and their pruning at once, or none of them. Outside runs (reads of the
state, ``delete_thread``) it uses its own pool.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from convmem_graph.store.engine import POOL_DEFAULTS, PoolSettings, advisory_key
from convmem_graph.store.urls import libpq_url, mask_url

if TYPE_CHECKING:
    from langgraph.checkpoint.postgres import PostgresSaver

__all__ = ["RunBinding", "bind_run_connection", "postgres_checkpointer"]

logger = logging.getLogger(__name__)

_INSTALL_HINT = (
    "PostgreSQL checkpoints need the postgres extra: pip install 'convmem-graph[postgres]' "
    "(langgraph-checkpoint-postgres, psycopg, psycopg-pool)"
)
_setup_done: set[str] = set()
_setup_guard = threading.Lock()


@dataclass
class RunBinding:
    """A saver bound to a run's connection, and what it saw of the run's threads.

    What it saw lets the run skip housekeeping that cannot do anything: a thread that held no
    checkpoint when the run began and got at most ``keep`` of them has nothing to prune.
    """

    saver: Any
    connection: Any
    #: Threads whose first read in this run found no checkpoint.
    started_empty: set[str] = field(default_factory=set)
    #: Threads read in this run (only the first read says whether the thread was empty).
    seen: set[str] = field(default_factory=set)
    #: Checkpoints written per thread in this run.
    puts: Counter[str] = field(default_factory=Counter)

    def nothing_to_prune(self, thread_id: str, keep: int) -> bool:
        """Whether the thread holds at most ``keep`` checkpoints, all written by this run."""
        return thread_id in self.started_empty and self.puts[thread_id] <= keep


#: The run in progress in this context. LangGraph copies the context into the threads that write
#: checkpoints in the background, so they see it too.
_RUN_CONNECTION: ContextVar[RunBinding | None] = ContextVar("convmem_run_connection", default=None)
#: LangGraph's blob upsert, run once per blob by ``executemany``; sent as one statement instead.
_BLOB_UPSERT = """
    INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)
    VALUES (%s, %s, %s, %s, %s, %s)
    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING
"""
_BLOB_UPSERT_ARRAYS = (
    "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) "
    "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::bytea[]) "
    "ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING"
)
#: LangGraph's checkpoint upsert, which ``put`` sends right after the blobs of the same checkpoint.
_CHECKPOINT_UPSERT = (
    "\n    INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, "
    "checkpoint, metadata)\n"
    "    VALUES (%s, %s, %s, %s, %s, %s)\n"
    "    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id)\n"
    "    DO UPDATE SET\n"
    "        checkpoint = EXCLUDED.checkpoint,\n"
    "        metadata = EXCLUDED.metadata;\n"
)
#: Both in one statement: the blobs as a data-modifying CTE, then the checkpoint row. The two
#: tables do not refer to each other, so the rows written are the two statements' rows.
_BLOBS_THEN_CHECKPOINT = f"WITH blobs AS ({_BLOB_UPSERT_ARRAYS}) {_CHECKPOINT_UPSERT.strip().rstrip(';')}"


class _RunCursor:
    """The run connection's cursor, with LangGraph's per-blob upserts sent as one statement.

    ``put`` writes a blob per changed channel (eight per lifecycle run) with ``executemany``: a
    statement each on the server. That is sent as one ``unnest`` statement, and held until the
    checkpoint upsert that follows it in ``put``, so both take one round trip (a run of the
    lifecycle makes about thirty). Only those exact statements are rewritten; anything else (or a
    LangGraph version whose statements differ) sends the held blobs first and goes through
    unchanged, and so does the end of the cursor's block (:meth:`flush`).
    """

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        self._blobs: list[list[Any]] | None = None

    def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> Any:
        self.flush()
        if query == _BLOB_UPSERT and not kwargs:
            rows = list(params_seq)
            if rows:
                self._blobs = [list(column) for column in zip(*rows, strict=True)]
            return None
        return self._cursor.executemany(query, params_seq, **kwargs)

    def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
        blobs, self._blobs = self._blobs, None
        if blobs is not None and query == _CHECKPOINT_UPSERT and params is not None and not kwargs:
            return self._cursor.execute(_BLOBS_THEN_CHECKPOINT, [*blobs, *params])
        if blobs is not None:
            self._cursor.execute(_BLOB_UPSERT_ARRAYS, blobs)
        return self._cursor.execute(query, params, **kwargs)

    def flush(self) -> None:
        """Send the blobs still held (their checkpoint upsert did not follow)."""
        blobs, self._blobs = self._blobs, None
        if blobs is not None:
            self._cursor.execute(_BLOB_UPSERT_ARRAYS, blobs)

    def __iter__(self) -> Iterator[Any]:
        self.flush()
        return iter(self._cursor)  # LangGraph iterates some results (special methods skip __getattr__)

    def __getattr__(self, name: str) -> Any:
        self.flush()
        return getattr(self._cursor, name)


@functools.cache
def _saver_class() -> type[PostgresSaver]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    class RunScopedPostgresSaver(PostgresSaver):
        """A :class:`PostgresSaver` that writes inside the bound run's transaction.

        Outside a bound run it is the plain saver on its pool. Inside one, every statement goes
        to the run's connection, without pipeline mode (the connection is shared with the run's
        store calls; psycopg serializes them) and without a transaction of its own.
        """

        #: libpq connection string of the pool (to recognize the store's database).
        conninfo: str = ""

        @contextmanager
        def _cursor(self, *, pipeline: bool = False) -> Iterator[Any]:
            bound = _RUN_CONNECTION.get()
            if bound is None or bound.saver is not self:
                with super()._cursor(pipeline=pipeline) as cur:
                    yield cur
                return
            with bound.connection.cursor(binary=True, row_factory=dict_row) as cur:
                run_cursor = _RunCursor(cur)
                yield run_cursor
                run_cursor.flush()

        def get_tuple(self, config: Any) -> Any:
            found = super().get_tuple(config)
            bound = _RUN_CONNECTION.get()
            if bound is not None and bound.saver is self:
                thread_id = str(config["configurable"]["thread_id"])
                if thread_id not in bound.seen:
                    bound.seen.add(thread_id)
                    if found is None:
                        bound.started_empty.add(thread_id)
            return found

        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            saved = super().put(config, checkpoint, metadata, new_versions)
            bound = _RUN_CONNECTION.get()
            if bound is not None and bound.saver is self:
                bound.puts[str(config["configurable"]["thread_id"])] += 1
            return saved

    return RunScopedPostgresSaver


@contextmanager
def bind_run_connection(saver: Any, store_url: str, connection: Any | None) -> Iterator[RunBinding | None]:
    """Route ``saver``'s statements in this context to ``connection`` (the run's transaction).

    Only for a saver made by :func:`postgres_checkpointer` on the same database as the store;
    anything else is left as it is.

    Yields:
        The binding (what the saver saw of the run's threads), or ``None`` when not bound.
    """
    # Only our saver has a conninfo; it must be the store's database.
    if connection is None or getattr(saver, "conninfo", None) != libpq_url(store_url):
        yield None
        return
    binding = RunBinding(saver, connection)
    token = _RUN_CONNECTION.set(binding)
    try:
        yield binding
    finally:
        _RUN_CONNECTION.reset(token)


def _setup_needed(pool: Any, saver: Any) -> bool:
    """Whether the saver's migrations are not all applied yet (one read; no table means yes)."""
    import psycopg

    try:
        with pool.connection() as conn:
            row = conn.execute("SELECT max(v) AS v FROM checkpoint_migrations").fetchone()
    except psycopg.errors.UndefinedTable:
        return True
    return row is None or row["v"] is None or int(row["v"]) < len(saver.MIGRATIONS) - 1


_LEASE_TABLE = "convmem_setup_leases"
_LEASE_NAME = "checkpoint-setup"
#: A holder that died mid-setup gives its lease up after this long.
_LEASE_SECONDS = 300
#: Advisory-lock key of the lease table's creation (a transaction lock, released at its commit).
_LEASE_TABLE_LOCK_KEY = advisory_key("convmem_graph:checkpoint-setup-lease-table")


@contextmanager
def _setup_lease(pool: Any) -> Iterator[bool]:
    """Hold the checkpoint-setup lease (a row with an expiry), or yield False when it is taken.

    Not an advisory lock: a session lock does not survive a transaction-mode pooler, and a lock
    held by an open transaction would make the setup's ``CREATE INDEX CONCURRENTLY`` wait for
    it (the holder's own setup included). Every statement here is short and commits at once.
    """
    owner = uuid.uuid4().hex
    with pool.connection() as conn:
        # Two concurrent CREATE TABLE IF NOT EXISTS can both pass the check and one then fails on
        # the catalog (DuplicateObject on the row type): create it under a transaction lock.
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LEASE_TABLE_LOCK_KEY,))
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {_LEASE_TABLE} "
                "(name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_at TIMESTAMPTZ NOT NULL)"
            )
        row = conn.execute(
            f"INSERT INTO {_LEASE_TABLE} AS l (name, owner, expires_at) "
            "VALUES (%s, %s, now() + make_interval(secs => %s)) "
            "ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at "
            "WHERE l.expires_at < now() RETURNING owner",
            (_LEASE_NAME, owner, _LEASE_SECONDS),
        ).fetchone()
    held = row is not None and row["owner"] == owner
    try:
        yield held
    finally:
        if held:
            with pool.connection() as conn:
                release = f"DELETE FROM {_LEASE_TABLE} WHERE name = %s AND owner = %s"
                conn.execute(release, (_LEASE_NAME, owner))


def _setup(pool: Any, saver: Any) -> None:
    """Run the saver's migrations unless they are all applied, one process at a time.

    Processes starting together on a new database take turns through a lease row (see
    :func:`_setup_lease`): two ``CREATE INDEX CONCURRENTLY`` on one table deadlock, and the loser
    leaves an invalid index behind. A process that finds the migrations applied does nothing.
    """
    deadline = time.monotonic() + _LEASE_SECONDS + 60
    while _setup_needed(pool, saver):
        with _setup_lease(pool) as held:
            if held:
                if _setup_needed(pool, saver):
                    saver.setup()
                return
        if time.monotonic() > deadline:
            raise TimeoutError("checkpoint setup: another process kept the setup lease too long")
        time.sleep(0.05)


def postgres_checkpointer(
    url: str, *, max_size: int | None = None, pools: PoolSettings | None = None
) -> PostgresSaver:
    """Return a :class:`PostgresSaver` on a connection pool, with its tables set up.

    The pool's connections use autocommit and ``dict_row``, as the saver requires, and
    ``prepare_threshold=0``, or none when ``CONVMEM_PG_PREPARE_THRESHOLD=none`` (behind PgBouncer
    before 1.21 in transaction mode). ``setup()`` runs at most once per database URL and process,
    only when a migration is missing, one process at a time (a lease row, no session lock).

    Args:
        url: ``postgresql://`` (or ``postgresql+psycopg://``) URL.
        max_size: Most connections in the pool (default ``pools.checkpoint_size``, 4; at least 2).
            Lifecycle runs write on the store's run connection instead.
        pools: Pool settings (from ``CONVMEM_PG_*`` via the CLI's or server's settings); default
            :data:`~convmem_graph.store.engine.POOL_DEFAULTS`.

    Returns:
        The saver; close its pool with ``saver.conn.close()``.

    Raises:
        ImportError: If the ``postgres`` extra is not installed.
    """
    try:
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(_INSTALL_HINT) from exc

    settings = pools or POOL_DEFAULTS
    # LangGraph's recommended 0 (prepare at once), unless preparing is turned off.
    prepare = None if settings.prepare_threshold is None else 0
    conninfo = libpq_url(url)
    pool: ConnectionPool = ConnectionPool(
        conninfo,
        min_size=1,
        max_size=max(2, settings.checkpoint_size if max_size is None else max_size),
        kwargs={"autocommit": True, "prepare_threshold": prepare, "row_factory": dict_row},
        open=True,
        name="convmem-checkpoints",
    )
    saver = _saver_class()(pool)  # type: ignore[arg-type]
    saver.conninfo = conninfo  # type: ignore[attr-defined]
    try:
        with _setup_guard:
            if conninfo not in _setup_done:
                _setup(pool, saver)
                _setup_done.add(conninfo)
    except BaseException:
        logger.error("checkpoint setup failed at %s", mask_url(conninfo))
        pool.close()
        raise
    return saver
