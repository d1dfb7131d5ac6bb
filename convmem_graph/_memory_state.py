"""The lifecycle graph's checkpointed state (``MemoryState``), apart from ``convmem_graph.state``.

It names a LangGraph channel (``UntrackedValue``) in its annotations, so importing it imports
LangGraph; ``convmem_graph.state`` (which the call-start path imports through the runner) exports it
lazily and stays free of LangGraph, LangChain and LangSmith.
"""

from __future__ import annotations

from typing import Annotated, Any

from langgraph.channels.untracked_value import UntrackedValue

# typing_extensions.TypedDict: pydantic (LangGraph Studio's schemas) rejects typing.TypedDict on
# Python < 3.12, and LangGraph's MessagesState uses it too (mixing the two is a metaclass conflict).
from typing_extensions import TypedDict

__all__ = ["MemoryState"]


class MemoryState(TypedDict, total=False):
    """Checkpointed state of one lifecycle run on one memory (thread ``convmem:<memory id>``).

    Every key is reset by ``ingest`` at the start of a run, so a run's result never mixes with the
    previous run's. It combines with LangGraph's ``MessagesState``
    (``class S(MessagesState, MemoryState)``): ``ingest`` then also reads the graph's new
    ``messages``.
    """

    memory_id: str
    #: Payloads read this run, payloads quarantined, and counts of skipped items by reason.
    ingested: int
    dead_letters: int
    skipped: dict[str, int]
    #: The first ``MAX_ERRORS_KEPT`` payloads that could not be read (name, source, path, reason)
    #: and how many there were in all.
    errors: list[dict[str, str]]
    error_count: int
    #: Ids of the messages this run stored (the batch), in the run's output but never checkpointed:
    #: a replay batch's ~1k ids were 24 of a checkpoint's 28 KB, kept for each of the last
    #: ``keep_checkpoints`` runs of every memory, where only their count was ever read back.
    new_message_ids: Annotated[list[str], UntrackedValue]
    #: How many messages this run stored (checkpointed: what the viewer shows of the last run).
    new_messages: int
    #: The store cursors after the run.
    max_seq: int
    extracted_seq: int
    summarized_seq: int
    #: Routing flags decided by the nodes (the routes of :mod:`convmem_graph.graph` read them).
    pending_extraction: bool
    fragments_changed: bool
    summary_due: bool
    #: Small results.
    fragment_ops: dict[str, int]
    variable_guesses: dict[str, dict[str, Any]]
    #: Canonical keys whose facts this run's extraction touched (``None``: unknown, infer all).
    touched_keys: list[str] | None
    variables_changed: list[str]
    summary_version: int
    model_calls: int
    #: Model calls and prompt/completion tokens per stage (``extract``, ``summarize``) this run.
    model_usage: dict[str, dict[str, int]]
    #: Milliseconds spent inside each node this run, in run order (``accounting.timed_node``).
    node_ms: dict[str, float]
    #: Vendors whose payloads this run built (the payloads themselves are in the context).
    payloads: list[str]
    #: Id of the last ``messages`` entry ``ingest`` read (graphs that also carry ``messages``).
    messages_cursor: str
