"""``summarize``: fold the previous summary and the new messages into a new summary.

Runs when enough new content arrived or the session ended (see ``normalize``), and when the run
changed a variable: the summary names the variables, so a run that moved ``city`` with one short
sentence would otherwise leave a summary naming the old city until enough other words arrived
(two replays of one archive on one SQLite file split a memory's messages between them, and a
memory's last run was often such a run). The result always fits the configured token budget,
counted with the project's CJK-aware counter.
"""

from __future__ import annotations

from typing import Literal

from langgraph.runtime import Runtime

from convmem_graph.models import Message, Summary
from convmem_graph.snapshot import SNAPSHOT_RECENT, summary_fact_limit
from convmem_graph.state import MemoryContext, MemoryState

__all__ = ["summarize"]

_CHUNK = 200
_RECENT = 20


def _commit(
    ctx: MemoryContext,
    memory_id: str,
    messages: list[Message],
    upto_seq: int,
    budget: int,
    previous: Summary | None,
) -> Summary:
    """Summarize, store the new version, and hold what was read for ``inject`` (``ctx.held``)."""
    store = ctx.store
    now = ctx.clock()
    variables = store.get_variables(memory_id)
    limit = summary_fact_limit(budget)
    # Both kinds in one read; models of rows unchanged since the last refresh are reused.
    durable, transient = store.summary_facts(memory_id, limit=limit, now_ms=now)
    text = ctx.summarizer.summarize(
        previous,
        messages,
        dict(variables),
        durable + transient,
        budget_tokens=budget,
        counter=ctx.counter,
        now_ms=now,
    )
    covers = max((m.timestamp_ms for m in messages), default=0)
    from_model = getattr(ctx.summarizer, "uses_messages", True)
    origin: Literal["model", "extractive"] = "model" if from_model else "extractive"
    summary = store.commit_summary(
        memory_id,
        text,
        tokens=ctx.counter(text),
        covers_until_ms=covers,
        upto_seq=upto_seq,
        now_ms=now,
        origin=origin,
    )
    # The summary write changes none of these: the snapshot inject builds next can use them.
    held = ctx.held
    held.writes = store.write_count()
    held.durable, held.transient, held.limit, held.now_ms = durable, transient, limit, now
    held.variables, held.summary, held.summary_read = variables, summary.model_copy(), True
    return summary


def summarize(state: MemoryState, runtime: Runtime[MemoryContext]) -> MemoryState:
    """Refresh the rolling summary from the messages past the summary cursor, chunk by chunk.

    A summarizer whose ``uses_messages`` attribute is false (the extractive one builds its text
    from variables and fragments) is called once with the newest few messages only.
    """
    ctx = runtime.context
    store = ctx.store
    memory_id = state["memory_id"]
    budget = ctx.config.summary_budget_tokens
    last, _, cursor, _ = store.cursors(memory_id)
    uses_messages = getattr(ctx.summarizer, "uses_messages", True)
    calls_before = getattr(ctx.summarizer, "calls", 0)
    version = 0
    previous = store.get_summary(memory_id)
    # Here only because a variable changed: a summary naming it is refreshed; none is started early.
    refresh = bool(state.get("variables_changed")) and not state.get("summary_due")
    if refresh and previous is None:
        return {"summary_due": False}
    if (
        not uses_messages
        and cursor < last
        and previous is not None
        and not state.get("fragments_changed")
        and not ctx.session_ended
    ):
        # An extractive summary depends on variables and facts only: none changed, so only the
        # cursor moves (same text, same version) and nothing is recomputed.
        store.commit_summary(
            memory_id,
            previous.text,
            tokens=previous.tokens,
            covers_until_ms=previous.covers_until_ms,
            upto_seq=last,
            now_ms=ctx.clock(),
            origin=previous.origin,
        )
        return {"summarized_seq": last, "summary_version": previous.version, "summary_due": False}
    if not uses_messages and (cursor < last or refresh):
        # The summary is rebuilt from variables and fragments; only the newest messages matter
        # (language, recency), so the backlog is not read. The snapshot's newest turns are read
        # (more than the summary needs) and held for inject, which would read them next.
        recent = store.recent_messages(memory_id, max(_RECENT, SNAPSHOT_RECENT))
        version = _commit(ctx, memory_id, recent[-_RECENT:], last, budget, previous).version
        ctx.held.recent, ctx.held.recent_limit = recent, max(_RECENT, SNAPSHOT_RECENT)
        cursor = last
    while cursor < last:
        rows = store.messages_after(memory_id, cursor, limit=_CHUNK)
        if not rows:
            break
        previous = _commit(ctx, memory_id, [m for _, m in rows], rows[-1][0], budget, previous)
        version = previous.version
        cursor = rows[-1][0]
    calls = getattr(ctx.summarizer, "calls", 0) - calls_before
    return {
        "summarized_seq": cursor,
        "summary_version": version,
        "summary_due": False,
        "model_calls": state.get("model_calls", 0) + calls,
    }
