"""A PostgreSQL run's changes of its memory's own row, folded into one statement.

A lifecycle run moves its memory's row up to four times between its message insert and its
summary: the extraction cursor after each extraction batch (``PG_EXTRACTED``), the stamp when
inference changed a variable (``PG_TOUCH``), ``facts_dirty`` when it did not
(``SET_FACTS_DIRTY``). Each was a statement (a round trip, client and server CPU) of a run's ~20.
Nothing the run reads in between looks at these columns or at the call-start snapshot those
statements drop, so the store keeps them as one :class:`RowPatch` and sends it once: inside the
summary's statement when the run summarizes, else before the run's next statement that might
read them (see ``StoreCore._flush_rows``) and before the commit.

The fold is exact: one statement with the patch's parameters leaves the row (and the snapshot
table) as the steps one after another would, from any starting row. The only step whose effect
depends on the row is the extraction's conditional stamp (``updated_at`` moves when the cursor
moves); composed, only the last such step after the last unconditional stamp can decide the
result, with the cursor as it was before the first step (see :meth:`RowPatch.extracted`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from convmem_graph.store.schema import memories, snapshots

__all__ = ["PG_ROW_PATCH", "RowPatch"]

#: The folded steps in one statement. Every SET expression reads the row as it was before it;
#: GREATEST ignores a NULL argument, so a NULL ``upto`` keeps the cursor.
PG_ROW_PATCH = text(
    f"WITH gone AS (DELETE FROM {snapshots.name} WHERE memory_id = :mid AND CAST(:drop AS BOOLEAN)) "
    f"UPDATE {memories.name} SET extracted_seq = GREATEST(extracted_seq, CAST(:upto AS BIGINT)), "
    "updated_at = CASE WHEN extracted_seq < CAST(:cond_upto AS BIGINT) THEN CAST(:cond_now AS BIGINT) "
    "ELSE COALESCE(CAST(:now AS BIGINT), updated_at) END, "
    "facts_dirty = COALESCE(CAST(:dirty AS INTEGER), facts_dirty) WHERE memory_id = :mid"
)


@dataclass
class RowPatch:
    """What a run's deferred steps do to its memory's row, composed in order.

    Attributes:
        upto: The extraction cursor's target (the largest of the steps'; ``None``: no step moved it).
        now: ``updated_at`` of the last step that stamped the row unconditionally (``None``: none).
        cond: ``(upto, now)`` of the last extraction step after ``now``'s that stamps the row only
            when the cursor, as stored before the first step, is below ``upto`` (``None``: none).
        dirty: ``facts_dirty`` of the last step that set it (``None``: kept).
        drop: Whether a step dropped the call-start snapshot.
    """

    upto: int | None = None
    now: int | None = None
    cond: tuple[int, int] | None = None
    dirty: int | None = None
    drop: bool = False

    def extracted(self, upto: int, now: int, *, changed: bool, dirty: int | None) -> None:
        """``PG_EXTRACTED``: the cursor moved to ``upto`` (never back), the row stamped when it moved.

        Stamped always when ``changed`` (the snapshot dropped too). Otherwise the step stamps only
        when the cursor, as the earlier steps left it, is below ``upto``: that is, when ``upto`` is
        above every earlier step's target and the stored cursor is below it. A later such step has
        a higher threshold than an earlier one, so if it does not stamp no earlier one did: the
        last one is all that is kept.
        """
        if changed:
            self.now, self.cond, self.drop = now, None, True
        elif self.upto is None or upto > self.upto:
            self.cond = (upto, now)
        self.upto = upto if self.upto is None else max(self.upto, upto)
        if dirty is not None:
            self.dirty = dirty

    def touched(self, now: int, *, dirty: int | None) -> None:
        """``PG_TOUCH``: the row stamped, the snapshot dropped, ``facts_dirty`` set unless ``None``."""
        self.now, self.cond, self.drop = now, None, True
        if dirty is not None:
            self.dirty = dirty

    def set_dirty(self, dirty: int) -> None:
        """``SET_FACTS_DIRTY``."""
        self.dirty = dirty

    def params(self, memory_id: str) -> dict[str, Any]:
        """The parameters of :data:`PG_ROW_PATCH` for this patch of ``memory_id``'s row."""
        cond_upto, cond_now = self.cond if self.cond is not None else (None, None)
        return {
            "mid": memory_id,
            "drop": self.drop,
            "upto": self.upto,
            "cond_upto": cond_upto,
            "cond_now": cond_now,
            "now": self.now,
            "dirty": self.dirty,
        }
