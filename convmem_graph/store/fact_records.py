"""The facts (fragments) of a memory and their audit trail."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import (
    select,
)

from convmem_graph._ids import check_identifier
from convmem_graph._time import now_ms as _now
from convmem_graph.errors import NotFoundError
from convmem_graph.models import (
    FRAGMENT_MAX_CHARS,
    Fragment,
    FragmentCandidate,
    FragmentOp,
    FragmentStatus,
)
from convmem_graph.store import _fact_queries as FQ
from convmem_graph.store import _queries as Q
from convmem_graph.store._audit import row_to_audit
from convmem_graph.store._fact_vectors import (
    delete_stale,
    fact_vector_plan,
    stored_fact_vectors,
    write_fact_vectors,
)
from convmem_graph.store._fragments import (
    FragmentWriter,
    manual_key,
    row_to_fragment,
)
from convmem_graph.store.core import (
    CACHED_KINDS,
    NO_FACTS,
    SAME_MESSAGES,
    Cursors,
    StoreCore,
    check_memory_id,
)
from convmem_graph.store.records import AuditEntry
from convmem_graph.store.schema import (
    audit,
    fragments,
)
from convmem_graph.text.sentences import split_to_fit

if TYPE_CHECKING:
    from numpy import ndarray

__all__ = ["FactRecords"]


class FactRecords(StoreCore):
    """Facts and audit (see :class:`convmem_graph.store.base.FactStore`)."""

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
    # (reads shaped for one node live beside it: nodes/_extract_reads.py, nodes/_inference.py)
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
        check_memory_id(memory_id)
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
        check_memory_id(memory_id)
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

    def holds_no_facts(self, memory_id: str) -> bool:
        """Whether this run has proved that the memory has no fact (fragment) at all.

        True only inside a PostgreSQL run whose write created the memory, until the run's next
        write of it; a reader of facts may then answer empty without a statement. ``False`` means
        unknown, never "has facts".

        Example:
            >>> from convmem_graph.store import MemoryStore
            >>> store = MemoryStore.from_url(":memory:")
            >>> store.holds_no_facts("mem_1")  # outside a PostgreSQL run: unknown
            False
        """
        return self._recall(NO_FACTS, memory_id) is True

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
        check_memory_id(memory_id)
        before: Cursors | None = self._peek("cursors", memory_id)
        # Read before the write, whose end drops it: a memory this run created has no fact to load.
        empty = self.holds_no_facts(memory_id)
        with self._write(memory_id, keeps=CACHED_KINDS | SAME_MESSAGES, keeps_row=True) as conn:
            self._ensure(conn, memory_id, now_ms)
            writer = FragmentWriter(conn, memory_id, now_ms, empty=empty)
            counts = writer.apply(ops)
            changed = writer.changed
            writer.flush()
            facts = bool(counts["add"] or counts["update"] or counts["supersede"])
            held = self._held_row(memory_id)
            if held is not None:  # a PostgreSQL run: sent with the run's next change of the row
                held.extracted(upto_seq, now_ms, changed=changed, dirty=1 if changed and facts else None)
            else:
                self._backend.advance_extracted(
                    conn, memory_id, upto_seq, now_ms, changed=changed, facts=facts
                )
        if before is not None:
            # The run's next cursor read needs no round trip: what PG_EXTRACTED did is known.
            moved = before._replace(extracted_seq=max(before.extracted_seq, upto_seq))
            if changed and facts:
                moved = moved._replace(facts_dirty=True)
            self._remember("cursors", memory_id, moved)
        return counts

    # -- fact vectors (see store/_fact_vectors.py) ------------------------------------------------
    def missing_fact_vectors(self, memory_id: str, model: str) -> list[tuple[str, str]]:
        """``(fragment id, text)`` of the memory's active facts with no valid vector by ``model``.

        Oldest first. Vector rows that no longer count (their fact deleted or edited outside the
        store, by hand in SQL) are deleted on the way, any model's.
        """
        with self._read() as conn:
            plan = fact_vector_plan(conn, memory_id, model)
        if plan.stale:
            with self._write(memory_id) as conn:
                delete_stale(conn, memory_id, plan.stale)
        return plan.missing

    def save_fact_vectors(
        self, memory_id: str, model: str, rows: Sequence[tuple[str, str, list[float]]]
    ) -> int:
        """Store ``(fragment id, text, vector)`` rows; a fact deleted or edited since gets none."""
        with self._write(memory_id) as conn:
            return write_fact_vectors(conn, memory_id, model, rows)

    def stored_fact_vectors(
        self, memory_id: str, model: str, facts: Sequence[Fragment]
    ) -> dict[str, ndarray]:
        """The stored vectors by ``model`` of ``facts`` made from their current text (the others lack one)."""
        with self._read() as conn:
            return stored_fact_vectors(conn, memory_id, model, facts)

    def list_audit(
        self, memory_id: str, *, limit: int = 100, object_id: str | None = None
    ) -> list[AuditEntry]:
        """List the audit entries of a memory (of one fragment id or variable name), newest first."""
        stmt = select(audit).where(audit.c.memory_id == memory_id).order_by(audit.c.id.desc()).limit(limit)
        if object_id is not None:
            stmt = stmt.where(audit.c.object_id == object_id)
        with self._read() as conn:
            return [row_to_audit(r) for r in conn.execute(stmt)]
