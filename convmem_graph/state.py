"""Graph state and run context of the memory lifecycle.

The state is what LangGraph checkpoints at every step, so it holds ids, cursors and small results
as plain JSON-like values, never transcripts (a growing message list makes checkpoint storage grow
quadratically; see the project's conventions). Messages, fragments and variables live in the store.

The context carries per-run services (store, extractor, summarizer, config) and the raw payloads of
this run. LangGraph does not checkpoint the context, so raw payloads never reach checkpoint storage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from convmem_graph._time import now_ms
from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.base import Extractor, Summarizer
from convmem_graph.models import Message, ReadResult
from convmem_graph.tokens import TokenCounter, count_tokens

if TYPE_CHECKING:
    from convmem_graph.store import MemoryStore

__all__ = ["MemoryContext", "MemoryState", "RawInput"]


class MemoryState(TypedDict, total=False):
    """Checkpointed state of one lifecycle run on one memory (``thread_id`` = memory id).

    Every key is reset by ``ingest`` at the start of a run, so a run's result never mixes with the
    previous run's.
    """

    memory_id: str
    #: Payloads read this run, payloads quarantined, and counts of skipped items by reason.
    ingested: int
    dead_letters: int
    skipped: dict[str, int]
    #: One entry per payload that could not be read: name, source, path, reason.
    errors: list[dict[str, str]]
    #: Ids of the messages this run stored (the batch), and the store cursors after the run.
    new_message_ids: list[str]
    max_seq: int
    extracted_seq: int
    summarized_seq: int
    #: Routing flags decided by the nodes (conditional edges read them).
    pending_extraction: bool
    fragments_changed: bool
    summary_due: bool
    #: Small results.
    fragment_ops: dict[str, int]
    variable_guesses: dict[str, dict[str, Any]]
    variables_changed: list[str]
    summary_version: int
    model_calls: int
    #: Vendors whose payloads this run built (the payloads themselves are in the context).
    payloads: list[str]


@dataclass(frozen=True)
class RawInput:
    """One raw payload handed to a run: a parsed JSON document, bytes/str of JSON, or messages.

    Attributes:
        data: The payload (dict, list, JSON text, or LangChain messages), or a
            :class:`~convmem_graph.models.ReadResult` the caller already read.
        source: The source format name, or ``None`` to auto-detect.
        name: Where it came from (file name and line), used in errors and dead letters.
    """

    data: Any
    source: str | None = None
    name: str = ""


def _default_extractor() -> Extractor:
    from convmem_graph.extractors.heuristic import HeuristicExtractor

    return HeuristicExtractor()


def _default_summarizer() -> Summarizer:
    from convmem_graph.extractors.extractive import ExtractiveSummarizer

    return ExtractiveSummarizer()


@dataclass
class MemoryContext:
    """Services and inputs of one run, passed as ``graph.invoke(..., context=MemoryContext(...))``.

    When LangGraph builds the context from JSON (LangGraph Studio / ``langgraph dev``), ``store``
    is absent: it is opened from ``db_url`` (default ``convmem.db``), ``config`` may be a mapping,
    and ``inputs`` may hold plain payload documents.

    Attributes:
        store: The memory store (SQLite or PostgreSQL).
        db_url: Opens the store when ``store`` is not given.
        config: Budgets, thresholds and bot ids.
        extractor: Fact extractor (heuristic by default, or an LLM extractor).
        summarizer: Summarizer (extractive by default, or an LLM summarizer).
        inputs: Raw payloads of this run.
        vendors: Payloads ``inject`` builds and returns (``trtc``, ``agora``, ``openai`` ...).
        inject_options: Per-vendor options for ``inject`` (persona, query, recent turns ...).
        session_ended: Forces a summary refresh (a call or chat session has ended).
        counter: The token counter used for every budget.
        clock: Returns the current time in ms (injectable for tests).
    """

    store: MemoryStore = None  # type: ignore[assignment]  # resolved in __post_init__
    db_url: str | None = None
    config: MemoryConfig = field(default_factory=MemoryConfig)
    extractor: Extractor = field(default_factory=_default_extractor)
    summarizer: Summarizer = field(default_factory=_default_summarizer)
    inputs: Sequence[RawInput] = ()
    vendors: Sequence[str] = ()
    inject_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    session_ended: bool = False
    counter: TokenCounter = count_tokens
    clock: Callable[[], int] = now_ms
    #: Hand-off from ``ingest`` to ``normalize`` within one run (not checkpointed on purpose).
    inbox: list[ReadResult] = field(default_factory=list)
    #: Messages ``normalize`` stored in this run, by id, so ``extract`` need not read them back.
    fresh: dict[str, Message] = field(default_factory=dict)
    #: Payloads ``inject`` built, by vendor (returned to the caller, never checkpointed).
    payloads: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.store is None:
            from convmem_graph.store import MemoryStore

            self.store = MemoryStore.from_url(self.db_url)
        if not isinstance(self.config, MemoryConfig):
            self.config = MemoryConfig.model_validate(self.config)
        self.inputs = tuple(i if isinstance(i, RawInput) else RawInput(i) for i in self.inputs)
