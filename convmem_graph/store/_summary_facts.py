"""The summary's fact read: the strongest durable and temporary facts, models kept between reads.

Every run that refreshes a memory's summary reads the ``limit`` strongest live durable facts and
the ``limit`` strongest temporary ones (what ``strongest_fragments`` of each kind returns), and
``inject`` builds the call-start snapshot from the same rows. On a full memory that is ~400 rows
a turn, and SQLAlchemy's processing of each row and the ``Fragment`` made of it were about two
thirds of the read's CPU (the rest is the database reading the rows), while from one turn to the
next all but the few facts the turn touched come back unchanged.

So the rows are read as plain tuples (on SQLite by the driver's own cursor; no SQLAlchemy type
processing: the JSON column stays text until a model is made), and a full read hands out the
model made for a row before when the row is equal in every column (not only in id and
``updated_at``: an edit in the same millisecond, or one behind the store's back, leaves those as
they were). A new or changed row gets a new model. The models are shared between reads: treat
them as read-only.

:class:`StrongestRows` goes further: it keeps each memory's ranked rows, and a read first asks
the memory's fact revision (:mod:`convmem_graph.store._fact_revisions`, kept by triggers whoever
writes); when it moved, only the rows written since are read and merged into the kept lists, in
the statements' order. A full memory's live turn then reads the one or two facts it wrote instead
of ~400 rows. SQLite since migration 9; PostgreSQL since migration 16 (:data:`PG_READS`), where
the ids' order is the column's collation: unless that is bytewise (Python's string order), a
merge that would place a row among rows equal to it in everything but the id reads the lists
again instead (:attr:`FactReads.exact_ids`).
"""

from __future__ import annotations

import sqlite3
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import TextClause, text

from convmem_graph.models import Fragment
from convmem_graph.store._fragments import FRAGMENT_COLUMNS, fragment_of
from convmem_graph.store.schema import fragments

__all__ = [
    "STRONGEST_BOTH",
    "STRONGEST_DURABLE",
    "STRONGEST_TEMPORARY",
    "FactReads",
    "PG_READS",
    "SQLITE_READS",
    "StrongestRows",
    "fragment_of",
]

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


# -- The ranked rows kept between reads, moved by what changed ----------------------------

#: The memory's fact revision and the revision of its last deleted fact (``_fact_revisions``).
_REVISION = "SELECT facts_rev, facts_cut FROM cm_memories WHERE memory_id = :mid"
#: Both, and the memory's fact rows written since a revision (any status, ``ix_cm_fragments_rev``),
#: in one statement: one snapshot of the database (two statements could see a write between
#: them, a delete among its changes). No row: no memory; one row of NULL facts: none written.
_CHANGED = (
    "SELECT m.facts_rev, m.facts_cut, "
    + ", ".join(f'f."{c}"' for c in FRAGMENT_COLUMNS)
    + f" FROM cm_memories AS m LEFT JOIN {fragments.name} AS f"
    " ON f.memory_id = m.memory_id AND f.rev > :rev WHERE m.memory_id = :mid LIMIT :cap"
)


@dataclass(frozen=True, slots=True)
class FactReads:
    """The statements :class:`StrongestRows` reads through, for one database.

    Attributes:
        revision: The memory's ``facts_rev, facts_cut`` (:data:`_REVISION`).
        changed: Both, and the rows written since ``:rev`` (:data:`_CHANGED`).
        kinds: The full read: one statement per kind (durable, temporary), or one of both kinds,
            durable rows first (:data:`STRONGEST_BOTH`).
        exact_ids: Whether the database orders ids as Python orders strings (SQLite: bytewise;
            PostgreSQL: a ``C``-like collation of ``cm_fragments.id``). When not, a merge never
            decides between rows that differ only in id (:class:`_Ties`).
    """

    revision: Any
    changed: Any
    kinds: tuple[Any, ...]
    exact_ids: bool = True


