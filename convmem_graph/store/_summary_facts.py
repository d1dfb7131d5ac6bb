"""The summary's fact read: the strongest durable and temporary facts, models kept between reads.

Every run that refreshes a memory's summary reads the ``limit`` strongest live durable facts and
the ``limit`` strongest temporary ones (what ``strongest_fragments`` of each kind returns), and
``inject`` builds the call-start snapshot from the same rows. On a full memory that is ~400 rows
a turn, and SQLAlchemy's processing of each row and the ``Fragment`` made of it were about two
thirds of the read's CPU (the rest is the database reading the rows), while from one turn to the
next all but the few facts the turn touched come back unchanged.

So the rows are read as plain tuples (on SQLite by the driver's own cursor; no SQLAlchemy type
processing: the JSON column stays text until a model is made), and :class:`KeptFacts` hands out
the model it made for a row before when the row is equal in every column (not only in id and
``updated_at``: an edit in the same millisecond, or one behind the store's back, leaves those as
they were). A new or changed row gets a new model. The models are shared between reads: treat
them as read-only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import text

from convmem_graph.models import Fragment
from convmem_graph.store._fragments import FRAGMENT_COLUMNS, fragment_of
from convmem_graph.store.schema import fragments

__all__ = ["STRONGEST_BOTH", "STRONGEST_DURABLE", "STRONGEST_TEMPORARY", "KeptFacts", "fragment_of"]

_SELECT = ", ".join(f'"{c}"' for c in FRAGMENT_COLUMNS)
#: ``STRONGEST_OF_KIND``'s order (``ix_cm_fragments_rank``); ``id`` makes it total.
_ORDER = "confidence DESC, observed_at DESC, updated_at DESC, id"
_ARM = (
    f"SELECT {_SELECT} FROM {fragments.name} "
    "WHERE memory_id = :mid AND status = 'active' AND transient = {kind}{live} "
    f"ORDER BY {_ORDER} LIMIT :limit"
)
_DURABLE_ARM = _ARM.format(kind=":durable", live="")
_TEMPORARY_ARM = _ARM.format(kind=":temporary", live=" AND (expires_at IS NULL OR expires_at > :now)")
#: Each kind alone: a range of the rank index cut at ``limit`` exactly as
#: ``strongest_fragments(transient=...)`` cuts it. A durable fact is live whatever its expiry
#: (``_LIVE`` of ``_fact_queries``), a temporary one until ``expires_at``.
#: Plain SQL for SQLite's driver (``sqlite3`` takes the ``:name`` parameters as written).
STRONGEST_DURABLE = _DURABLE_ARM
STRONGEST_TEMPORARY = _TEMPORARY_ARM
#: Both kinds in one statement, durable rows first: one round trip on PostgreSQL. (On SQLite,
#: where a statement costs no round trip, the two arms alone cost ~35 % less: the union's order
#: is a temporary B-tree sort of each arm.)
STRONGEST_BOTH = text(
    f"SELECT * FROM ({_DURABLE_ARM}) AS d UNION ALL SELECT * FROM ({_TEMPORARY_ARM}) AS t "
    f"ORDER BY transient, {_ORDER}"
)


class KeptFacts:
    """The models made from each memory's last summary fact read, by fact id with their row.

    Bounded: the rows of one read per memory (at most twice the read's limit), for the
    ``memories`` most recently read.
    """

    def __init__(self, memories: int) -> None:
        self._memories = memories
        self._kept: OrderedDict[str, dict[str, tuple[tuple[Any, ...], Fragment]]] = OrderedDict()
        self._lock = threading.Lock()

    def models(self, memory_id: str, rows: Iterable[Sequence[Any]]) -> list[Fragment]:
        """A model for each row, in order: the one kept for an equal row, else a new one.

        Example:
            >>> kept = KeptFacts(memories=2)
            >>> row = ("f1", "m", "用户喜欢茶。", "preference", "pref:茶", "active", 0, None, None,
            ...        "extracted", None, 0.8, 5, 5, 5, None, None)
            >>> first = kept.models("m", [row])
            >>> kept.models("m", [row])[0] is first[0]
            True
            >>> edited = row[:2] + ("用户喜欢咖啡。",) + row[3:]  # same id and updated_at
            >>> kept.models("m", [edited])[0].content
            '用户喜欢咖啡。'
        """
        with self._lock:
            before = self._kept.get(memory_id, {})
        now: dict[str, tuple[tuple[Any, ...], Fragment]] = {}
        out: list[Fragment] = []
        for raw in rows:
            row = tuple(raw)
            hit = before.get(row[0])
            model = hit[1] if hit is not None and hit[0] == row else fragment_of(row)
            now[row[0]] = (row, model)
            out.append(model)
        with self._lock:
            self._kept[memory_id] = now
            self._kept.move_to_end(memory_id)
            while len(self._kept) > self._memories:
                self._kept.popitem(last=False)
        return out
