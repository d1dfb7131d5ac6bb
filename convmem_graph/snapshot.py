"""The call-start snapshot: what the payload builders need of a memory, read in a few index reads.

Kept apart from the ``inject`` node so that building a payload (``convmem inject``,
``ConvMemory.payload()``) imports no LangGraph.
"""

from __future__ import annotations

from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS
from convmem_graph.models import Fragment, MemorySnapshot
from convmem_graph.store import MemoryStore

__all__ = ["build_snapshot", "select_fragments"]


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