#: SQLite's statements: plain SQL for its driver (``sqlite3`` takes the ``:name`` parameters).
SQLITE_READS = FactReads(_REVISION, _CHANGED, (STRONGEST_DURABLE, STRONGEST_TEMPORARY))
#: PostgreSQL's: long-lived ``text`` statements for ``select_rows`` (compiled once each). The
#: full read is one round trip; ``exact_ids`` is set per database from its collation
#: (``PostgresBackend.fact_reads``).
PG_READS = FactReads(text(_REVISION), text(_CHANGED), (STRONGEST_BOTH,), exact_ids=False)

#: How :class:`StrongestRows` runs a statement of its :class:`FactReads`: its rows as sequences.
Fetch = Callable[[str | TextClause, dict[str, Any]], Sequence[Sequence[Any]]]


class _Ties(Exception):
    """A merge met a row it cannot order: equal to a neighbour in all but the id (see ``exact_ids``)."""


#: Rows read past the limit of each kind: a kept fact that leaves the list (demoted, expired)
#: is replaced from them without reading the list again.
MARGIN = 16
#: More rows written since the last read than this: the lists are read again instead.
_MAX_CHANGED = 256
# Positions in FRAGMENT_COLUMNS (asserted below, so a change of the column order fails loudly).
_ID, _STATUS, _TRANSIENT, _EXPIRES, _CONFIDENCE, _UPDATED, _OBSERVED = 0, 5, 6, 7, 11, 13, 14
_POSITIONS = (_ID, _STATUS, _TRANSIENT, _EXPIRES, _CONFIDENCE, _UPDATED, _OBSERVED)
assert [FRAGMENT_COLUMNS[i] for i in _POSITIONS] == [
    "id",
    "status",
    "transient",
    "expires_at",
    "confidence",
    "updated_at",
    "observed_at",
]

Rank = tuple[Any, ...]


def _rank(row: Sequence[Any]) -> Rank:
    """The statements' ``ORDER BY`` as a sort key (SQLite compares ids bytewise, as Python does)."""
    return (-row[_CONFIDENCE], -row[_OBSERVED], -row[_UPDATED], row[_ID])


def _live(row: Sequence[Any], now_ms: int) -> bool:
    return row[_EXPIRES] is None or row[_EXPIRES] > now_ms


@dataclass(frozen=True, slots=True)
class _Ranked:
    """One kind's rows as the statement returns them (rank order), with their models.

    ``bound``: the rank of the last row the statement returned when its ``LIMIT`` cut it (rows
    ranked after it are unknown); ``None`` when the read returned every row of the kind.
    """

    ranks: list[Rank]
    rows: list[tuple[Any, ...]]
    models: list[Fragment]
    bound: Rank | None

    def merged(
        self, changed: set[str], rows: list[tuple[Any, ...]], cap: int, *, exact_ids: bool = True
    ) -> _Ranked:
        """Without the rows of ``changed`` ids, with ``rows`` (their new versions of this kind) in place.

        ``exact_ids`` False: raises :class:`_Ties` where a row's place would depend on how the
        database orders ids (a neighbour or the bound equal to it in all but the id).
        """
        keep = [i for i, row in enumerate(self.rows) if row[_ID] not in changed]
        ranks = [self.ranks[i] for i in keep]
        kept_rows = [self.rows[i] for i in keep]
        models = [self.models[i] for i in keep]
        bound = self.bound
        for row in rows:
            rank = _rank(row)
            if not exact_ids and bound is not None and rank[:3] == bound[:3]:
                raise _Ties
            if bound is not None and rank > bound:
                continue  # past the rows read: unknown rows may rank before it
            at = bisect_right(ranks, rank)
            if not exact_ids and any(0 <= i < len(ranks) and ranks[i][:3] == rank[:3] for i in (at - 1, at)):
                raise _Ties
            ranks.insert(at, rank)
            kept_rows.insert(at, row)
            models.insert(at, fragment_of(row))
        if len(ranks) > cap:
            del ranks[cap:], kept_rows[cap:], models[cap:]
            bound = ranks[-1]
        return _Ranked(ranks, kept_rows, models, bound)

    def live(self, now_ms: int) -> _Ranked:
        """Without the temporary facts expired at ``now_ms`` (the rows past ``bound`` stay unknown)."""
        if all(_live(row, now_ms) for row in self.rows):
            return self
        keep = [i for i, row in enumerate(self.rows) if _live(row, now_ms)]
        return _Ranked(
            [self.ranks[i] for i in keep],
            [self.rows[i] for i in keep],
            [self.models[i] for i in keep],
            self.bound,
        )

    def first(self, limit: int) -> list[Fragment] | None:
        """The ``limit`` strongest, as ``LIMIT limit`` reads them; ``None`` when not known."""
        if len(self.models) >= limit:
            return self.models[:limit]
        return list(self.models) if self.bound is None else None


