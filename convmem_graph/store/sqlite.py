"""SQLite's policy for the memory store: the write gate, the schema stamp and secure deletes.

The repository (:class:`convmem_graph.store.MemoryStore`) asks its backend wherever the two
databases differ in what they must do, not only in SQL text; :mod:`convmem_graph.store.postgres`
is the other backend.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import ColumnElement, Connection, Engine, Row, select

from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store import _queries as Q
from convmem_graph.store._driver import DriverOpener, ReadOpener, driver_execute, select_rows
from convmem_graph.store._episode_search import EPISODE_TABLE, PER_TERM, SEQ_MASK, rowid_range, search_sqlite
from convmem_graph.store._fresh_sqlite import is_empty, set_up_fresh
from convmem_graph.store._messages import INSERT_COLUMNS, RowWriter
from convmem_graph.store._snapshot_revisions import SnapshotRow, read_snapshot_row
from convmem_graph.store._stamp import SCHEMA_STAMP
from convmem_graph.store._summary_facts import StrongestRows
from convmem_graph.store.engine import execute_upsert
from convmem_graph.store.episodes import TEXT_VERSION, EpisodeIndex, EpisodeSearch, episode_text
from convmem_graph.store.locks import file_memory_lock
from convmem_graph.store.schema import memories, messages, snapshots, summaries
from convmem_graph.store.urls import sqlite_path
from convmem_graph.store.write_gate import WriteGate, write_gate

if TYPE_CHECKING:
    from convmem_graph.models import Fragment
    from convmem_graph.store._row_patch import RowPatch

__all__ = ["FTS_SECURE_DELETE", "SQLITE_EPISODES", "SqliteBackend", "SqliteEpisodeIndex"]

logger = logging.getLogger(__name__)

#: FTS5 ``secure-delete`` (SQLite 3.42+) removes a deleted row's terms from the index pages at once.
FTS_SECURE_DELETE = sqlite3.sqlite_version_info >= (3, 42)


class SqliteEpisodeIndex(EpisodeIndex):
    """The episodic index on SQLite: a contentless FTS5 table, one rowid range per memory.

    See :mod:`convmem_graph.store.episodes` for the layout (``bucket(memory_id) << 36 | seq``).
    """

    version_key = "text_version"
    version = TEXT_VERSION
    mark = "?"

    def ensure(self, conn: Connection) -> None:
        """Create the FTS5 table if missing; rebuild it when the indexed text format changed."""
        conn.exec_driver_sql(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS {EPISODE_TABLE} USING fts5("
            "body, content='', detail=none, tokenize='porter unicode61 remove_diacritics 2')"
        )
        self.rebuild_if_stale(conn)

    def add(self, conn: Connection, memory_id: str, rows: Iterable[tuple[int, str]]) -> int:
        """Index ``(seq, content)`` rows; a seq too large for the rowid layout is skipped with a warning.

        Such a row stays stored, just not searchable.
        """
        base = rowid_range(memory_id)[0]
        params: list[tuple[int, str]] = []
        for seq, content in rows:
            if not 0 < seq <= SEQ_MASK:
                logger.warning("message seq %d is outside the episodic index's range; not indexed", seq)
                continue
            params.append((base | seq, episode_text(content)))
        if params:
            conn.exec_driver_sql(f"INSERT INTO {EPISODE_TABLE} (rowid, body) VALUES (?, ?)", params)
        return len(params)

    def compact(self, conn: Connection) -> None:
        """Merge the FTS5 index's segments into one (``optimize``); a no-op when it is one already.

        Every write transaction adds a segment, and FTS5's automatic merges leave a few per
        level of size: a replayed 100k-message file had ~15, and a MATCH looks each term up in
        every one (a search matching nothing: 34-110 us, 19-26 us after the merge). The merge
        rewrites the whole index once (43 ms at 100k messages), so it runs after bulk writes,
        not per turn.
        """
        conn.exec_driver_sql(f"INSERT INTO {EPISODE_TABLE} ({EPISODE_TABLE}) VALUES ('optimize')")

    def segments(self, conn: Connection) -> int:
        """How many b-tree segments the FTS5 index holds (each is read by every term's lookup)."""
        sql = f"SELECT count(DISTINCT segid) FROM {EPISODE_TABLE}_idx"
        return int(conn.exec_driver_sql(sql).scalar() or 0)

    def _remove_rows(self, conn: Connection, memory_id: str, rows: list[tuple[int, str]]) -> None:
        # A contentless FTS5 row is deleted by giving the text it was indexed with, which
        # episode_text recomputes.
        base = rowid_range(memory_id)[0]
        params = [(base | seq, episode_text(content)) for seq, content in rows if 0 < seq <= SEQ_MASK]
        # A contentless FTS5 'delete' of a row that was never indexed corrupts the index ("database
        # disk image is malformed"): messages stored with episodic=False have none, so only the
        # rowids the index holds are deleted.
        indexed: set[int] = set()
        for start in range(0, len(params), 500):
            part = [rowid for rowid, _ in params[start : start + 500]]
            marks = ", ".join("?" * len(part))
            found = conn.exec_driver_sql(
                f"SELECT rowid FROM {EPISODE_TABLE} WHERE rowid IN ({marks})", tuple(part)
            )
            indexed.update(int(r) for r in found.scalars())
        params = [p for p in params if p[0] in indexed]
        if params:
            conn.exec_driver_sql(
                f"INSERT INTO {EPISODE_TABLE} ({EPISODE_TABLE}, rowid, body) VALUES ('delete', ?, ?)", params
            )

    def _remove_matching(self, conn: Connection, memory_id: str, *where: ColumnElement[bool]) -> None:
        stored = conn.execute(
            select(messages.c.seq, messages.c.content).where(messages.c.memory_id == memory_id, *where)
        )
        self._remove_rows(conn, memory_id, [(int(seq), content) for seq, content in stored])

    def _clear(self, conn: Connection) -> None:
        conn.exec_driver_sql(f"INSERT INTO {EPISODE_TABLE}({EPISODE_TABLE}) VALUES ('delete-all')")

    def count(self, conn: Connection, memory_id: str | None = None) -> int:
        """Count index rows (of one memory's rowid range, or all)."""
        if memory_id is None:
            return int(conn.exec_driver_sql(f"SELECT count(*) FROM {EPISODE_TABLE}").scalar() or 0)
        lo, hi = rowid_range(memory_id)
        sql = f"SELECT count(*) FROM {EPISODE_TABLE} WHERE rowid BETWEEN ? AND ?"
        return int(conn.exec_driver_sql(sql, (lo, hi)).scalar() or 0)

    def search(
        self,
        conn: Connection,
        memory_id: str,
        query: str,
        *,
        limit: int = 32,
        per_term: int = PER_TERM,
        replies: int | None = None,
    ) -> EpisodeSearch:
        """See :meth:`EpisodeIndex.search`; through the driver's connection (the standard library's)."""
        driver = cast(sqlite3.Connection, conn.connection.driver_connection)
        return search_sqlite(driver, memory_id, query, limit=limit, per_term=per_term, replies=replies)


#: The cached snapshot's JSON as the bytes SQLite stores.

#: The one instance every SQLite store uses (it holds no state).
SQLITE_EPISODES = SqliteEpisodeIndex()


class SqliteBackend:
    """What the store does differently on SQLite (a file, or ``:memory:``).

    Args:
        url: The store's SQLite URL.
        memory: Whether it is an in-memory database (no file: no gate, no stamp).
    """

    name = "sqlite"
    #: The episodic index (FTS5).
    episodes = SQLITE_EPISODES
    #: No transaction-scoped advisory locks: writers of a file take turns at the write gate.
    locks_memories = False
    #: ``add_messages`` reads the new seqs back: SQLite's executemany cannot return rows.
    returns_rows = False
    #: Reads of a memory's messages by seq: the equality forms (SQLite plans each execution).
    seq_reads = Q.SEQ_READS

    def __init__(self, url: str, *, memory: bool) -> None:
        self.memory = memory
        # Writers of a SQLite file queue here instead of sleeping in SQLite's busy handler.
        self.gate: WriteGate | None = None if memory else write_gate(sqlite_path(url))
        # Beside the file, as the write gate's: two processes naming one file differently share it.
        self._lock_dir = None if memory else os.path.realpath(sqlite_path(url)) + "-convmem.locks"

    def hold_memory(self, memory_id: str) -> AbstractContextManager[None]:
        """Hold a memory against other processes for a run (the in-process lock is already held).

        Nothing in a SQLite file plays PostgreSQL's advisory lock: without this, two processes
        (two ``convmem replay``, a replay beside ``convmem serve``) ran one memory at once and a
        summary could be built from variables the other run then changed. ``flock`` on the
        memory's lock file (see :func:`~convmem_graph.store.locks.file_memory_lock`); an in-memory
        database lives in one process only.
        """
        if self._lock_dir is None:
            return nullcontext()
        return file_memory_lock(self._lock_dir, memory_id)

    def is_set_up(self, engine: Engine) -> bool:
        """Whether this file was set up by a version with this schema and needs nothing filled in.

        A read of ``PRAGMA user_version`` (no write lock). Facts an older version wrote since
        (without the derived columns) are found by the partial index on them: one indexed probe,
        and the full set-up only when there are any. An in-memory database is always new.
        """
        if self.memory:
            return False
        with engine.connect() as conn:
            if conn.exec_driver_sql("PRAGMA user_version").scalar() != SCHEMA_STAMP:
                return False
            return conn.execute(FQ.ANY_UNDERIVED).first() is None

    def begin_setup(self, conn: Connection) -> None:
        """Nothing to do first: the set-up's transaction already holds the file's write lock."""

    def set_up(self, conn: Connection, steps: Callable[[Connection], None]) -> None:
        """Run the set-up ``steps``, then the index's; on an empty database replay what they did before.

        The replay (:mod:`~convmem_graph.store._fresh_sqlite`) gives the same schema without
        compiling every ``CREATE`` and reading the catalog before each: a new store opens in a
        fraction of the time (every test, every new file).
        """
        if is_empty(conn):
            set_up_fresh(conn, steps, self.episodes.ensure, kept=self._kept(steps))
        else:
            steps(conn)
            self.episodes.ensure(conn)

    def _kept(self, steps: Callable[[Connection], None]) -> list[tuple[str, Any]] | None:
        """The generated set-up script (``store/_fresh_script.py``) when it is these steps' and current.

        Current: made under this version's schema stamp. Otherwise ``None``, and the steps run on a
        scratch database first (see :mod:`~convmem_graph.store._fresh_sqlite`).
        """
        from convmem_graph.store import _fresh_script
        from convmem_graph.store.migrations import set_up_schema

        if (
            _fresh_script.STAMP != SCHEMA_STAMP
            or steps is not set_up_schema
            or self.episodes is not SQLITE_EPISODES
        ):
            return None
        return [(statement, tuple(parameters)) for statement, parameters in _fresh_script.SCRIPT]

    def end_setup(self, conn: Connection) -> None:
        """Stamp the file; part of the set-up's transaction, so there only if the set-up committed."""
        conn.exec_driver_sql(f"PRAGMA user_version = {SCHEMA_STAMP}")

    def schema_lock(self, conn: Connection) -> None:
        """Nothing to take: a write transaction on SQLite already excludes every other writer."""

    def lock_memory(self, conn: Connection, memory_id: str, *, flush: bool = True) -> None:
        """Nothing to take: see :attr:`locks_memories` (``flush``: a commit here never syncs, see ``run``)."""

    @staticmethod
    def message_writer(
        *,
        now_ms: int,
        index: bool,
        stamped: list[Any] | None = None,
        written: list[tuple[int, str]] | None = None,
    ) -> RowWriter:
        """The insert of a batch's new message rows, and nothing else.

        Straight to the driver's ``executemany``: SQLAlchemy's per-row parameter processing cost
        more than SQLite's own insert work for large batches. ``executemany`` returns no rows, so
        the caller indexes them and touches the memory itself; the arguments PostgreSQL's one
        statement uses for that are ignored here. ``written``: the new rows' ``(seq, content)``,
        in seq order, are appended to it (what the episodic index takes), known from the
        connection's last rowid instead of read back.
        """

        def write(conn: Connection, memory_id: str, rows: list[tuple[Any, ...]], ids: list[str]) -> None:
            conn.exec_driver_sql(_INSERT_SQL, rows)
            if written is not None and rows:
                # ``seq`` is the rowid (INTEGER PRIMARY KEY AUTOINCREMENT): each row of the insert
                # gets one more than the largest seq the table ever held, which the row before it
                # just became, so the batch's seqs are consecutive and end at the last rowid.
                # Asked now: a later insert on this connection (an FTS5 'delete') moves it.
                last = int(driver_execute(conn, "SELECT last_insert_rowid()").fetchall()[0][0])
                first = last - len(rows) + 1
                written.extend(zip(range(first, last + 1), [row[_CONTENT_AT] for row in rows], strict=True))

        return write

    @staticmethod
    def ensure_memory_row(conn: Connection, row: dict[str, Any]) -> bool:
        """Insert the memory's row unless it exists; whether it was inserted.

        On the driver (see :func:`~convmem_graph.store._driver.driver_execute`): every write of a
        live turn makes it. The other columns get their schema defaults (0), as SQLAlchemy's
        insert gives them.
        """
        params = (
            row["memory_id"],
            row["description"],
            row["created_at"],
            row["updated_at"],
            row["extracted_seq"],
            row["summarized_seq"],
        )
        return bool(driver_execute(conn, _ENSURE_SQL, params).rowcount == 1)

    def touch(self, conn: Connection, params: dict[str, Any]) -> None:
        """Drop the memory's cached snapshot and move its ``updated_at`` (and ``facts_dirty``).

        On the driver: each write of a live turn ends with these two statements.
        """
        mid = params["mid"]
        driver_execute(conn, _DROP_SNAPSHOT_SQL, (mid,))
        if params["dirty"] is None:
            driver_execute(conn, _SET_UPDATED_AT_SQL, (params["now"], mid))
        else:
            driver_execute(conn, _SET_UPDATED_AT_DIRTY_SQL, (params["now"], params["dirty"], mid))

    def related_fact_rows(
        self, conn: Connection, memory_id: str, ckeys: Sequence[str], hashes: Sequence[int]
    ) -> list[Row[Any]]:
        """Active facts with one of the canonical keys or content hashes (a fact may come twice).

        Two statements, not one with OR: each is then an index lookup.
        """
        rows = select_rows(conn, FQ.ACTIVE_BY_CKEY, {"mid": memory_id, "ckeys": ckeys})
        rows += select_rows(conn, FQ.ACTIVE_BY_HASH, {"mid": memory_id, "hashes": hashes})
        return rows

    def context_fact_rows(
        self, conn: Connection, memory_id: str, limit: int, ranges: Sequence[tuple[str, str]], per_prefix: int
    ) -> list[Row[Any]]:
        """The ``limit`` most recently updated active facts, then up to ``per_prefix`` in each key range.

        A range that is a whole family with an index of its own (``pet:``, ``plan:``) reads that
        index's first rows; any other range is read and sorted.
        """
        rows = select_rows(conn, FQ.RECENTLY_UPDATED, {"mid": memory_id, "limit": limit}) if limit > 0 else []
        for lo, hi in ranges:
            family = FQ.indexed_family(lo, hi)
            if family is not None:
                rows += select_rows(
                    conn, FQ.RECENTLY_UPDATED_IN_FAMILY[family], {"mid": memory_id, "limit": per_prefix}
                )
                continue
            params = {"mid": memory_id, "lo": lo, "hi": hi, "limit": per_prefix}
            rows += select_rows(conn, FQ.RECENTLY_UPDATED_IN_RANGE, params)
        return rows

    def advance_extracted(
        self, conn: Connection, memory_id: str, upto_seq: int, now_ms: int, *, changed: bool, facts: bool
    ) -> None:
        """Move the extraction cursor; touch the memory when facts changed (up to three statements)."""
        cursor = driver_execute(conn, _ADVANCE_SQL["extracted_seq"], (upto_seq, memory_id, upto_seq))
        if changed:
            self.touch(conn, {"mid": memory_id, "now": now_ms, "dirty": 1 if facts else None})
        elif cursor.rowcount:
            driver_execute(conn, _SET_UPDATED_AT_SQL, (now_ms, memory_id))

    @staticmethod
    def search_episodes(
        read: ReadOpener, driver: DriverOpener, memory_id: str, query: str, *, limit: int
    ) -> EpisodeSearch:
        """The episodic search on the driver's cursor: SQLAlchemy's work per statement outweighed FTS5's."""
        with driver() as raw:
            return search_sqlite(raw, memory_id, query, limit=limit)

    @staticmethod
    def snapshot_row(
        read: ReadOpener, driver: DriverOpener, memory_id: str, kept_rev: int | None
    ) -> SnapshotRow | None:
        """The cached snapshot's revision and JSON bytes, these only when the revision is new.

        See :mod:`convmem_graph.store._snapshot_revisions`: one primary-key read, and the ~93 kB
        row of a full memory is not fetched when the memory's snapshot did not change.
        """
        with driver() as raw:
            return read_snapshot_row(raw, memory_id, kept_rev)

    @staticmethod
    def summary_facts(
        strongest: StrongestRows,
        read: ReadOpener,
        driver: DriverOpener,
        memory_id: str,
        *,
        limit: int,
        now_ms: int,
    ) -> tuple[list[Fragment], list[Fragment]]:
        """The summary's strongest facts of each kind: the kept lists moved by the facts written since.

        On the driver's connection (``store/_fact_revisions.py``, migration 9).
        """
        with driver() as raw:
            return strongest.read(raw, memory_id, limit=limit, now_ms=now_ms)

    def store_summary(
        self,
        conn: Connection,
        row: dict[str, Any],
        *,
        upto_seq: int,
        now_ms: int,
        held: RowPatch | None = None,
    ) -> None:
        """Write the summary row, move the summary cursor and touch the memory.

        ``held`` is always ``None`` here: only a PostgreSQL run holds memory-row changes back.
        """
        assert held is None, "a SQLite store holds no memory-row change back"
        execute_upsert(conn, summaries, ("memory_id",), row)
        driver_execute(conn, _ADVANCE_SQL["summarized_seq"], (upto_seq, row["memory_id"], upto_seq))
        self.touch(conn, {"mid": row["memory_id"], "now": now_ms, "dirty": None})

    @contextmanager
    def deleting(self, conn: Connection) -> Iterator[None]:
        """Around a memory's delete: leave none of its bytes in free pages or the episodic index.

        Freed cells are zeroed on every connection (``PRAGMA secure_delete=ON`` at connect, see
        ``store.engine``); what is left is the episodic index, whose entries a delete only marks.
        """
        if FTS_SECURE_DELETE:
            # FTS5 ``secure-delete``: a stored setting of the index.
            conn.exec_driver_sql(
                f"INSERT INTO {EPISODE_TABLE} ({EPISODE_TABLE}, rank) VALUES ('secure-delete', 1)"
            )
        yield
        if not FTS_SECURE_DELETE:
            _purge_deleted_terms(conn)


#: The live turn's fixed writes as the driver runs them (the same statements as
#: ``_queries``' ``DROP_SNAPSHOT``, ``SET_UPDATED_AT(_DIRTY)``, ``ADVANCE_*`` and the memory's
#: insert-or-ignore; ``tests/unit/store/test_driver_writes.py`` holds them to those).
_ENSURE_SQL = (
    f"INSERT INTO {memories.name} (memory_id, description, created_at, updated_at, extracted_seq,"
    " summarized_seq, facts_dirty, facts_zh, facts_other, expired_through, expired_zh, expired_other)"
    " VALUES (?, ?, ?, ?, ?, ?, 0, 0, 0, 0, 0, 0) ON CONFLICT DO NOTHING"
)
_DROP_SNAPSHOT_SQL = f"DELETE FROM {snapshots.name} WHERE memory_id = ?"
_SET_UPDATED_AT_SQL = f"UPDATE {memories.name} SET updated_at = ? WHERE memory_id = ?"
_SET_UPDATED_AT_DIRTY_SQL = f"UPDATE {memories.name} SET updated_at = ?, facts_dirty = ? WHERE memory_id = ?"
_ADVANCE_SQL = {
    cursor: f"UPDATE {memories.name} SET {cursor} = ? WHERE memory_id = ? AND {cursor} < ?"
    for cursor in ("extracted_seq", "summarized_seq")
}

_MARKS = ", ".join("?" * len(INSERT_COLUMNS))
_INSERT_SQL = f"INSERT INTO {messages.name} ({', '.join(INSERT_COLUMNS)}) VALUES ({_MARKS})"
#: Where a message row of :data:`_INSERT_SQL` holds its content.
_CONTENT_AT = INSERT_COLUMNS.index("content")


def _purge_deleted_terms(conn: Connection) -> None:
    """Without ``secure-delete``, rewrite the episodic index so a deleted memory's terms leave the file.

    A contentless FTS5 delete only appends tombstones: the deleted terms stay in the older index
    segments (an ID-card number was found 8 times in the file after a checkpoint). ``optimize``
    merges every segment into one, dropping them; its cost grows with the whole index, paid once
    per deleted memory (deletes are rare; the retention purge of old messages does not call it).
    """
    conn.exec_driver_sql(f"INSERT INTO {EPISODE_TABLE} ({EPISODE_TABLE}) VALUES ('optimize')")
