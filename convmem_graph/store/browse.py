"""Read helpers for browsing a store page by page (the viewer and the Bailian-compatible API).

The lifecycle reads messages by ``seq``; a person reads them by time. These helpers add the few
queries a browser needs on top of :class:`~convmem_graph.store.MemoryStore`: a keyset-paginated
timeline (``(timestamp_ms, seq)``, served by the ``(memory_id, timestamp_ms)`` index, so a page
costs the same on message 10 and message 100 000), memories filtered by id, a fragment found by id
alone, and a memory's description.

Example:
    >>> from convmem_graph.store import MemoryStore
    >>> store = MemoryStore.from_url("sqlite://")
    >>> _ = store.ensure_memory("mem_1", "demo")
    >>> page = message_page(store, "mem_1", limit=10)
    >>> page.messages, page.older, page.newer
    ([], None, None)
    >>> count_memories(store)
    1
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import and_, func, or_, select, update

from convmem_graph._ids import check_identifier
from convmem_graph._time import now_ms as _now
from convmem_graph.errors import MemoryNotFoundError, NotFoundError
from convmem_graph.models import Fragment, MemoryInfo, Message
from convmem_graph.store._fragments import row_to_fragment
from convmem_graph.store._messages import MESSAGE_COLUMNS, row_to_message
from convmem_graph.store.repository import MemoryStore
from convmem_graph.store.schema import fragments, memories, messages

__all__ = [
    "MessagePage",
    "count_memories",
    "find_fragment",
    "message_page",
    "search_memories",
    "set_description",
]


class MessagePage(NamedTuple):
    """One page of a timeline, oldest first, with cursors to the neighbouring pages.

    A cursor is ``"<timestamp_ms>.<seq>"`` of the message next to the page edge; ``None`` when
    there is nothing on that side.
    """

    messages: list[tuple[int, Message]]
    older: str | None
    newer: str | None


def _parse_cursor(cursor: str) -> tuple[int, int]:
    ts, _, seq = cursor.partition(".")
    try:
        return int(ts), int(seq)
    except ValueError:
        raise ValueError(f"timeline cursor {cursor!r} is not '<timestamp_ms>.<seq>'") from None


def message_page(
    store: MemoryStore,
    memory_id: str,
    *,
    before: str | None = None,
    after: str | None = None,
    limit: int = 100,
) -> MessagePage:
    """Return one page of a memory's messages in time order (keyset pagination).

    Args:
        store: The store.
        memory_id: The memory.
        before: A cursor: the page of messages just older than it (default: the newest page).
        after: A cursor: the page of messages just newer than it.
        limit: Page size.

    Raises:
        ValueError: On a malformed cursor.
    """
    ts, seq = messages.c.timestamp_ms, messages.c.seq
    stmt = select(*MESSAGE_COLUMNS).where(messages.c.memory_id == memory_id)
    newest_first = after is None
    if after is not None:
        a_ts, a_seq = _parse_cursor(after)
        stmt = stmt.where(or_(ts > a_ts, and_(ts == a_ts, seq > a_seq))).order_by(ts, seq)
    else:
        if before is not None:
            b_ts, b_seq = _parse_cursor(before)
            stmt = stmt.where(or_(ts < b_ts, and_(ts == b_ts, seq < b_seq)))
        stmt = stmt.order_by(ts.desc(), seq.desc())
    stmt = stmt.limit(limit + 1)  # one more row says whether another page follows
    with store._read() as conn:
        rows = list(conn.execute(stmt))
    more = len(rows) > limit
    rows = rows[:limit]
    if newest_first:
        rows.reverse()
    page = [(int(r[0]), row_to_message(r)) for r in rows]
    if not page:
        return MessagePage([], None, None)
    first, last = page[0], page[-1]
    first_cursor = f"{first[1].timestamp_ms}.{first[0]}"
    last_cursor = f"{last[1].timestamp_ms}.{last[0]}"
    if newest_first:
        older = first_cursor if more else None
        newer = last_cursor if before is not None else None
    else:
        older = first_cursor
        newer = last_cursor if more else None
    return MessagePage(page, older, newer)


def count_memories(store: MemoryStore, *, id_contains: str | None = None) -> int:
    """Return how many memories the store holds (whose id contains ``id_contains``)."""
    stmt = select(func.count()).select_from(memories)
    if id_contains:
        stmt = stmt.where(memories.c.memory_id.contains(id_contains, autoescape=True))
    with store._read() as conn:
        return int(conn.execute(stmt).scalar() or 0)


def search_memories(
    store: MemoryStore, id_contains: str, *, limit: int = 100, offset: int = 0
) -> list[MemoryInfo]:
    """List memories whose id contains ``id_contains`` (oldest first), with their counters."""
    stmt = (
        select(memories.c.memory_id)
        .where(memories.c.memory_id.contains(id_contains, autoescape=True))
        .order_by(memories.c.created_at, memories.c.memory_id)
        .limit(limit)
        .offset(offset)
    )
    with store._read() as conn:
        ids = [r.memory_id for r in conn.execute(stmt)]
    out: list[MemoryInfo] = []
    for memory_id in ids:
        try:
            out.append(store.get_memory(memory_id))
        except MemoryNotFoundError:  # deleted between the two reads
            continue
    return out


def find_fragment(store: MemoryStore, fragment_id: str) -> Fragment:
    """Return the fragment with this id in whichever memory holds it.

    Fragment ids are digests of (memory, key, content), so one id names one fragment.

    Raises:
        NotFoundError: If no memory has such a fragment.
    """
    stmt = select(fragments).where(fragments.c.id == fragment_id).limit(1)
    with store._read() as conn:
        row = conn.execute(stmt).first()
    if row is None:
        raise NotFoundError(f"fragment {fragment_id!r} not found")
    return row_to_fragment(row)


def set_description(store: MemoryStore, memory_id: str, description: str) -> MemoryInfo:
    """Change a memory's description.

    Raises:
        MemoryNotFoundError: If the memory does not exist.
    """
    check_identifier(memory_id, "memory_id")
    with store._write(memory_id) as conn:
        changed = conn.execute(
            update(memories)
            .where(memories.c.memory_id == memory_id)
            .values(description=description, updated_at=_now())
        ).rowcount
    if not changed:
        raise MemoryNotFoundError(f"memory {memory_id!r} not found")
    return store.get_memory(memory_id)
