"""Run the lifecycle graph on one memory: locking, checkpoint key, pruning.

:class:`Lifecycle` is what the CLI, the replay command and :class:`~convmem_graph.memory.ConvMemory`
use. Work for one memory is serialized (an in-process lock; on PostgreSQL also the run's one
transaction, which holds the memory's ``pg_advisory_xact_lock`` and commits the run's store writes
and checkpoints together; on a SQLite file also ``flock`` on the memory's lock file beside the
database, see :func:`~convmem_graph.store.locks.file_memory_lock`); different memories run in
parallel.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, Field

from convmem_graph._inline_background import inline_background
from convmem_graph._time import now_ms
from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.base import Extractor, Summarizer
from convmem_graph.state import MemoryContext, RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.tokens import TokenCounter, count_tokens

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.graph.state import CompiledStateGraph

__all__ = ["Durability", "Lifecycle", "RunResult"]

logger = logging.getLogger(__name__)

#: "exit" (the default) writes one checkpoint per run, its end state (or, when a node raises, the
#: state at the failing step with its pending writes). A kill costs no stored message or fact
#: under it: every node commits its store writes before the next node starts (on PostgreSQL the
#: run is one transaction, committed whole or not at all) and the next run resumes from the
#: store's cursors; what is lost is the killed run's checkpoint trace (tested with a SIGKILL after
#: every node, ``tests/integration/test_lifecycle_kill.py``). A live turn costs ~3 ms (a fifth)
#: less CPU than with the per-step kinds (``benchmarks/turn_cost.py``), and the viewer's lifecycle
#: page draws its path and per-node times from the end state's ``node_ms``. "sync" persists every
#: step before the next starts and "async" while the next steps run: both keep each run's
#: per-step trace (to inspect a run step by step, or resume it from a mid-run checkpoint). On
#: PostgreSQL with the checkpoints in the store's database a run is one transaction, so its
#: per-step checkpoints could never be seen: such runs always use "exit" (see ``Lifecycle.run``).
Durability = Literal["sync", "async", "exit"]


#: The end-state keys a :class:`RunResult` is made of: the only channels the run's stream reads
#: after each step (every state key would be read and copied into a dict at every step).
RESULT_KEYS = (
    "ingested",
    "dead_letters",
    "skipped",
    "errors",
    "error_count",
    "new_messages",
    "fragment_ops",
    "variables_changed",
    "summary_version",
    "model_calls",
    "model_usage",
    "node_ms",
)


def _checked_durability(value: object) -> Durability:
    """Return ``value`` if it names a durability; a typo would otherwise surface only at a run."""
    if value not in get_args(Durability):
        raise ValueError(
            f"durability must be one of {', '.join(map(repr, get_args(Durability)))}, not {value!r}"
        )
    return value  # type: ignore[return-value]


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
    #: Model calls and prompt/completion tokens per stage (see :mod:`convmem_graph.accounting`).
    model_usage: dict[str, dict[str, int]] = Field(default_factory=dict)
    #: Milliseconds spent inside each node that ran, in run order (see :mod:`convmem_graph.accounting`).
    node_ms: dict[str, float] = Field(default_factory=dict)
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
        checkpointer_factory: Opens the checkpointer when the first run needs it (instead of
            ``checkpointer``): a call start that only reads the store never imports LangGraph.

    The graph, the checkpointer and the default extractor and summarizer are built on first use.

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
        durability: Durability = "exit",
        counter: TokenCounter = count_tokens,
        clock: Callable[[], int] = now_ms,
        checkpointer_factory: Callable[[], BaseCheckpointSaver[Any] | None] | None = None,
    ) -> None:
        self.store = store
        self.config = config or MemoryConfig()
        self._durability: Durability = _checked_durability(durability)
        self.counter = counter
        self.clock = clock
        self._checkpointer = checkpointer
        self._checkpointer_factory = checkpointer_factory if checkpointer is None else None
        self._extractor = extractor
        self._summarizer = summarizer
        self._graph: CompiledStateGraph[Any, Any, Any, Any] | None = None
        self._build = threading.RLock()

    @property
    def durability(self) -> Durability:
        """Checkpoint durability of each run: ``"exit"`` (default), ``"sync"`` or ``"async"``."""
        return self._durability

    @durability.setter
    def durability(self, value: Durability) -> None:
        self._durability = _checked_durability(value)

    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any] | None:
        """The LangGraph checkpointer (opened on first use when given as a factory)."""
        if self._checkpointer_factory is not None:
            with self._build:
                factory, self._checkpointer_factory = self._checkpointer_factory, None
                if factory is not None:
                    self._checkpointer = factory()
        return self._checkpointer

    @property
    def extractor(self) -> Extractor:
        """The fact extractor (the heuristic one unless given; built once, it compiles its rules)."""
        if self._extractor is None:
            with self._build:
                if self._extractor is None:
                    self._extractor = _default_extractor(self.config)
        return self._extractor

    @extractor.setter
    def extractor(self, value: Extractor) -> None:
        self._extractor = value

    @property
    def summarizer(self) -> Summarizer:
        """The summarizer (the extractive one unless given)."""
        if self._summarizer is None:
            with self._build:
                if self._summarizer is None:
                    self._summarizer = _default_summarizer()
        return self._summarizer

    @summarizer.setter
    def summarizer(self, value: Summarizer) -> None:
        self._summarizer = value

    @property
    def graph(self) -> CompiledStateGraph[Any, Any, Any, Any]:
        """The compiled lifecycle graph (compiled on first use, with the checkpointer)."""
        if self._graph is None:
            with self._build:
                if self._graph is None:
                    from convmem_graph.graph import build_memory_graph

                    builder = build_memory_graph(max_attempts=self.config.model_max_attempts)
                    self._graph = builder.compile(checkpointer=self.checkpointer, name="convmem_lifecycle")
        return self._graph

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
        flush_commit: bool = True,
    ) -> RunResult:
        """Run the whole lifecycle for ``memory_id`` on ``inputs`` (may be empty: just catch up).

        ``strict_inputs`` raises :class:`~convmem_graph.errors.SourceFormatError` for a payload
        that cannot be read, before anything is stored, instead of quarantining it.

        ``flush_commit=False`` lets the run commit on PostgreSQL without waiting for the server's
        WAL flush (see :meth:`~convmem_graph.store.MemoryStore.run`): for callers that redo a run
        a database crash lost, as a replay does.

        Raises:
            ExtractionError: A model kept failing; everything stored before the failing step stays
                stored and the next run resumes from the store's cursors without duplicates.
        """
        from convmem_graph.checkpoints import prune_memory_checkpoints, thread_id_for
        from convmem_graph.checkpoints.postgres import bind_run_connection
        from convmem_graph.checkpoints.sqlite import GatedSqliteSaver, PruneWithPut

        if not memory_id:
            raise ValueError("memory_id must be a non-empty string")
        ctx = self._context(inputs, vendors, inject_options, session_ended, strict_inputs)
        # Open the checkpointer and compile the graph before taking the memory's lock: the
        # PostgreSQL saver's first setup() runs CREATE INDEX CONCURRENTLY, which waits for every
        # open transaction, including another process's request for the lock we would hold.
        graph = self.graph
        saver = self.checkpointer
        # The run owns the memory's lock, one connection and, on PostgreSQL, one transaction; the
        # nodes make their store calls on it (ctx.store). A saver of ours on the store's database
        # writes the run's checkpoints in that transaction too (see convmem_graph.checkpoints.postgres).
        with (
            self.store.run(memory_id, flush_commit=flush_commit) as run,
            bind_run_connection(saver, self.store.url, run.run_connection()) as in_run,
        ):
            ctx.store = run
            # durability only means something with a checkpointer (langgraph 1.2 fails without one).
            durability: Durability | None = self.durability if saver is not None else None
            if in_run and durability != "exit":
                # The run's checkpoints commit with the run or not at all, so per-step ones would be
                # written and pruned unseen. "exit" writes the end state, or on failure the state at
                # the failing step with its pending writes: what "sync" leaves visible, for a third
                # of the statements.
                durability = "exit"
            # The end state's RESULT_KEYS are the last "values" chunk. ``invoke`` would stream
            # "updates" too (to collect interrupts, which this graph never raises) and every key.
            out: dict[str, Any] = {}
            keep = self.config.keep_checkpoints
            # With "exit" on convmem's SQLite saver the run's one checkpoint write also prunes the
            # thread, in its transaction (GatedSqliteSaver.pruning); otherwise pruning follows.
            prune: AbstractContextManager[PruneWithPut | None] = (
                saver.pruning(thread_id_for(memory_id), keep)
                if isinstance(saver, GatedSqliteSaver) and durability == "exit"
                else nullcontext(None)
            )
            # Its checkpoint writes in this thread, not in a pool started for the run: the run
            # waits for each anyway (see convmem_graph._inline_background). Not with "async".
            with inline_background(durability != "async"), prune as pruned:
                for out in graph.stream(  # noqa: B007  # the loop keeps the last chunk
                    {"memory_id": memory_id},
                    {
                        # convmem's own thread: a checkpointer shared with an app keyed by user id
                        # stays the app's.
                        "configurable": {"thread_id": thread_id_for(memory_id)},
                        # Every step of this graph runs one node, in this thread; LangGraph's pool (a
                        # new one per run) then only carries the checkpoint writes, which a saver
                        # makes one at a time anyway (its lock, or the run's one connection). Where
                        # the pool is not made inline (another LangGraph), one worker instead of two
                        # or three started per run: ~1.2 ms less CPU per run (a 6-node graph on
                        # SqliteSaver, "sync"). Not with "async", whose writes are meant to overlap
                        # the next steps (its wall p50 was worse in two of two same-run comparisons).
                        "max_concurrency": 1 if durability != "async" else None,
                    },
                    context=ctx,
                    durability=durability,
                    stream_mode="values",
                    output_keys=list(RESULT_KEYS),
                ):
                    pass
            # A thread this run began holds only what the run wrote: nothing to prune then.
            if (
                saver is not None
                and not (pruned is not None and pruned.done)
                and not (in_run and in_run.nothing_to_prune(thread_id_for(memory_id), keep))
            ):
                prune_memory_checkpoints(saver, memory_id, keep=keep)
        return RunResult(
            memory_id=memory_id,
            ingested=out.get("ingested", 0),
            dead_letters=out.get("dead_letters", 0),
            skipped=out.get("skipped", {}),
            errors=out.get("errors", []),
            error_count=out.get("error_count", len(out.get("errors", []))),
            new_messages=out.get("new_messages", 0),
            fragment_ops=out.get("fragment_ops", {}),
            variables_changed=out.get("variables_changed", []),
            summary_version=out.get("summary_version", 0),
            model_calls=out.get("model_calls", 0),
            model_usage=out.get("model_usage", {}),
            node_ms=out.get("node_ms", {}),
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
