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
  Like the FTS5 table, it is kept in step by the store's own deletes (:meth:`EpisodeIndex.remove`,
  :meth:`EpisodeIndex.remove_matching`), not by a foreign key: the per-row check cost a fifth of every
  message insert, and a search joins candidates back to ``cm_messages`` anyway. The lexemes are made in the
  client (the words :func:`search_terms` keeps, Snowball-stemmed by PyStemmer), so the database
  server does no linguistic work and searches stem the same way whatever its text-search setup.

Chinese (and Japanese/Korean) needs no segmenter download: a CJK run is indexed as its character
bigrams (a lone character as itself). Measured against jieba on MADial-Bench (see the README),
bigrams recall as well and cost nothing to install.

This module holds what both share: the text an index reads (:func:`episode_text`), the versions
an index is built to, and :class:`EpisodeIndex`, the interface. Each database's index is its
backend's (``backend.episodes``): :class:`~convmem_graph.store.sqlite.SqliteEpisodeIndex`,
:class:`~convmem_graph.store.postgres.PostgresEpisodeIndex`.

Scoring is BM25 done by the caller (:mod:`convmem_graph.payloads.ranker`) over the candidates this
module returns, with per-term document frequencies read from the index. FTS5's own ``bm25()`` is
not used: it computes each term's frequency over the whole table (every memory), which cost tens
of milliseconds per query on a 100k-message file. Each term's postings are read newest first
with a cap, so a query's cost is bounded whatever the memory's size.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable

from sqlalchemy import ColumnElement, Connection

from convmem_graph.models import EpisodeHit, EpisodeSearch
from convmem_graph.store._episode_search import EPISODE_TABLE, PER_TERM
from convmem_graph.store._vectors import delete_message_vectors, delete_seq_vectors
from convmem_graph.store.schema import messages
from convmem_graph.text.terms import CJK_RUN, bigrams, search_terms

__all__ = [
    "EPISODE_TABLE",
    "INDEX_VERSION",
    "META_TABLE",
    "PG_VERSION",
    "TEXT_VERSION",
    "EpisodeHit",
    "EpisodeIndex",
    "EpisodeSearch",
    "episode_text",
    "search_terms",
]

logger = logging.getLogger(__name__)

#: The index's format versions, one row per key. Keyed by ``k`` alone: on SQLite ``WITHOUT
#: ROWID`` (one B-tree instead of a table and its key's index; migration 15).
META_TABLE = "cm_episode_meta"
#: Bumped whenever :func:`episode_text` changes: the SQLite index is then rebuilt on open (its
#: deletes must see the same text that was indexed).
TEXT_VERSION = "1"
#: The PostgreSQL index's format: 3: lexemes stemmed in the client, bucket-prefixed; 4: numbers kept.
PG_VERSION = "4"
#: What an index built by this version looks like, on either database (the store's schema stamp).
INDEX_VERSION = f"sqlite {TEXT_VERSION}, postgresql {PG_VERSION}, turn vectors 1"


def episode_text(content: str) -> str:
    """Return the text the index reads for a message: CJK runs spelled out as character bigrams.

    Example:
        >>> episode_text("我在杭州 running")
        '我在 在杭 杭州  running'
    """
    # Every script of ``CJK_RUN`` lies above ASCII: an ASCII text (most of an English replay's)
    # is its own index text without a scan (``isascii`` reads a flag of the string).
    if content.isascii() or not CJK_RUN.search(content):
        return content
    return CJK_RUN.sub(lambda m: " ".join(bigrams(m.group(0))) + " ", content)


