"""Graph state and run context of the memory lifecycle.

The state is what LangGraph checkpoints (each run's end state by default; every step with
durability "sync" or "async"), so it holds ids, cursors and small results as plain JSON-like
values, never transcripts (a growing message list makes checkpoint storage grow quadratically; see
the project's conventions). Messages, fragments and variables live in the store.

The context carries per-run services (store, extractor, summarizer, config) and the raw payloads of
this run. LangGraph does not checkpoint the context, so raw payloads never reach checkpoint storage.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from pydantic import ConfigDict
from pydantic.json_schema import SkipJsonSchema

from convmem_graph._held import HeldRows
from convmem_graph._lazy import lazy_exports
from convmem_graph._time import now_ms
from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.base import Extractor, Summarizer
from convmem_graph.models import Message, ReadResult
from convmem_graph.store import MemoryStore
from convmem_graph.tokens import TokenCounter, count_tokens

if TYPE_CHECKING:
    from convmem_graph._memory_state import MemoryState

__all__ = [
    "MAX_DEAD_LETTERS_PER_RUN",
    "MAX_ERRORS_KEPT",
    "MemoryContext",
    "MemoryState",
    "RawInput",
    "shared_store",
]

#: Unreadable payloads described in a run's ``errors`` (the state is checkpointed every run or step, so
#: it holds a count and this sample, never the full list: 300k bad lines once made three 47 MB blobs).
MAX_ERRORS_KEPT = 20
#: Unreadable payloads quarantined one by one per run; past it they are counted and one dead letter
#: says how many more there were (each dead letter is a write).
MAX_DEAD_LETTERS_PER_RUN = 1000

# The graph's state names a LangGraph channel, so it lives apart and loads on first use: the
# call-start path imports this module (through the runner) and must not import LangGraph.
__getattr__ = lazy_exports(__name__, {"MemoryState": "convmem_graph._memory_state"})


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


_shared: dict[str | None, MemoryStore] = {}
_shared_lock = threading.Lock()


def shared_store(db_url: str | None) -> MemoryStore:
    """Return one store per database URL for this process (opened on first use).

    Contexts built from JSON (LangGraph Studio) name a database, not a store; opening a store per
    run would leak connections, so they share this one.
    """
    with _shared_lock:
        store = _shared.get(db_url)
        if store is None:
            store = _shared[db_url] = MemoryStore.from_url(db_url)
        return store


class _LazyStore:
    """Descriptor of ``MemoryContext.store``: an absent store is opened from ``db_url`` on first use.

    Opening happens where a node first reads ``context.store``, a worker thread in async runs,
    never while the context is built on the event loop (LangGraph's dev server rejects that).
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = f"_{name}"

    def __get__(self, obj: Any, objtype: type | None = None) -> MemoryStore:
        if obj is None:
            return None  # type: ignore[return-value]  # the dataclass default: "not given"
        store: MemoryStore | None = obj.__dict__.get(self._attr)
        if store is None:
            store = shared_store(obj.db_url)
            obj.__dict__[self._attr] = store
        return store

    def __set__(self, obj: Any, value: MemoryStore | None) -> None:
        obj.__dict__[self._attr] = value


@dataclass(kw_only=True)
class MemoryContext:
    """Services and inputs of one run, passed as ``graph.invoke(..., context=MemoryContext(...))``.

    When LangGraph builds the context from JSON (LangGraph Studio / ``langgraph dev``), ``store``
    is absent: it is opened from ``db_url`` (default ``convmem.db``) the first time a node uses it,
    ``config`` may be a mapping, and ``inputs`` may hold plain payload documents. Every field is
    keyword-only, so a subclass can add fields of its own, required ones included.

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
        strict_inputs: An unreadable payload raises ``SourceFormatError`` instead of being
            quarantined as a dead letter.
        counter: The token counter used for every budget.
        clock: Returns the current time in ms (injectable for tests).

    Example:
        >>> @dataclass(kw_only=True)
        ... class AppContext(MemoryContext):
        ...     user_id: str
        >>> AppContext(user_id="u_1", db_url="sqlite://").user_id
        'u_1'
    """

    # Services are not JSON: Studio's context form shows only the JSON fields.
    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(arbitrary_types_allowed=True)

    # A descriptor default (dataclass "descriptor-typed field"): absent -> opened on first use.
    store: Annotated[MemoryStore, SkipJsonSchema()] = _LazyStore()  # type: ignore[assignment]
    db_url: str | None = None
    config: MemoryConfig = field(default_factory=MemoryConfig)
    extractor: Annotated[Extractor, SkipJsonSchema()] = field(default_factory=_default_extractor)
    summarizer: Annotated[Summarizer, SkipJsonSchema()] = field(default_factory=_default_summarizer)
    inputs: Sequence[Any] = ()
    vendors: Sequence[str] = ()
    inject_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    session_ended: bool = False
    strict_inputs: bool = False
    counter: Annotated[TokenCounter, SkipJsonSchema()] = count_tokens
    clock: Annotated[Callable[[], int], SkipJsonSchema()] = now_ms
    #: Hand-off from ``ingest`` to ``normalize`` within one run (not checkpointed on purpose).
    inbox: Annotated[list[ReadResult], SkipJsonSchema()] = field(default_factory=list)
    #: Messages ``normalize`` stored in this run, by id, so ``extract`` need not read them back.
    fresh: Annotated[dict[str, Message], SkipJsonSchema()] = field(default_factory=dict)
    #: Payloads ``inject`` built, by vendor (returned to the caller, never checkpointed).
    payloads: Annotated[dict[str, Any], SkipJsonSchema()] = field(default_factory=dict)
    #: Rows ``summarize`` read that ``inject`` builds the snapshot from (see :mod:`convmem_graph._held`).
    held: Annotated[HeldRows, SkipJsonSchema()] = field(default_factory=HeldRows)

    def __post_init__(self) -> None:
        if not isinstance(self.config, MemoryConfig):
            self.config = MemoryConfig.model_validate(self.config)
        self.inputs = tuple(i if isinstance(i, RawInput) else RawInput(i) for i in self.inputs)
