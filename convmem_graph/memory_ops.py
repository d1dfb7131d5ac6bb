"""Fragment search, edits and history, and the async twins of :class:`~convmem_graph.memory.ConvMemory`.

Mixins of ``ConvMemory`` kept apart from its core (opening, ingesting, payloads): what a memory
API such as mem0's offers besides add and delete (``search``, ``update``, ``history``), and an
``a``-prefixed async twin for every public method. The store is synchronous, so each twin runs its
method in a worker thread and never blocks the event loop.

Example:
    >>> from convmem_graph import ConvMemory
    >>> mem = ConvMemory.open("sqlite://")
    >>> _ = mem.ingest("u_1", [{"role": "user", "content": "I'm allergic to mango."}], source="openai")
    >>> [hit.fragment.content for hit in mem.search("u_1", "mango")]
    ['User is allergic to mango.']
    >>> mem.close()
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from convmem_graph.models import (
    Fragment,
    MemoryInfo,
    MemorySnapshot,
    Message,
    Summary,
    VariableSpec,
    VariableValue,
    VariableValueType,
)
from convmem_graph.store.records import AuditEntry

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from convmem_graph.config import MemoryConfig
    from convmem_graph.runner import Lifecycle, RunResult
    from convmem_graph.store import MemoryStore

__all__ = ["AsyncTwins", "FragmentHit", "FragmentQueries"]

FragmentStatusFilter = Literal["active", "expired", "superseded", "deleted"]


class FragmentHit(BaseModel):
    """One search result: a fragment and how well it matched.

    ``score`` is the lexical (BM25) score relative to the best hit, in ``(0, 1]``; ``None`` when
    the fragment was placed by embeddings or recency alone.
    """

    model_config = ConfigDict(frozen=True)

    fragment: Fragment
    score: float | None = Field(default=None, ge=0.0, le=1.0)


class FragmentQueries:
    """``search``, ``update_fragment`` and ``fragment_history`` (mixed into ``ConvMemory``)."""

    store: MemoryStore
    lifecycle: Lifecycle
    config: MemoryConfig
    embeddings: Embeddings | None = None

    def _embed_soon(self, memory_id: str, *, facts: bool = True) -> None:
        """Have the memory's new or changed facts embedded off the request path (``ConvMemory``)."""

    def search(
        self,
        memory_id: str,
        query: str,
        k: int = 10,
        *,
        embeddings: Embeddings | None = None,
    ) -> list[FragmentHit]:
        """Search a memory's active, unexpired fragments with convmem's ranker.

        Args:
            memory_id: The memory.
            query: Free text (Chinese, English or mixed). Blank returns the ``k`` newest facts.
            k: At most this many results.
            embeddings: A LangChain ``Embeddings`` re-ranking the best lexical candidates (default:
                the one ``ConvMemory.open`` was given, if any). Without embeddings only fragments
                sharing a term with the query are returned.

        Returns:
            Best first.
        """
        from convmem_graph.payloads.relevance import lexical_scores, rank_fragments

        if k < 1:
            raise ValueError("search: k must be at least 1")
        now = self.lifecycle.clock()
        live = self.store.list_fragments(memory_id, status="active", include_expired=False, now_ms=now)
        model = embeddings if embeddings is not None else self.embeddings
        blank = not query.strip()
        scores = {} if blank else lexical_scores(query, [f.content for f in live])
        top = max(scores.values(), default=0.0)
        by_id = {live[i].id: s / top for i, s in scores.items()} if top > 0 else {}
        ranked = rank_fragments(query, live, embeddings=model)
        if not blank and model is None:
            ranked = [f for f in ranked if f.id in by_id]
        return [FragmentHit(fragment=f, score=by_id.get(f.id)) for f in ranked[:k]]

    def update_fragment(
        self,
        memory_id: str,
        fragment_id: str,
        *,
        content: str | None = None,
        category: str | None = None,
    ) -> Fragment:
        """Edit a fragment's content and/or category by hand; the change goes to the audit log.

        Variables are re-inferred from the facts and the call-start snapshot is rebuilt.

        Raises:
            NotFoundError: If the memory has no such fragment.
        """
        fragment = self.store.update_fragment(memory_id, fragment_id, content=content, category=category)
        self.lifecycle.run(memory_id)
        self._embed_soon(memory_id)  # a new text needs a new vector
        return fragment

    def fragment_history(self, memory_id: str, fragment_id: str, *, limit: int = 100) -> list[AuditEntry]:
        """Return the audit log of one fragment, oldest first (added, updated, superseded, deleted)."""
        entries = self.store.list_audit(memory_id, object_id=fragment_id, limit=limit)
        return [e for e in reversed(entries) if e.kind == "fragment"]


