"""Batch replay of stored conversation archives into memories.

Files (JSON, JSON Lines, gzip of either) and folders of them are streamed document by document;
documents are grouped into memories by a stated rule, batched, and run through the lifecycle with
several memories in parallel. Replay is idempotent (message ids come from the sources' own keys,
fragment ids from their content) and resumable: a file is marked done in the database once all of
its batches committed, and a rerun skips done files and re-reads the others, adding nothing twice.

Grouping rules (``group_by``):

- ``auto`` (default): an explicit memory id found in the payload (Agora ``labels.memory_id``),
  else the human's user id found in it (IM operator account, TRTC target user, Agora uid,
  OpenAI ``user``), else the file name without extensions.
- ``user``: the memory id or user id found in the payload; documents with neither are quarantined.
- ``file``: one memory per file, named after the file without extensions.
- a fixed ``memory_id`` puts everything into one memory.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import logging
import os
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import inspect, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from convmem_graph._ids import identifier_problem
from convmem_graph.config import MemoryConfig
from convmem_graph.errors import SourceFormatError
from convmem_graph.models import ReadResult
from convmem_graph.runner import Lifecycle
from convmem_graph.sources._common import BOT_PREFIX, clean_text
from convmem_graph.sources.files import DEFAULT_LIMITS, BadLine, iter_documents
from convmem_graph.state import MAX_DEAD_LETTERS_PER_RUN, RawInput
from convmem_graph.store import MemoryStore
from convmem_graph.store.engine import PoolSettings
from convmem_graph.store.registry import SIDE_METADATA, replay_progress
from convmem_graph.store.schema import dead_letters

if TYPE_CHECKING:
    from convmem_graph.extractors.pacing import ModelGate, ModelPacing

__all__ = [
    "GroupBy",
    "ReplayReport",
    "Replayer",
    "discover_files",
    "forget_replay_file",
    "forget_replay_rows",
    "parse_shard",
    "replay_in_processes",
    "shard_of",
]

logger = logging.getLogger(__name__)

GroupBy = Literal["auto", "user", "file"]

_SUFFIXES = (".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz", ".ndjson.gz")


def discover_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand files and folders into the sorted list of archive files to replay.

    Symlinked folders are followed and each one is reported (a warning naming link and target);
    a folder reached twice (a symlink loop or two links to one place) is read once and reported.
    Entries that are neither folders nor regular files are left to the reader, which refuses them
    by name.
    """
    found: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if not p.is_dir():
            found.append(p)
            continue
        seen: set[str] = set()
        batch: list[Path] = []
        for root, dirs, files in os.walk(p, followlinks=True):
            real = os.path.realpath(root)
            if real in seen:
                logger.warning("replay: %s leads to a folder already read (%s); not read again", root, real)
                dirs[:] = []
                continue
            seen.add(real)
            dirs.sort()
            for d in dirs:
                link = Path(root, d)
                if link.is_symlink():
                    logger.warning(
                        "replay: following symlinked folder %s -> %s", link, os.path.realpath(link)
                    )
            batch.extend(Path(root, f) for f in files if f.lower().endswith(_SUFFIXES))
        found.extend(sorted(batch))
    return found


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``i/n`` (0-based shard i of n) and validate it."""
    try:
        i_s, n_s = text.split("/", 1)
        i, n = int(i_s), int(n_s)
    except ValueError as exc:
        raise ValueError(f"--shard must look like i/n, e.g. 0/2; got {text!r}") from exc
    if n < 1 or not 0 <= i < n:
        raise ValueError(f"--shard i/n needs 0 <= i < n; got {text!r}")
    return i, n


def shard_of(memory_id: str, n: int) -> int:
    """Return the shard (0..n-1) that owns ``memory_id``: stable across processes and hosts."""
    return int.from_bytes(hashlib.blake2b(memory_id.encode("utf-8"), digest_size=8).digest(), "big") % n


def _stem(path: Path) -> str:
    name = path.name
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def _add_progress_memory_column(conn: Any) -> None:
    """Add ``memory_id`` to a progress table made by an older version (nullable, nothing rewritten)."""
    if "memory_id" not in {c["name"] for c in inspect(conn).get_columns(replay_progress.name)}:
        conn.exec_driver_sql(f"ALTER TABLE {replay_progress.name} ADD COLUMN memory_id VARCHAR")


def _storable(text: str) -> str:
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


class _FileLetters:
    """The dead letters of one file, held until the file is read (at most ``MAX_DEAD_LETTERS_PER_RUN``).

    With several shards (worker processes, ``--shard``), every shard reads a file: a bad item that
    belongs to no memory (an unreadable line, a document without a user id) is seen by all of them
    and is *shared*; it is written and counted by one shard only (see ``Replayer._replay_file``).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.items: list[dict[str, str]] = []
        self.shared: list[bool] = []
        #: The memory a letter names itself (an unreadable IM page's request account), else None.
        self.owners: list[str | None] = []
        self.dropped = 0
        #: Quarantine counts of the shared items, by reason.
        self.shared_counts: Counter[str] = Counter()

    @property
    def count(self) -> int:
        """Bad documents and items seen in the file so far."""
        return len(self.items) + self.dropped

    def add(
        self, *, source: str, raw: str, error: str, path: str, shared: bool = False, owner: str | None = None
    ) -> None:
        if len(self.items) >= MAX_DEAD_LETTERS_PER_RUN:
            self.dropped += 1
            return
        # Lone surrogates (ids like "mem_\udc00") cannot be stored; kept visible as escapes.
        self.items.append(
            {k: _storable(v) for k, v in (("source", source), ("raw", raw), ("error", error), ("path", path))}
        )
        self.shared.append(shared)
        self.owners.append(owner)

    def write(self, store: MemoryStore, owner: str | None, *, shared: bool = True) -> None:
        """Store the letters attributed to ``owner``; the shared ones only when ``shared``."""
        for item, is_shared, named in zip(self.items, self.shared, self.owners, strict=True):
            if shared or not is_shared:
                store.add_dead_letter(named if named is not None else owner, **item)
        if self.dropped and shared:
            store.add_dead_letter(
                owner,
                source="file",
                raw=f"{self.path}: {self.dropped} more bad documents",
                error=f"dead-letter limit of {MAX_DEAD_LETTERS_PER_RUN} per file reached",
                path=str(self.path),
            )


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


