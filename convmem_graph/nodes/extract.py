"""``extract``: turn the messages past the extraction cursor into fragment operations.

Works batch by batch from the store's cursor, so a failed run resumes exactly where it stopped:
each batch's fragment operations and the cursor advance commit in one transaction.

A turn's cost does not grow with the facts a memory holds: the extractor is shown a bounded set of
known facts (the newest ones, plus known pets and plans), and candidates are reconciled only with
the stored facts that have the same canonical keys or the same normalized content (index reads).
The canonical keys this run touched go to ``update_variables``, which re-infers only the
variables depending on them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from langgraph.runtime import Runtime

from convmem_graph.extractors.reconcile import reconcile
from convmem_graph.models import FragmentCandidate, Message
from convmem_graph.nodes._extract_reads import known_facts, related_facts
from convmem_graph.nodes._fresh import messages_after
from convmem_graph.state import MemoryContext, MemoryState
from convmem_graph.text.keys import canonical_key

__all__ = ["CONTEXT_FRAGMENTS", "extract"]

#: Newest known facts shown to an extractor per batch, unless it sets ``known_facts`` itself (the
#: LLM extractor shows the model 200). Known pets and plans are always included.
CONTEXT_FRAGMENTS = 200


def _known_limit(extractor: Any) -> int:
    limit = getattr(extractor, "known_facts", CONTEXT_FRAGMENTS)
    return limit if isinstance(limit, int) and limit >= 0 else CONTEXT_FRAGMENTS


def extract(state: MemoryState, runtime: Runtime[MemoryContext]) -> MemoryState:
    """Extract facts from every stored message not yet processed and reconcile them with memory.

    Batches without a user message advance the cursor without calling the extractor (no model
    call for assistant-only batches).
    """
    ctx = runtime.context
    store = ctx.store
    memory_id = state["memory_id"]
    cursor = store.extracted_seq(memory_id)
    specs = store.get_specs(memory_id) or _default_specs()
    counts: Counter[str] = Counter()
    guesses: dict[str, dict[str, Any]] = dict(state.get("variable_guesses") or {})
    calls = state.get("model_calls", 0)
    # Facts changed before this run (an interrupted run, a hand edit): which keys is unknown.
    touched: set[str] | None = None if state.get("fragments_changed") else set()
    if _waits(ctx, memory_id, cursor):
        return {
            "extracted_seq": cursor,
            "fragment_ops": {},
            "fragments_changed": bool(state.get("fragments_changed")),
            "variable_guesses": guesses,
            "touched_keys": None if touched is None else [],
            "model_calls": calls,
        }
    while True:
        rows = _batch(ctx, memory_id, cursor)
        if not rows:
            break
        upto = rows[-1][0]
        batch = [m for _, m in rows]
        ops = []
        if any(m.role == "user" for m in batch):
            context = known_facts(store, memory_id, limit=_known_limit(ctx.extractor))
            result = ctx.extractor.extract(batch, context, specs, now_ms=ctx.clock())
            calls += result.model_calls
            stamp_observed(result.candidates, batch)
            related = related_facts(
                store, memory_id, [c.key for c in result.candidates], [c.content for c in result.candidates]
            )
            ops = reconcile(result.candidates, related)
            if touched is not None:
                keys_of = {f.id: f.key for f in related}
                for op in ops:
                    touched.add(canonical_key(op.candidate.key))
                    if op.target_id in keys_of:
                        touched.add(canonical_key(keys_of[op.target_id]))
            for name, guess in result.variables.items():
                guesses[name] = guess.model_dump()
        applied = store.commit_extraction(memory_id, ops, upto_seq=upto, now_ms=ctx.clock())
        counts.update(applied)
        cursor = upto
        if len(rows) < ctx.config.extraction_batch_messages:
            break  # a short batch was the last one: no need to ask for more
    changed = any(counts.get(k, 0) for k in ("add", "update", "supersede"))
    return {
        "extracted_seq": cursor,
        "fragment_ops": dict(counts),
        "fragments_changed": changed or bool(guesses) or bool(state.get("fragments_changed")),
        "variable_guesses": guesses,
        "touched_keys": None if touched is None else sorted(touched),
        "model_calls": calls,
    }


def _waits(ctx: MemoryContext, memory_id: str, cursor: int) -> bool:
    """Whether a model extractor leaves this run's turns for a later, larger batch.

    Only extractors whose ``buffers_turns`` is true wait (one model call per short live turn
    re-sends instructions and known facts each time); they wait until
    ``extract_after_user_messages`` user messages are pending, the session ended, or the
    conversation was idle for ``extract_idle_seconds`` when a run comes. Waiting turns are already
    stored: nothing is lost.
    """
    if ctx.session_ended or not getattr(ctx.extractor, "buffers_turns", False):
        return False
    config = ctx.config
    rows = messages_after(ctx, memory_id, cursor, config.extraction_batch_messages)
    users = [m for _, m in rows if m.role == "user"]
    if not users or len(users) >= config.extract_after_user_messages:
        return False
    if len(rows) >= config.extraction_batch_messages:
        return False
    # Idle: no message for extract_idle_seconds (a conversation that paused, or an old archive).
    newest = max(m.timestamp_ms for _, m in rows)
    return ctx.clock() - newest < config.extract_idle_seconds * 1000


def stamp_observed(candidates: Sequence[FragmentCandidate], batch: Sequence[Message]) -> None:
    """Set each candidate's ``observed_at`` to the time of its newest source message in the batch."""
    times = {m.id: m.timestamp_ms for m in batch}
    latest = max(times.values(), default=0)
    for c in candidates:
        stated = [times[i] for i in c.source_message_ids if i in times]
        c.observed_at = max(stated) if stated else latest


def _batch(ctx: MemoryContext, memory_id: str, cursor: int) -> list[tuple[int, Message]]:
    """The next batch past ``cursor``: from this run's fresh messages when they cover it, else the store."""
    return messages_after(ctx, memory_id, cursor, ctx.config.extraction_batch_messages)


def _default_specs() -> list[Any]:
    from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS

    return list(DEFAULT_VARIABLE_SPECS)
