"""Reads of the facts a live turn needs, by index, whatever the number of facts a memory holds.

The lifecycle used to read every active fragment of a memory several times per run (extraction
context, reconciliation, variable inference, summary, snapshot). These statements read only what
each step looks at: facts with given canonical keys or content hashes, the newest facts, the
strongest facts in the snapshot's order, and facts under a key prefix, each an index range of
``cm_fragments`` (see the indexes in :mod:`convmem_graph.store.schema`).

Rows are returned as ``Row`` objects; callers build :class:`~convmem_graph.models.Fragment` models
only for the few rows they keep.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy import (
    BindParameter,
    CompoundSelect,
    Connection,
    Row,
    and_,
    bindparam,
    case,
    desc,
    false,
    func,
    literal,
    or_,
    select,
    tuple_,
    union_all,
)

from convmem_graph.store._driver import select_rows
from convmem_graph.store.schema import (
    HOBBY_PREFIXES,
    RECENT_FAMILIES,
    fragments,
    key_family,
    key_head,
)

__all__ = [
    "ANY_UNDERIVED",
    "ACTIVE_BY_CKEY",
    "ACTIVE_BY_HASH",
    "CJK_COUNTS",
    "NEWEST_DURABLE",
    "NEWEST_DURABLE_IDS",
    "NEWEST_OF_LANGUAGE",
    "RECENTLY_UPDATED",
    "RECENTLY_UPDATED_IN_FAMILY",
    "RECENTLY_UPDATED_IN_RANGE",
    "STRONGEST",
    "STRONGEST_OF_KIND",
    "ACTIVE_IN_RANGE",
    "PG_RELATED",
    "NEWEST_OF_KEY_FAMILY",
    "NEWEST_OF_TWO_FAMILIES",
    "indexed_family",
    "key_range",
    "newest_hobby_rows",
    "newest_key_family_rows",
    "pg_context",
    "prefix_rows",
    "usable",
]

_F = fragments.c
_MID: BindParameter[str] = bindparam("mid")
_ACTIVE = and_(_F.memory_id == _MID, _F.status == "active")
#: Not expired at ``now`` (a transient fact past its expiry is hidden).
_LIVE = or_(_F.transient.is_(False), _F.expires_at.is_(None), _F.expires_at > bindparam("now"))
#: Durable facts usable by variable inference at ``now``.
_USABLE = and_(
    _ACTIVE, _F.transient == false(), or_(_F.expires_at.is_(None), _F.expires_at > bindparam("now"))
)

_BY_CKEY = _F.ckey.in_(bindparam("ckeys", expanding=True))
_BY_HASH = _F.norm_hash.in_(bindparam("hashes", expanding=True))
#: Most recently updated first (the extractor's context).
_RECENT_ORDER = (_F.updated_at.desc(), _F.created_at.desc(), _F.id.desc())

#: Any fact without its derived columns (written by an older version): the partial index answers.
ANY_UNDERIVED = select(_F.id).where(_F.ckey.is_(None)).limit(1)

#: Active facts with one of the content hashes ``hashes`` (same fact under another key).
ACTIVE_BY_HASH = select(fragments).where(_ACTIVE, _BY_HASH)

#: Active facts with one of the canonical keys ``ckeys``.
ACTIVE_BY_CKEY = select(fragments).where(_ACTIVE, _BY_CKEY)

#: PostgreSQL: both lookups above in one round trip (``arm`` 1: by key, 2: by content hash; the
#: order within an arm does not matter: reconciliation sorts the facts itself).
PG_RELATED = union_all(
    select(literal(1).label("arm"), fragments).where(_ACTIVE, _BY_CKEY),
    select(literal(2).label("arm"), fragments).where(_ACTIVE, _BY_HASH),
).order_by("arm")

#: The ``limit`` most recently updated active facts (what an extractor is shown as context).
RECENTLY_UPDATED = select(fragments).where(_ACTIVE).order_by(*_RECENT_ORDER).limit(bindparam("limit"))
#: The same under the key prefixes ``lo``..``hi`` (pets and plans the heuristic extractor uses).
RECENTLY_UPDATED_IN_RANGE = (
    select(fragments)
    .where(_ACTIVE, _F.ckey >= bindparam("lo"), _F.ckey < bindparam("hi"))
    .order_by(*_RECENT_ORDER)
    .limit(bindparam("limit"))
)
#: The same for the families of ``RECENT_FAMILIES`` (``pet:``, ``plan:``; prefix -> statement), each
#: the first ``limit`` rows of its own partial index: the range above reads and sorts the whole
#: family.
RECENTLY_UPDATED_IN_FAMILY = {
    prefix: select(fragments)
    .where(_ACTIVE, key_head(prefix))
    .order_by(*_RECENT_ORDER)
    .limit(bindparam("limit"))
    for prefix in RECENT_FAMILIES
}
#: Live active facts in the snapshot's order: durable first, then confidence, then recency.
STRONGEST = (
    select(fragments)
    .where(_ACTIVE, _LIVE)
    .order_by(_F.transient, _F.confidence.desc(), _F.observed_at.desc(), _F.updated_at.desc(), _F.id)
    .limit(bindparam("limit"))
)

#: The same, durable (``transient`` false) or temporary (true) facts only: the summary's two sections.
STRONGEST_OF_KIND = (
    select(fragments)
    .where(_ACTIVE, _LIVE, _F.transient == bindparam("transient"))
    .order_by(_F.confidence.desc(), _F.observed_at.desc(), _F.updated_at.desc(), _F.id)
    .limit(bindparam("limit"))
)

#: Newest stated first: what inference's walks read, and the order of ``ix_cm_fragments_family``.
_NEWEST_ORDER = (_F.observed_at.desc(), _F.updated_at.desc(), _F.created_at.desc(), _F.id.desc())

#: Durable facts usable by inference, newest stated first (a walk that stops early).
NEWEST_DURABLE = select(fragments).where(_USABLE).order_by(*_NEWEST_ORDER)
#: Their ids, first ``limit`` (how many there are, up to a bound, without decoding the rows).
NEWEST_DURABLE_IDS = select(_F.id).where(_USABLE).order_by(*_NEWEST_ORDER).limit(bindparam("limit"))


def _newest_pages(family: Any) -> tuple[Any, Any]:
    # The first page and the page after a sort key, of the usable durable facts whose canonical
    # key is in ``family`` (an expression an index repeats), newest stated first. The next page
    # starts after the fact whose sort key is (``o``, ``u``, ``c``, ``i``): keyset paging, so a
    # page deep in the walk costs what the first does (an OFFSET re-reads every row before it).
    after = tuple_(_F.observed_at, _F.updated_at, _F.created_at, _F.id) < tuple_(
        bindparam("o"), bindparam("u"), bindparam("c"), bindparam("i")
    )
    first = select(fragments).where(_USABLE, family).order_by(*_NEWEST_ORDER).limit(bindparam("limit"))
    return first, select(fragments).where(_USABLE, family, after).order_by(*_NEWEST_ORDER).limit(
        bindparam("limit")
    )


#: The walk over one key family (``family``, a bound parameter: ``like:``, ``food:``, ``pref:``),
#: the first page and the page after a sort key: ranges of the expression index
#: ``ix_cm_fragments_family`` in its order (what ``hobbies``, ``diet`` and custom lists read).
NEWEST_OF_KEY_FAMILY: tuple[Any, Any] = _newest_pages(key_family(_F.ckey) == bindparam("family"))


def _both_families_pages() -> tuple[Any, Any]:
    # The walk over two key families (``fa``, ``fb``) in one statement per page: each arm the
    # first ``limit`` rows of its family's range of ``ix_cm_fragments_family``, the union sorted
    # (at most twice ``limit`` rows) and cut to ``limit``. One round trip and ``limit`` rows per
    # page, where two walks merged in Python read two pages of rows and made Rows of all.
    pages = []
    for first_or_after in (0, 1):
        arms = []
        for name in ("fa", "fb"):
            stmt = _newest_pages(key_family(_F.ckey) == bindparam(name))[first_or_after]
            arms.append(stmt.subquery().select())
        order: tuple[Any, ...] = (desc("observed_at"), desc("updated_at"), desc("created_at"), desc("id"))
        pages.append(union_all(*arms).order_by(*order).limit(bindparam("limit")))
    return pages[0], pages[1]


#: The walk over the two hobby families (``HOBBY_PREFIXES``), both in each page's one statement.
NEWEST_OF_TWO_FAMILIES: tuple[Any, Any] = _both_families_pages()

#: The ids of the newest ``limit`` usable durable facts whose ``cjk`` is ``cjk``: the first rows of
#: the index range ``ix_cm_fragments_lang`` (the ``language`` variable's support).
NEWEST_OF_LANGUAGE = (
    select(_F.id)
    .where(_USABLE, _F.cjk == bindparam("cjk"))
    .order_by(*_NEWEST_ORDER)
    .limit(bindparam("limit"))
)

#: How many usable durable facts there are, and how many of them are mainly Chinese.
CJK_COUNTS = select(func.count(), func.coalesce(func.sum(case((_F.cjk, 1), else_=0)), 0)).where(_USABLE)


def key_range(prefix: str) -> tuple[str, str]:
    """Bounds ``[lo, hi)`` of the canonical keys starting with ``prefix`` (bytewise order).

    Example:
        >>> key_range("pref:")
        ('pref:', 'pref;')
    """
    return prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)


#: Active facts whose canonical key is in ``[lo, hi)``: one index range (an OR of ranges, or a
#: filter on ``transient`` too, makes SQLite walk every active fact instead).
ACTIVE_IN_RANGE = select(fragments).where(_ACTIVE, _F.ckey >= bindparam("lo"), _F.ckey < bindparam("hi"))


def usable(row: Row[Any], now_ms: int) -> bool:
    """Whether a fact row is durable and unexpired at ``now_ms`` (what variable inference reads)."""
    return not row.transient and (row.expires_at is None or row.expires_at > now_ms)


def prefix_rows(
    conn: Connection, memory_id: str, prefixes: Collection[str], *, now_ms: int
) -> Iterator[Row[Any]]:
    """Active durable facts, unexpired at ``now_ms``, whose canonical key starts with one of ``prefixes``.

    Each prefix is one index range (``prefixes`` end in ``:``, e.g. ``pref:``); :func:`usable`
    filters the rows in Python (see :data:`ACTIVE_IN_RANGE`).
    """
    for prefix in sorted(set(prefixes)):
        lo, hi = key_range(prefix)
        for row in select_rows(conn, ACTIVE_IN_RANGE, {"mid": memory_id, "lo": lo, "hi": hi}):
            if usable(row, now_ms):
                yield row


def newest_hobby_rows(
    read: Callable[[], AbstractContextManager[Connection]],
    memory_id: str,
    *,
    now_ms: int,
    batch: int = 32,
) -> Iterator[Row[Any]]:
    """Usable durable facts of the hobby key families, newest stated first (stop iterating to stop).

    Both families' ranges of ``ix_cm_fragments_family`` in one statement per page
    (:data:`NEWEST_OF_TWO_FAMILIES`), each page one short read through ``read`` (the store's
    ``_read``: no connection or lock is held while the caller looks at a page), the next page
    starting after the last row seen (keyset). Pages grow to 1024 rows: most walks stop within
    the first.
    """
    first, after = NEWEST_OF_TWO_FAMILIES
    fa, fb = HOBBY_PREFIXES
    return _keyset_walk(read, first, after, memory_id, now_ms=now_ms, batch=batch, extra={"fa": fa, "fb": fb})


def newest_key_family_rows(
    read: Callable[[], AbstractContextManager[Connection]],
    memory_id: str,
    family: str,
    *,
    now_ms: int,
    batch: int = 32,
) -> Iterator[Row[Any]]:
    """Usable durable facts whose canonical key's family is ``family`` (``like:``), newest stated first.

    Any family (a user's custom list names its own), through ``ix_cm_fragments_family``; paged as
    :func:`newest_hobby_rows`.
    """
    if not family.endswith(":") or family.count(":") != 1:
        raise ValueError(f"a key family is a prefix ending in its only ':' (like 'like:'), got {family!r}")
    first, after = NEWEST_OF_KEY_FAMILY
    return _keyset_walk(read, first, after, memory_id, now_ms=now_ms, batch=batch, extra={"family": family})


def _keyset_walk(
    read: Callable[[], AbstractContextManager[Connection]],
    first: Any,
    after: Any,
    memory_id: str,
    *,
    now_ms: int,
    batch: int,
    extra: dict[str, Any] | None = None,
) -> Iterator[Row[Any]]:
    fixed: dict[str, Any] = {"mid": memory_id, "now": now_ms, **(extra or {})}
    params: dict[str, Any] = {**fixed, "limit": batch}
    stmt = first
    while True:
        with read() as conn:
            rows = select_rows(conn, stmt, params)
        yield from rows
        if len(rows) < params["limit"]:
            return
        last = rows[-1]
        params = {
            **fixed,
            "limit": min(params["limit"] * 2, 1024),
            "o": last.observed_at,
            "u": last.updated_at,
            "c": last.created_at,
            "i": last.id,
        }
        stmt = after


@functools.cache
def pg_context(newest: bool, families: tuple[str | None, ...]) -> CompoundSelect[Any]:
    """PostgreSQL: the reads of ``nodes._extract_reads.known_facts`` in one round trip.

    Arm 0 is :data:`RECENTLY_UPDATED` (when ``newest``), arm ``k`` (1-based) the ``k``-th key
    range: a family of :data:`RECENTLY_UPDATED_IN_FAMILY` when ``families[k - 1]`` names one (its
    partial index's predicate), else :data:`RECENTLY_UPDATED_IN_RANGE`'s (parameters ``lo{k}``,
    ``hi{k}``); built once per shape.
    """
    arms = []
    if newest:
        arms.append(
            select(literal(0).label("arm"), fragments)
            .where(_ACTIVE)
            .order_by(*_RECENT_ORDER)
            .limit(bindparam("limit"))
        )
    for k, family in enumerate(families, start=1):
        within = (
            key_head(family)
            if family is not None
            else and_(_F.ckey >= bindparam(f"lo{k}"), _F.ckey < bindparam(f"hi{k}"))
        )
        arms.append(
            select(literal(k).label("arm"), fragments)
            .where(_ACTIVE, within)
            .order_by(*_RECENT_ORDER)
            .limit(bindparam("per_prefix"))
        )
    # Within an arm, the arm's own order (a sort on the union's output columns, not trust in
    # how the arms are appended).
    union = union_all(*[a.subquery().select() for a in arms])
    return union.order_by("arm", desc("updated_at"), desc("created_at"), desc("id"))


def indexed_family(lo: str, hi: str) -> str | None:
    """The family of :data:`RECENTLY_UPDATED_IN_FAMILY` whose whole range ``[lo, hi)`` is, if any."""
    return lo if lo in RECENTLY_UPDATED_IN_FAMILY and (lo, hi) == key_range(lo) else None
