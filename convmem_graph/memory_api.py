"""What the LangChain and LangGraph adapters need of a memory: a protocol below both and the facade.

:class:`~convmem_graph.memory.ConvMemory` implements it; :mod:`convmem_graph.integrations` and
:mod:`convmem_graph.langgraph_store` depend on this module only, so the facade can build them
without an import circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from convmem_graph.config import MemoryConfig
    from convmem_graph.memory_ops import FragmentHit
    from convmem_graph.models import Fragment, MemoryInfo, Message, Summary, VariableValue, VariableValueType
    from convmem_graph.payloads.memory_block import MemoryBlock
    from convmem_graph.runner import Lifecycle, RunResult
    from convmem_graph.store import MemoryStore

__all__ = ["MemoryAPI"]


class MemoryAPI(Protocol):
    """The part of ``ConvMemory`` the middleware, the chat history and the LangGraph store use."""

    store: MemoryStore
    lifecycle: Lifecycle
    config: MemoryConfig

    def memories(self, *, limit: int = 100, offset: int = 0) -> list[MemoryInfo]:
        """List memories, newest activity first."""
        ...

    def info(self, memory_id: str) -> MemoryInfo:
        """One memory's counts and times; raises ``MemoryNotFoundError``."""
        ...

    def ingest(
        self, memory_id: str, payloads: Any, source: str | None = None, *, session_ended: bool = False
    ) -> RunResult:
        """Store payloads and run the lifecycle."""
        ...

    def variables(self, memory_id: str) -> dict[str, VariableValue]:
        """The memory's current variable values."""
        ...

    def set_variable(self, memory_id: str, name: str, value: VariableValueType) -> VariableValue:
        """Set a variable by hand (it wins over inferred values)."""
        ...

    def clear_variable(self, memory_id: str, name: str) -> None:
        """Drop a hand-set variable value."""
        ...

    def update_fragment(
        self, memory_id: str, fragment_id: str, *, content: str | None = None, category: str | None = None
    ) -> Fragment:
        """Edit a fact's content or category."""
        ...

    def delete_fragment(self, memory_id: str, fragment_id: str) -> None:
        """Delete one fact."""
        ...

    def summary(self, memory_id: str) -> Summary | None:
        """The memory's rolling summary."""
        ...

    def recent(self, memory_id: str, n: int = 10) -> list[Message]:
        """The last ``n`` stored messages, oldest first."""
        ...

    def search(
        self, memory_id: str, query: str, k: int = 10, *, embeddings: Embeddings | None = None
    ) -> list[FragmentHit]:
        """Search the memory's active fragments."""
        ...

    def memory_block(
        self,
        memory_id: str,
        query: str | None = None,
        *,
        budget_tokens: int | None = None,
        skip_recent_turns: int = 0,
        embeddings: Embeddings | None = None,
    ) -> MemoryBlock:
        """Build the memory block for one model call."""
        ...
