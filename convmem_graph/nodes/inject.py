"""``inject``: cache the memory snapshot a call start needs and build the requested payloads.

The snapshot (variables, schema, the strongest active fragments, summary, recent turns) is stored
as one row per memory, so reading it at call start is one primary-key lookup whatever the length
of the history.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS
from convmem_graph.models import Fragment, MemorySnapshot
from convmem_graph.state import MemoryContext, MemoryState
from convmem_graph.store import MemoryStore

__all__ = ["build_snapshot", "inject", "select_fragments"]


def select_fragments(fragments: list[Fragment], limit: int) -> list[Fragment]:
    """Keep the ``limit`` strongest fragments: stable before transient, then confidence, then recency."""
    ranked = sorted(
        fragments, key=lambda f: (f.transient, -f.confidence, -f.observed_at, -f.updated_at, f.id)
    )
    return ranked[:limit]


def build_snapshot(
    store: MemoryStore, memory_id: str, config: MemoryConfig, *, now_ms: int
) -> MemorySnapshot:
    """Read everything the payload builders need for ``memory_id`` from the store."""
    specs = store.get_specs(memory_id) or list(DEFAULT_VARIABLE_SPECS)
    # The database picks the strongest facts by index (the same order as select_fragments).
    fragments = store.strongest_fragments(memory_id, limit=config.snapshot_max_fragments, now_ms=now_ms)
    values = store.get_variables(memory_id)
    # Schema order first (name, birth year, city ...), then values of names no longer in the schema.
    order = {s.name: i for i, s in enumerate(specs)}
    variables = dict(sorted(values.items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0])))
    return MemorySnapshot(
        memory_id=memory_id,
        variables=variables,
        specs={s.name: s for s in specs},
        fragments=select_fragments(fragments, config.snapshot_max_fragments),
        summary=store.get_summary(memory_id),
        recent=store.recent_messages(memory_id, 30),
    )


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
