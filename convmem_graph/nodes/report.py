"""``report``: put what ``inject`` built into the run's output, for LangGraph Studio and parent graphs.

The lifecycle keeps payloads out of its checkpointed state (``inject`` hands them back through the
context, see :mod:`convmem_graph.nodes.inject`), which a programmatic caller reads from
``RunResult.payloads``. Studio and ``langgraph dev`` only show the graph's output, so the Studio
graph ends with this node: it copies the payloads and the memory block into the state. Both are
bounded (a budgeted block and the last few turns), overwritten by every run, never a transcript.
"""

from __future__ import annotations

from typing import Any

from langgraph.runtime import Runtime

from convmem_graph.state import MemoryContext, MemoryState

__all__ = ["ReportState", "report"]


class ReportState(MemoryState, total=False):
    """The lifecycle state plus the run's payloads and memory block (the Studio graph's output)."""

    #: Payload bodies by vendor, as ``inject`` built them (``context.vendors``).
    payload_bodies: dict[str, Any]
    #: The memory block a model request would carry now (``MemoryConfig.memory_block_budget_tokens``).
    memory_block: str
    #: Vendors not built, with what their options lack (a context with ``payload_errors``, such as
    #: Studio's, leaves out a vendor whose options are incomplete instead of failing the run).
    payload_errors: dict[str, str]


def report(state: MemoryState, runtime: Runtime[MemoryContext]) -> ReportState:
    """Return the payloads ``inject`` built and the current memory block."""
    from convmem_graph.payloads.memory_block import MemoryBlockOptions, build_memory_block

    ctx = runtime.context
    snapshot = ctx.store.load_snapshot(state["memory_id"])
    block = ""
    if snapshot is not None:
        options = MemoryBlockOptions(budget_tokens=ctx.config.memory_block_budget_tokens, now_ms=ctx.clock())
        block = build_memory_block(snapshot, options, counter=ctx.counter).text
    errors = getattr(ctx, "payload_errors", None)
    return {
        "payload_bodies": dict(ctx.payloads),
        "memory_block": block,
        "payload_errors": dict(errors) if isinstance(errors, dict) else {},
    }
