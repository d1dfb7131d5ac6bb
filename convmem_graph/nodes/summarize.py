"""``summarize``: fold the previous summary and the new messages into a new summary.

Runs only when enough new content arrived or the session ended (see ``normalize``). The result
always fits the configured token budget, counted with the project's CJK-aware counter.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from convmem_graph.state import MemoryContext, MemoryState

__all__ = ["summarize"]

_CHUNK = 200


def summarize(state: MemoryState, runtime: Runtime[MemoryContext]) -> MemoryState:
    """Refresh the rolling summary from the messages past the summary cursor, chunk by chunk.

    A summarizer whose ``uses_messages`` attribute is false (the extractive one builds its text
    from variables and fragments) is called once with the last chunk only.
    """
    ctx = runtime.context
    store = ctx.store
    memory_id = state["memory_id"]
    budget = ctx.config.summary_budget_tokens
    cursor = store.summarized_seq(memory_id)
    last = store.max_seq(memory_id)
    uses_messages = getattr(ctx.summarizer, "uses_messages", True)
    if not uses_messages:
        # Only the newest messages matter (language, recency): skip reading the backlog. Seqs are
        # global, so this keeps at most _CHUNK of this memory's newest messages, never zero.
        cursor = max(cursor, last - _CHUNK)
    version = 0
    while cursor < last:
        rows = store.messages_after(memory_id, cursor, limit=_CHUNK)
        if not rows:
            break
        now = ctx.clock()
        messages = [m for _, m in rows]
        text = ctx.summarizer.summarize(
            store.get_summary(memory_id),
            messages,
            store.get_variables(memory_id),
            store.list_fragments(memory_id, status="active", include_expired=False, now_ms=now),
            budget_tokens=budget,
            counter=ctx.counter,
            now_ms=now,
        )
        summary = store.commit_summary(
            memory_id,
            text,
            tokens=ctx.counter(text),
            covers_until_ms=max(m.timestamp_ms for m in messages),
            upto_seq=rows[-1][0],
            now_ms=now,
        )
        version = summary.version
        cursor = rows[-1][0]
    return {"summarized_seq": cursor, "summary_version": version, "summary_due": False}
