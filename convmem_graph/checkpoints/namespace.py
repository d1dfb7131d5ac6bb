"""convmem's own checkpoint threads, so a checkpointer shared with an application stays the app's.

Decision: every lifecycle run of memory ``m`` is checkpointed on thread ``convmem:m``
(:data:`THREAD_PREFIX` + memory id), never on ``m`` itself. Applications commonly key their own
threads by the user id, which is also the natural memory id; a prefix keeps the two apart in any
saver (a ``checkpoint_ns`` would not: LangGraph reserves it for subgraphs and ``delete_thread``
removes every namespace of a thread). Pruning and deletion below touch only ``convmem:`` threads.

Databases written before this change have convmem's checkpoints on the bare memory id. They are
stale (the store's cursors are the durable record; a run never resumes from them) and at most
``keep_checkpoints`` per memory. :func:`drop_legacy_checkpoints` removes them, but only when every
checkpoint of the thread is recognizably convmem's; ``ConvMemory.delete`` calls it for the deleted
memory.

Example:
    >>> thread_id_for("u_1")
    'convmem:u_1'
    >>> memory_id_of("convmem:u_1"), memory_id_of("u_1")
    ('u_1', None)
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from convmem_graph.checkpoints.prune import prune_checkpoints, supports_pruning

__all__ = [
    "THREAD_PREFIX",
    "delete_memory_checkpoints",
    "drop_legacy_checkpoints",
    "is_lifecycle_checkpoint",
    "memory_id_of",
    "prune_memory_checkpoints",
    "thread_id_for",
]

logger = logging.getLogger(__name__)

#: Prefix of every checkpoint thread the lifecycle writes.
THREAD_PREFIX = "convmem:"

_warned: set[str] = set()
_warned_lock = threading.Lock()


def thread_id_for(memory_id: str) -> str:
    """Return the checkpoint thread id of a memory's lifecycle runs."""
    return f"{THREAD_PREFIX}{memory_id}"


def memory_id_of(thread_id: str) -> str | None:
    """Return the memory id of a convmem thread id, or ``None`` for any other thread."""
    return thread_id[len(THREAD_PREFIX) :] if thread_id.startswith(THREAD_PREFIX) else None


@functools.cache
def _channels() -> frozenset[str]:
    """The lifecycle graph's channels (compiled once, on first use)."""
    from convmem_graph.graph import build_memory_graph

    return frozenset(build_memory_graph().compile().channels)


def is_lifecycle_checkpoint(checkpoint: Mapping[str, Any]) -> bool:
    """Whether a checkpoint was written by convmem's lifecycle graph.

    Every channel it has must be one of the lifecycle graph's; a run's input checkpoint (only
    ``__start__``) must carry a lifecycle input (a ``memory_id`` and state keys only).
    """
    versions = set(checkpoint.get("channel_versions") or ())
    channels = _channels()
    if not versions or not versions <= channels:
        return False
    if versions - {"__start__", "__pregel_tasks"}:
        return True
    start = (checkpoint.get("channel_values") or {}).get("__start__")
    return isinstance(start, Mapping) and "memory_id" in start and set(start) <= channels


def _warn_once(key: str, message: str, *args: object) -> None:
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    logger.warning(message, *args)


def prune_memory_checkpoints(saver: BaseCheckpointSaver[Any], memory_id: str, keep: int) -> int:
    """Prune a memory's lifecycle thread to its newest ``keep`` checkpoints; never raises.

    Runs after the lifecycle committed its work, so a failure here must not turn a successful
    run into an error: a saver type convmem cannot prune is used without pruning (one warning
    per type), and any other failure is logged and the run goes on.

    Returns:
        The number of checkpoints deleted (0 when pruning was skipped).
    """
    if not supports_pruning(saver):
        kind = type(saver).__name__
        _warn_once(
            f"prune:{type(saver).__module__}.{kind}",
            "convmem cannot prune checkpoints of %s: threads convmem:<memory id> grow by one "
            "checkpoint per run, one per step with durability sync or async (delete a memory to drop them)",
            kind,
        )
        return 0
    try:
        return prune_checkpoints(saver, thread_id_for(memory_id), keep=keep)
    except Exception:  # noqa: BLE001 - the run's data is committed; pruning is housekeeping
        logger.warning("pruning checkpoints of memory %r failed", memory_id, exc_info=True)
        return 0


def _delete_thread(saver: BaseCheckpointSaver[Any], thread_id: str) -> bool:
    try:
        saver.delete_thread(thread_id)
    except NotImplementedError:
        _warn_once(
            f"delete:{type(saver).__module__}.{type(saver).__name__}",
            "%s cannot delete threads: checkpoints of deleted memories stay",
            type(saver).__name__,
        )
        return False
    return True


def delete_memory_checkpoints(saver: BaseCheckpointSaver[Any], memory_id: str) -> None:
    """Delete a memory's lifecycle thread and its legacy (unprefixed) convmem checkpoints.

    The application's threads are never touched, even one whose id equals the memory id.
    """
    _delete_thread(saver, thread_id_for(memory_id))
    drop_legacy_checkpoints(saver, [memory_id])


def drop_legacy_checkpoints(saver: BaseCheckpointSaver[Any], memory_ids: Iterable[str]) -> int:
    """Delete pre-namespace convmem threads (thread id = memory id) that hold only convmem checkpoints.

    A thread that also holds checkpoints of another graph (an application that used the same id)
    is left alone with a warning: deleting it would delete the application's history.

    Args:
        saver: The checkpointer.
        memory_ids: Memory ids whose bare-id threads to look at.

    Returns:
        The number of threads deleted.
    """
    dropped = 0
    for memory_id in memory_ids:
        config: Any = {"configurable": {"thread_id": memory_id}}
        mine = other = 0
        for item in saver.list(config):
            if is_lifecycle_checkpoint(item.checkpoint):
                mine += 1
            else:
                other += 1
                break
        if other:
            if mine:
                logger.warning(
                    "thread %r mixes convmem's old checkpoints with another graph's; left as it is",
                    memory_id,
                )
            continue
        if mine and _delete_thread(saver, memory_id):
            dropped += 1
    return dropped
