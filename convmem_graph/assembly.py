"""Assemble a store and a lifecycle from a database URL and a model: what ``ConvMemory.open`` does.

Below both :class:`~convmem_graph.memory.ConvMemory` and the replay workers, so a worker process
builds the same lifecycle without importing the facade above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from convmem_graph._time import now_ms
from convmem_graph.config import MemoryConfig
from convmem_graph.extractors.base import Extractor, Summarizer
from convmem_graph.runner import Durability, Lifecycle
from convmem_graph.store import MemoryStore
from convmem_graph.store.engine import PoolSettings

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = ["lazy_checkpointer", "open_lifecycle"]


def lazy_checkpointer(
    url: str, pools: PoolSettings | None = None
) -> tuple[Callable[[], BaseCheckpointSaver[Any] | None], Callable[[], None]]:
    """A factory opening the checkpointer at ``url`` on first call, and a closer for it."""
    opened: list[Callable[[], None]] = []

    def factory() -> BaseCheckpointSaver[Any] | None:
        from convmem_graph.checkpoints import open_checkpointer

        saver, closer = open_checkpointer(url, pools=pools)
        opened.append(closer)
        return saver

    def close() -> None:
        while opened:
            opened.pop()()

    return factory, close


def open_lifecycle(
    url: str | None = None,
    model: BaseChatModel | str | None = None,
    config: MemoryConfig | None = None,
    *,
    checkpoint_url: str | None = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    extractor: Extractor | None = None,
    summarizer: Summarizer | None = None,
    durability: Durability = "exit",
    clock: Callable[[], int] = now_ms,
    pools: PoolSettings | None = None,
) -> tuple[Lifecycle, Callable[[], None] | None]:
    """Open the store at ``url`` and the lifecycle over it (arguments as ``ConvMemory.open``).

    Returns:
        The lifecycle (its ``store`` is the opened store) and the closer of a checkpointer opened
        here (``None`` when ``checkpointer`` was given: it stays the caller's to close).
    """
    config = config or MemoryConfig()
    if checkpointer is not None and checkpoint_url is not None:
        raise ValueError("pass checkpoint_url or checkpointer, not both")
    store = MemoryStore.from_url(url, pools=pools)
    closer: Callable[[], None] | None = None
    factory: Callable[[], BaseCheckpointSaver[Any] | None] | None = None
    if checkpointer is None:
        # Opened when a run first needs it: payloads and reads never import LangGraph.
        factory, closer = lazy_checkpointer(checkpoint_url or store.url, pools)
    if model is not None:
        from convmem_graph.extractors.chat_models import make_chat_model
        from convmem_graph.extractors.llm import LLMExtractor, LLMSummarizer

        chat = make_chat_model(model) if isinstance(model, str) else model
        extractor = extractor or LLMExtractor(
            chat, method=config.structured_output_method, transient_ttl_days=config.transient_ttl_days
        )
        summarizer = summarizer or LLMSummarizer(chat)
    lifecycle = Lifecycle(
        store,
        checkpointer,
        checkpointer_factory=factory,
        config=config,
        extractor=extractor,
        summarizer=summarizer,
        durability=durability,
        clock=clock,
    )
    return lifecycle, closer
