"""Embedding stored turns and facts off the request path: the batched loops, and one background worker.

:func:`embed_missing_turns` writes the vectors of a memory's turns that have none yet, a batch per
model call and one write per batch, so a killed run leaves whole batches and the next run picks up
the rest (:meth:`~convmem_graph.memory.ConvMemory.embed_turns` and the replayer call it).
:func:`embed_missing_facts` does the same for the memory's active facts (those with no vector of
their current text: new, edited, or embedded by another model), which the call start's block reads
instead of embedding the facts at every call (:mod:`convmem_graph.store._fact_vectors`).

:class:`BackgroundEmbedder` is one daemon thread per :class:`~convmem_graph.memory.ConvMemory`
opened with ``embeddings=``: ``ingest`` tells it which memory got new turns and returns at once;
the thread embeds them later. Its queue holds memory ids, at most ``max_pending`` of them (a memory
told twice is queued once; one told while the queue is full is dropped with a warning, and its
turns wait for the memory's next ingest or an ``embed_turns``: the work is resumable). A failing
model is logged, never raised into the run that stored the turns. ``close`` stops the thread
between two batches.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from convmem_graph.store import MemoryStore

__all__ = ["FACT_CHANGES", "BackgroundEmbedder", "embed_missing_facts", "embed_missing_turns"]

#: The extraction ops (``RunResult.fragment_ops`` keys) after which a memory's facts need a pass.
FACT_CHANGES = ("add", "update", "supersede")

logger = logging.getLogger(__name__)


def _embedded(embeddings: Embeddings, texts: list[str]) -> list[list[float]]:
    """One ``embed_documents`` call, refused when the model answers another number of vectors."""
    vectors = embeddings.embed_documents(texts)
    if len(vectors) != len(texts):
        raise ValueError(f"embed_documents returned {len(vectors)} vectors for {len(texts)} texts")
    return vectors


def embed_missing_turns(
    store: MemoryStore,
    embeddings: Embeddings,
    memory_id: str,
    *,
    batch: int = 64,
    limit: int | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Write the vectors of the memory's stored turns that have none by this model yet.

    Args:
        store: The memory's store.
        embeddings: The model; its vectors are stored under
            :func:`~convmem_graph.embeddings.model_name`.
        memory_id: The memory.
        batch: Turns per ``embed_documents`` call (and per write).
        limit: At most this many turns (``None``: all that are missing).
        stop: Checked before each batch: once set, the loop returns.

    Returns:
        How many turns got a vector.

    Raises:
        ValueError: The model returned another number of vectors than texts.
    """
    from convmem_graph.embeddings import model_name  # LangChain: only with a model given

    model = model_name(embeddings)
    done = 0
    while (limit is None or done < limit) and not (stop is not None and stop.is_set()):
        size = max(1, batch if limit is None else min(batch, limit - done))
        todo = store.missing_turn_vectors(memory_id, model, limit=size)
        if not todo:
            break
        vectors = _embedded(embeddings, [content for _, content in todo])
        store.save_turn_vectors(memory_id, model, [(s, v) for (s, _), v in zip(todo, vectors, strict=True)])
        done += len(todo)
    return done


def embed_missing_facts(
    store: MemoryStore,
    embeddings: Embeddings,
    memory_id: str,
    *,
    batch: int = 64,
    limit: int | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Write the vectors of the memory's active facts that have none of their current text by this model.

    The facts to embed are read once (with their texts); each batch is one model call and one
    write, which stores a vector only if its fact still has that text (an edit made meanwhile is
    embedded by the next pass). A killed pass leaves whole batches; the next one does the rest.

    Args:
        store: The memory's store.
        embeddings: The model; its vectors are stored under
            :func:`~convmem_graph.embeddings.model_name`.
        memory_id: The memory.
        batch: Facts per ``embed_documents`` call (and per write).
        limit: At most this many facts (``None``: all that are missing).
        stop: Checked before each batch: once set, the loop returns.

    Returns:
        How many facts got a vector.

    Raises:
        ValueError: The model returned another number of vectors than texts.
    """
    from convmem_graph.embeddings import model_name  # LangChain: only with a model given

    model = model_name(embeddings)
    todo = store.missing_fact_vectors(memory_id, model)
    if limit is not None:
        todo = todo[: max(0, limit)]
    done = 0
    step = max(1, batch)
    for start in range(0, len(todo), step):
        if stop is not None and stop.is_set():
            break
        part = todo[start : start + step]
        vectors = _embedded(embeddings, [text for _, text in part])
        done += store.save_fact_vectors(
            memory_id, model, [(fid, text, v) for (fid, text), v in zip(part, vectors, strict=True)]
        )
    return done


class BackgroundEmbedder:
    """One worker thread that runs ``work(memory_id, stop)`` for each memory it is told about.

    Args:
        work: Embeds one memory's missing turns (checking ``stop`` between batches).
        max_pending: Memories queued at most; more are dropped (their turns wait for the next call).

    Example:
        >>> seen = []
        >>> worker = BackgroundEmbedder(lambda memory_id, stop: seen.append(memory_id) or 1)
        >>> worker.notify("u1")
        True
        >>> worker.wait_idle(timeout=5)
        True
        >>> worker.close(); seen
        ['u1']
    """

    def __init__(self, work: Callable[[str, threading.Event], int], *, max_pending: int = 10_000) -> None:
        self._work = work
        self._max_pending = max_pending
        # Insertion-ordered: memories are served in the order they were first told.
        self._pending: dict[str, None] = {}
        self._busy = False
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def notify(self, memory_id: str) -> bool:
        """Queue ``memory_id`` (once) for embedding; never blocks. False when closed or full."""
        with self._changed:
            if self._stop.is_set():
                return False
            if memory_id not in self._pending:
                if len(self._pending) >= self._max_pending:
                    logger.warning(
                        "background embedding: %d memories queued already; %r waits for its next ingest",
                        len(self._pending),
                        memory_id,
                    )
                    return False
                self._pending[memory_id] = None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="convmem-embed", daemon=True)
                self._thread.start()
            self._changed.notify_all()
        return True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until nothing is queued or running; False if ``timeout`` seconds passed first."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._pending and not self._busy, timeout)

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop the thread between two batches (queued memories are left for a later run).

        Args:
            timeout: Seconds to wait for the thread to end (``0``: tell it and return).
        """
        with self._changed:
            self._stop.set()
            self._pending.clear()
            self._changed.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread() and timeout != 0:
            thread.join(timeout)
            if thread.is_alive():
                logger.warning("background embedding: the model call in progress outlived close()")

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._pending or self._stop.is_set())
                if self._stop.is_set():
                    return
                memory_id = next(iter(self._pending))
                del self._pending[memory_id]
                self._busy = True
            try:
                done = self._work(memory_id, self._stop)
                logger.debug("background embedding: %d turns of %r", done, memory_id)
            except Exception:
                # The turns are stored and found by their words; the next ingest tries again.
                logger.warning("background embedding of memory %r failed", memory_id, exc_info=True)
            finally:
                with self._changed:
                    self._busy = False
                    self._changed.notify_all()
