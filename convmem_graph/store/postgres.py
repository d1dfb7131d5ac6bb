"""PostgreSQL's policy for the memory store: the schema lock and per-memory advisory locks.

Every lock is transaction-scoped (``pg_advisory_xact_lock``), so the store works behind a
transaction-mode pooler (PgBouncer). :mod:`convmem_graph.store.sqlite` is the other backend.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Connection,
    Engine,
    Row,
    any_,
    column,
    delete,
    func,
    select,
    table,
    text,
)
from sqlalchemy.exc import DBAPIError

from convmem_graph._query_dates import date_spans
from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store import _queries as Q
from convmem_graph.store._driver import DriverOpener, ReadOpener, driver_execute, execute_rows, select_rows
from convmem_graph.store._episode_search import COUNT_CAP, EPISODE_TABLE, PER_TERM, bucket, collect
from convmem_graph.store._messages import INSERT_COLUMNS, RowWriter
from convmem_graph.store._snapshot_revisions import SnapshotRow
from convmem_graph.store._summary_facts import FactReads, StrongestRows, pg_reads
from convmem_graph.store.engine import advisory_key, dumps, insert_ignore
from convmem_graph.store.episodes import PG_VERSION, EpisodeIndex, EpisodeSearch
from convmem_graph.store.schema import add_postgres_options, memories, messages, snapshots
from convmem_graph.text.terms import search_terms, stem, stemmed_terms

if TYPE_CHECKING:
    from convmem_graph.models import Fragment
    from convmem_graph.store._row_patch import RowPatch

__all__ = [
    "POSTGRES_EPISODES",
    "SCHEMA_LOCK_KEY",
    "PgFollow",
    "PgStamp",
    "PostgresBackend",
    "PostgresEpisodeIndex",
    "int32_pair",
    "pg_index_prefix",
    "pg_index_terms",
    "pg_terms_sql",
]

logger = logging.getLogger(__name__)

#: "cm_schem": serializes table creation across processes (one bigint key).
SCHEMA_LOCK_KEY = 0x636D5F736368656D
_SCHEMA_LOCK = text("SELECT pg_advisory_xact_lock(:k)")
# Two-int key space for memories: never meets the one-bigint schema and setup locks.
_XACT_LOCK = text("SELECT pg_advisory_xact_lock(CAST(:a AS integer), CAST(:b AS integer))")
# The same lock for a transaction whose commit need not wait for its WAL flush (``flush=False`` of
# :meth:`PostgresBackend.lock_memory`): the setting joins the lock's round trip, and ``is_local``
# ends it with the transaction.
_XACT_LOCK_NO_FLUSH = text(
    "SELECT pg_advisory_xact_lock(CAST(:a AS integer), CAST(:b AS integer)), "
    "set_config('synchronous_commit', 'off', true)"
)


def int32_pair(key: int) -> tuple[int, int]:
    """Split a 64-bit advisory key into the two signed 32-bit halves of the two-int lock space."""
    hi, lo = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
    return (hi - (1 << 32) if hi >= 1 << 31 else hi), (lo - (1 << 32) if lo >= 1 << 31 else lo)


def pg_index_prefix(memory_id: str) -> str:
    """The prefix every PostgreSQL lexeme of this memory's turns carries (its bucket).

    Every lexeme carries its memory's bucket, so a GIN posting list holds one memory's turns.
    """
    return f"{bucket(memory_id):07x}_"


def pg_terms_sql(terms: str) -> str:
    """SQL of the ``tsvector`` indexed for a turn from its lexemes as one space-separated string.

    ``terms`` is an SQL expression (a parameter or a column) holding what :func:`pg_index_terms`
    made. The lexemes are final: no parser or dictionary runs on the server.
    """
    return f"array_to_tsvector(string_to_array({terms}, ' '))"


def pg_index_terms(memory_id: str) -> Callable[[str], str]:
    """The function giving a turn's PostgreSQL lexemes: its stemmed terms behind the memory's prefix.

    Stemming happens in the client (PyStemmer's Snowball, see :func:`stemmed_terms`) and searches
    stem the query the same way, so both sides agree whatever the server's text-search setup;
    the database server, the resource many app hosts share, does no linguistic work.

    Example:
        >>> pg_index_terms("m1")("Running to 成都")  # doctest: +ELLIPSIS
        '..._run ..._成都'
    """
    prefix = pg_index_prefix(memory_id)

    glue = " " + prefix

    def terms(content: str) -> str:
        found = stemmed_terms(content)
        return prefix + glue.join(found) if found else ""

    return terms


def _tsquery_literal(lexeme: str) -> str:
    # A quoted tsquery lexeme: taken as is, never parsed as query syntax.
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


#: The side table, for the deletes SQLAlchemy builds.
_PG_EPISODES = table(EPISODE_TABLE, column("seq"))


class PostgresEpisodeIndex(EpisodeIndex):
    """The episodic index on PostgreSQL: ``cm_episodes (seq, memory_id, terms tsvector)`` with a GIN index.

    Lexemes are stemmed in the client and carry their memory's bucket (:func:`pg_index_terms`).
    """

    version_key = "pg_version"
    version = PG_VERSION
    mark = "%s"

    def ensure(self, conn: Connection) -> None:
        """Create the side table and its GIN index if missing; rebuild them when the format changed."""
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {EPISODE_TABLE} ("
            "seq BIGINT PRIMARY KEY, memory_id TEXT NOT NULL, terms TSVECTOR NOT NULL)"
        )
        # Indexes written before this version had a foreign key to cm_messages; its per-row check
        # cost a fifth of each message insert. Looked up first: ALTER TABLE would take the table's
        # exclusive lock on every open.
        fkeys = conn.exec_driver_sql(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype = 'f'",
            (EPISODE_TABLE,),
        ).scalars()
        for name in list(fkeys):
            conn.exec_driver_sql(f'ALTER TABLE {EPISODE_TABLE} DROP CONSTRAINT "{name}"')
        conn.exec_driver_sql(
            f"CREATE INDEX IF NOT EXISTS ix_{EPISODE_TABLE}_terms ON {EPISODE_TABLE} USING GIN (terms)"
        )
        # Versions before format 3 kept a (memory_id, seq) index here; only counts used it, and every
        # insert paid for it. Counts join cm_messages' own (memory_id, seq) index instead.
        conn.exec_driver_sql(f"DROP INDEX IF EXISTS ix_{EPISODE_TABLE}_memory_id")
        self.rebuild_if_stale(conn)

    def add(self, conn: Connection, memory_id: str, rows: Iterable[tuple[int, str]]) -> int:
        """Index ``(seq, content)`` rows: one statement for the batch (a row per JSON member)."""
        terms = pg_index_terms(memory_id)
        found = {str(seq): terms(content) for seq, content in rows}
        if found:
            conn.exec_driver_sql(
                f"INSERT INTO {EPISODE_TABLE} (seq, memory_id, terms) "
                f"SELECT e.key::bigint, %s, {pg_terms_sql('e.value')} "
                "FROM jsonb_each_text(%s::jsonb) AS e ON CONFLICT (seq) DO NOTHING",
                (memory_id, dumps(found)),
            )
        return len(found)

    def compact(self, conn: Connection) -> None:
        """Move the GIN index's pending list into its tree (``gin_clean_pending_list``).

        With ``fastupdate`` (PostgreSQL's default) new entries wait in an unsorted pending list
        of up to ``gin_pending_list_limit`` (4 MB) that every search scans whole, until a later
        insert overflows it or autovacuum runs. After bulk writes the list is full: moving it
        costs at most those 4 MB once. Only the index's owner may: for another role the
        pending list stays where it is (logged) and autovacuum moves it later.
        """
        try:
            with conn.begin_nested():
                conn.exec_driver_sql(f"SELECT gin_clean_pending_list('ix_{EPISODE_TABLE}_terms'::regclass)")
        except DBAPIError as exc:
            logger.info("the episodic index's pending list was left to autovacuum: %s", exc.orig)

    def _remove_rows(self, conn: Connection, memory_id: str, rows: list[tuple[int, str]]) -> None:
        seqs = [seq for seq, _ in rows]
        if seqs:
            conn.exec_driver_sql(f"DELETE FROM {EPISODE_TABLE} WHERE seq = ANY(%s::bigint[])", (seqs,))

    def _remove_matching(self, conn: Connection, memory_id: str, *where: ColumnElement[bool]) -> None:
        # One statement finds them through the messages; nothing is read into Python. The seqs as
        # an array the index's key is probed with: ``seq IN (subquery)`` was planned generically
        # as a scan of the whole index table joined to the memory's rows (the purge's delete,
        # issue 24; benchmarks/pg_generic_plans.py --purge).
        chosen = select(messages.c.seq).where(messages.c.memory_id == memory_id, *where)
        seqs = any_(func.array(chosen.scalar_subquery()))
        conn.execute(delete(_PG_EPISODES).where(_PG_EPISODES.c.seq == seqs))

    def _clear(self, conn: Connection) -> None:
        conn.exec_driver_sql(f"DELETE FROM {EPISODE_TABLE}")

    def count(self, conn: Connection, memory_id: str | None = None) -> int:
        """Count index rows (of one memory, joined to its messages, or all)."""
        if memory_id is None:
            return int(conn.exec_driver_sql(f"SELECT count(*) FROM {EPISODE_TABLE}").scalar() or 0)
        sql = (
            f"SELECT count(*) FROM {messages.name} m JOIN {EPISODE_TABLE} e USING (seq) "
            "WHERE m.memory_id = %s"
        )
        return int(conn.exec_driver_sql(sql, (memory_id,)).scalar() or 0)

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
        """See :meth:`EpisodeIndex.search`: one GIN lookup per term, of this memory's lexemes only."""
        terms = search_terms(query)
        spans = date_spans(query)
        if not (terms or spans) or limit <= 0:
            return EpisodeSearch(terms=terms)
        # The term's stem, prefixed with the memory's bucket: the GIN posting list of this memory
        # alone. OFFSET 0 keeps the planner on that index: a backward scan of the whole table by
        # seq "until LIMIT rows match" took ~50 ms for a rare term in a 100k-message memory.
        sql = (
            f"SELECT seq FROM (SELECT seq FROM {EPISODE_TABLE} WHERE terms @@ %s::tsquery OFFSET 0) t "
            "ORDER BY seq DESC LIMIT %s"
        )
        prefix = pg_index_prefix(memory_id)
        postings: dict[str, list[int]] = {}
        for term, lexeme in zip(terms, stem(terms), strict=True):
            rows = conn.exec_driver_sql(sql, (_tsquery_literal(prefix + lexeme), per_term))
            postings[term] = [int(r[0]) for r in rows]
        return collect(
            conn.exec_driver_sql,
            "%s",
            memory_id,
            terms,
            postings,
            limit=limit,
            replies=replies,
            spans=spans,
            per_term=per_term,
            count_sql=_PG_COUNT,
        )


#: The memory's messages counted up to :data:`COUNT_CAP` (the one parameter: the memory id), read
#: from its ``(memory_id, seq)`` entries alone. ``WHERE memory_id = $1 LIMIT 1000`` under a generic
#: plan, with statistics saying one memory holds most messages, was a scan of the whole table for
#: any other memory (``benchmarks/pg_generic_plans.py``); the memory named by two comparisons of
#: the row ``(memory_id, seq)`` (together exactly ``memory_id = $1``), in that index's order, is
#: answered by that index (the same form as ``_queries.PG_SEQ_READS``' newest seq).
_PG_COUNT = (
    f"SELECT count(*) FROM (SELECT 1 FROM {messages.name}, (SELECT %s::text AS m) v "
    f"WHERE {Q.pg_memory_range_sql('v.m')} "
    f"ORDER BY memory_id, seq LIMIT {COUNT_CAP}) t"
)

#: The one instance every PostgreSQL store uses (it holds no state).
POSTGRES_EPISODES = PostgresEpisodeIndex()


class PostgresBackend:
    """What the store does differently on PostgreSQL."""

    name = "postgresql"
    #: The episodic index (a GIN-indexed side table).
    episodes = POSTGRES_EPISODES
    #: Writers of one memory take turns on its transaction-scoped advisory lock.
    locks_memories = True
    #: ``add_messages`` inserts with ``RETURNING`` (the new seqs, indexed in the same statement).
    returns_rows = True
    #: Reads of a memory's messages by seq in forms no generic plan answers by a table walk.
    seq_reads = Q.PG_SEQ_READS
    #: No write gate: the server orders writers.
    gate = None

    def __init__(self) -> None:
        # The summary's fact statements, with whether the ids' collation is Python's order
        # (asked of the database at the first read).
        self._fact_reads: FactReads | None = None

    def is_set_up(self, engine: Engine) -> bool:
        """Always set up on open, under the schema lock: the pending migrations are read there."""
        return False

    def begin_setup(self, conn: Connection) -> None:
        """Take the schema lock and set the table options only PostgreSQL's DDL reads."""
        self.schema_lock(conn)
        add_postgres_options()

    def set_up(self, conn: Connection, steps: Callable[[Connection], None]) -> None:
        """Run the set-up ``steps``, then the index's (under the schema lock :meth:`begin_setup` took)."""
        steps(conn)
        self.episodes.ensure(conn)

    def end_setup(self, conn: Connection) -> None:
        """Nothing to stamp: the migration record is the state."""

    def schema_lock(self, conn: Connection) -> None:
        """Serialize schema changes across processes (two concurrent ``CREATE TABLE`` can fail)."""
        conn.execute(_SCHEMA_LOCK, {"k": SCHEMA_LOCK_KEY})

    def hold_memory(self, memory_id: str) -> AbstractContextManager[None]:
        """Nothing beyond the run's transaction: its ``pg_advisory_xact_lock`` holds other processes off."""
        return nullcontext()

    def lock_memory(self, conn: Connection, memory_id: str, *, flush: bool = True) -> None:
        """Take the memory's ``pg_advisory_xact_lock`` in the current transaction.

        With ``flush=False`` the transaction also commits without waiting for the server to flush
        its WAL (``SET LOCAL synchronous_commit = off``, in the same statement): a server crash
        can then lose it, and only it and later commits (WAL is flushed in order), never leave
        it half-applied. For writers that redo lost work anyway (a replay's runs, see
        :meth:`~convmem_graph.store.MemoryStore.run`).
        """
        hi, lo = int32_pair(advisory_key(memory_id))
        execute_rows(conn, _XACT_LOCK if flush else _XACT_LOCK_NO_FLUSH, {"a": hi, "b": lo})

    @staticmethod
    def message_writer(
        *,
        now_ms: int,
        index: bool,
        stamped: list[PgStamp] | None = None,
        written: list[tuple[int, str]] | None = None,
    ) -> RowWriter:
        """The insert of a batch's new message rows, which also indexes them and stamps the memory.

        One statement for the whole batch, its rows sent as one JSON array: one round trip and one
        executor run on the server, and one C-speed dump instead of an array per column (psycopg
        builds text arrays element by element in Python). The same statement indexes the new rows
        in the episodic index (``index``), drops the cached snapshot, moves ``updated_at`` to
        ``now_ms`` and answers the memory's cursors, appended to ``stamped`` (see :class:`PgStamp`).
        ``written`` (SQLite's list of the rows to index) is not filled: this statement indexes them.
        """

        def write(conn: Connection, memory_id: str, rows: list[tuple[Any, ...]], ids: list[str]) -> None:
            follow = PgFollow(now_ms, pg_index_terms(memory_id) if index else None, stamped)
            params: dict[str, Any] = {"rows": dumps(rows)}
            sql = _PG_INSERT_SQL
            if follow is not None:
                sql = _pg_followed_sql(follow.index_terms is not None)
                params |= {"mid": memory_id, "now": follow.now_ms}
                if follow.index_terms is not None:
                    # The turn's index terms, made here: stemming is then no work for the server.
                    terms = follow.index_terms
                    params["ep"] = dumps({row[1]: terms(row[3]) for row in rows})
            answer = driver_execute(conn, sql, params).fetchone()
            if follow is not None and follow.stamped is not None and answer is not None:
                top, extracted, summarized, dirty, prior, seqs = answer
                cursors = (int(top), int(extracted), int(summarized), int(dirty))
                stored = [(int(seq), mid) for seq, mid in zip(seqs, ids, strict=True)]
                follow.stamped.append(PgStamp(cursors, int(prior or 0), stored))

        return write

    @staticmethod
    def ensure_memory_row(conn: Connection, row: dict[str, Any]) -> bool:
        """Insert the memory's row unless it exists; whether it was inserted."""
        return execute_rows(conn, insert_ignore("postgresql", memories), row) == 1

    def touch(self, conn: Connection, params: dict[str, Any]) -> None:
        """Drop the cached snapshot and move ``updated_at``: one statement (a round trip each counts)."""
        execute_rows(conn, Q.PG_TOUCH, params)

    def related_fact_rows(
        self, conn: Connection, memory_id: str, ckeys: Sequence[str], hashes: Sequence[int]
    ) -> list[Row[Any]]:
        """Active facts with one of the canonical keys or content hashes (a fact may come twice).

        One round trip for both index lookups (each arm is still one).
        """
        params = {"mid": memory_id, "ckeys": list(ckeys), "hashes": list(hashes)}
        return select_rows(conn, FQ.PG_RELATED, params)

    def context_fact_rows(
        self, conn: Connection, memory_id: str, limit: int, ranges: Sequence[tuple[str, str]], per_prefix: int
    ) -> list[Row[Any]]:
        """The ``limit`` most recently updated active facts, then up to ``per_prefix`` in each key range.

        One round trip for every range (arms in that order: newest, then by range).
        """
        if limit <= 0 and not ranges:
            return []
        params: dict[str, Any] = {"mid": memory_id, "limit": limit, "per_prefix": per_prefix}
        families = tuple(FQ.indexed_family(lo, hi) for lo, hi in ranges)
        for k, ((lo, hi), family) in enumerate(zip(ranges, families, strict=True), start=1):
            if family is None:  # a family's arm names its keys in the statement
                params[f"lo{k}"], params[f"hi{k}"] = lo, hi
        return select_rows(conn, FQ.pg_context(limit > 0, families), params)

    def advance_extracted(
        self, conn: Connection, memory_id: str, upto_seq: int, now_ms: int, *, changed: bool, facts: bool
    ) -> None:
        """Move the extraction cursor and touch the memory when facts changed: one statement."""
        params = {"mid": memory_id, "upto": upto_seq, "now": now_ms, "changed": changed}
        execute_rows(conn, Q.PG_EXTRACTED, params | {"dirty": 1 if changed and facts else None})

    def search_episodes(
        self, read: ReadOpener, driver: DriverOpener, memory_id: str, query: str, *, limit: int
    ) -> EpisodeSearch:
        """The episodic search (:meth:`PostgresEpisodeIndex.search`) on the store's connection."""
        with read() as conn:
            return self.episodes.search(conn, memory_id, query, limit=limit)

    @staticmethod
    def snapshot_row(
        read: ReadOpener, driver: DriverOpener, memory_id: str, kept_rev: int | None
    ) -> SnapshotRow | None:
        """The cached snapshot's JSON text (no revision here: the caller compares the text)."""
        with read() as conn:
            data = conn.execute(Q.SNAPSHOT_DATA, {"mid": memory_id}).scalar()
        return None if data is None else SnapshotRow(None, str(data), committed=False)

    def summary_facts(
        self,
        strongest: StrongestRows,
        read: ReadOpener,
        driver: DriverOpener,
        memory_id: str,
        *,
        limit: int,
        now_ms: int,
    ) -> tuple[list[Fragment], list[Fragment]]:
        """The summary's strongest facts of each kind: the kept lists moved by the facts written since.

        Migration 16's revisions (``store/_fact_revisions.py``): one statement reads the memory's
        revision and the rows written since; the ~400 rows of both lists only on a full read.
        """
        with read() as conn:
            reads = self._fact_reads
            if reads is None:
                reads = self._fact_reads = pg_reads(_ids_bytewise(conn))

            def fetch(statement: Any, params: dict[str, Any]) -> list[Any]:
                return select_rows(conn, statement, params)

            return strongest.read(fetch, memory_id, limit=limit, now_ms=now_ms, reads=reads)

    def store_summary(
        self,
        conn: Connection,
        row: dict[str, Any],
        *,
        upto_seq: int,
        now_ms: int,
        held: RowPatch | None = None,
    ) -> None:
        """Write the summary row, move the summary cursor and touch the memory: one statement.

        ``held``: the run's held-back changes of the memory's row (the extraction cursor,
        ``facts_dirty``), applied by the same statement. Its stamp and snapshot drop need nothing
        more: the summary stamps the row after them and drops the snapshot itself.
        """
        upto, dirty = (held.upto, held.dirty) if held is not None else (None, None)
        params = {"mid": row["memory_id"], "upto": upto_seq, "held_upto": upto, "held_dirty": dirty}
        execute_rows(conn, Q.PG_SUMMARIZED, params | row)

    @contextmanager
    def deleting(self, conn: Connection) -> Iterator[None]:
        """Nothing around a delete: freed tuples are not readable through the server."""
        yield


#: PostgreSQL type of each of ``INSERT_COLUMNS``, read from the JSON row sent for it.
_PG_TYPES = (
    "text", "text", "text", "text", "text", "text", "bigint", "bigint", "text", "text",
    "boolean", "boolean", "text", "json", "bigint",
)  # fmt: skip
#: Rows in the array's order, so seqs follow the batch's order; ``metadata`` travels as text.
_PG_INSERT_SQL = (
    f"INSERT INTO {messages.name} ({', '.join(INSERT_COLUMNS)}) "
    f"SELECT {', '.join(f'(r.e->>{i})::{t}' for i, t in enumerate(_PG_TYPES))} "
    "FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS r(e, n) ORDER BY r.n "
    "RETURNING seq"
)


class PgFollow(NamedTuple):
    """What a PostgreSQL message insert also does in its statement when it inserts rows."""

    #: The memory's ``updated_at`` (the call-start snapshot is dropped too).
    now_ms: int
    #: The episodic index's lexemes of a content, as one space-separated string (``None``: no
    #: indexing).
    index_terms: Callable[[str], str] | None = None
    #: When given, what the statement answers is appended to it when it inserted anything.
    stamped: list[PgStamp] | None = None


class PgStamp(NamedTuple):
    """What a PostgreSQL message insert answers about the memory it wrote."""

    #: The memory's cursors after it: ``(max_seq, extracted_seq, summarized_seq, facts_dirty)``.
    cursors: tuple[int, int, int, int]
    #: The memory's newest seq before it (0: none).
    prior_max: int
    #: ``(seq, id)`` of the inserted rows in seq order: every message of the memory past
    #: ``prior_max`` (its writers take turns, so no other writer's row lies among them).
    rows: list[tuple[int, str]]


@functools.cache
def _pg_followed_sql(index: bool) -> str:
    """The insert as a CTE, then the episodic rows of what it inserted and the memory's stamp.

    The episodic rows take the seqs the insert returned (joined by message id). Answers one row
    about the memory (see :class:`PgStamp`) when anything was inserted, none otherwise.
    """
    insert = _PG_INSERT_SQL.replace("RETURNING seq", "RETURNING seq, id")
    parts = [f"WITH ins AS ({insert})"]
    if index:
        parts.append(
            f", ep AS (INSERT INTO {EPISODE_TABLE} (seq, memory_id, terms) "
            f"SELECT ins.seq, %(mid)s, {pg_terms_sql('t.value')} "
            # The seqs were just assigned: no conflict to arbitrate (a plain insert is cheaper).
            "FROM ins JOIN jsonb_each_text(%(ep)s::jsonb) AS t ON t.key = ins.id)"
        )
    parts.append(
        f", gone AS (DELETE FROM {snapshots.name} WHERE memory_id = %(mid)s AND EXISTS (SELECT 1 FROM ins))"
        f", stamp AS (UPDATE {memories.name} SET updated_at = %(now)s WHERE memory_id = %(mid)s "
        "AND EXISTS (SELECT 1 FROM ins) RETURNING extracted_seq, summarized_seq, facts_dirty) "
        # The memory's cursors after the insert: its writers take turns, so its newest seq is one
        # just assigned (a read of them after the insert was a round trip of its own).
        "SELECT (SELECT max(seq) FROM ins), s.extracted_seq, s.summarized_seq, s.facts_dirty, "
        # The statement's snapshot is the one before it: this is the newest seq before the insert.
        # Its form: see _queries.PG_SEQ_READS (``max(seq) ... WHERE memory_id = $1`` read every
        # newer message of the table for a new memory under a generic plan).
        f"(SELECT seq FROM {messages.name} WHERE {Q.pg_memory_range_sql('%(mid)s')} "
        "ORDER BY memory_id DESC, seq DESC LIMIT 1), "
        "(SELECT array_agg(seq ORDER BY seq) FROM ins) FROM stamp s"
    )
    return "".join(parts)


#: The collation ``cm_fragments.id`` sorts by (its own, else the database's) and its provider.
_ID_COLLATION = """
SELECT CASE WHEN c.collname = 'default' THEN d.datcollate ELSE c.collcollate END,
       CASE WHEN c.collname = 'default' THEN d.datlocprovider ELSE c.collprovider END
  FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
  JOIN pg_database d ON d.datname = current_database()
 WHERE a.attrelid = 'cm_fragments'::regclass AND a.attname = 'id'
"""


def _ids_bytewise(conn: Connection) -> bool:
    """Whether the server orders fact ids as Python orders strings (by code point).

    A libc ``C`` / ``POSIX`` locale compares bytes, and UTF-8's byte order is code point order;
    glibc's ``C.UTF-8`` sorts by code point too. Any other locale (or ICU) may not.
    """
    found = conn.exec_driver_sql(_ID_COLLATION).first()
    if found is None or found[0] is None:
        return False
    name, provider = str(found[0]), str(found[1])
    return provider == "c" and (name in ("C", "POSIX") or name.lower() in ("c.utf-8", "c.utf8"))
