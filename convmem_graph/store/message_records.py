"""The messages of a memory, their episodic index and turn vectors, and the retention purge."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    delete,
    func,
    select,
)

from convmem_graph._time import now_ms as _now
from convmem_graph.models import (
    EpisodeSearch,
    Message,
)
from convmem_graph.store import _queries as Q
from convmem_graph.store._audit import audit_row, write_audit
from convmem_graph.store._driver import select_rows
from convmem_graph.store._messages import (
    MESSAGE_COLUMNS,
    insert_messages,
    prepare_messages,
    row_to_message,
)
from convmem_graph.store._vectors import dense_episodes, missing_vectors, write_vectors
from convmem_graph.store.core import (
    CACHED_KINDS,
    Cursors,
    StoreCore,
    check_memory_id,
)
from convmem_graph.store.engine import (
    chunked,
)
from convmem_graph.store.postgres import PgStamp
from convmem_graph.store.schema import (
    audit,
    memories,
    messages,
    snapshots,
)

if TYPE_CHECKING:
    pass

__all__ = ["MessageRecords", "PURGE_OBJECT_ID"]

# The store logs under one name, as before its record kinds had modules of their own
# (``convmem ingest`` and log configurations name it).
logger = logging.getLogger("convmem_graph.store.repository")

#: ``object_id`` of the audit entries a retention purge of messages writes.
PURGE_OBJECT_ID = "messages"


class MessageRecords(StoreCore):
    """Messages and the episodic index (see :class:`convmem_graph.store.base.MessageStore`)."""

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
        check_memory_id(memory_id)
        if dedupe_window_ms < 0:
            raise ValueError("dedupe_window_ms must be >= 0")
        now = _now()
        prepared = prepare_messages(messages)
        with self._write(memory_id, keeps=CACHED_KINDS) as conn:
            # A memory created here holds no message yet (messages reference their memory).
            created = self._ensure(conn, memory_id, now)
            # PostgreSQL's insert returns the new rows' seqs; SQLite's executemany cannot.
            returns = self._backend.returns_rows
            replaced: list[tuple[int, str]] = []
            stamped: list[PgStamp] = []
            # SQLite's writer hands back the new rows' (seq, content) for the index: reading them
            # back cost a statement and a row object per message (4 % of a replay, issue 24).
            written: list[tuple[int, str]] = []
            # On PostgreSQL the insert's own statement indexes the new rows and stamps the memory
            # (what it answers lands in ``stamped``); SQLite's does neither (see below).
            writer = self._backend.message_writer(
                now_ms=now, index=index, stamped=stamped, written=written if index and not returns else None
            )
            inserted = insert_messages(
                conn,
                memory_id,
                prepared,
                window_ms=dedupe_window_ms,
                write_rows=writer,
                replaced_rows=replaced,
                new_memory=created,
                interruptions=interruptions,
                now_ms=now,
            )
            # A replaced row's index entry goes whether or not this write indexes.
            self._backend.episodes.remove(conn, memory_id, replaced)
            if inserted and not returns:
                if index:
                    self._backend.episodes.add(conn, memory_id, written)
                self._touch(conn, memory_id, now)
        if created:
            # After the write: its end drops what it does not keep (see _write).
            self._remember_new_memory(memory_id)
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
        return self._backend.search_episodes(self._read, self._driver, memory_id, query, limit=limit)

    def compact_episodes(self) -> None:
        """Fold the episodic index's bulk-written parts together: searches then read less.

        For the end of bulk writes (a replay runs it once at its end): on SQLite it merges the
        FTS5 index's segments into one, a rewrite of the whole index (43 ms at 100k messages;
        a search matching nothing went from 34-110 to 19-26 us); on PostgreSQL it moves the GIN
        index's pending list into its tree. The live path needs none: FTS5's automatic merges
        and the GIN pending list's own limit keep what a search reads bounded. On a SQLite
        file made by this version (``auto_vacuum=INCREMENTAL``) the pages the merge frees are
        then given back to the disk instead of staying in the file as free pages.
        """
        with self._write() as conn:
            self._backend.episodes.compact(conn)
        freed = self._give_back_free_pages()  # the old segments' pages, on files that allow it
        if freed:
            logger.info("gave %d free pages back to the disk after the episodic merge", freed)

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
            if known and tail is None and not self._backend.returns_rows and limit <= len(known):
                # On SQLite (its insert returns no rows to stamp the run's with), when the caller
                # holds a page's worth: ids first, the full rows only when one is not the caller's
                # (a replay's extraction batches, 200 of the run's 1,000 rows each, whose reading
                # and metadata decoding cost more than the read of ids). A live turn holds fewer
                # than a page and reads the rows at once, one statement as before.
                ids = select_rows(conn, self._backend.seq_reads.message_ids_after, params)
                if all(row.id in known for row in ids):
                    return [(int(row.seq), known[row.id]) for row in ids]
            rows = select_rows(conn, self._backend.seq_reads.messages_after, params)
            if not known:
                return [(int(row[0]), row_to_message(row)) for row in rows]
            return [(int(row[0]), known.get(row.id) or row_to_message(row)) for row in rows]

    def message_texts_after(
        self, memory_id: str, after_seq: int, *, limit: int = 500, known: Mapping[str, Message] | None = None
    ) -> list[tuple[int, str]]:
        """``(seq, content)`` of up to ``limit`` messages with seq greater than ``after_seq``, in seq order.

        What :meth:`messages_after` answers, the content only: no ``Message`` is built from a row
        (``summary_due`` reads the whole unsummarized backlog each live turn for its token count).
        ``known`` as there: a message the caller holds gives its own ``content``.
        """
        tail: PgStamp | None = self._peek("tail", memory_id) if known else None
        if tail is not None and known is not None and after_seq >= tail.prior_max:
            # In a PostgreSQL run that stored them: no statement, as in messages_after.
            picked = [(seq, mid) for seq, mid in tail.rows if seq > after_seq][:limit]
            if all(mid in known for _, mid in picked):
                return [(seq, known[mid].content) for seq, mid in picked]
        with self._read() as conn:
            params = {"mid": memory_id, "after": after_seq, "limit": limit}
            rows = select_rows(conn, self._backend.seq_reads.message_texts_after, params)
        if not known:
            return [(int(row[0]), row[2]) for row in rows]
        return [(int(row[0]), known[row[1]].content if row[1] in known else row[2]) for row in rows]

    def message_ids_after(self, memory_id: str, after_seq: int, *, limit: int = 500) -> list[tuple[int, str]]:
        """Return ``(seq, id)`` of up to ``limit`` messages with seq greater than ``after_seq``, in seq order.

        A cheap companion of :meth:`messages_after` for callers that already hold the messages.
        """
        params = {"mid": memory_id, "after": after_seq, "limit": limit}
        with self._read() as conn:
            return [
                (int(seq), str(mid))
                for seq, mid in select_rows(conn, self._backend.seq_reads.message_ids_after, params)
            ]

    def recent_messages(self, memory_id: str, n: int) -> list[Message]:
        """Return the last ``n`` messages by (timestamp, seq), oldest first."""
        if n <= 0:
            return []
        # Message rows only: a PostgreSQL run's held-back memory-row changes stay held back.
        with self._read_keeping_row() as conn:
            rows = select_rows(conn, Q.RECENT_MESSAGES, {"mid": memory_id, "limit": n})
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
        check_memory_id(memory_id)
        with self._write(memory_id) as conn:
            pg = conn.dialect.name == "postgresql"
            cond: list[ColumnElement[bool]] = [messages.c.timestamp_ms < before_ms]
            upto: int | None = None
            if only_processed:
                cursors = conn.execute(
                    select(memories.c.extracted_seq, memories.c.summarized_seq).where(
                        memories.c.memory_id == memory_id
                    )
                ).first()
                if cursors is None:
                    return 0
                upto = min(cursors.extracted_seq, cursors.summarized_seq)
                if not pg:
                    cond.append(messages.c.seq <= upto)
            if pg:
                # The memory and the cursor as one range of the (memory_id, seq) index: generic
                # plans of ``memory_id = $1 AND seq <= $2`` walked the seq primary key from the
                # table's start, in the delete and in the index's and the vectors' deletes that
                # select through it (issue 24; benchmarks/pg_generic_plans.py --purge).
                mine = Q.pg_memory_seqs(memory_id) if upto is None else Q.pg_memory_seqs(memory_id, high=upto)
                cond.extend(mine)
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
            self._backend.episodes.remove_matching(conn, memory_id, *cond)
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
            self._forget_in_process(memory_id)
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

    # -- cursors ----------------------------------------------------------------------------------
    def max_seq(self, memory_id: str) -> int:
        """Return the highest message seq of a memory (0 when it has none)."""
        with self._read() as conn:
            value = conn.execute(self._backend.seq_reads.max_seq, {"mid": memory_id}).scalar()
        return int(value or 0)

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
            rows = select_rows(conn, self._backend.seq_reads.cursors, {"mid": memory_id})
            if not rows:
                return None
            row = rows[0]
            return Cursors(int(row[0] or 0), int(row[1] or 0), int(row[2] or 0), bool(row[3]))

        found = self._cached("cursors", memory_id, load)
        return found if found is not None else Cursors(self.max_seq(memory_id), 0, 0, False)

    def _cursor(self, memory_id: str, query: Any) -> int:
        with self._read() as conn:
            rows = select_rows(conn, query, {"mid": memory_id})
        return int(rows[0][0] or 0) if rows else 0
