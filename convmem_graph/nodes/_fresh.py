"""Messages past a cursor, taken from the run's own fresh messages when they cover the range.

``normalize`` keeps the messages it stored in ``context.fresh``; later reads of the same rows get
them from there (one cheap id query) instead of reading and rebuilding every row.
"""

from __future__ import annotations

from convmem_graph.models import Message
from convmem_graph.state import MemoryContext

__all__ = ["messages_after"]


def messages_after(ctx: MemoryContext, memory_id: str, cursor: int, limit: int) -> list[tuple[int, Message]]:
    """Up to ``limit`` ``(seq, message)`` past ``cursor``, in seq order."""
    if ctx.fresh:
        ids = ctx.store.message_ids_after(memory_id, cursor, limit=limit)
        if all(mid in ctx.fresh for _, mid in ids):
            return [(seq, ctx.fresh[mid]) for seq, mid in ids]
    return ctx.store.messages_after(memory_id, cursor, limit=limit)
