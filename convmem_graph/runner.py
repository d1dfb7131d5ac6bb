"""Run the lifecycle graph on one memory: locking, checkpoint key, pruning.

:class:`Lifecycle` is what the CLI, the replay command and :class:`~convmem_graph.memory.ConvMemory`
use. Work for one memory is serialized (an in-process lock, plus a PostgreSQL advisory lock on
PostgreSQL); different memories run in parallel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from pydantic import BaseModel, Field

from convmem_graph._time import now_ms
from convmem_graph.checkpoints import prune_memory_checkpoints, thread_id_for
from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.base import Extractor, Summarizer
from convmem_graph.graph import build_memory_graph
from convmem_graph.state import MemoryContext, RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.tokens import TokenCounter, count_tokens

__all__ = ["Durability", "Lifecycle", "RunResult"]

logger = logging.getLogger(__name__)

#: "sync" persists every step before the next starts (a crashed run can be inspected and resumed
#: from its checkpoint); "exit" writes only the final state (about 3x cheaper per run, used for
#: batch replay, where the store's own per-step transactions are the durable record anyway).
Durability = Literal["sync", "async", "exit"]


def _default_extractor(config: MemoryConfig) -> Extractor:
    from convmem_graph.extractors.heuristic import HeuristicExtractor

    return HeuristicExtractor(transient_ttl_days=config.transient_ttl_days)


def _default_summarizer() -> Summarizer:
    from convmem_graph.extractors.extractive import ExtractiveSummarizer

    return ExtractiveSummarizer()


class RunResult(BaseModel):
    """What one lifecycle run did."""

    memory_id: str
    ingested: int = 0
    dead_letters: int = 0
    skipped: dict[str, int] = Field(default_factory=dict)
    #: The first ``MAX_ERRORS_KEPT`` unreadable payloads; ``error_count`` counts them all.
    errors: list[dict[str, str]] = Field(default_factory=list)
    error_count: int = 0
    new_messages: int = 0
    fragment_ops: dict[str, int] = Field(default_factory=dict)
    variables_changed: list[str] = Field(default_factory=list)
    summary_version: int = 0
    model_calls: int = 0
    payloads: dict[str, Any] = Field(default_factory=dict)


class Lifecycle:
    """A compiled lifecycle graph bound to a store, a checkpointer and the services.

    Args:
        store: Where messages, fragments, variables and summaries live.
        checkpointer: Any LangGraph checkpointer (thread ``convmem:<memory id>``), or ``None``.
        config: Budgets, thresholds, bot ids.
        extractor: Defaults to the heuristic extractor.
        summarizer: Defaults to the extractive summarizer.
        durability: Checkpoint durability of each run (see :data:`Durability`).
        counter: Token counter for every budget.
        clock: Current time in ms; replaying old archives "as of" their own time, or tests, set it.

    Example:
        >>> from convmem_graph.store import MemoryStore
        >>> lc = Lifecycle(MemoryStore.from_url("sqlite://"))
        >>> lc.run("mem_1", [RawInput([{"role": "user", "content": "I'm allergic to mango."}])]).new_messages
        1
    """

    def __init__(
        self,
        store: MemoryStore,
        checkpointer: BaseCheckpointSaver[Any] | None = None,
        *,
        config: MemoryConfig | None = None,
        extractor: Extractor | None = None,
        summarizer: Summarizer | None = None,
        durability: Durability = "sync",
        counter: TokenCounter = count_tokens,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.store = store
        self.checkpointer = checkpointer
        self.config = config or MemoryConfig()
        # Built once: the defaults compile their rules, which a per-run default would repeat.
        self.extractor: Extractor = extractor or _default_extractor(self.config)
        self.summarizer: Summarizer = summarizer or _default_summarizer()
        self.durability: Durability = durability
        self.counter = counter
        self.clock = clock
        self.graph = build_memory_graph(max_attempts=self.config.model_max_attempts).compile(
            checkpointer=checkpointer, name="convmem_lifecycle"
        )

    def _context(
        self,
        inputs: Sequence[RawInput],
        vendors: Sequence[str],
        inject_options: Mapping[str, dict[str, Any]] | None,
        session_ended: bool,
        strict_inputs: bool = False,
    ) -> MemoryContext:
        ctx = MemoryContext(
            store=self.store,
            config=self.config,
            extractor=self.extractor,
            summarizer=self.summarizer,
            inputs=tuple(inputs),
            vendors=tuple(vendors),
            inject_options=dict(inject_options or {}),
            session_ended=session_ended,
            strict_inputs=strict_inputs,
            counter=self.counter,
            clock=self.clock,
        )
        return ctx

    def run(
        self,
        memory_id: str,
        inputs: Sequence[RawInput] = (),
        *,
        vendors: Sequence[str] = (),
        inject_options: Mapping[str, dict[str, Any]] | None = None,
        session_ended: bool = False,
        strict_inputs: bool = False,
    ) -> RunResult:
        """Run the whole lifecycle for ``memory_id`` on ``inputs`` (may be empty: just catch up).

        ``strict_inputs`` raises :class:`~convmem_graph.errors.SourceFormatError` for a payload
        that cannot be read, before anything is stored, instead of quarantining it.

        Raises:
            ExtractionError: A model kept failing; everything stored before the failing step stays
                stored and the next run resumes from the store's cursors without duplicates.
        """
        if not memory_id:
            raise ValueError("memory_id must be a non-empty string")
        ctx = self._context(inputs, vendors, inject_options, session_ended, strict_inputs)
        with self.store.memory_lock(memory_id), self.store.pinned():
            # durability only means something with a checkpointer (langgraph 1.2 fails without one).
            durability = self.durability if self.checkpointer is not None else None
            out = self.graph.invoke(
                {"memory_id": memory_id},
                # convmem's own thread: a checkpointer shared with an app keyed by user id stays the app's.
                {"configurable": {"thread_id": thread_id_for(memory_id)}},
                context=ctx,
                durability=durability,
            )
            if self.checkpointer is not None:
                prune_memory_checkpoints(self.checkpointer, memory_id, keep=self.config.keep_checkpoints)
        return RunResult(
            memory_id=memory_id,
            ingested=out.get("ingested", 0),
            dead_letters=out.get("dead_letters", 0),
            skipped=out.get("skipped", {}),
            errors=out.get("errors", []),
            error_count=out.get("error_count", len(out.get("errors", []))),
            new_messages=len(out.get("new_message_ids", [])),
            fragment_ops=out.get("fragment_ops", {}),
            variables_changed=out.get("variables_changed", []),
            summary_version=out.get("summary_version", 0),
            model_calls=out.get("model_calls", 0),
            payloads=dict(ctx.payloads),
        )

    async def arun(
        self,
        memory_id: str,
        inputs: Sequence[RawInput] = (),
        *,
        vendors: Sequence[str] = (),
        inject_options: Mapping[str, dict[str, Any]] | None = None,
        session_ended: bool = False,
        strict_inputs: bool = False,
    ) -> RunResult:
        """Async twin of :meth:`run`; the store is synchronous, so the run happens in a worker thread."""
        return await asyncio.to_thread(
            self.run,
            memory_id,
            inputs,
            vendors=vendors,
            inject_options=inject_options,
            session_ended=session_ended,
            strict_inputs=strict_inputs,
        )