class AsyncTwins:
    """An ``a``-prefixed async twin of each public ``ConvMemory`` method, run in a worker thread.

    ``aingest`` and ``apayload`` are defined with their sync methods in ``convmem_graph.memory``.
    """

    # The sync methods the twins call (defined by ConvMemory and FragmentQueries).
    if TYPE_CHECKING:

        def close(self) -> None: ...  # noqa: D102
        def memories(self, *, limit: int = 100, offset: int = 0) -> list[MemoryInfo]: ...  # noqa: D102
        def info(self, memory_id: str) -> MemoryInfo: ...  # noqa: D102
        def delete(self, memory_id: str) -> bool: ...  # noqa: D102
        def define_variables(  # noqa: D102
            self, memory_id: str, specs: Iterable[VariableSpec | dict[str, Any]]
        ) -> None: ...
        def variables(self, memory_id: str) -> dict[str, VariableValue]: ...  # noqa: D102
        def set_variable(  # noqa: D102
            self, memory_id: str, name: str, value: VariableValueType
        ) -> VariableValue: ...
        def clear_variable(self, memory_id: str, name: str) -> None: ...  # noqa: D102
        def variable_schema(self, memory_id: str) -> list[dict[str, str | bool]]: ...  # noqa: D102
        def embed_turns(  # noqa: D102
            self, memory_id: str, *, batch: int = 64, limit: int | None = None
        ) -> int: ...
        def embed_facts(  # noqa: D102
            self, memory_id: str, *, batch: int = 64, limit: int | None = None
        ) -> int: ...
        def fragments(  # noqa: D102
            self, memory_id: str, *, status: FragmentStatusFilter | None = "active"
        ) -> list[Fragment]: ...
        def add_fragment(self, memory_id: str, content: str, *, category: str = "other") -> Fragment: ...  # noqa: D102
        def add_long_fragment(  # noqa: D102
            self, memory_id: str, content: str, *, category: str = "other"
        ) -> list[Fragment]: ...
        def delete_fragment(self, memory_id: str, fragment_id: str) -> None: ...  # noqa: D102
        def summary(self, memory_id: str) -> Summary | None: ...  # noqa: D102
        def recent(self, memory_id: str, n: int = 10) -> list[Message]: ...  # noqa: D102
        def snapshot(self, memory_id: str) -> MemorySnapshot: ...  # noqa: D102
        def ingest_messages(self, memory_id: str, messages: Sequence[Any]) -> RunResult: ...  # noqa: D102
        def search(  # noqa: D102
            self, memory_id: str, query: str, k: int = 10, *, embeddings: Embeddings | None = None
        ) -> list[FragmentHit]: ...
        def update_fragment(  # noqa: D102
            self, memory_id: str, fragment_id: str, *, content: str | None = None, category: str | None = None
        ) -> Fragment: ...
        def fragment_history(  # noqa: D102
            self, memory_id: str, fragment_id: str, *, limit: int = 100
        ) -> list[AuditEntry]: ...

    async def aclose(self) -> None:
        """Async twin of ``close``."""
        await asyncio.to_thread(self.close)

    async def amemories(self, *, limit: int = 100, offset: int = 0) -> list[MemoryInfo]:
        """Async twin of ``memories``."""
        return await asyncio.to_thread(self.memories, limit=limit, offset=offset)

    async def ainfo(self, memory_id: str) -> MemoryInfo:
        """Async twin of ``info``."""
        return await asyncio.to_thread(self.info, memory_id)

    async def adelete(self, memory_id: str) -> bool:
        """Async twin of ``delete``."""
        return await asyncio.to_thread(self.delete, memory_id)

    async def adefine_variables(self, memory_id: str, specs: Iterable[VariableSpec | dict[str, Any]]) -> None:
        """Async twin of ``define_variables``."""
        await asyncio.to_thread(self.define_variables, memory_id, list(specs))

    async def avariables(self, memory_id: str) -> dict[str, VariableValue]:
        """Async twin of ``variables``."""
        return await asyncio.to_thread(self.variables, memory_id)

    async def aset_variable(self, memory_id: str, name: str, value: VariableValueType) -> VariableValue:
        """Async twin of ``set_variable``."""
        return await asyncio.to_thread(self.set_variable, memory_id, name, value)

    async def aclear_variable(self, memory_id: str, name: str) -> None:
        """Async twin of ``clear_variable``."""
        await asyncio.to_thread(self.clear_variable, memory_id, name)

    async def avariable_schema(self, memory_id: str) -> list[dict[str, str | bool]]:
        """Async twin of ``variable_schema``."""
        return await asyncio.to_thread(self.variable_schema, memory_id)

    async def aembed_turns(self, memory_id: str, *, batch: int = 64, limit: int | None = None) -> int:
        """Async twin of ``embed_turns`` (the model's calls run in a worker thread)."""
        return await asyncio.to_thread(self.embed_turns, memory_id, batch=batch, limit=limit)

    async def aembed_facts(self, memory_id: str, *, batch: int = 64, limit: int | None = None) -> int:
        """Async twin of ``embed_facts`` (the model's calls run in a worker thread)."""
        return await asyncio.to_thread(self.embed_facts, memory_id, batch=batch, limit=limit)

    async def afragments(
        self, memory_id: str, *, status: FragmentStatusFilter | None = "active"
    ) -> list[Fragment]:
        """Async twin of ``fragments``."""
        return await asyncio.to_thread(self.fragments, memory_id, status=status)

    async def aadd_fragment(self, memory_id: str, content: str, *, category: str = "other") -> Fragment:
        """Async twin of ``add_fragment``."""
        return await asyncio.to_thread(self.add_fragment, memory_id, content, category=category)

    async def aadd_long_fragment(
        self, memory_id: str, content: str, *, category: str = "other"
    ) -> list[Fragment]:
        """Async twin of ``add_long_fragment``."""
        return await asyncio.to_thread(self.add_long_fragment, memory_id, content, category=category)

    async def adelete_fragment(self, memory_id: str, fragment_id: str) -> None:
        """Async twin of ``delete_fragment``."""
        await asyncio.to_thread(self.delete_fragment, memory_id, fragment_id)

    async def asummary(self, memory_id: str) -> Summary | None:
        """Async twin of ``summary``."""
        return await asyncio.to_thread(self.summary, memory_id)

    async def arecent(self, memory_id: str, n: int = 10) -> list[Message]:
        """Async twin of ``recent``."""
        return await asyncio.to_thread(self.recent, memory_id, n)

    async def asnapshot(self, memory_id: str) -> MemorySnapshot:
        """Async twin of ``snapshot``."""
        return await asyncio.to_thread(self.snapshot, memory_id)

    async def aingest_messages(self, memory_id: str, messages: Sequence[Any]) -> RunResult:
        """Async twin of ``ingest_messages``."""
        return await asyncio.to_thread(self.ingest_messages, memory_id, list(messages))

    async def asearch(
        self, memory_id: str, query: str, k: int = 10, *, embeddings: Embeddings | None = None
    ) -> list[FragmentHit]:
        """Async twin of ``search``."""
        return await asyncio.to_thread(self.search, memory_id, query, k, embeddings=embeddings)

    async def aupdate_fragment(
        self, memory_id: str, fragment_id: str, *, content: str | None = None, category: str | None = None
    ) -> Fragment:
        """Async twin of ``update_fragment``."""
        return await asyncio.to_thread(
            self.update_fragment, memory_id, fragment_id, content=content, category=category
        )

    async def afragment_history(
        self, memory_id: str, fragment_id: str, *, limit: int = 100
    ) -> list[AuditEntry]:
        """Async twin of ``fragment_history``."""
        return await asyncio.to_thread(self.fragment_history, memory_id, fragment_id, limit=limit)
