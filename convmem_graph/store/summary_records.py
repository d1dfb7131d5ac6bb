"""The summary of a memory and its cached call-start snapshot."""

from __future__ import annotations

from functools import partial
from typing import Literal

from sqlalchemy import (
    Connection,
)

from convmem_graph.models import (
    Fragment,
    MemorySnapshot,
    Summary,
)
from convmem_graph.store import _queries as Q
from convmem_graph.store._driver import select_rows
from convmem_graph.store.core import (
    CACHED_KINDS,
    PARSED_SNAPSHOTS,
    SAME_MESSAGES,
    UNKNOWN,
    Cursors,
    StoreCore,
    check_memory_id,
)
from convmem_graph.store.engine import (
    execute_upsert,
)
from convmem_graph.store.schema import (
    snapshots,
)

__all__ = ["SummaryRecords"]


def _read_summary(conn: Connection, memory_id: str) -> Summary | None:
    rows = select_rows(conn, Q.SUMMARY, {"mid": memory_id})
    if not rows:
        return None
    return Summary.model_validate({name: getattr(rows[0], name) for name in Summary.model_fields})


class SummaryRecords(StoreCore):
    """Summaries and snapshots (see :class:`convmem_graph.store.base.SummaryStore`)."""

    # -- summary --------------------------------------------------------------------------------

    @property
    def keeps_summary_facts(self) -> bool:
        """Whether :meth:`summary_facts` reads only the facts written since its previous call.

        True on both databases, where triggers keep a revision per fact
        (``store/_fact_revisions.py``: SQLite since migration 9, PostgreSQL since 16): a reader
        that needs the strongest facts (``inject`` building a snapshot) should then ask
        :meth:`summary_facts` rather than read them all again.
        """
        return True

    def summary_facts(
        self, memory_id: str, *, limit: int, now_ms: int
    ) -> tuple[list[Fragment], list[Fragment]]:
        """The ``limit`` strongest live durable facts and the ``limit`` strongest temporary ones.

        What ``strongest_fragments(memory_id, limit=limit, now_ms=now_ms, transient=kind)`` returns
        for ``kind`` False and True. The rows of the previous call are kept and only the facts
        written since are read (:class:`~convmem_graph.store._summary_facts.StrongestRows`); an
        unchanged row gives the same model back. Treat the models as read-only.
        """
        return self._backend.summary_facts(
            self._strongest, self._read_keeping_row, self._driver, memory_id, limit=limit, now_ms=now_ms
        )

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
        check_memory_id(memory_id)
        before: Cursors | None = self._peek("cursors", memory_id)
        known = self._recall("summary", memory_id)
        with self._write(
            memory_id, keeps=frozenset({"specs", "variables"}) | SAME_MESSAGES, keeps_row=True
        ) as conn:
            self._ensure(conn, memory_id, now_ms)
            old: Summary | None = _read_summary(conn, memory_id) if known is UNKNOWN else known
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
            # The run's held-back changes of the row go inside the summary's own update of it.
            held = self._take_held_row(memory_id)
            self._backend.store_summary(conn, row, upto_seq=upto_seq, now_ms=now_ms, held=held)
        # What the run reads next (inject's snapshot, the next chunk's cursor) is known.
        self._remember("summary", memory_id, summary.model_copy())
        if before is not None:
            moved = before._replace(summarized_seq=max(before.summarized_seq, upto_seq))
            self._remember("cursors", memory_id, moved)
        return summary

    # -- payload cache --------------------------------------------------------------------------
    def save_snapshot(self, memory_id: str, snapshot: MemorySnapshot, *, now_ms: int) -> None:
        """Cache the call-start snapshot of a memory (one row, replaced)."""
        check_memory_id(memory_id)
        if snapshot.memory_id != memory_id:
            raise ValueError(f"snapshot of memory {snapshot.memory_id!r} cannot be saved under {memory_id!r}")
        # ``snapshot.model_dump_json()``, with the facts unchanged since the last save not serialized again.
        row = {"memory_id": memory_id, "data": self._snapshot_json.dumps(snapshot), "updated_at": now_ms}
        with self._write(memory_id, keeps=CACHED_KINDS) as conn:
            self._ensure(conn, memory_id, now_ms)
            execute_upsert(conn, snapshots, ("memory_id",), row)

    def load_snapshot(self, memory_id: str) -> MemorySnapshot | None:
        """Read the cached snapshot by primary key; None when absent or made stale by a change.

        The parsed form of the last row read is kept in process, so a call start on an unchanged
        memory parses nothing. On SQLite it is known unchanged by the memory's snapshot revision
        (:mod:`convmem_graph.store._snapshot_revisions`), read with the row's key: the row itself
        is fetched only when it changed. Otherwise (PostgreSQL, a SQLite row without a stamp)
        the row is read and compared with the parsed one by its exact text. Treat the returned
        snapshot as read-only: it may be shared with later calls.
        """
        with self._parsed_lock:
            hit = self._parsed.get(memory_id)
        found = self._backend.snapshot_row(self._read, self._driver, memory_id, hit[0] if hit else None)
        if found is None:
            return None
        if hit is not None and (found.data is None or found.data == hit[1]):
            # The stamp read equals the kept one (the row was not fetched), or the same bytes.
            kept = hit if found.data is None or not found.committed else (found.rev, hit[1], hit[2])
            with self._parsed_lock:
                self._parsed[memory_id] = kept
                self._parsed.move_to_end(memory_id)
            return hit[2]
        data = found.data
        assert data is not None  # fetched unless the stamp equals a kept one (handled above)
        snapshot = MemorySnapshot.model_validate_json(data)
        # A stamp read inside an open transaction may be rolled back and given again: not kept.
        with self._parsed_lock:
            self._parsed[memory_id] = (found.rev if found.committed else None, data, snapshot)
            self._parsed.move_to_end(memory_id)
            while len(self._parsed) > PARSED_SNAPSHOTS:
                self._parsed.popitem(last=False)
        return snapshot
