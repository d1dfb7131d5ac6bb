"""Replay in worker processes, each with its own store and lifecycle on a share of the memories."""

from __future__ import annotations

import gc
import importlib
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from convmem_graph.accounting import merge_node_ms, merge_usage
from convmem_graph.config import MemoryConfig
from convmem_graph.replay.progress import ReplayReport, _ProgressSender
from convmem_graph.replay.read import GroupBy, Replayer, compact_episodes
from convmem_graph.store.engine import PoolSettings

if TYPE_CHECKING:
    from convmem_graph.extractors.pacing import ModelPacing

__all__ = ["default_concurrency", "replay_in_processes"]


def default_concurrency() -> int:
    """Worker processes by default: the CPU cores this process may run on.

    ``os.sched_getaffinity`` (a container's or ``taskset``'s limit), not ``os.cpu_count`` (the
    host's): a replay is CPU-bound, and workers beyond the cores it gets only take turns.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _exit_with_parent() -> None:
    """End this worker process as soon as the replay process that started it dies.

    A killed parent (SIGKILL, OOM) would otherwise leave its workers replaying on as orphans, and a
    rerun of the same command would race with them.
    """
    import multiprocessing as mp

    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        parent.join()  # returns when the parent's end of the pipe closes, i.e. when it exits
        os._exit(1)

    threading.Thread(target=watch, name="convmem-replay-parent-watch", daemon=True).start()


def _worker(
    db_url: str,
    paths: list[str],
    config: dict[str, Any],
    model: str | None,
    options: dict[str, Any],
    queue: Any,
    worker: int = 0,
    pools: PoolSettings | None = None,
    inline: bool = False,
) -> None:
    """Body of one replay process: its own store, checkpointer and lifecycle on its sub-shard.

    ``inline``: run in the caller's process (one worker, see :func:`replay_in_processes`): no
    watch of a parent, the collector's freeze undone at the end, and an interrupt (not an
    ``Exception``) raised as it came after its report.
    """
    if not inline:
        _exit_with_parent()
    from convmem_graph.assembly import open_lifecycle
    from convmem_graph.config import MemoryConfig

    try:
        lifecycle, close_checkpointer = open_lifecycle(
            db_url, model, MemoryConfig.model_validate(config), durability="exit", pools=pools
        )
        # Everything imported so far lives as long as the worker: keep the collector off it (and
        # off the pages a forked worker shares with its parent). Inline, only a heap nobody froze
        # before, and only for the replay.
        freeze = not inline or gc.get_freeze_count() == 0
        try:
            if freeze:
                gc.freeze()
            progress = _ProgressSender(queue, worker=worker)
            # A model object does not cross a process boundary: each worker makes its own by name.
            named = options.pop("embeddings", None)
            if named:
                from convmem_graph.embeddings import embeddings_from_name

                options["embeddings"] = embeddings_from_name(named)
            # The parent folds the episodic index once, after every worker (see replay_in_processes).
            replayer = Replayer(lifecycle, on_progress=progress, compact=False, **options)
            try:
                report = replayer.run(paths)
            finally:
                progress.flush()
        finally:
            if close_checkpointer is not None:
                close_checkpointer()
            lifecycle.store.close()
            if inline and freeze:
                gc.unfreeze()
        queue.put(("done", report.as_dict() | {"memory_ids": sorted(report.memories), "worker": worker}))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        queue.put(("error", f"{type(exc).__name__}: {exc}"))
        if inline and not isinstance(exc, Exception):
            raise


class _Inline:
    """The queue of a worker run in the caller's process: progress straight to the callbacks.

    The worker's end (``done`` or ``error``) is kept for :func:`replay_in_processes` to read as it
    reads a process's.
    """

    def __init__(
        self, on_progress: Callable[[int], None] | None, on_files: Callable[[int], None] | None
    ) -> None:
        self.on_progress = on_progress
        self.on_files = on_files
        self.ends: deque[tuple[str, Any]] = deque()

    def put(self, item: tuple[str, Any]) -> None:
        kind, value = item
        if kind == "progress":
            if self.on_progress is not None:
                self.on_progress(int(value))
        elif kind == "files":
            if self.on_files is not None:
                self.on_files(int(value[1]))
        else:
            self.ends.append(item)

    def get(self, timeout: float | None = None) -> tuple[str, Any]:
        return self.ends.popleft()

    def empty(self) -> bool:
        return not self.ends


def _start_method() -> str:
    """``fork`` where it is safe (Linux, a parent with one thread), else ``spawn``.

    A forked worker starts with the parent's imports; a spawned one imports LangGraph, LangChain
    Core and SQLAlchemy again (about 2 s each, a seventh of a 100k-message replay on two cores).
    Forking a process with other threads can copy a lock some thread holds, so then: spawn.
    """
    if sys.platform == "linux" and threading.active_count() == 1:
        return "fork"
    return "spawn"


def replay_in_processes(
    db_url: str,
    paths: Iterable[str | Path],
    *,
    processes: int,
    config: MemoryConfig,
    model: str | None = None,
    source: str | None = None,
    group_by: GroupBy = "auto",
    memory_id: str | None = None,
    shard: tuple[int, int] = (0, 1),
    batch_messages: int = 1000,
    pacing: ModelPacing | None = None,
    on_progress: Callable[[int], None] | None = None,
    on_files: Callable[[int], None] | None = None,
    pools: PoolSettings | None = None,
    embeddings: str | None = None,
) -> ReplayReport:
    """Replay with ``processes`` worker processes, each owning a stable share of the memories.

    Python threads do not run the CPU-bound work of a replay in parallel; processes do (forked
    from a single-threaded parent on Linux, spawned otherwise: see ``_start_method``). With
    ``processes=1`` the one worker runs in this process, as ``convmem replay --concurrency 1``
    runs its replay: a process of its own would add only its start, its copy-on-write page faults
    and the queue (about 0.05 CPU-s per replay, a sixth of a 1,000-message one). Process
    ``k`` replays the memories with ``shard_of(memory_id, n * processes) == i + n * k`` for the
    caller's shard ``(i, n)``, so a memory's batches stay in one process and in order, and the
    shares of all processes make up exactly the caller's shard.

    ``on_progress`` gets the messages read since its last call; ``on_files`` the files done by
    the slowest worker (every worker walks every file, replaying only its share of memories).

    ``embeddings`` names the model each worker embeds its memories' new turns with
    (:func:`~convmem_graph.embeddings.embeddings_from_name`); the report sums their turns and time.

    ``pacing`` holds the limits for the whole replay: each worker gets an even share
    (:meth:`~convmem_graph.extractors.pacing.ModelPacing.share`: calls at once, requests and
    tokens per minute), so together they stay within them; a worker that finished its memories
    leaves its share unused.

    Raises:
        ValueError: ``pacing.concurrency`` is below ``processes``.
        ConvMemError: A worker failed (its message is included); what was committed stays.
    """
    import multiprocessing as mp
    import queue as queue_mod

    from convmem_graph.errors import ConvMemError

    i, n = shard
    shares = [pacing.share(k, processes) if pacing is not None else None for k in range(processes)]
    # Forked workers inherit the parent's imports: load LangGraph once here (a lifecycle compiles
    # its graph on first use, so nothing may have imported it yet).
    importlib.import_module("convmem_graph.graph")
    importlib.import_module("convmem_graph.checkpoints")
    if db_url.startswith(("postgresql", "postgres:")):
        # And the PostgreSQL driver, saver and stemmer, which a worker would import on first use
        # (about 0.06 CPU-s per worker, paid again in each).
        for name in ("psycopg", "psycopg_pool", "langgraph.checkpoint.postgres", "Stemmer"):
            try:
                importlib.import_module(name)
            except ImportError:
                pass  # a missing extra: the worker raises its own error, with the install hint
    files = [str(p) for p in paths]
    started = time.perf_counter()
    workers: list[Any] = []
    queue: Any
    if processes == 1:
        queue = _Inline(on_progress, on_files)
        options = {
            "source": source,
            "group_by": group_by,
            "memory_id": memory_id,
            "shard": shard,
            "batch_messages": batch_messages,
            "pacing": shares[0],
            "embeddings": embeddings,
        }
        _worker(db_url, files, config.model_dump(), model, options, queue, 0, pools, inline=True)
    else:
        ctx: Any = mp.get_context(_start_method())  # typeshed types each method's context apart
        queue = ctx.Queue()
    for k in range(processes if processes > 1 else 0):
        options = {
            "source": source,
            "group_by": group_by,
            "memory_id": memory_id,
            "shard": (i + n * k, n * processes),
            "batch_messages": batch_messages,
            "pacing": shares[k],
            "embeddings": embeddings,
        }
        proc = ctx.Process(
            target=_worker,
            args=(db_url, files, config.model_dump(), model, options, queue, k, pools),
            name=f"convmem-replay-{k}",
        )
        proc.start()
        workers.append(proc)
    report = ReplayReport()
    errors: list[str] = []
    finished = 0
    files_done = [0] * processes
    while finished < processes:
        try:
            kind, value = queue.get(timeout=0.5)
        except queue_mod.Empty:
            if all(not p.is_alive() for p in workers) and queue.empty():
                dead = [p.name for p in workers if p.exitcode not in (0, None)]
                errors.append(f"worker(s) {', '.join(dead) or '?'} exited without a report")
                break
            continue
        if kind == "progress":
            if on_progress is not None:
                on_progress(int(value))
        elif kind == "files":
            worker, done = value
            files_done[int(worker)] = int(done)
            if on_files is not None:
                on_files(min(files_done))
        elif kind == "error":
            errors.append(str(value))
            finished += 1
        else:
            finished += 1
            files_done[int(value["worker"])] = int(value["files"])
            if on_files is not None:
                on_files(min(files_done))
            report.files = max(report.files, int(value["files"]))
            report.files_skipped_done = max(report.files_skipped_done, int(value["files_skipped_done"]))
            report.documents = max(report.documents, int(value["documents"]))
            report.messages_read += int(value["messages_read"])
            report.new_messages += int(value["new_messages"])
            report.memories.update(value["memory_ids"])
            report.quarantined.update(value["quarantined"])
            report.skipped.update(value["skipped"])
            report.model_usage = merge_usage(report.model_usage, value.get("model_usage") or {})
            report.node_ms = merge_node_ms(report.node_ms, value.get("node_ms") or {})
            report.runs += int(value.get("runs", 0))
            report.embedded_turns += int(value.get("embedded_turns", 0))
            report.embedded_facts += int(value.get("embedded_facts", 0))
            report.embed_seconds += float(value.get("embed_seconds", 0.0))
    for proc in workers:
        proc.join()
    if errors:
        report.seconds = time.perf_counter() - started
        raise ConvMemError("replay worker failed: " + "; ".join(errors))
    if report.new_messages:
        # Once for the whole replay, after every worker: each worker's own would rewrite the
        # index again while the others still add to it.
        from convmem_graph.store import MemoryStore

        with MemoryStore.from_url(db_url, pools=pools) as store:
            compact_episodes(store, report)
    report.seconds = time.perf_counter() - started
    return report