@dataclass(frozen=True, slots=True)
class _Lists:
    """A memory's two ranked lists and the revision they are current at."""

    rev: int
    cut: int
    now_ms: int
    limit: int
    durable: _Ranked
    temporary: _Ranked


class StrongestRows:
    """Each memory's strongest durable and temporary fact rows, kept current by revision.

    :meth:`read` answers what the two ``LIMIT`` statements (:data:`STRONGEST_DURABLE`,
    :data:`STRONGEST_TEMPORARY`) return, with the model made before for every row that did not
    change. Bounded like :class:`KeptFacts`: the ``memories`` most recently read.

    Args:
        memories: How many memories' rows to keep.
        margin: Rows kept past the limit of each kind (:data:`MARGIN`).

    Attributes:
        full_reads: Reads that read both lists from the database.
        delta_reads: Reads that read only the revision, or it and the rows written since.
    """

    def __init__(self, memories: int, *, margin: int = MARGIN) -> None:
        self._memories = memories
        self._margin = margin
        self._kept: OrderedDict[str, _Lists] = OrderedDict()
        self._lock = threading.Lock()
        self.full_reads = 0
        self.delta_reads = 0

    def forget(self, memory_id: str) -> None:
        """Keep nothing of ``memory_id`` (it was deleted or purged)."""
        with self._lock:
            self._kept.pop(memory_id, None)

    def clear(self) -> None:
        """Keep nothing (a write failed: what was read inside its transaction may be gone)."""
        with self._lock:
            self._kept.clear()

    def read(
        self,
        raw: sqlite3.Connection | Fetch,
        memory_id: str,
        *,
        limit: int,
        now_ms: int,
        reads: FactReads = SQLITE_READS,
    ) -> tuple[list[Fragment], list[Fragment]]:
        """The ``limit`` strongest live durable facts and the ``limit`` strongest temporary ones.

        ``raw``: SQLite's driver connection, or a function running ``reads``' statements.

        A full read reads the revision first: rows written after it are read again next time
        (merging a row twice is the same as once), while a row written before it and missed would
        be missed for good.
        """
        fetch = _fetch_of(raw)
        with self._lock:
            kept = self._kept.get(memory_id)
        lists = None
        if kept is None:
            revisions = fetch(reads.revision, {"mid": memory_id})
            found = revisions[0] if revisions else None
        else:
            params = {"mid": memory_id, "rev": kept.rev, "cap": _MAX_CHANGED + 1}
            rows = fetch(reads.changed, params)
            found = rows[0][:2] if rows else None
            if found is not None and len(rows) <= _MAX_CHANGED:
                changed = [tuple(row[2:]) for row in rows if row[2] is not None]
                revision = (int(found[0]), int(found[1]))
                lists = self._moved(
                    kept, revision, changed, limit, limit + self._margin, now_ms, exact_ids=reads.exact_ids
                )
        answer = None if lists is None else self._answer(lists, limit)
        if lists is None or answer is None:
            cap = limit + self._margin
            try:
                lists = self._full(fetch, reads, memory_id, kept, found, limit, cap, now_ms)
            except TypeError:
                found = None  # a value raw SQL stored that Python cannot order: read, keep nothing
                lists = self._full(fetch, reads, memory_id, None, None, limit, cap, now_ms, ranked=False)
            answer = self._answer(lists, limit)
            assert answer is not None  # a full read knows its first ``limit`` rows
            self.full_reads += 1
        else:
            self.delta_reads += 1
        if found is not None:
            with self._lock:
                self._kept[memory_id] = lists
                self._kept.move_to_end(memory_id)
                while len(self._kept) > self._memories:
                    self._kept.popitem(last=False)
        return answer

    @staticmethod
    def _answer(lists: _Lists, limit: int) -> tuple[list[Fragment], list[Fragment]] | None:
        durable, temporary = lists.durable.first(limit), lists.temporary.first(limit)
        return None if durable is None or temporary is None else (durable, temporary)

    @staticmethod
    def _moved(
        kept: _Lists,
        revision: tuple[int, int],
        changed: list[tuple[Any, ...]],
        limit: int,
        cap: int,
        now_ms: int,
        *,
        exact_ids: bool = True,
    ) -> _Lists | None:
        """``kept`` brought to ``revision`` (``changed``: the rows written since) and ``now_ms``.

        ``cap``: the rows kept of each kind at most. ``None`` when it cannot be.
        """
        rev, cut = revision
        if limit != kept.limit or cut != kept.cut or rev < kept.rev or now_ms < kept.now_ms:
            return None  # a fact deleted, another limit, or time or revision going back
        durable, temporary = kept.durable, kept.temporary
        ids = {row[_ID] for row in changed}
        active = [row for row in changed if row[_STATUS] == "active"]
        try:
            if changed:
                # SQLite stores the flag as 0 / 1: the statements' ``transient = :durable`` / ``:temporary``.
                stays = [r for r in active if r[_TRANSIENT] == 0]
                lasts = [r for r in active if r[_TRANSIENT] == 1 and _live(r, now_ms)]
                durable = durable.merged(ids, stays, cap, exact_ids=exact_ids)
                temporary = temporary.merged(ids, lasts, cap, exact_ids=exact_ids)
            return _Lists(rev, cut, now_ms, limit, durable, temporary.live(now_ms))
        except (TypeError, _Ties):
            return None  # a value raw SQL stored that Python cannot order as the database does

    @staticmethod
    def _full(
        fetch: Fetch,
        reads: FactReads,
        memory_id: str,
        kept: _Lists | None,
        found: Sequence[Any] | None,
        limit: int,
        cap: int,
        now_ms: int,
        *,
        ranked: bool = True,
    ) -> _Lists:
        """Both lists read from the database (``cap`` rows each), models reused by row.

        ``ranked=False``: without the sort keys (the lists are not kept).
        """
        before: dict[str, tuple[tuple[Any, ...], Fragment]] = {}
        if kept is not None:
            for kind in (kept.durable, kept.temporary):
                pairs = zip(kind.rows, kind.models, strict=True)
                before.update((row[_ID], (row, model)) for row, model in pairs)
        params = {"mid": memory_id, "limit": cap, "now": now_ms, "durable": False, "temporary": True}
        if len(reads.kinds) == 2:
            by_kind = [[tuple(row) for row in fetch(statement, params)] for statement in reads.kinds]
        else:
            both = [tuple(row) for row in fetch(reads.kinds[0], params)]
            durable = [row for row in both if not row[_TRANSIENT]]
            by_kind = [durable, both[len(durable) :]]
        kinds = []
        for rows in by_kind:
            models = []
            for row in rows:
                hit = before.get(row[_ID])
                models.append(hit[1] if hit is not None and hit[0] == row else fragment_of(row))
            ranks = [_rank(row) for row in rows] if ranked else []
            kinds.append(_Ranked(ranks, rows, models, ranks[-1] if ranked and len(rows) >= cap else None))
        rev, cut = (int(found[0]), int(found[1])) if found is not None else (0, 0)
        return _Lists(rev, cut, now_ms, limit, kinds[0], kinds[1])


def _fetch_of(raw: sqlite3.Connection | Fetch) -> Fetch:
    """``raw`` as a :data:`Fetch`: a SQLite driver connection runs the plain SQL itself."""
    if isinstance(raw, sqlite3.Connection):
        conn = raw
        return lambda statement, params: conn.execute(str(statement), params).fetchall()
    return raw


def pg_reads(exact_ids: bool) -> FactReads:
    """:data:`PG_READS` for a database whose ``cm_fragments.id`` orders as Python does (or not)."""
    return PG_READS if not exact_ids else replace(PG_READS, exact_ids=True)
