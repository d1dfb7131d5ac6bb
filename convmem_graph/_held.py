"""Rows a lifecycle run already read, handed from one node to a later one instead of read again.

``summarize`` reads the strongest facts (durable and temporary), the newest turns and the
variables, and writes the summary; ``inject`` then builds the call-start snapshot from the same
rows. Reading them twice cost a third of a live turn's store time (each fact row is ~30 us to
fetch and validate, and a memory of a few hundred facts has them all read by both nodes).

The rows are held in the run context (never checkpointed) with the number of writes the run's
store view had made when they were read: a later node uses them only when no write of the run
came between (a write of its own the holder knows about, such as the summary, is counted in). A
write by another process or thread in between is not seen, as a read made just before it would
not have seen it either: the window is the few milliseconds between the two nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from convmem_graph.models import Fragment, Message, Summary, VariableValue

__all__ = ["HeldRows"]


@dataclass
class HeldRows:
    """What one node of a run read, for the next nodes of the same run.

    Attributes:
        writes: The run's store write count when these rows were last known to be current
            (see :meth:`convmem_graph.store.core.StoreCore.write_count`); ``-1``: nothing held.
        durable: The strongest live durable facts, read with ``LIMIT limit``.
        transient: The strongest temporary facts (expired ones included up to ``now_ms``),
            read with ``LIMIT limit``.
        limit: The limit both fact lists were read with.
        now_ms: The time the fact lists were read at (temporary facts expire after it).
        recent: The newest ``len(recent)`` turns, oldest first, read with ``LIMIT recent_limit``.
        recent_limit: The limit ``recent`` was read with.
        variables: The effective variables.
        summary: The summary as stored (``None``: the memory has none).
        summary_read: ``summary`` holds what the store holds (``None`` included).
    """

    writes: int = -1
    durable: list[Fragment] | None = None
    transient: list[Fragment] | None = None
    limit: int = 0
    now_ms: int = 0
    recent: list[Message] | None = None
    recent_limit: int = 0
    variables: dict[str, VariableValue] | None = None
    summary: Summary | None = None
    summary_read: bool = False

    def clear(self) -> None:
        """Hold nothing (a new run, or a write the holder did not account for)."""
        self.writes = -1
        self.durable = self.transient = self.recent = None
        self.variables = self.summary = None
        self.summary_read = False
        self.limit = self.recent_limit = 0

    def current(self, writes: int) -> bool:
        """Whether the rows are still what the store holds: no write of the run came since."""
        return self.writes >= 0 and self.writes == writes

    def strongest(self, limit: int, now_ms: int) -> list[Fragment] | None:
        """The ``limit`` strongest live facts at ``now_ms``, as ``strongest_fragments`` reads them.

        ``None`` when the held lists cannot answer: a list cut by its read limit before it had
        what ``limit`` asks for (the rows after the cut are unknown), or a time before the read.

        Example:
            >>> f = lambda i, t, exp=None: Fragment(id=f"f{i}", memory_id="m", content="x",
            ...     category="other", key=f"k:{i}", transient=t, expires_at=exp)
            >>> held = HeldRows(writes=0, durable=[f(1, False)], transient=[f(2, True, 50)], limit=5)
            >>> [x.id for x in held.strongest(3, now_ms=20)], [x.id for x in held.strongest(3, now_ms=60)]
            (['f1', 'f2'], ['f1'])
            >>> cut = HeldRows(writes=0, durable=[f(1, False)], transient=[], limit=1)
            >>> cut.strongest(2, now_ms=0) is None  # durable facts past the first may exist
            True
        """
        durable, transient = self.durable, self.transient
        if durable is None or transient is None or now_ms < self.now_ms:
            return None
        if len(durable) >= limit:
            return durable[:limit]
        if len(durable) >= self.limit:
            return None  # more durable facts may follow the cut
        live = [f for f in transient if f.expires_at is None or f.expires_at > now_ms]
        want = limit - len(durable)
        if len(live) < want and len(transient) >= self.limit:
            return None  # the cut hid temporary facts that would fill the rest
        return durable + live[:want]

    def newest(self, n: int) -> list[Message] | None:
        """The newest ``n`` turns, oldest first, when the held read covers them."""
        recent = self.recent
        if recent is None or (n > self.recent_limit and len(recent) >= self.recent_limit):
            return None
        return recent[-n:] if n > 0 else []