def _file_shard_key(path: Path) -> str:
    """The key that assigns a file's memory-less problems to one shard."""
    return f"\x00file:{os.fsencode(path).hex()}"


def forget_replay_rows(store: MemoryStore, memory_id: str) -> int:
    """Delete the replay progress rows of files that fed only ``memory_id``; returns how many.

    Called by ``ConvMemory.delete`` (and so ``convmem delete``): progress rows keep file paths,
    which often name the user. A later replay of such a file reads it again.
    """
    with store.transaction() as conn:
        if not inspect(conn).has_table(replay_progress.name):
            return 0
        _add_progress_memory_column(conn)
        return int(
            conn.execute(replay_progress.delete().where(replay_progress.c.memory_id == memory_id)).rowcount
        )


def forget_replay_file(store: MemoryStore, path: str | Path) -> int:
    """Delete what a replay kept about one file that cannot be attributed to a single memory.

    Removes the file's progress rows and the dead letters without a memory that name it (a file
    feeding several memories, or none). Returns the number of rows deleted.
    """
    name = str(path)
    like = name.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    with store.transaction() as conn:
        deleted = 0
        if inspect(conn).has_table(replay_progress.name):
            deleted += int(
                conn.execute(replay_progress.delete().where(replay_progress.c.path == name)).rowcount
            )
        stmt = dead_letters.delete().where(
            dead_letters.c.memory_id.is_(None),
            or_(
                dead_letters.c.raw == name,
                dead_letters.c.raw.startswith(name + ": "),
                dead_letters.c.path == name,
                dead_letters.c.path.like(like + ":%", escape="\\"),
                dead_letters.c.error.like(like + ":%", escape="\\"),
            ),
        )
        return deleted + int(conn.execute(stmt).rowcount)


@dataclass
class ReplayReport:
    """What a replay did; ``quarantined`` counts bad items by reason."""

    files: int = 0
    files_skipped_done: int = 0
    documents: int = 0
    messages_read: int = 0
    new_messages: int = 0
    memories: set[str] = field(default_factory=set)
    quarantined: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    @property
    def messages_per_second(self) -> float:
        """Messages read per wall-clock second."""
        return self.messages_read / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        """A JSON-friendly view."""
        return {
            "files": self.files,
            "files_skipped_done": self.files_skipped_done,
            "documents": self.documents,
            "messages_read": self.messages_read,
            "new_messages": self.new_messages,
            "memories": len(self.memories),
            "quarantined": dict(self.quarantined),
            "skipped": dict(self.skipped),
            "seconds": round(self.seconds, 3),
            "messages_per_second": round(self.messages_per_second, 1),
        }


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
    ) -> None:
        self.lifecycle = lifecycle
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
        with self.store.schema_transaction() as conn:
            SIDE_METADATA.create_all(conn, tables=[replay_progress], checkfirst=True)
            _add_progress_memory_column(conn)
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
            result = self.lifecycle.run(memory_id, [RawInput(r) for r in batch])
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
        fut.set_result(None)

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


