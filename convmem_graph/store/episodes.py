"""The episodic index: every stored turn of a memory, searchable by its words at call start.

Facts drop the detail a later question asks for, so the turns themselves are kept searchable over
a memory's whole history. The index lives in the store's database and is written in the same
transaction as the messages:

- **SQLite** (embedded default): an FTS5 table ``cm_episodes`` (contentless, ``detail=none``: only
  which rows hold a term, no copy of the text), tokenizer ``porter unicode61`` (English lower-cased
  and Porter-stemmed). Its rowid puts a memory's rows in one range: ``bucket(memory_id) << 36 |
  seq``, so a search of one memory seeks to that range instead of walking every memory's postings.
  Buckets may collide; candidates are joined back to ``cm_messages`` by memory id, so a collision
  costs a little work and never shows another memory's turn.
- **PostgreSQL**: a side table ``cm_episodes (seq, memory_id, terms tsvector)`` with a GIN index.
  Like the FTS5 table, it is kept in step by the store's own deletes (:func:`delete_episodes`,
  :func:`delete_message_episodes`), not by a foreign key: the per-row check cost a fifth of every
  message insert, and a search joins candidates back to ``cm_messages`` anyway. The lexemes are made in the
  client (the words :func:`search_terms` keeps, Snowball-stemmed by PyStemmer), so the database
  server does no linguistic work and searches stem the same way whatever its text-search setup.

Chinese (and Japanese/Korean) needs no segmenter download: a CJK run is indexed as its character
bigrams (a lone character as itself). Measured against jieba on MADial-Bench (see the README),
bigrams recall as well and cost nothing to install.

Scoring is BM25 done by the caller (:mod:`convmem_graph.payloads.ranker`) over the candidates this
module returns, with per-term document frequencies read from the index. FTS5's own ``bm25()`` is
not used: it computes each term's frequency over the whole table (every memory), which cost tens
of milliseconds per query on a 100k-message file. Each term's postings are read newest first
with a cap, so a query's cost is bounded whatever the memory's size.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterable
from typing import cast

from sqlalchemy import ColumnElement, Connection, column, delete, select, table

from convmem_graph._query_dates import date_spans
from convmem_graph.models import EpisodeHit, EpisodeSearch
from convmem_graph.store._episode_search import (
    EPISODE_TABLE,
    PER_TERM,
    SEQ_MASK,
    bucket,
    collect,
    rowid_range,
    search_sqlite,
)
from convmem_graph.store._vectors import delete_message_vectors, delete_seq_vectors
from convmem_graph.store.engine import dumps
from convmem_graph.store.schema import messages
from convmem_graph.text.terms import CJK_RUN, bigrams, search_terms, stem, stemmed_terms

__all__ = [
    "EPISODE_TABLE",
    "INDEX_VERSION",
    "EpisodeHit",
    "EpisodeSearch",
    "count_episode_rows",
    "delete_episodes",
    "delete_message_episodes",
    "ensure_episode_index",
    "episode_text",
    "index_episodes",
    "pg_index_prefix",
    "pg_index_terms",
    "pg_terms_sql",
    "search_episodes",
    "search_terms",
]

logger = logging.getLogger(__name__)

_META_TABLE = "cm_episode_meta"
#: Bumped whenever :func:`episode_text` changes: the SQLite index is then rebuilt on open (its
#: deletes must see the same text that was indexed).
_TEXT_VERSION = "1"
#: The PostgreSQL side table, for the deletes SQLAlchemy builds.
_PG_EPISODES = table(EPISODE_TABLE, column("seq"))
_PG_VERSION = "4"  # 3: lexemes stemmed in the client, bucket-prefixed; 4: numbers kept
#: What an index built by this version looks like, on either database (the store's schema stamp).
INDEX_VERSION = f"sqlite {_TEXT_VERSION}, postgresql {_PG_VERSION}, turn vectors 1"


def episode_text(content: str) -> str:
    """Return the text the index reads for a message: CJK runs spelled out as character bigrams.

    Example:
        >>> episode_text("我在杭州 running")
        '我在 在杭 杭州  running'
    """
    if not CJK_RUN.search(content):
        return content
    return CJK_RUN.sub(lambda m: " ".join(bigrams(m.group(0))) + " ", content)


# -- schema -------------------------------------------------------------------------------------


def ensure_episode_index(conn: Connection) -> None:
    """Create the index if missing; on SQLite rebuild it when the indexed text format changed.

    Runs inside the store's schema transaction. A database written before the index existed is
    indexed here once (logged), so old memories become searchable.
    """
    if conn.dialect.name == "postgresql":
        _ensure_postgres(conn)
        return
    conn.exec_driver_sql(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {EPISODE_TABLE} USING fts5("
        "body, content='', detail=none, tokenize='porter unicode61 remove_diacritics 2')"
    )
    _rebuild_if_stale(conn, "text_version", _TEXT_VERSION)


def _ensure_postgres(conn: Connection) -> None:
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
    _rebuild_if_stale(conn, "pg_version", _PG_VERSION)


def _rebuild_if_stale(conn: Connection, key: str, version: str) -> None:
    """Index every stored message once when the index is new or its format changed."""
    mark = "%s" if conn.dialect.paramstyle != "qmark" else "?"
    conn.exec_driver_sql(f"CREATE TABLE IF NOT EXISTS {_META_TABLE} (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
    found = conn.exec_driver_sql(f"SELECT v FROM {_META_TABLE} WHERE k = {mark}", (key,)).scalar()
    if found == version:
        return
    if conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"DELETE FROM {EPISODE_TABLE}")
    else:
        conn.exec_driver_sql(f"INSERT INTO {EPISODE_TABLE}({EPISODE_TABLE}) VALUES ('delete-all')")
    by_memory: dict[str, list[tuple[int, str]]] = {}
    for seq, memory_id, content in conn.exec_driver_sql(
        f"SELECT seq, memory_id, content FROM {messages.name}"
    ):
        by_memory.setdefault(memory_id, []).append((int(seq), content))
    if by_memory:
        logger.info("building the episodic index over %d memories", len(by_memory))
    for memory_id, items in by_memory.items():
        index_episodes(conn, memory_id, items)
    conn.exec_driver_sql(
        f"INSERT INTO {_META_TABLE} (k, v) VALUES ({mark}, {mark}) "
        "ON CONFLICT (k) DO UPDATE SET v = excluded.v",
        (key, version),
    )


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

    def terms(content: str) -> str:
        return " ".join(prefix + t for t in stemmed_terms(content))

    return terms


def _tsquery_literal(lexeme: str) -> str:
    # A quoted tsquery lexeme: taken as is, never parsed as query syntax.
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"


# -- writes -------------------------------------------------------------------------------------


def index_episodes(conn: Connection, memory_id: str, rows: Iterable[tuple[int, str]]) -> int:
    """Index ``(seq, content)`` rows of one memory inside the caller's write transaction.

    Returns:
        How many rows were indexed (rows with a seq too large for the rowid layout are skipped
        with a warning; they stay stored, just not searchable).
    """
    if conn.dialect.name == "postgresql":
        terms = pg_index_terms(memory_id)
        found = {str(seq): terms(content) for seq, content in rows}
        if found:
            # One statement for the batch (a row per JSON member), not one per message.
            conn.exec_driver_sql(
                f"INSERT INTO {EPISODE_TABLE} (seq, memory_id, terms) "
                f"SELECT e.key::bigint, %s, {pg_terms_sql('e.value')} "
                "FROM jsonb_each_text(%s::jsonb) AS e ON CONFLICT (seq) DO NOTHING",
                (memory_id, dumps(found)),
            )
        return len(found)
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


def delete_episodes(
    conn: Connection, memory_id: str, rows: Iterable[tuple[int, str]], *, vectors: bool = True
) -> None:
    """Remove the index rows of messages deleted or about to be (``(seq, content)`` as stored).

    On PostgreSQL by seq; on SQLite a contentless FTS5 row is deleted by giving the text it was
    indexed with, which :func:`episode_text` recomputes. The turns' vectors go too (``vectors``).
    """
    rows = list(rows)
    if vectors:
        seqs = [seq for seq, _ in rows]
        for start in range(0, len(seqs), 500):
            delete_seq_vectors(conn, memory_id, seqs[start : start + 500])
    if conn.dialect.name == "postgresql":
        seqs = [seq for seq, _ in rows]
        if seqs:
            conn.exec_driver_sql(f"DELETE FROM {EPISODE_TABLE} WHERE seq = ANY(%s::bigint[])", (seqs,))
        return
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


def delete_message_episodes(conn: Connection, memory_id: str, *where: ColumnElement[bool]) -> None:
    """Remove the index rows of a memory's messages matching ``where`` (all when none), before they go.

    On PostgreSQL one statement finds them through the messages; nothing is read into Python.
    The turns' vectors go too.
    """
    delete_message_vectors(conn, memory_id, *where)
    if conn.dialect.name == "postgresql":
        chosen = select(messages.c.seq).where(messages.c.memory_id == memory_id, *where)
        conn.execute(delete(_PG_EPISODES).where(_PG_EPISODES.c.seq.in_(chosen)))
        return
    stored = conn.execute(
        select(messages.c.seq, messages.c.content).where(messages.c.memory_id == memory_id, *where)
    )
    delete_episodes(conn, memory_id, ((int(seq), content) for seq, content in stored), vectors=False)


def count_episode_rows(conn: Connection, memory_id: str | None = None) -> int:
    """Count index rows (of one memory's rowid range on SQLite, or of one memory on PostgreSQL)."""
    if memory_id is None:
        return int(conn.exec_driver_sql(f"SELECT count(*) FROM {EPISODE_TABLE}").scalar() or 0)
    if conn.dialect.name == "postgresql":
        sql = (
            f"SELECT count(*) FROM {messages.name} m JOIN {EPISODE_TABLE} e USING (seq) "
            "WHERE m.memory_id = %s"
        )
        return int(conn.exec_driver_sql(sql, (memory_id,)).scalar() or 0)
    lo, hi = rowid_range(memory_id)
    sql = f"SELECT count(*) FROM {EPISODE_TABLE} WHERE rowid BETWEEN ? AND ?"
    return int(conn.exec_driver_sql(sql, (lo, hi)).scalar() or 0)


# -- search -------------------------------------------------------------------------------------


def search_episodes(
    conn: Connection,
    memory_id: str,
    query: str,
    *,
    limit: int = 32,
    per_term: int = PER_TERM,
    replies: int | None = None,
) -> EpisodeSearch:
    """Find the stored turns of one memory that hold the query's rarest terms.

    Each term's postings are read newest first, at most ``per_term`` of them (also its document
    frequency, capped). Candidates are ordered by the summed IDF of the terms they hold and the
    best ``limit`` are read from ``cm_messages`` (by memory id: never another memory's turn).

    Args:
        conn: A connection of the store.
        memory_id: The memory.
        query: The current user input (or any text).
        limit: Candidate turns returned.
        per_term: Postings read per term.
        replies: For this many of the best candidates (default: a third of ``limit``), the other
            speaker's next turn is added too (``reply_to`` set): the answer to a found question
            often shares no word with it.

    Returns:
        The candidates with the statistics the ranker scores them with.
    """
    if conn.dialect.name != "postgresql":
        # The store opens SQLite with the standard library's driver.
        driver = cast(sqlite3.Connection, conn.connection.driver_connection)
        return search_sqlite(driver, memory_id, query, limit=limit, per_term=per_term, replies=replies)
    terms = search_terms(query)
    spans = date_spans(query)
    if not (terms or spans) or limit <= 0:
        return EpisodeSearch(terms=terms)
    # The term's stem, prefixed with the memory's bucket: the GIN posting list of this memory
    # alone. OFFSET 0 keeps the planner on that index: a backward scan of the whole table by seq
    # "until LIMIT rows match" took ~50 ms for a rare term in a 100k-message memory.
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
    )
