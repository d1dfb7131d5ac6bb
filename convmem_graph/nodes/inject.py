"""``inject``: cache the memory snapshot a call start needs and build the requested payloads.

The snapshot (variables, schema, the strongest active fragments, summary, recent turns) is stored
as one row per memory, so reading it at call start is one primary-key lookup whatever the length
of the history.

With ``purge_summarized_messages`` the retention purge runs here, first: at the end of every
lifecycle run, before the snapshot is built from what is left.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from convmem_graph.snapshot import build_snapshot, select_fragments
from convmem_graph.state import MemoryContext, MemoryState

__all__ = ["apply_retention", "build_snapshot", "inject", "select_fragments"]

#: No time bound on a retention purge: the cursors and the short-term window decide.
_ANY_TIME = 2**62


def apply_retention(ctx: MemoryContext, memory_id: str) -> int:
    """``purge_summarized_messages``: delete the raw messages the summary and the facts cover.

    Only messages at or below both cursors (extracted and summarized) go, so no fact is lost
    before it was read. While a session is open the newest ``recent_turns`` stay (the block's
    short-term window); once it ended (a run with ``session_ended=True``) none is kept, so a
    facts-only deployment (``episodic=False``) holds no transcript past the session's summary.
    Returns how many messages were deleted (0 when the setting is off).
    """
    if not ctx.config.purge_summarized_messages:
        return 0
    keep = 0 if ctx.session_ended else ctx.config.recent_turns
    return ctx.store.purge_messages(memory_id, before_ms=_ANY_TIME, keep_recent=keep)


def inject(state: MemoryState, runtime: Runtime[MemoryContext]) -> MemoryState:
    """Refresh the cached snapshot; build the ``context.vendors`` payloads into ``context.payloads``."""
    from convmem_graph.payloads.render import render_payload

    ctx = runtime.context
    memory_id = state["memory_id"]
    now = ctx.clock()
    apply_retention(ctx, memory_id)  # a purge is a write: rows held from before it are not used
    snapshot = build_snapshot(ctx.store, memory_id, ctx.config, now_ms=now, held=ctx.held)
    ctx.held.clear()
    ctx.store.save_snapshot(memory_id, snapshot, now_ms=now)
    # Payloads carry memory text and recent turns: they go back through the context, so the
    # checkpointed state only records which were built.
    ctx.payloads = {
        vendor: render_payload(
            vendor, snapshot, ctx.inject_options.get(vendor, {}), counter=ctx.counter, now_ms=now
        )
        for vendor in ctx.vendors
    }
    return {"payloads": sorted(ctx.payloads)}
