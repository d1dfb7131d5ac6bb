"""``inject``: cache the memory snapshot a call start needs and build the requested payloads.

The snapshot (variables, schema, the strongest active fragments, summary, recent turns) is stored
as one row per memory, so reading it at call start is one primary-key lookup whatever the length
of the history.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from convmem_graph.snapshot import build_snapshot, select_fragments
from convmem_graph.state import MemoryContext, MemoryState

__all__ = ["build_snapshot", "inject", "select_fragments"]


def inject(state: MemoryState, runtime: Runtime[MemoryContext]) -> MemoryState:
    """Refresh the cached snapshot; build the ``context.vendors`` payloads into ``context.payloads``."""
    from convmem_graph.payloads.render import render_payload

    ctx = runtime.context
    memory_id = state["memory_id"]
    now = ctx.clock()
    snapshot = build_snapshot(ctx.store, memory_id, ctx.config, now_ms=now)
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
