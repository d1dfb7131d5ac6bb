"""Messages past a cursor, taken from the run's own fresh messages where they cover the range.

``normalize`` keeps the messages it stored in ``context.fresh``; later reads of the same rows get
them from there instead of rebuilding them, in the one read that finds which rows are past the
cursor (a first read of ids only, then a second of rows when the fresh ones did not cover the
range, cost two round trips on a database server).
"""

from __future__ import annotations

from convmem_graph.models import Message
from convmem_graph.state import MemoryContext

__all__ = ["messages_after"]


def messages_after(ctx: MemoryContext, memory_id: str, cursor: int, limit: int) -> list[tuple[int, Message]]:
    """Up to ``limit`` ``(seq, message)`` past ``cursor``, in seq order."""
    return ctx.store.messages_after(memory_id, cursor, limit=limit, known=ctx.fresh or None)