class EpisodeIndex(ABC):
    """One database's episodic index, written in the caller's transaction and searched by memory.

    Every method takes a connection of the store (inside its write transaction for the writes).
    """

    #: The key of this index's format in ``cm_episode_meta``, and the format this version builds.
    version_key: str
    version: str
    #: The driver's parameter mark.
    mark: str

    @abstractmethod
    def ensure(self, conn: Connection) -> None:
        """Create the index if missing and rebuild it when its format changed (the store's set-up)."""

    @abstractmethod
    def add(self, conn: Connection, memory_id: str, rows: Iterable[tuple[int, str]]) -> int:
        """Index ``(seq, content)`` rows of one memory; return how many were indexed."""

    @abstractmethod
    def count(self, conn: Connection, memory_id: str | None = None) -> int:
        """Count index rows (of one memory, or all)."""

    @abstractmethod
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
        """Find the stored turns of one memory that hold the query's rarest terms.

        Each term's postings are read newest first, at most ``per_term`` of them (also its
        document frequency, capped). Candidates are ordered by the summed IDF of the terms they
        hold and the best ``limit`` are read from ``cm_messages`` (by memory id: never another
        memory's turn). For ``replies`` of the best candidates (default: a third of ``limit``), the
        other speaker's next turn is added too (``reply_to`` set): the answer to a found question
        often shares no word with it.
        """

    @abstractmethod
    def compact(self, conn: Connection) -> None:
        """Fold what bulk writes left in the index into the form searches read fastest (a replay's end)."""

    @abstractmethod
    def _remove_rows(self, conn: Connection, memory_id: str, rows: list[tuple[int, str]]) -> None:
        """Remove the index rows of these ``(seq, content)`` messages."""

    @abstractmethod
    def _remove_matching(self, conn: Connection, memory_id: str, *where: ColumnElement[bool]) -> None:
        """Remove the index rows of the memory's messages matching ``where`` (all when none)."""

    @abstractmethod
    def _clear(self, conn: Connection) -> None:
        """Empty the index (before it is rebuilt)."""

    def remove(
        self, conn: Connection, memory_id: str, rows: Iterable[tuple[int, str]], *, vectors: bool = True
    ) -> None:
        """Remove the index rows of messages deleted or about to be (``(seq, content)`` as stored).

        The turns' vectors go too (``vectors``).
        """
        rows = list(rows)
        if vectors:
            seqs = [seq for seq, _ in rows]
            for start in range(0, len(seqs), 500):
                delete_seq_vectors(conn, memory_id, seqs[start : start + 500])
        self._remove_rows(conn, memory_id, rows)

    def remove_matching(self, conn: Connection, memory_id: str, *where: ColumnElement[bool]) -> None:
        """Remove the index rows of a memory's messages matching ``where`` (all when none), before they go.

        The turns' vectors go too.
        """
        delete_message_vectors(conn, memory_id, *where)
        self._remove_matching(conn, memory_id, *where)

    def rebuild_if_stale(self, conn: Connection) -> None:
        """Index every stored message once when the index is new or its format changed."""
        mark = self.mark
        keyed = " WITHOUT ROWID" if conn.dialect.name == "sqlite" else ""
        conn.exec_driver_sql(
            f"CREATE TABLE IF NOT EXISTS {META_TABLE} (k TEXT PRIMARY KEY, v TEXT NOT NULL){keyed}"
        )
        found = conn.exec_driver_sql(
            f"SELECT v FROM {META_TABLE} WHERE k = {mark}", (self.version_key,)
        ).scalar()
        if found == self.version:
            return
        self._clear(conn)
        by_memory: dict[str, list[tuple[int, str]]] = {}
        for seq, memory_id, content in conn.exec_driver_sql(
            f"SELECT seq, memory_id, content FROM {messages.name}"
        ):
            by_memory.setdefault(memory_id, []).append((int(seq), content))
        if by_memory:
            logger.info("building the episodic index over %d memories", len(by_memory))
        for memory_id, items in by_memory.items():
            self.add(conn, memory_id, items)
        conn.exec_driver_sql(
            f"INSERT INTO {META_TABLE} (k, v) VALUES ({mark}, {mark}) "
            "ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            (self.version_key, self.version),
        )
