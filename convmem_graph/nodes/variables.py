"""``update_variables``: infer profile variables from active, non-transient fragments.

Manual values are never touched: the store keeps inferred and manual values apart and the manual
one wins when read.
"""

from __future__ import annotations

from langgraph.runtime import Runtime

from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS, infer_variables
from convmem_graph.models import VariableGuess
from convmem_graph.state import MemoryContext, MemoryState

__all__ = ["update_variables"]


def update_variables(state: MemoryState, runtime: Runtime[MemoryContext]) -> MemoryState:
    """Recompute inferred values for ``infer=True`` specs and store the ones that changed.

    Values a model proposed during extraction (``variable_guesses``) are used for specs the
    fragment rules leave empty.
    """
    ctx = runtime.context
    store = ctx.store
    memory_id = state["memory_id"]
    now = ctx.clock()
    specs = store.get_specs(memory_id) or list(DEFAULT_VARIABLE_SPECS)
    fragments = [
        f
        for f in store.list_fragments(memory_id, status="active", include_expired=False, now_ms=now)
        if not f.transient
    ]
    guesses = infer_variables(specs, fragments, now_ms=now)
    inferable = {s.name for s in specs if s.infer}
    for name, raw in (state.get("variable_guesses") or {}).items():
        if name in inferable and name not in guesses:
            guesses[name] = VariableGuess.model_validate(raw)
    changed = store.commit_inferred_variables(memory_id, guesses, now_ms=now, inferable=inferable)
    return {"variables_changed": changed}
