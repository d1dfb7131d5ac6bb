"""The replayer: reads documents from files and runs the lifecycle on batches of each memory."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from convmem_graph._ids import identifier_problem
from convmem_graph.accounting import merge_node_ms, merge_usage
from convmem_graph.errors import SourceFormatError
from convmem_graph.models import ReadResult
from convmem_graph.replay.discover import _file_shard_key, _stem, discover_files, shard_of
from convmem_graph.replay.progress import ReplayReport, _FileLetters
from convmem_graph.runner import Lifecycle
from convmem_graph.sources._common import BOT_PREFIX, clean_text
from convmem_graph.sources.files import DEFAULT_LIMITS, BadLine, iter_documents
from convmem_graph.state import RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.store.registry import replay_progress
from convmem_graph.store.turn_embedding import FACT_CHANGES

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from convmem_graph.extractors.pacing import ModelGate, ModelPacing

__all__ = ["GroupBy", "Replayer", "compact_episodes"]

# One logger for the package, named as before the split (handlers and levels set on it apply).
logger = logging.getLogger("convmem_graph.replay")


GroupBy = Literal["auto", "user", "file"]


_ACCOUNT_KEYS = ("Operator_Account", "From_Account", "Peer_Account", "To_Account")


def _named_account(doc: Any, bot_ids: Iterable[str]) -> str | None:
    """The human account an IM ``admin_getroammsg`` request of ``doc`` names (the reader's rule), if any.

    Read without the reader's checks: the document is one the reader refused. Only a valid memory
    id is returned (a refused id cannot own a dead letter).
    """
    bots = set(bot_ids)
    if isinstance(doc, dict) and isinstance(doc.get("pages"), list):
        pages: list[Any] = doc["pages"]
    elif isinstance(doc, dict):
        pages = [doc]
    elif isinstance(doc, list):
        pages = doc
    else:
        return None
    for page in pages:
        request = page.get("request") if isinstance(page, dict) else None
        if not isinstance(request, dict):
            continue
        for key in _ACCOUNT_KEYS:
            value = request.get(key)
            if not isinstance(value, str) or not value:
                continue
            account = clean_text(value)
            if account.startswith(BOT_PREFIX) or account in bots:
                continue
            return account if identifier_problem(account, "memory_id") is None else None
    return None


class Replayer:
    """Replays archives into a :class:`~convmem_graph.runner.Lifecycle`.

    Args:
        lifecycle: Where batches run (its store also keeps the replay progress).
        source: Source format of every document, or ``None`` to detect each one.
        group_by: Grouping rule (see module docstring); ignored when ``memory_id`` is given.
        memory_id: Put everything into this one memory.
        concurrency: Memories processed in parallel (batches of one memory stay in order).
        pacing: Limits for the model calls (:class:`~convmem_graph.extractors.pacing.ModelPacing`:
            calls at once, requests and tokens per minute, 429 backoff). The lifecycle's LLM
            extractor and summarizer call through one gate with these limits during :meth:`run`,
            and at least ``pacing.concurrency`` memories are processed in parallel, so that many
            model calls can be in flight at once.
        gate: A ready :class:`~convmem_graph.extractors.pacing.ModelGate` instead of ``pacing``
            (one shared with other work, or with a fake clock in tests).
        shard: ``(i, n)``: only memories with ``shard_of(memory_id, n) == i`` are processed.
        batch_messages: Messages buffered per memory before a lifecycle run.
        max_buffered: Messages buffered over all memories before every buffer is flushed (bounds
            memory use whatever the archive's size).
        on_progress: Called with ``(messages_read_delta, report)`` as documents are read.
        embeddings: When given, each lifecycle run of a memory is followed, in the same worker
            thread, by the embedding of the memory's turns still without a vector (batches of
            ``embed_batch``; resumable). A failing model is logged and the replay goes on; the
            time it took is in ``report.embed_seconds``.
        embed_batch: Turns per model call when embedding.
        compact: At the end of :meth:`run`, when it stored new messages, fold the episodic
            index's parts together (:meth:`~convmem_graph.store.MemoryStore.compact_episodes`):
            once per replay, not per batch. Replays in worker processes leave it to their parent,
            which runs it once after all of them.
    """

    def __init__(
        self,
        lifecycle: Lifecycle,
        *,
        source: str | None = None,
        group_by: GroupBy = "auto",
        memory_id: str | None = None,
        concurrency: int = 1,
        pacing: ModelPacing | None = None,
        gate: ModelGate | None = None,
        shard: tuple[int, int] = (0, 1),
        batch_messages: int = 1000,
        max_buffered: int = 20_000,
        on_progress: Callable[[int, ReplayReport], None] | None = None,
        embeddings: Embeddings | None = None,
        embed_batch: int = 64,
        compact: bool = True,
    ) -> None:
        self.lifecycle = lifecycle
        self.compact = compact
        self.embeddings = embeddings
        self.embed_batch = max(1, embed_batch)
        self.store = lifecycle.store
        self.source = source
        self.group_by: GroupBy = group_by
        self.memory_id = memory_id
        if pacing is not None and gate is not None:
            raise ValueError("Replayer: pass pacing or gate, not both")
        if gate is None and pacing is not None:
            from convmem_graph.extractors.pacing import ModelGate

            gate = ModelGate(pacing)
        self.gate = gate
        # Model calls wait on the network, not the CPU: one thread per call that may be in flight.
        self.concurrency = max(1, concurrency, gate.pacing.concurrency if gate is not None else 1)
        self.shard = shard
        self.batch_messages = max(1, batch_messages)
        self.max_buffered = max(self.batch_messages, max_buffered)
        self.on_progress = on_progress
        self._report_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1)
        self._tails: dict[str, Future[None]] = {}
        self._inflight: list[Future[None]] = []
        # Per memory: batches waiting for the memory's running batch (run by the same thread, in
        # order), and the failure that stops its later batches until a rerun.
        self._queues: dict[str, deque[tuple[list[ReadResult], Future[None]]]] = {}
        self._failed: dict[str, BaseException] = {}
        self._queue_lock = threading.Lock()
        self._buffers: dict[str, list[ReadResult]] = {}
        self._sizes: Counter[str] = Counter()

    # -- progress marks -------------------------------------------------------------------
    def _file_key(self, path: Path) -> str:
        # Under another shard or grouping the same file feeds other memories, so it gets its own mark
        # (a shared mark let shard 0 of a database make shard 1 skip every file).
        st = path.stat()
        i, n = self.shard
        routing = f"{i}/{n}|{self.memory_id or ''}|{'' if self.memory_id else self.group_by}"
        raw = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{routing}"
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    def _is_done(self, key: str) -> bool:
        with self.store.read() as conn:
            row = conn.execute(
                select(replay_progress.c.file_key).where(replay_progress.c.file_key == key)
            ).first()
        return row is not None

    def _mark_done(self, key: str, path: Path, messages: int, memory_id: str | None = None) -> None:
        insert = pg_insert if self.store.dialect == "postgresql" else sqlite_insert
        stmt = insert(replay_progress).values(
            file_key=key,
            path=str(path)[:1024],
            messages=messages,
            finished_at=int(time.time()),
            memory_id=memory_id,
        )
        with self.store.transaction() as conn:
            conn.execute(stmt.on_conflict_do_nothing(index_elements=["file_key"]))

    # -- grouping -------------------------------------------------------------------------
    def _fixed_memory(self, path: Path) -> str | None:
        if self.memory_id:
            return self.memory_id
        if self.group_by == "file":
            return _stem(path)
        return None

    def _memory_for(self, result: ReadResult, path: Path) -> str | None:
        fixed = self._fixed_memory(path)
        if fixed:
            return fixed
        found = result.memory_id or result.user_id
        if found:
            return found
        return _stem(path) if self.group_by == "auto" else None

    def _mine(self, memory_id: str) -> bool:
        i, n = self.shard
        return n == 1 or shard_of(memory_id, n) == i

    # -- the run --------------------------------------------------------------------------
    def run(self, paths: Iterable[str | Path]) -> ReplayReport:
        """Replay every file under ``paths`` and return the report.

        Raises:
            Exception: The first failure of a lifecycle run (after the other in-flight batches
                finished); everything committed before stays, and a rerun resumes.
        """
        report = ReplayReport()
        started = time.perf_counter()
        self._executor = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="convmem-replay")
        self._tails, self._inflight, self._buffers, self._sizes = {}, [], {}, Counter()
        self._queues, self._failed = {}, {}
        paced = self._attach_gate()
        try:
            for path in discover_files(paths):
                self._replay_file(path, report)
        finally:
            for memory_id in list(self._buffers):
                self._flush(memory_id, report)
            self._executor.shutdown(wait=True)
            for owner, previous in paced:
                owner.gate = previous
            report.seconds = time.perf_counter() - started
        for fut in self._inflight:
            fut.result()  # re-raise the first failure, if any
        if self.compact and report.new_messages:
            compact_episodes(self.store, report)
        return report

    def _attach_gate(self) -> list[tuple[Any, Any]]:
        """Route the lifecycle's model calls through the gate; returns what to restore afterwards."""
        if self.gate is None:
            return []
        owners = [o for o in (self.lifecycle.extractor, self.lifecycle.summarizer) if hasattr(o, "gate")]
        if not owners:
            logger.warning("replay: model pacing given, but the extractor and summarizer call no model")
        else:
            logger.info("replay: model calls paced: %s", self.gate.describe())
        paced = [(o, o.gate) for o in owners]
        for owner in owners:
            owner.gate = self.gate
        room = _pool_room(self.store)
        if owners and room is not None and self.gate.pacing.concurrency > room:
            # A run in progress keeps one store connection (and on PostgreSQL its transaction)
            # while its model call waits: the pool, not the gate, then bounds the calls in flight.
            logger.warning(
                "replay: %d model calls at once asked, but the store's connection pool holds %d "
                "and each lifecycle run in progress keeps one: at most about %d calls will be in "
                "flight (on PostgreSQL raise CONVMEM_PG_POOL_SIZE / CONVMEM_PG_MAX_OVERFLOW; or "
                "split the calls across worker processes with --concurrency)",
                self.gate.pacing.concurrency,
                room,
                room,
            )
        return paced

    def _drain(self, memory_id: str, report: ReplayReport) -> None:
        """Run one memory's queued batches in order, in this worker thread, until none is left."""
        while True:
            with self._queue_lock:
                queue = self._queues[memory_id]
                if not queue:
                    del self._queues[memory_id]
                    return
                batch, fut = queue.popleft()
            self._run_batch(memory_id, batch, fut, report)

    def _run_batch(
        self, memory_id: str, batch: list[ReadResult], fut: Future[None], report: ReplayReport
    ) -> None:
        failed = self._failed.get(memory_id)
        if failed is not None:
            # A memory's later batches wait for a rerun: run now, they would be extracted before
            # the failed one (whose messages are stored, past the extraction cursor).
            fut.set_exception(failed)
            return
        try:
            # No WAL flush per run on PostgreSQL (the ~3.5 ms fsync a commit waits for here, 150
            # per 31k-message replay): the file's mark, written once its runs committed, commits
            # with the flush, and a flush covers every earlier commit. So a database crash loses
            # only runs of files not marked done, which a rerun replays again anyway.
            result = self.lifecycle.run(memory_id, [RawInput(r) for r in batch], flush_commit=False)
        except BaseException as exc:
            self._failed[memory_id] = exc
            logger.error(
                "replay: a batch of %d messages for memory %r failed: %s: %s (what it stored stays; "
                "a rerun resumes it)",
                sum(len(r.messages) for r in batch),
                memory_id,
                type(exc).__name__,
                exc,
            )
            fut.set_exception(exc)  # re-raised by run() after the other memories' batches
            if not isinstance(exc, Exception):
                raise
            return
        with self._report_lock:
            report.new_messages += result.new_messages
            report.skipped.update(result.skipped)
            report.model_usage = merge_usage(report.model_usage, result.model_usage)
            report.node_ms = merge_node_ms(report.node_ms, result.node_ms)
            report.runs += 1
        facts = any(result.fragment_ops.get(op) for op in FACT_CHANGES)
        if self.embeddings is not None and (result.new_messages or facts):
            self._embed(memory_id, report, facts=facts)
        fut.set_result(None)

    def _embed(self, memory_id: str, report: ReplayReport, *, facts: bool) -> None:
        """Embed the memory's new turns (and facts, when they changed) after its run; logs a failure."""
        from convmem_graph.store.turn_embedding import embed_missing_facts, embed_missing_turns

        assert self.embeddings is not None
        started = time.perf_counter()
        done = embedded_facts = 0
        try:
            done = embed_missing_turns(self.store, self.embeddings, memory_id, batch=self.embed_batch)
            if facts:
                embedded_facts = embed_missing_facts(
                    self.store, self.embeddings, memory_id, batch=self.embed_batch
                )
        except Exception as exc:
            # The turns and facts are stored and found by their words; a later pass picks them up.
            logger.warning(
                "replay: embedding the turns or facts of memory %r failed: %s: %s",
                memory_id,
                type(exc).__name__,
                exc,
            )
        with self._report_lock:
            report.embedded_turns += done
            report.embedded_facts += embedded_facts
            report.embed_seconds += time.perf_counter() - started

    def _flush(self, memory_id: str, report: ReplayReport) -> Future[None] | None:
        batch = self._buffers.pop(memory_id, [])
        self._sizes.pop(memory_id, None)
        if batch:
            fut: Future[None] = Future()
            if self.concurrency == 1:
                # One at a time: run in the reading thread. A reader thread beside one worker
                # thread gains nothing under the GIL and stretches every write transaction (the
                # worker waits for the GIL after each SQLite call while holding the write lock).
                self._run_batch(memory_id, batch, fut, report)
            else:
                # A memory with a batch running gets the next one queued behind it, not a thread
                # of its own: a thread blocked on a memory's previous batch would idle a slot that
                # another memory's model call could use.
                with self._queue_lock:
                    queue = self._queues.get(memory_id)
                    start = queue is None
                    if queue is None:
                        queue = self._queues[memory_id] = deque()
                    queue.append((batch, fut))
                if start:
                    self._executor.submit(self._drain, memory_id, report)
            self._tails[memory_id] = fut
            self._inflight.append(fut)
        # Bound the work queued ahead of the workers (and so memory use).
        while sum(1 for f in self._inflight if not f.done()) > 2 * self.concurrency:
            next(f for f in self._inflight if not f.done()).exception()
        return self._tails.get(memory_id)

    def _replay_file(self, path: Path, report: ReplayReport) -> None:
        from convmem_graph.sources import peek_user_id, read_payload

        cfg = self.lifecycle.config
        report.files += 1
        try:
            key = self._file_key(path)
        except OSError as exc:
            if self._mine(_file_shard_key(path)):  # every shard fails here: one reports it
                report.quarantined["unreadable file"] += 1
                self.store.add_dead_letter(None, source="file", raw=str(path), error=str(exc), path="$")
            return
        fixed = self._fixed_memory(path)
        if fixed is not None and not self._mine(fixed):
            return
        if self._is_done(key):
            report.files_skipped_done += 1
            return
        touched: set[str] = set()
        in_file: set[str] = set()  # memories of the file's documents, other shards' included
        file_messages = 0
        complete = True
        # Dead letters of the file are written once it is read, attributed to the memory the file
        # fed when that is one memory, so deleting the memory deletes them (issue 10).
        letters = _FileLetters(path)
        bad_limit = DEFAULT_LIMITS.max_bad_documents
        try:
            for locator, doc in iter_documents(path, skip_bad_lines=True):
                report.documents += 1
                if letters.count > bad_limit:
                    # Bounded work: a file this broken is abandoned (quarantined, not marked done).
                    raise SourceFormatError(
                        "json", locator, f"more than {bad_limit} unreadable documents; file abandoned"
                    )
                if isinstance(doc, BadLine):
                    letters.shared_counts["json: unreadable document"] += 1
                    letters.add(
                        source="json", raw=doc.raw, error=doc.error.reason, path=doc.error.path, shared=True
                    )
                    continue
                hint = None
                if fixed is None and self.shard[1] > 1:
                    # Another shard's document is skipped without reading its messages.
                    hint = peek_user_id(doc, self.source)
                    if hint is not None:
                        in_file.add(hint)
                        if not self._mine(hint):
                            continue
                # A document without a hint is read by every shard: its problems are shared.
                shared = hint is None and self.shard[1] > 1
                counts = letters.shared_counts if shared else report.quarantined
                try:
                    result = read_payload(doc, self.source, bot_ids=cfg.bot_ids, config=cfg)
                except SourceFormatError as exc:
                    # An unreadable page whose request names the user is that memory's letter, so
                    # deleting the memory deletes it (written and counted by the user's shard only).
                    named = None if fixed else _named_account(doc, cfg.bot_ids)
                    if named is not None and not self._mine(named):
                        continue
                    if named is not None:
                        counts, shared = report.quarantined, False
                    counts[f"{exc.source}: unreadable payload"] += 1
                    letters.add(
                        source=exc.source,
                        raw=_short(doc),
                        error=f"{locator}: {exc.reason}",
                        path=exc.path,
                        shared=shared,
                        owner=named,
                    )
                    continue
                memory_id = self._memory_for(result, path)
                if memory_id is None:
                    counts["no user id in payload"] += 1
                    letters.add(
                        source=result.source,
                        raw=_short(doc),
                        error=f"{locator}: no user id",
                        path="$",
                        shared=shared,
                    )
                    continue
                problem = identifier_problem(memory_id, "memory_id")
                if problem is not None:
                    # Quarantined with its file named; the replay goes on (one identifier rule).
                    counts["invalid memory id"] += 1
                    letters.add(
                        source=result.source,
                        raw=_short(doc),
                        error=f"{locator}: memory id {problem}",
                        path="$",
                        shared=shared,
                    )
                    continue
                in_file.add(memory_id)
                if not self._mine(memory_id):
                    continue
                bad = sum(1 for s in result.skipped if s.reason == "invalid")
                if bad:
                    report.quarantined[f"{result.source}: invalid item"] += bad
                n = len(result.messages)
                file_messages += n
                report.messages_read += n
                report.memories.add(memory_id)
                touched.add(memory_id)
                if self.on_progress is not None:
                    self.on_progress(n, report)
                self._buffers.setdefault(memory_id, []).append(result)
                self._sizes[memory_id] += n
                if self._sizes[memory_id] >= self.batch_messages:
                    self._flush(memory_id, report)
                if sum(self._sizes.values()) >= self.max_buffered:
                    for m in list(self._buffers):
                        self._flush(m, report)
        except SourceFormatError as exc:
            # A broken whole-file document or gzip stream: what was read is kept; the file stays
            # "not done" for a rerun.
            letters.shared_counts["json: unreadable document"] += 1
            letters.add(source=exc.source, raw=str(path), error=exc.reason, path=exc.path, shared=True)
            complete = False
        # Every shard computes the same owner (the file's one memory, if it fed one) and so agrees
        # on which of them writes and counts the shared letters: the owner's shard, else the file's.
        owner = fixed or (next(iter(in_file)) if len(in_file) == 1 else None)
        responsible = self._mine(owner if owner is not None else _file_shard_key(path))
        if responsible:
            report.quarantined.update(letters.shared_counts)
        letters.write(self.store, owner, shared=responsible)
        tails = [t for t in (self._flush(m, report) for m in touched) if t is not None]
        if complete:
            # The file is done once every batch holding its messages has committed.
            self._mark_when_done(tails, key, path, file_messages, owner)

    def _mark_when_done(
        self, tails: list[Future[None]], key: str, path: Path, messages: int, owner: str | None = None
    ) -> None:
        if not tails:
            self._mark_done(key, path, messages, owner)
            return
        remaining = [len(tails)]
        lock = threading.Lock()

        def on_done(fut: Future[None]) -> None:
            if fut.cancelled() or fut.exception() is not None:
                return
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                self._mark_done(key, path, messages, owner)

        for t in tails:
            t.add_done_callback(on_done)


def compact_episodes(store: MemoryStore, report: ReplayReport) -> None:
    """The replay's end: the episodic index's bulk-written parts folded together (timed in ``report``)."""
    started = time.perf_counter()
    store.compact_episodes()
    report.compact_seconds += time.perf_counter() - started
    logger.info("replay: episodic index compacted in %.3f s", report.compact_seconds)


def _pool_room(store: MemoryStore) -> int | None:
    """Connections the store's pool hands out at once, or ``None`` when it sets no limit."""
    from sqlalchemy.pool import QueuePool

    pool = store.engine.pool
    if not isinstance(pool, QueuePool):
        return None
    overflow = int(getattr(pool, "_max_overflow", 0))  # SQLAlchemy keeps the limit private
    return None if overflow < 0 else pool.size() + overflow


def _short(doc: object, limit: int = 100_000) -> str:
    import json

    try:
        text = json.dumps(doc, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(doc)
    return text if len(text) <= limit else text[:limit] + "…"