class _ProgressSender:
    """Sends a worker's progress to the parent at most ten times a second.

    A queue put per document kept the queue's feeder thread busy, and every wake-up of it took the
    GIL from the replay.
    """

    def __init__(self, queue: Any, interval_s: float = 0.1, worker: int = 0) -> None:
        self.queue = queue
        self.interval_s = interval_s
        self.worker = worker
        self.pending = 0
        self.files_done = self.files_sent = 0
        self.sent_at = time.monotonic()

    def __call__(self, delta: int, report: ReplayReport) -> None:
        self.pending += delta
        # ``report.files`` counts files started: the one being read is not done yet.
        self.files_done = max(report.files - 1, self.files_done)
        if time.monotonic() - self.sent_at >= self.interval_s:
            self.flush()

    def flush(self) -> None:
        """Send what is pending (messages read, and files done when that changed)."""
        if self.pending:
            self.queue.put(("progress", self.pending))
            self.pending = 0
        if self.files_done != self.files_sent:
            self.queue.put(("files", (self.worker, self.files_done)))
            self.files_sent = self.files_done
        self.sent_at = time.monotonic()


def _worker(
    db_url: str,
    paths: list[str],
    config: dict[str, Any],
    model: str | None,
    options: dict[str, Any],
    queue: Any,
    worker: int = 0,
    pools: PoolSettings | None = None,
) -> None:
    """Body of one replay process: its own store, checkpointer and lifecycle on its sub-shard."""
    _exit_with_parent()
    from convmem_graph.assembly import open_lifecycle
    from convmem_graph.config import MemoryConfig

    try:
        lifecycle, close_checkpointer = open_lifecycle(
            db_url, model, MemoryConfig.model_validate(config), durability="exit", pools=pools
        )
        try:
            # Everything imported so far lives as long as the worker: keep the collector off it
            # (and off the pages a forked worker shares with its parent).
            gc.freeze()
            progress = _ProgressSender(queue, worker=worker)
            replayer = Replayer(lifecycle, on_progress=progress, **options)
            try:
                report = replayer.run(paths)
            finally:
                progress.flush()
        finally:
            if close_checkpointer is not None:
                close_checkpointer()
            lifecycle.store.close()
        queue.put(("done", report.as_dict() | {"memory_ids": sorted(report.memories), "worker": worker}))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


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
) -> ReplayReport:
    """Replay with ``processes`` worker processes, each owning a stable share of the memories.

    Python threads do not run the CPU-bound work of a replay in parallel; processes do (forked
    from a single-threaded parent on Linux, spawned otherwise: see ``_start_method``). Process
    ``k`` replays the memories with ``shard_of(memory_id, n * processes) == i + n * k`` for the
    caller's shard ``(i, n)``, so a memory's batches stay in one process and in order, and the
    shares of all processes make up exactly the caller's shard.

    ``on_progress`` gets the messages read since its last call; ``on_files`` the files done by
    the slowest worker (every worker walks every file, replaying only its share of memories).

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
    ctx: Any = mp.get_context(_start_method())  # typeshed types each method's context apart
    queue = ctx.Queue()
    files = [str(p) for p in paths]
    workers = []
    for k in range(processes):
        options = {
            "source": source,
            "group_by": group_by,
            "memory_id": memory_id,
            "shard": (i + n * k, n * processes),
            "batch_messages": batch_messages,
            "pacing": shares[k],
        }
        proc = ctx.Process(
            target=_worker,
            args=(db_url, files, config.model_dump(), model, options, queue, k, pools),
            name=f"convmem-replay-{k}",
        )
        proc.start()
        workers.append(proc)
    report = ReplayReport()
    started = time.perf_counter()
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
    for proc in workers:
        proc.join()
    report.seconds = time.perf_counter() - started
    if errors:
        raise ConvMemError("replay worker failed: " + "; ".join(errors))
    return report
