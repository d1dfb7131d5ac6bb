"""LangChain integrations of :class:`~convmem_graph.memory.ConvMemory`.

- :class:`ConvMemoryMiddleware`: LangChain 1.x agent middleware. Before each model call it adds the
  memory block to the system message of that one request (nothing is stored in agent state); after
  the agent finishes it hands the turn (the last user message and what followed) to the lifecycle.
- :class:`ConvMemoryChatHistory`: a ``BaseChatMessageHistory`` for code that still uses
  ``RunnableWithMessageHistory`` (deprecated upstream since langchain-core 1.6.4; the deprecation
  warning is silenced here so users of this adapter are not flooded).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain_core._api import LangChainDeprecationWarning
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from convmem_graph._heap import freeze_long_lived
from convmem_graph.errors import ConvMemError, MemoryNotFoundError
from convmem_graph.models import Message

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from convmem_graph.memory_api import MemoryAPI

with warnings.catch_warnings():
    warnings.simplefilter("ignore", LangChainDeprecationWarning)
    from langchain_core.chat_history import BaseChatMessageHistory

__all__ = ["ConvMemoryChatHistory", "ConvMemoryMiddleware", "MissingMemoryIdError", "last_turn"]

logger = logging.getLogger(__name__)

#: Stored turns the middleware never quotes: the agent's own request carries the newest ones.
_AGENT_RECENT_TURNS = 10


def _text(message: BaseMessage) -> str:
    return message.text if hasattr(message, "text") else str(message.content)


def last_turn(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Return the last user message and the assistant messages after it (tool traffic dropped)."""
    start = None
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            start = i
            break
    if start is None:
        return []
    turn: list[BaseMessage] = [messages[start]]
    for m in messages[start + 1 :]:
        if isinstance(m, AIMessage) and _text(m).strip() and not m.tool_calls:
            turn.append(m)
        elif isinstance(m, ToolMessage):
            continue
    return turn


class MissingMemoryIdError(ConvMemError, ValueError):
    """The middleware found no memory id for a run (``on_missing_memory_id="raise"``)."""


def _default_resolve(runtime: Any) -> str | None:
    context = getattr(runtime, "context", None)
    if isinstance(context, Mapping):
        value = context.get("memory_id")
    else:
        value = getattr(context, "memory_id", None)
    return str(value) if value else None


def _ingest_then_freeze(memory: MemoryAPI, memory_id: str, turn: list[BaseMessage]) -> None:
    """Ingest a turn; after the process's first one, freeze the long-lived heap for the collector.

    The first turn imports and builds what an agent keeps for its life (the lifecycle graph, the
    checkpointer, the extractor's rules): see :mod:`convmem_graph._heap`.
    """
    memory.ingest(memory_id, turn, source="langchain")
    freeze_long_lived()


