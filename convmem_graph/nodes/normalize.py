"""``normalize``: merge this run's messages into one timeline and store the new ones.

Also decides the routing flags: whether there is anything to extract and whether a summary is due.
"""

from __future__ import annotations

from collections import Counter

from langgraph.runtime import Runtime

from convmem_graph.models import Message
from convmem_graph.state import MemoryContext, MemoryState

__all__ = ["normalize", "summary_due"]

#: Messages read per page while adding up the tokens not yet summarized.
_PAGE = 32


def summary_due(ctx: MemoryContext, memory_id: str, *, max_seq: int, summarized_seq: int) -> bool:
    """Return whether enough new transcript arrived since the last summary (or the session ended)."""
    after = summarized_seq
    if max_seq <= after:
        return False
    if ctx.session_ended:
        return True
    threshold = ctx.config.summary_threshold_tokens
    tokens = 0
    # Stop reading as soon as the threshold is crossed: cost is bounded by the threshold.
    while True:
        # The contents only: building the backlog's ``Message``s each turn cost more than counting.
        rows = ctx.store.message_texts_after(memory_id, after, limit=_PAGE, known=ctx.fresh or None)
        for seq, content in rows:
            tokens += ctx.counter(content)
            if tokens >= threshold:
                return True
            after = seq
        if len(rows) < _PAGE:
            # A short page was the last: asking again would read nothing (one statement a live
            # turn, whose few new messages rarely reach the threshold).
            return False


def normalize(state: MemoryState, runtime: Runtime[MemoryContext]) -> MemoryState:
    """Merge the ingested read results (dedupe across sources, order by time) and persist them."""
    from convmem_graph.sources import merge_timeline

    ctx = runtime.context
    memory_id = state["memory_id"]
    store = ctx.store
    # The readers' own skipped items (listed first by merge_timeline) were counted by ingest.
    counted = sum(len(result.skipped) for result in ctx.inbox)
    messages, dropped = merge_timeline(ctx.inbox, dedupe_window_ms=ctx.config.dedupe_window_ms)
    # Interruption metrics (TRTC 906/908) also of rounds stored in another run, or still to come.
    interruptions = sorted({pair for result in ctx.inbox for pair in result.interruptions})
    ctx.inbox.clear()
    for m in messages:
        m.memory_id = memory_id
        # The item's path inside its payload only matters while reading; storing it costs bytes.
        m.metadata.pop("path", None)
    late: list[Message] = []
    if ctx.config.purge_summarized_messages and messages:
        # A copy of a message a retention purge already deleted (a vendor's retry, Agora's 103
        # history at call end) is older than the purge horizon: storing it again would bring
        # back a transcript the summary already covers.
        horizon = store.purged_until(memory_id)
        if horizon:
            late = [m for m in messages if m.timestamp_ms <= horizon]
            messages = [m for m in messages if m.timestamp_ms > horizon]
    new_ids = store.add_messages(
        memory_id,
        messages,
        dedupe_window_ms=ctx.config.dedupe_window_ms,
        index=ctx.config.episodic,
        interruptions=interruptions,
    )
    by_id = {m.id: m for m in messages}
    ctx.fresh = {i: by_id[i] for i in new_ids if i in by_id}
    skipped: Counter[str] = Counter(state.get("skipped", {}))
    skipped.update(d.reason for d in dropped[counted:])
    if late:
        skipped["purged"] += len(late)
    max_seq, extracted, summarized, facts_dirty = store.cursors(memory_id)
    return {
        "new_message_ids": new_ids,
        "new_messages": len(new_ids),
        "skipped": dict(skipped),
        "max_seq": max_seq,
        "extracted_seq": extracted,
        "summarized_seq": summarized,
        "pending_extraction": max_seq > extracted,
        # A run that stopped between extraction and inference left facts newer than variables.
        "fragments_changed": facts_dirty,
        "summary_due": summary_due(ctx, memory_id, max_seq=max_seq, summarized_seq=summarized),
    }
