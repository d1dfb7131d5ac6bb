"""``update_variables``: infer profile variables from active, non-transient fragments.

Manual values are never touched: the store keeps inferred and manual values apart and the manual
one wins when read. Only the variables depending on the facts this run changed are re-inferred,
each from the facts it reads (see :mod:`convmem_graph.nodes._inference`), so the step costs the
same for a memory of ten facts and one of ten thousand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph.runtime import Runtime

from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS
from convmem_graph.models import VariableGuess
from convmem_graph.nodes._inference import affected_specs, infer_from_store
from convmem_graph.state import MemoryContext, MemoryState

__all__ = ["update_variables"]


def update_variables(state: MemoryState, runtime: Runtime[MemoryContext]) -> MemoryState:
    """Recompute inferred values for the ``infer=True`` specs the run's fact changes may affect.

    Values a model proposed during extraction (``variable_guesses``) are used for specs the
    fragment rules leave empty.
    """
    ctx = runtime.context
    store = ctx.store
    memory_id = state["memory_id"]
    now = ctx.clock()
    specs = store.get_specs(memory_id) or list(DEFAULT_VARIABLE_SPECS)
    proposed = state.get("variable_guesses") or {}
    # Keys are known only when this run's extract step ran (state carries over between runs).
    touched = state.get("touched_keys") if state.get("pending_extraction") else None
    inferable = {s.name for s in specs if s.infer}
    chosen = affected_specs(specs, touched)
    # A name a model proposed is decided again (rules first), so its value is never stale.
    chosen += [s for s in specs if s.infer and s.name in proposed and s not in chosen]
    guesses = infer_from_store(store, memory_id, chosen, now_ms=now)
    names = {s.name for s in chosen}
    _add_proposed(guesses, proposed, inferable)
    diet = next((s for s in specs if s.infer and s.name == "diet" and s.type == "string"), None)
    # diet is worded in the user's language: a language change rewrites it. The commit says
    # whether the inferred language changed (it reads the stored values anyway), so a turn whose
    # language stays (nearly all) makes no read of its own for this; one that changes it commits
    # diet in a second transaction, and until then the facts stay marked newer than the variables
    # (``follow_up``): a run stopped in between is completed by the next. A diet a model proposed
    # is among ``names`` and decided in the first commit.
    rewords = diet is not None and "diet" not in names and "language" in names
    changed = store.commit_inferred_variables(
        memory_id, guesses, now_ms=now, inferable=names, follow_up=("language",) if rewords else ()
    )
    if diet is not None and rewords and "language" in changed:
        again = infer_from_store(store, memory_id, [diet], now_ms=now)
        changed += store.commit_inferred_variables(memory_id, again, now_ms=now, inferable={"diet"})
    return {"variables_changed": changed}


def _add_proposed(
    guesses: dict[str, VariableGuess], proposed: Mapping[str, Any], inferable: set[str]
) -> None:
    """Fill the specs the fragment rules left empty with what a model proposed during extraction."""
    for name, raw in proposed.items():
        if name in inferable and name not in guesses:
            guesses[name] = VariableGuess.model_validate(raw)
