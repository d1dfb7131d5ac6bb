"""ConvMemory: the class LangChain and LangGraph developers hold.

It owns a store, a checkpointer and the lifecycle graph, and gives, per memory id: ingest,
variables, fragments, summary, vendor payloads and delete, each with an async twin. It plugs into
LangChain 1.x agents as middleware (:meth:`ConvMemory.as_middleware`) and into older code as a
``BaseChatMessageHistory`` (:meth:`ConvMemory.as_chat_history`).

Example:
    >>> mem = ConvMemory.open("sqlite://")
    >>> _ = mem.ingest("mem_1", [{"role": "user", "content": "我对芒果过敏。"}], source="openai")
    >>> [f.content for f in mem.fragments("mem_1")]
    ['用户对芒果过敏。']
    >>> mem.close()
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from convmem_graph._time import now_ms
from convmem_graph.assembly import open_lifecycle
from convmem_graph.config import MemoryConfig
from convmem_graph.errors import UnknownVariableError
from convmem_graph.extractors.base import Extractor, Summarizer
from convmem_graph.memory_ops import AsyncTwins, FragmentQueries
from convmem_graph.models import (
    FRAGMENT_MAX_CHARS,
    LONG_FRAGMENT_MAX_CHARS,
    Fragment,
    MemoryInfo,
    MemorySnapshot,
    Message,
    Summary,
    VariableSpec,
    VariableValue,
    VariableValueType,
)
from convmem_graph.runner import Durability, Lifecycle, RunResult
from convmem_graph.snapshot import build_snapshot, render_call_start, with_episodes, with_fact_vectors
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.store.engine import PoolSettings
from convmem_graph.store.turn_embedding import FACT_CHANGES

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings
    from langchain_core.language_models import BaseChatModel
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from convmem_graph.integrations import ConvMemoryChatHistory, ConvMemoryMiddleware
    from convmem_graph.langgraph_store import ConvMemoryStore
    from convmem_graph.payloads.memory_block import MemoryBlock
    from convmem_graph.store.turn_embedding import BackgroundEmbedder

__all__ = ["ConvMemory"]

logger = logging.getLogger(__name__)


def _check_content(method: str, content: Any, limit: int, hint: str) -> None:
    """Refuse a hand-added fact that is blank or over ``limit`` characters, naming ``method``."""
    if not isinstance(content, str) or not content.strip():
        raise ValueError(f"{method}: content must be a non-empty string")
    if len(content) > limit:
        raise ValueError(f"{method}: content is {len(content)} characters, over the limit of {limit}; {hint}")


def _as_inputs(payloads: Any, source: str | None) -> tuple[list[RawInput], bool]:
    # A single document (dict), or a list that is itself one payload (a message list), or a
    # list/tuple of RawInput. A list of dicts is treated as ONE payload (OpenAI/LangChain lists).
    # The flag says "a batch": a RawInput or a list of them, whose unreadable items are
    # quarantined rather than raised.
    if isinstance(payloads, RawInput):
        return [payloads], True
    if isinstance(payloads, list | tuple) and payloads and all(isinstance(p, RawInput) for p in payloads):
        return list(payloads), True
    return [RawInput(payloads, source)], False


class ConvMemory(FragmentQueries, AsyncTwins):
    """Conversational memory for voice and text agents, backed by the LangGraph lifecycle.

    Use :meth:`open` rather than the constructor. Every public method has an ``a``-prefixed async
    twin that runs it in a worker thread (``aingest``, ``apayload``, ``asearch``, ``adelete`` ...);
    search, fragment edits and history come from :mod:`convmem_graph.memory_ops`.
    """

    def __init__(
        self,
        store: MemoryStore,
        lifecycle: Lifecycle,
        *,
        close_checkpointer: Callable[[], None] | None = None,
        embeddings: Embeddings | None = None,
        embed_in_background: bool = True,
    ) -> None:
        self.store = store
        self.lifecycle = lifecycle
        self.config = lifecycle.config
        self._close_checkpointer = close_checkpointer
        #: Re-ranks search results, store searches and the middleware's memory block.
        self.embeddings = embeddings
        #: With ``embeddings``: new turns of an ``ingest`` are embedded by a worker thread.
        self.embed_in_background = embed_in_background
        self._embedder: BackgroundEmbedder | None = None
        self._embedder_lock = threading.Lock()
        #: Memories whose facts changed since the worker last embedded them (under the lock).
        self._facts_changed: set[str] = set()

    @classmethod
    def open(
        cls,
        url: str | None = None,
        model: BaseChatModel | str | None = None,
        config: MemoryConfig | None = None,
        *,
        checkpoint_url: str | None = None,
        checkpointer: BaseCheckpointSaver[Any] | None = None,
        extractor: Extractor | None = None,
        summarizer: Summarizer | None = None,
        durability: Durability = "exit",
        embeddings: Embeddings | None = None,
        embed_in_background: bool = True,
        clock: Callable[[], int] = now_ms,
        pools: PoolSettings | None = None,
    ) -> ConvMemory:
        """Open (and create if needed) a memory database.

        Args:
            url: SQLAlchemy URL or SQLite file path; ``None`` means ``convmem.db`` in the current
                directory; ``postgresql://...`` uses PostgreSQL (install the ``postgres`` extra).
            model: A LangChain chat model, or a model name for ``ChatOpenAI`` (base URL and key from
                ``OPENAI_BASE_URL``/``OPENAI_API_KEY``). ``None`` uses the offline heuristic
                extractor and the extractive summarizer.
            config: Budgets, thresholds, bot ids.
            checkpoint_url: Where checkpoints go; defaults to the store's database.
            checkpointer: Any LangGraph checkpointer to use instead (e.g. the one your app
                compiles with; it stays yours to close). convmem writes only threads
                ``convmem:<memory id>`` and prunes and deletes only those; a saver it cannot
                prune (not SQLite, PostgreSQL or in-memory) is used unpruned, with one warning.
            extractor: Overrides the extractor chosen from ``model``.
            summarizer: Overrides the summarizer chosen from ``model``.
            durability: Checkpoint durability of lifecycle runs: ``"exit"`` (default; one
                checkpoint per run, its end state) or ``"sync"`` / ``"async"`` (one per step, to
                inspect a run step by step). A kill loses no message or fact under any of them
                (see :data:`~convmem_graph.runner.Durability`).
            embeddings: Any LangChain ``Embeddings``: re-ranks the lexical candidates of
                :meth:`search`, of ``as_store()`` searches and of the middleware's memory block.
            embed_in_background: With ``embeddings``, the turns each :meth:`ingest` stores get their
                vectors from one worker thread of this instance, after the run and without delaying
                it (``False``: only when :meth:`embed_turns` is called).
            clock: Current time in ms (decides which transient facts have expired); set it to
                replay an old archive as of its own time, or in tests.
            pools: PostgreSQL pool sizes of the store and the checkpointer (the CLI and the server
                fill them from ``CONVMEM_PG_*``; the library never reads the environment).
        """
        lifecycle, closer = open_lifecycle(
            url,
            model,
            config,
            checkpoint_url=checkpoint_url,
            checkpointer=checkpointer,
            extractor=extractor,
            summarizer=summarizer,
            durability=durability,
            clock=clock,
            pools=pools,
        )
        return cls(
            lifecycle.store,
            lifecycle,
            close_checkpointer=closer,
            embeddings=embeddings,
            embed_in_background=embed_in_background,
        )

    @property
    def checkpointer(self) -> BaseCheckpointSaver[Any] | None:
        """The LangGraph checkpointer of the lifecycle graph."""
        return self.lifecycle.checkpointer

    def close(self) -> None:
        """Stop the background embedding (between two batches), then close database connections."""
        if self._embedder is not None:
            self._embedder.close()
        if self._close_checkpointer is not None:
            self._close_checkpointer()
            self._close_checkpointer = None
        self.store.close()

    def __enter__(self) -> ConvMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- memories -------------------------------------------------------------------------
    def memories(self, *, limit: int = 100, offset: int = 0) -> list[MemoryInfo]:
        """List memories (isolation units), oldest first."""
        return self.store.list_memories(limit=limit, offset=offset)

    def info(self, memory_id: str) -> MemoryInfo:
        """Return one memory's counters; raises ``MemoryNotFoundError`` if unknown."""
        return self.store.get_memory(memory_id)

    def delete(self, memory_id: str) -> bool:
        """Delete a memory: its rows in every registered table, and its checkpoints.

        The registry (``store/registry.py``) covers dead letters, replay progress, the server's
        inbox and task map too.
        """
        existed = self.store.delete_memory(memory_id)
        if self.checkpointer is not None:
            # Only convmem's own thread (and its pre-namespace leftovers), never the app's threads.
            from convmem_graph.checkpoints import delete_memory_checkpoints

            delete_memory_checkpoints(self.checkpointer, memory_id)
        return existed

    # -- lifecycle ------------------------------------------------------------------------
    def ingest(
        self,
        memory_id: str,
        payloads: Any,
        source: str | None = None,
        *,
        session_ended: bool = False,
    ) -> RunResult:
        """Run the lifecycle on one payload (a vendor document, a message list) or a list of ``RawInput``.

        Args:
            memory_id: The memory to update.
            payloads: A Tencent IM roam response, TRTC callbacks, Agora history or 103 body, an
                OpenAI/LangChain message list, or a list of :class:`RawInput`.
            source: The source format, or ``None`` to auto-detect.
            session_ended: Refresh the summary now (a call or chat session ended).

        Raises:
            SourceFormatError: ``payloads`` is one payload that cannot be read (unrecognized, or
                not the named ``source``); nothing is stored. With a list of ``RawInput``, such
                payloads are quarantined as dead letters and listed in ``RunResult.errors``.
        """
        inputs, batch = _as_inputs(payloads, source)
        result = self.lifecycle.run(memory_id, inputs, session_ended=session_ended, strict_inputs=not batch)
        self._embed_later(memory_id, result)
        return result

    async def aingest(
        self,
        memory_id: str,
        payloads: Any,
        source: str | None = None,
        *,
        session_ended: bool = False,
    ) -> RunResult:
        """Async twin of :meth:`ingest`."""
        inputs, batch = _as_inputs(payloads, source)
        result = await self.lifecycle.arun(
            memory_id, inputs, session_ended=session_ended, strict_inputs=not batch
        )
        self._embed_later(memory_id, result)
        return result

    def _embed_later(self, memory_id: str, result: RunResult) -> None:
        """Hand a run's new turns and facts to the background embedder; never blocks."""
        facts_changed = any(result.fragment_ops.get(op) for op in FACT_CHANGES)
        if result.new_messages or facts_changed:
            self._embed_soon(memory_id, facts=facts_changed)

    def _embed_soon(self, memory_id: str, *, facts: bool = True) -> None:
        """Tell the background embedder (created on first use) about ``memory_id``; never blocks.

        ``facts``: the memory's facts changed too. Only then does the worker look for facts to
        embed (a pass reads every active fact's text: ~40 ms of CPU at 10k facts).
        """
        if self.embeddings is None or not self.embed_in_background:
            return
        with self._embedder_lock:
            if facts:
                self._facts_changed.add(memory_id)
            if self._embedder is None:
                from convmem_graph.store.turn_embedding import BackgroundEmbedder

                # The thread holds this instance weakly: one dropped without close() is collected,
                # and its worker stopped, as its connections would be.
                method = weakref.WeakMethod(self._embed_missing)

                def work(mid: str, stop: threading.Event) -> int:
                    bound = method()
                    return bound(mid, stop) if bound is not None else 0

                self._embedder = BackgroundEmbedder(work)
                weakref.finalize(self, self._embedder.close, 0)
        self._embedder.notify(memory_id)

    def _embed_missing(self, memory_id: str, stop: threading.Event) -> int:
        """The background worker's job: the memory's turns, then facts, without a vector by the model."""
        from convmem_graph.store.turn_embedding import embed_missing_facts, embed_missing_turns

        embeddings = self.embeddings
        if embeddings is None:  # taken away since the run
            return 0
        done = embed_missing_turns(self.store, embeddings, memory_id, stop=stop)
        with self._embedder_lock:
            # Taken before the pass: a change made during it queues the memory (and this) again.
            facts = memory_id in self._facts_changed
            self._facts_changed.discard(memory_id)
        if facts:
            done += embed_missing_facts(self.store, embeddings, memory_id, stop=stop)
        return done

    # -- variables ------------------------------------------------------------------------
    def define_variables(self, memory_id: str, specs: Iterable[VariableSpec | dict[str, Any]]) -> None:
        """Define (or redefine) the profile schema of a memory; used instead of the default schema.

        The list is the whole schema: a field of the previous schema (the default one when none was
        defined) that is not in it is retired, its value dropped from the profile and kept in the
        audit (a ``delete`` entry whose cause says "retired"), so it is never injected again.
        """
        new = [VariableSpec.model_validate(s) for s in specs]
        self.store.ensure_memory(memory_id)
        before = [s.name for s in self._schema(memory_id)]
        self.store.define_variables(memory_id, new)
        names = {s.name for s in new}
        self.store.retire_variables(memory_id, [n for n in before if n not in names])
        self._refresh(memory_id)

    def variable_schema(self, memory_id: str) -> list[dict[str, str | bool]]:
        """List the memory's fields and how each gets its value offline.

        ``source`` is ``rule: <family>`` (a deterministic rule fills it: the default fields, and a
        custom field whose name or description names a family such as a pet's name or a city),
        ``manual only`` (``infer=False``) or ``needs a model`` (only an LLM extractor can fill it).

        Example:
            >>> mem = ConvMemory.open(":memory:")
            >>> mem.define_variables("u", [{"name": "pet_name"}, {"name": "favourite_team"}])
            >>> [(r["name"], r["source"]) for r in mem.variable_schema("u")]
            [('pet_name', 'rule: pet_names'), ('favourite_team', 'needs a model')]
            >>> mem.close()
        """
        from convmem_graph.extractors._field_match import inference_source
        from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS

        defaults = frozenset(s.name for s in DEFAULT_VARIABLE_SPECS)
        return [
            {
                "name": s.name,
                "type": s.type,
                "infer": s.infer,
                "description": s.description,
                "source": inference_source(s, defaults),
            }
            for s in self._schema(memory_id)
        ]

    def _schema(self, memory_id: str) -> list[VariableSpec]:
        from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS

        return self.store.get_specs(memory_id) or list(DEFAULT_VARIABLE_SPECS)

    def variables(self, memory_id: str) -> dict[str, VariableValue]:
        """Return effective variable values (a manual value wins over an inferred one)."""
        return self.store.get_variables(memory_id)

    def set_variable(self, memory_id: str, name: str, value: VariableValueType) -> VariableValue:
        """Set a manual value; inference never overwrites it until it is cleared.

        Raises:
            UnknownVariableError: ``name`` is not in the memory's schema (the default one when none
                was defined).
            ValueError: The value does not fit the field's type or allowed values.
        """
        schema = [s.name for s in self._schema(memory_id)]
        if name not in schema:
            raise UnknownVariableError(memory_id, name, schema)
        if not self.store.get_specs(memory_id):
            # No schema defined: the default one applies, so its types are checked here too.
            from convmem_graph.extractors.variables import DEFAULT_VARIABLE_SPECS
            from convmem_graph.store._variables import check_value

            spec = next((s for s in DEFAULT_VARIABLE_SPECS if s.name == name), None)
            value = check_value(name, value, spec)
        self.store.ensure_memory(memory_id)
        result = self.store.set_manual_variable(memory_id, name, value)
        self._refresh(memory_id)
        return result

    def clear_variable(self, memory_id: str, name: str) -> None:
        """Clear a manual value, handing the field back to inference."""
        self.store.clear_manual_variable(memory_id, name)
        self._refresh(memory_id)

    # -- fragments ------------------------------------------------------------------------
    def fragments(
        self,
        memory_id: str,
        *,
        status: Literal["active", "expired", "superseded", "deleted"] | None = "active",
    ) -> list[Fragment]:
        """List fragments (active ones by default).

        ``"active"`` leaves out transient facts already past their ``expires_at`` (at the memory's
        clock): they are no longer true and never injected. ``"expired"`` lists those; ``None``
        lists every fragment, expired ones included.
        """
        now = self.lifecycle.clock()
        if status == "expired":
            active = self.store.list_fragments(memory_id, status="active", now_ms=now)
            return [f for f in active if f.transient and f.expires_at is not None and f.expires_at <= now]
        return self.store.list_fragments(
            memory_id, status=status, include_expired=status != "active", now_ms=now
        )

    def add_fragment(self, memory_id: str, content: str, *, category: str = "other") -> Fragment:
        """Add a fact by hand (origin ``manual``).

        Raises:
            ValueError: If ``content`` is blank or longer than ``FRAGMENT_MAX_CHARS`` (200)
                characters (Bailian's limit for a memory node too).
        """
        _check_content(
            "add_fragment", content, FRAGMENT_MAX_CHARS, "add_long_fragment() stores it as linked pieces"
        )
        self.store.ensure_memory(memory_id)
        fragment = self.store.add_fragment(
            memory_id, content, category=category, origin="manual", now_ms=self.lifecycle.clock()
        )
        self.lifecycle.run(memory_id)  # variables follow the facts; the snapshot is rebuilt
        self._embed_soon(memory_id)
        return fragment

    def add_long_fragment(self, memory_id: str, content: str, *, category: str = "other") -> list[Fragment]:
        """Add a fact by hand that may be longer than a fragment holds (origin ``manual``).

        Text over ``FRAGMENT_MAX_CHARS`` (200) characters is cut at sentence ends into linked
        fragments (``part_of``, ``part``), each within the limit as Bailian's memory nodes are; the
        memory block injects the pieces together, as one fact, or leaves them all out.

        Returns:
            The pieces in order (one fragment when the text fits in one).

        Raises:
            ValueError: If ``content`` is blank or longer than ``LONG_FRAGMENT_MAX_CHARS`` (2,000).

        Example:
            >>> mem = ConvMemory.open(":memory:")
            >>> story = "Lisa won the painting prize at school. " * 8
            >>> [len(p.content) <= 200 for p in mem.add_long_fragment("u1", story)]
            [True, True]
            >>> mem.close()
        """
        _check_content("add_long_fragment", content, LONG_FRAGMENT_MAX_CHARS, "a fact is not a document")
        self.store.ensure_memory(memory_id)
        pieces = self.store.add_long_fragment(
            memory_id, content, category=category, origin="manual", now_ms=self.lifecycle.clock()
        )
        self.lifecycle.run(memory_id)  # variables follow the facts; the snapshot is rebuilt
        self._embed_soon(memory_id)
        return pieces

    def delete_fragment(self, memory_id: str, fragment_id: str) -> None:
        """Delete a fragment (kept in the audit log)."""
        self.store.delete_fragment(memory_id, fragment_id)
        self.lifecycle.run(memory_id)

    def summary(self, memory_id: str) -> Summary | None:
        """Return the rolling summary, if one was made."""
        return self.store.get_summary(memory_id)

    def recent(self, memory_id: str, n: int = 10) -> list[Message]:
        """Return the last ``n`` messages, oldest first."""
        return self.store.recent_messages(memory_id, n)

    # -- payloads -------------------------------------------------------------------------
    def snapshot(self, memory_id: str) -> MemorySnapshot:
        """Return the cached call-start snapshot (one primary-key read), building it if missing."""
        snap = self.store.load_snapshot(memory_id)
        if snap is None:
            self.store.get_memory(memory_id)  # raises MemoryNotFoundError for unknown ids
            snap = self._refresh(memory_id)
        return snap

    def payload(self, memory_id: str, vendor: str, /, **options: Any) -> Any:
        """Build a vendor payload from the cached snapshot.

        Args:
            memory_id: The memory.
            vendor: ``trtc`` (StartAIConversation body), ``trtc-llmconfig`` (the LLMConfig string),
                ``agora`` (join body), ``agora-llm`` (``properties.llm``), ``agora-update``,
                ``agora-custom`` / ``agora-standard`` (messages for an LLM endpoint), ``openai``,
                ``langchain``.
            **options: Vendor options (persona, query, recent_turns, ...); see
                :func:`convmem_graph.payloads.render.render_payload`. Without ``budget_tokens``
                the block gets ``MemoryConfig.memory_block_budget_tokens``.

        With a ``query`` and ``MemoryConfig.episodic`` (the default), the memory's stored turns are
        searched too (the episodic index) and the matching ones compete for the block's budget
        with the facts, quoted with their dates.
        """
        if self.embeddings is not None:
            # A search by meaning calls a model (milliseconds): no pooled connection held over it.
            return self._payload(memory_id, vendor, options)
        # The snapshot's row and the turns' search read through one connection (SQLite files).
        with self.store.call_start_reads():
            return self._payload(memory_id, vendor, options)

    def _payload(self, memory_id: str, vendor: str, options: dict[str, Any]) -> Any:
        snap = self.snapshot(memory_id)
        now = self.lifecycle.clock()
        return render_call_start(
            self.store, snap, vendor, options, config=self.config, now_ms=now, embeddings=self.embeddings
        )

    async def apayload(self, memory_id: str, vendor: str, /, **options: Any) -> Any:
        """Async twin of :meth:`payload`."""
        return await asyncio.to_thread(self.payload, memory_id, vendor, **options)

    def embed_turns(self, memory_id: str, *, batch: int = 64, limit: int | None = None) -> int:
        """Write the vectors of the memory's stored turns that have none yet (off the request path).

        Batched (``batch`` turns per model call, one write each) and resumable: a killed run
        leaves whole batches written, and the next run picks up the turns still without one.
        A memory half embedded still answers: its other turns are found by their words.

        Args:
            memory_id: The memory.
            batch: Turns per ``embed_documents`` call.
            limit: At most this many turns this call (``None``: all that are missing).

        Returns:
            How many turns got a vector.

        Raises:
            ValueError: If the memory was opened without ``embeddings``.
        """
        if self.embeddings is None:
            raise ValueError("embed_turns: this ConvMemory was opened without embeddings=")
        from convmem_graph.store.turn_embedding import embed_missing_turns

        return embed_missing_turns(self.store, self.embeddings, memory_id, batch=batch, limit=limit)

    def embed_facts(self, memory_id: str, *, batch: int = 64, limit: int | None = None) -> int:
        """Write the vectors of the memory's active facts that have none of their current text.

        Off the request path, like :meth:`embed_turns` (the background embedder runs it after each
        ingest that changed facts, and after :meth:`add_fragment` / :meth:`update_fragment`). The
        call start's block reads these instead of embedding the facts at every call; a fact
        without one yet ranks by its words. Resumable: a killed pass leaves whole batches.

        Args:
            memory_id: The memory.
            batch: Facts per ``embed_documents`` call.
            limit: At most this many facts this call (``None``: all that are missing).

        Returns:
            How many facts got a vector.

        Raises:
            ValueError: If the memory was opened without ``embeddings``.
        """
        if self.embeddings is None:
            raise ValueError("embed_facts: this ConvMemory was opened without embeddings=")
        from convmem_graph.store.turn_embedding import embed_missing_facts

        return embed_missing_facts(self.store, self.embeddings, memory_id, batch=batch, limit=limit)

    def query_snapshot(
        self,
        memory_id: str,
        query: str | None,
        *,
        budget_tokens: int | None = None,
        embeddings: Embeddings | None = None,
    ) -> MemorySnapshot:
        """The call-start snapshot with the stored turns that match ``query`` attached.

        With ``MemoryConfig(episodic=False)`` or no query, the cached snapshot as it is. The
        number of candidate turns read follows the block's budget (a quote is ~10-40 tokens). With
        ``embeddings`` (default: the memory's own) the turns nearest the query by meaning join them,
        and the facts' stored vectors are attached (``fact_vectors``) for the block to rank them by.
        """
        snap = self.snapshot(memory_id)
        chosen = embeddings if embeddings is not None else self.embeddings
        found = with_episodes(
            self.store, snap, self.config, query, budget_tokens=budget_tokens, embeddings=chosen
        )
        return with_fact_vectors(self.store, found, chosen) if query and query.strip() else found

    def memory_block(
        self,
        memory_id: str,
        query: str | None = None,
        *,
        budget_tokens: int | None = None,
        skip_recent_turns: int = 0,
        embeddings: Embeddings | None = None,
    ) -> MemoryBlock:
        """Build the memory block alone (what every payload puts in its system prompt).

        Args:
            memory_id: The memory.
            query: The user's current input: facts and stored turns are ranked against it.
            budget_tokens: Defaults to ``MemoryConfig.memory_block_budget_tokens``.
            skip_recent_turns: The caller already sends the newest this many turns: they are
                not quoted again.
            embeddings: Re-ranks facts that tie lexically (default: the memory's own).

        Returns:
            The block and what went into it (``text`` is ``""`` for an empty memory).
        """
        from convmem_graph.payloads.memory_block import MemoryBlockOptions, build_memory_block

        chosen = embeddings if embeddings is not None else self.embeddings
        if chosen is not None:
            from convmem_graph.embeddings import QueryOnce

            # The turns' search and the facts' ranking embed the same query: once.
            chosen = QueryOnce(chosen)
        options = MemoryBlockOptions(
            budget_tokens=self.config.memory_block_budget_tokens if budget_tokens is None else budget_tokens,
            query=query,
            skip_recent_turns=skip_recent_turns,
            now_ms=self.lifecycle.clock(),
        )
        return build_memory_block(
            self.query_snapshot(memory_id, query, budget_tokens=options.budget_tokens, embeddings=chosen),
            options,
            embeddings=chosen,
        )

    async def aquery_snapshot(
        self, memory_id: str, query: str | None, *, budget_tokens: int | None = None
    ) -> MemorySnapshot:
        """Async twin of :meth:`query_snapshot`."""
        return await asyncio.to_thread(self.query_snapshot, memory_id, query, budget_tokens=budget_tokens)

    async def amemory_block(
        self,
        memory_id: str,
        query: str | None = None,
        *,
        budget_tokens: int | None = None,
        skip_recent_turns: int = 0,
        embeddings: Embeddings | None = None,
    ) -> MemoryBlock:
        """Async twin of :meth:`memory_block`."""
        return await asyncio.to_thread(
            self.memory_block,
            memory_id,
            query,
            budget_tokens=budget_tokens,
            skip_recent_turns=skip_recent_turns,
            embeddings=embeddings,
        )

    def _refresh(self, memory_id: str) -> MemorySnapshot:
        # Hand edits (variables, fragments) must show at the next call start without a full run.
        now = self.lifecycle.clock()
        snap = build_snapshot(self.store, memory_id, self.config, now_ms=now)
        self.store.save_snapshot(memory_id, snap, now_ms=now)
        return snap

    # -- LangChain integrations -----------------------------------------------------------
    def as_middleware(
        self,
        memory_id: str | None = None,
        *,
        resolve_memory_id: Callable[[Any], str | None] | None = None,
        mode: Literal["inline", "background"] = "inline",
        persona: str = "",
        on_missing_memory_id: Literal["warn", "raise"] = "warn",
        embeddings: Embeddings | None = None,
    ) -> ConvMemoryMiddleware:
        """Return a LangChain ``AgentMiddleware`` that injects memory and records finished turns.

        Args:
            memory_id: A fixed memory id; otherwise resolved per run (see ``resolve_memory_id``).
            resolve_memory_id: ``f(runtime) -> memory id``; the default reads ``memory_id`` from the
                agent's context object or mapping.
            mode: ``inline`` runs the lifecycle before the agent returns; ``background`` hands the
                turn to a worker thread (call ``middleware.flush()`` to wait).
            persona: Text placed before the memory block in the system message.
            on_missing_memory_id: When a run has no memory id (e.g. the agent's context is keyed
                on ``user_id``): log one warning and go on without memory, or raise
                ``MissingMemoryIdError``.
            embeddings: Re-ranks the memory block's facts against the user's last message
                (default: the ``embeddings`` given to :meth:`open`).
        """
        from convmem_graph.integrations import ConvMemoryMiddleware

        return ConvMemoryMiddleware(
            self,
            memory_id=memory_id,
            resolve_memory_id=resolve_memory_id,
            mode=mode,
            persona=persona,
            on_missing_memory_id=on_missing_memory_id,
            embeddings=embeddings,
        )

    def as_store(self, *, prefix: str = "memories") -> ConvMemoryStore:
        """Return a LangGraph ``BaseStore`` over this memory (namespaces ``(prefix, memory_id, ...)``).

        Pass it to ``graph.compile(store=...)`` / ``create_agent(store=...)`` so ``runtime.store``
        and LangMem's ``create_manage_memory_tool`` / ``create_search_memory_tool`` (namespace
        ``("memories", "{langgraph_user_id}")``) read and write convmem's facts; see
        :mod:`convmem_graph.langgraph_store`.
        """
        from convmem_graph.langgraph_store import ConvMemoryStore

        return ConvMemoryStore(self, prefix=prefix)

    def as_chat_history(self, memory_id: str, *, window: int = 50) -> ConvMemoryChatHistory:
        """Return a ``BaseChatMessageHistory`` for code built on ``RunnableWithMessageHistory``."""
        from convmem_graph.integrations import ConvMemoryChatHistory

        return ConvMemoryChatHistory(self, memory_id, window=window)

    def ingest_messages(self, memory_id: str, messages: Sequence[Any]) -> RunResult:
        """Ingest LangChain messages (or OpenAI-style dicts) as one payload."""
        return self.ingest(memory_id, list(messages), source=None)