class ConvMemoryMiddleware(AgentMiddleware[AgentState[Any], Any]):
    """Agent middleware giving a ``create_agent`` agent long-term memory.

    Example:
        >>> from langchain.agents import create_agent  # doctest: +SKIP
        >>> agent = create_agent(model, tools=[], middleware=[mem.as_middleware("mem_u1")])  # doctest: +SKIP
    """

    def __init__(
        self,
        memory: MemoryAPI,
        *,
        memory_id: str | None = None,
        resolve_memory_id: Callable[[Any], str | None] | None = None,
        mode: Literal["inline", "background"] = "inline",
        persona: str = "",
        on_missing_memory_id: Literal["warn", "raise"] = "warn",
        embeddings: Embeddings | None = None,
    ) -> None:
        super().__init__()
        self.memory = memory
        self.memory_id = memory_id
        self.resolve_memory_id = resolve_memory_id or _default_resolve
        self.mode = mode
        self.persona = persona
        self.on_missing_memory_id = on_missing_memory_id
        self.embeddings = embeddings
        self._executor: ThreadPoolExecutor | None = None
        self._pending: list[Future[Any]] = []
        self._lock = threading.Lock()
        self._warned_missing = False

    @property
    def name(self) -> str:
        """Middleware name shown in agent graphs."""
        return "ConvMemoryMiddleware"

    def _memory_id(self, runtime: Any) -> str | None:
        memory_id = self.memory_id or self.resolve_memory_id(runtime)
        if memory_id:
            return memory_id
        # Silence here means an agent without memory and nobody knowing why.
        message = (
            "ConvMemoryMiddleware: no memory id for this run, so no memory is injected or recorded; "
            "pass memory_id=, a resolve_memory_id= function, or a context with a 'memory_id' "
            f"(context was {type(getattr(runtime, 'context', None)).__name__})"
        )
        if self.on_missing_memory_id == "raise":
            raise MissingMemoryIdError(message)
        with self._lock:
            warned, self._warned_missing = self._warned_missing, True
        if not warned:
            logger.warning("%s; warning once per middleware", message)
        return None

    def memory_block(self, memory_id: str, query: str | None = None) -> str:
        """Return the memory block text for ``memory_id`` (empty if the memory is unknown or empty)."""
        try:
            # The agent sends its recent turns itself; stored turns matching the query are quoted.
            block = self.memory.memory_block(
                memory_id, query, skip_recent_turns=_AGENT_RECENT_TURNS, embeddings=self.embeddings
            )
        except MemoryNotFoundError:
            return ""
        return block.text

    def _with_memory(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        memory_id = self._memory_id(request.runtime)
        if not memory_id:
            return request
        query = next((_text(m) for m in reversed(request.messages) if isinstance(m, HumanMessage)), None)
        block = self.memory_block(memory_id, query)
        if not block:
            return request
        parts = [
            p
            for p in (request.system_message.text if request.system_message else "", self.persona, block)
            if p
        ]
        return request.override(system_message=SystemMessage(content="\n\n".join(parts)))

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage:
        """Add the memory block to this request's system message only."""
        return handler(self._with_memory(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage:
        """Async twin of :meth:`wrap_model_call`; the store is read in a worker thread."""
        return await handler(await asyncio.to_thread(self._with_memory, request))

    def _record(self, state: Any, runtime: Any) -> None:
        memory_id = self._memory_id(runtime)
        messages = state.get("messages", []) if isinstance(state, Mapping) else []
        turn = last_turn(messages)
        if not memory_id or not turn:
            return
        if self.mode == "inline":
            _ingest_then_freeze(self.memory, memory_id, turn)
            return
        with self._lock:
            if self._executor is None:
                # One worker keeps turns of a conversation in order.
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="convmem")
            self._pending.append(self._executor.submit(_ingest_then_freeze, self.memory, memory_id, turn))

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Hand the finished turn to the lifecycle (inline or in the background)."""
        self._record(state, runtime)
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Async twin of :meth:`after_agent`; the lifecycle runs in a worker thread."""
        if self.mode == "inline":
            await asyncio.to_thread(self._record, state, runtime)
        else:
            self._record(state, runtime)
        return None

    def flush(self, timeout: float | None = None) -> None:
        """Wait for background turns to be recorded; re-raises the first failure."""
        with self._lock:
            pending, self._pending = self._pending, []
        for future in pending:
            future.result(timeout=timeout)


def _to_langchain(message: Message) -> BaseMessage:
    if message.role == "user":
        return HumanMessage(content=message.content, id=message.id)
    return AIMessage(content=message.content, id=message.id)


class ConvMemoryChatHistory(BaseChatMessageHistory):
    """``BaseChatMessageHistory`` over a ConvMemory memory id.

    ``messages`` returns the last ``window`` stored messages; ``add_messages`` runs the lifecycle on
    them; ``clear`` deletes the stored messages only: what a chat history holds. The long-term
    memory learnt from them (facts, variables, summary) stays; ``ConvMemory.delete`` removes it.
    """

    def __init__(self, memory: MemoryAPI, memory_id: str, *, window: int = 50) -> None:
        self.memory = memory
        self.memory_id = memory_id
        self.window = window

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The most recent messages of the memory, oldest first."""
        return [_to_langchain(m) for m in self.memory.recent(self.memory_id, self.window)]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store messages and update the memory (system and tool messages are not conversation)."""
        if messages:
            self.memory.ingest(self.memory_id, list(messages), source="langchain")

    def clear(self) -> None:
        """Delete the stored messages of this memory, after their facts were extracted.

        Facts, variables and the summary stay (use ``ConvMemory.delete`` to forget everything).
        """
        try:
            self.memory.info(self.memory_id)
        except MemoryNotFoundError:
            return
        self.memory.lifecycle.run(self.memory_id)  # catch up: no message is cleared unread
        self.memory.store.purge_messages(self.memory_id, before_ms=2**62, keep_recent=0, only_processed=False)
        self.memory.lifecycle.run(self.memory_id)  # the call-start snapshot drops the old turns

    async def aclear(self) -> None:
        """Async twin of :meth:`clear`."""
        await asyncio.to_thread(self.clear)

    async def aget_messages(self) -> list[BaseMessage]:
        """Async twin of :attr:`messages` (read in a worker thread)."""
        return await asyncio.to_thread(lambda: self.messages)

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Async twin of :meth:`add_messages`."""
        await asyncio.to_thread(self.add_messages, messages)
